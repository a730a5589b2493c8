#!/bin/bash
# A masked-modelling recipe against lightly on a 2-core machine in about half of
# `benches/mim.sh`'s wall time (written for the longest epochs, iBOT and DINOv2: multi-crop 2 + 6
# through ViT-Tiny):
#   1. accuracy: the Rust recipe and its lightly + PyTorch replica (benches/pytorch/mim_fmnist.py)
#      train at the same time, each pinned to one core of its own (taskset; one thread each, the
#      replica's loader workers on its core), one epoch of the full Fashion-MNIST, then the kNN of
#      the 10,000 test images. The numbers a run computes do not depend on its speed;
#   2. speed: one after the other with nothing else running, 2 threads each (as mim.sh), the first
#      WINDOW steps of the same epoch; images/s over them (ours from its steps.csv, the replica's
#      from its --max-steps report).
# Usage: benches/mim_pinned.sh RECIPE [WINDOW]   (after `cargo build --release --bin recipe`)
#   benches/mim_pinned.sh ibot 40
#   SKIP_EPOCH=1 benches/mim_pinned.sh dinov2   # the speed windows only
#   BASE=mae benches/mim_pinned.sh mae_ratio_curriculum   # a curriculum recipe against its
#                                               # base method's replica (the replica has no
#                                               # masking curricula; it has mae_hpm)
#   SEED=1 SKIP_WINDOW=1 benches/mim_pinned.sh simmim   # another seed's epoch, both sides
#                                               # (weights, data order and masks; default 0)
#   THREADS=1 SKIP_EPOCH=1 benches/mim_pinned.sh mae    # the speed windows at 1 thread each
#   EXTRA="--backbone vit-tiny --batch-size 128" benches/mim_pinned.sh moco_v3
#                                               # options for our side only (the replica's
#                                               # MoCo v3 is ViT-Tiny at batch 128)
# Logs and run directories go to $LOGS (default: a new temporary directory, printed).
set -euo pipefail
RECIPE_NAME=${1:?usage: benches/mim_pinned.sh RECIPE [WINDOW]}
WINDOW=${2:-40}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
RECIPE=${RECIPE:-target/release/recipe}
LOGS=${LOGS:-$(mktemp -d)}
BASE=${BASE:-$RECIPE_NAME}
SEED=${SEED:-0}
THREADS=${THREADS:-2}
# At 1 thread both sides are pinned to one core, helper threads (ours: the augmentation ahead,
# view threads) and loader worker processes (the replica's) included.
PIN=()
[ "$THREADS" != 1 ] || PIN=(taskset -c 0)
read -r -a EXTRA_ARGS <<< "${EXTRA:-}"
REPLICA="$(dirname "$0")/pytorch/mim_fmnist.py"
mkdir -p "$LOGS"
# An unknown name fails here, not after an hour (argparse answers an invalid choice with exit 2).
python3 "$REPLICA" --recipe "$BASE" --help > /dev/null || {
  echo "error: the replica has no recipe '$BASE' (set BASE= to one of its --recipe choices)" >&2
  exit 2
}
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "date: $(date -u +%Y-%m-%dT%H:%MZ); load before: $(cut -d' ' -f1-3 /proc/loadavg); logs: $LOGS"

if [ -z "${SKIP_EPOCH:-}" ]; then
  echo "== $RECIPE_NAME (lightly: $BASE), seed $SEED: both sides at once, one core each"
  rm -rf "$LOGS/epoch"
  taskset -c 0 env RAYON_NUM_THREADS=1 /usr/bin/time -f "process %e s, user %U s, sys %S s" \
    "$RECIPE" "$RECIPE_NAME" --dataset fashion-mnist --data-dir "$DATA" --epochs 1 --no-baselines \
    --knn-every 0 --seed "$SEED" --run-dir "$LOGS/epoch" "${EXTRA_ARGS[@]}" > "$LOGS/ours-epoch.log" 2>&1 &
  ours=$!
  taskset -c 1 /usr/bin/time -f "process %e s, user %U s, sys %S s" \
    python3 -u "$REPLICA" --recipe "$BASE" --epochs 1 --threads 1 --data "$DATA" --seed "$SEED" \
    > "$LOGS/lightly-epoch.log" 2>&1 &
  lightly=$!
  wait "$ours" || { echo "error: the recipe failed:" >&2; tail -5 "$LOGS/ours-epoch.log" >&2; exit 2; }
  wait "$lightly" || { echo "error: the replica failed:" >&2; tail -5 "$LOGS/lightly-epoch.log" >&2; exit 2; }
  echo "-- curriculum-ssl (1 core)"
  grep -E "done in|kNN \(k|^process" "$LOGS/ours-epoch.log"
  cat "$LOGS/epoch/epochs.csv"
  echo "-- lightly + PyTorch (1 core)"
  grep -E "^epoch|^kNN|^RESULT|^process" "$LOGS/lightly-epoch.log"
fi

[ -z "${SKIP_WINDOW:-}" ] || exit 0
echo "== $RECIPE_NAME (lightly: $BASE): speed over the first $WINDOW steps, one after the other, $THREADS threads each"
rm -rf "$LOGS/window"
RAYON_NUM_THREADS=$THREADS "${PIN[@]}" "$RECIPE" "$RECIPE_NAME" --dataset fashion-mnist --data-dir "$DATA" \
  --epochs 1 --no-baselines --knn-every 0 --run-dir "$LOGS/window" "${EXTRA_ARGS[@]}" \
  > "$LOGS/ours-window.log" 2>&1 &
ours=$!
# steps.csv has a header and a line per step: stop the run once WINDOW steps are written.
until [ "$(wc -l 2>/dev/null < "$LOGS/window/steps.csv" || echo 0)" -gt "$WINDOW" ]; do
  kill -0 "$ours" 2>/dev/null || { echo "the recipe ended early:"; tail -5 "$LOGS/ours-window.log"; exit 1; }
  sleep 1
done
kill "$ours"; wait "$ours" 2>/dev/null || true
# Each step's images/s is its batch over its own wall time: with one batch size the window's
# rate is the harmonic mean of the steps' rates.
awk -F, -v w="$WINDOW" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "images_per_s") c = i }
  NR > 1 && NR <= w + 1 { s += 1 / $c; n += 1 }
  END { printf "curriculum-ssl: %d steps, %.2f images/s\n", w, n / s }' "$LOGS/window/steps.csv"
"${PIN[@]}" python3 "$REPLICA" --recipe "$BASE" --epochs 1 --threads "$THREADS" --data "$DATA" \
  --max-steps "$WINDOW" --knn-limit 500 > "$LOGS/lightly-window.log" 2>&1 \
  || { echo "error: the replica failed:" >&2; tail -5 "$LOGS/lightly-window.log" >&2; exit 2; }
grep -oE "images_per_s=[0-9.]+ wall_s=[0-9.]+ .*steps=[0-9]+" "$LOGS/lightly-window.log" \
  | sed 's/ knn.*steps=/ steps=/; s/^/lightly + PyTorch: /'
