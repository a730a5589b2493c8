#!/bin/bash
# SwAV and DINO: the Rust recipe, then its lightly + PyTorch replica
# (benches/pytorch/multi_crop_fmnist.py), one after the other, on the full Fashion-MNIST.
# Usage: benches/multi_crop.sh [EPOCHS] [LOCAL_CROPS]   (after `cargo build --release --bin recipe`)
set -euo pipefail
EPOCHS=${1:-3}
LOCAL=${2:-6}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
RECIPE=${RECIPE:-target/release/recipe}
THREADS=${THREADS:-2}
SEED=${SEED:-0}
for recipe in ${RECIPES:-swav dino}; do
  dir=$(mktemp -d)
  echo "== $recipe, curriculum-ssl"
  "$RECIPE" "$recipe" --dataset fashion-mnist --data-dir "$DATA" --epochs "$EPOCHS" --backbone small \
    --local-crops "$LOCAL" --seed "$SEED" --run-dir "$dir/run" 2>&1 | grep -E "epoch [0-9]+/|done in|kNN \(k"
  rm -rf "$dir"
  echo "== $recipe, lightly + PyTorch"
  python3 "$(dirname "$0")/pytorch/multi_crop_fmnist.py" --recipe "$recipe" --epochs "$EPOCHS" \
    --local-crops "$LOCAL" --seed "$SEED" --threads "$THREADS" --data "$DATA" 2>&1 \
    | grep -E "^epoch|^kNN|^RESULT"
done
