#!/bin/bash
# Masked image modelling and its relatives on ViT-Tiny: the Rust recipe, then its lightly + PyTorch
# replica (benches/pytorch/mim_fmnist.py), one after the other, on the full Fashion-MNIST.
# Usage: benches/mim.sh [EPOCHS] [RECIPES...]   (after `cargo build --release --bin recipe`)
#   RECIPES: any of mae simmim ijepa ibot dinov2 msn (default: mae simmim)
#   benches/mim.sh 1 mae simmim
#   benches/mim.sh 1 ijepa ibot dinov2 msn
set -euo pipefail
EPOCHS=${1:-1}
shift || true
RECIPES=${*:-mae simmim}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
RECIPE=${RECIPE:-target/release/recipe}
THREADS=${THREADS:-2}
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "date: $(date -u +%Y-%m-%dT%H:%MZ); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for recipe in $RECIPES; do
  dir=$(mktemp -d)
  echo "== $recipe, curriculum-ssl"
  /usr/bin/time -f "process %e s, user %U s, sys %S s" \
    "$RECIPE" "$recipe" --dataset fashion-mnist --data-dir "$DATA" --epochs "$EPOCHS" --no-baselines \
    --knn-every 0 --run-dir "$dir/run" 2>&1 | grep -E "epoch [0-9]+/|done in|kNN \(k|^process"
  cat "$dir/run/epochs.csv"
  rm -rf "$dir"
  echo "== $recipe, lightly + PyTorch"
  /usr/bin/time -f "process %e s, user %U s, sys %S s" \
    python3 "$(dirname "$0")/pytorch/mim_fmnist.py" --recipe "$recipe" --epochs "$EPOCHS" \
    --threads "$THREADS" --data "$DATA" 2>&1 | grep -E "^epoch|^kNN|^RESULT|^process"
done
