#!/bin/bash
# Barlow Twins and VICReg: the Rust recipe, then its lightly + PyTorch replica
# (benches/pytorch/redundancy_fmnist.py), one after the other, on the full Fashion-MNIST.
# Usage: benches/redundancy.sh [EPOCHS]   (after `cargo build --release --bin recipe`)
set -euo pipefail
EPOCHS=${1:-3}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
RECIPE=${RECIPE:-target/release/recipe}
THREADS=${THREADS:-2}
for recipe in barlow_twins vicreg; do
  dir=$(mktemp -d)
  echo "== $recipe, curriculum-ssl"
  "$RECIPE" "$recipe" --dataset fashion-mnist --data-dir "$DATA" --epochs "$EPOCHS" --backbone small \
    --run-dir "$dir/run" 2>&1 | grep -E "epoch [0-9]+/|done in|kNN \(k"
  rm -rf "$dir"
  echo "== $recipe, lightly + PyTorch"
  python3 "$(dirname "$0")/pytorch/redundancy_fmnist.py" --recipe "$recipe" --epochs "$EPOCHS" \
    --threads "$THREADS" --data "$DATA" 2>&1 | grep -E "^epoch|^kNN|^RESULT"
done
