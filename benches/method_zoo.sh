#!/bin/bash
# The method table on one work: each recipe on the full Fashion-MNIST for EPOCHS epochs at its
# defaults (the CPU backbone, batch 128, seed 0), one after the other; prints each recipe's
# epoch lines, its training images/s and its final kNN top-1.
# Usage: benches/method_zoo.sh [EPOCHS]   (after `cargo build --release --bin recipe`)
# RECIPES overrides the list; DATA the Fashion-MNIST directory.
set -euo pipefail
EPOCHS=${1:-3}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
RECIPE=${RECIPE:-target/release/recipe}
SEED=${SEED:-0}
for recipe in ${RECIPES:-simclr moco_v2 barlow_twins vicreg swav dino nnclr tico moco_v3}; do
  dir=$(mktemp -d)
  echo "== $recipe"
  "$RECIPE" "$recipe" --dataset fashion-mnist --data-dir "$DATA" --epochs "$EPOCHS" --backbone small \
    --seed "$SEED" --run-dir "$dir/run" 2>&1 | grep -E "epoch [0-9]+/|done in|kNN \(k"
  rm -rf "$dir"
done
