#!/usr/bin/env bash
# The README's bad-batches comparison: `simclr`, `bad_batches` and `curricular_weighting` on the
# full Fashion-MNIST training set, the CPU backbone, the same seeds and epochs; then the linear
# probe and kNN of each run (`recipe eval`), the rejection rate per epoch and the curation's wall
# time (epochs.csv), summarised by experiments/summarise.py.
#
#   cargo build --release --bin recipe
#   experiments/bad_batches.sh            # DATA, EPOCHS, WARMUP, SEEDS, LANES, OUT override
#
# LANES runs go side by side (each run keeps about one core busy); every run's own numbers
# (speed, curation seconds) are measured while its lane-mates run, so compare them within a
# table, not across machines.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
EPOCHS=${EPOCHS:-6}
WARMUP=${WARMUP:-3}
SEEDS=${SEEDS:-"0 1 2"}
LANES=${LANES:-2}
OUT=${OUT:-runs/bad-batches}
BIN=${BIN:-target/release/recipe}
mkdir -p "$OUT/logs"

jobs=()
for seed in $SEEDS; do
    for recipe in simclr bad_batches curricular_weighting; do
        jobs+=("$recipe $seed")
    done
done

one() {
    local recipe=$1 seed=$2
    local dir="$OUT/$recipe-seed$seed"
    local extra=()
    if [ "$recipe" = bad_batches ]; then extra=(--curation-warmup "$WARMUP"); fi
    if [ ! -f "$dir/summary.md" ]; then
        rm -rf "$dir"
        "$BIN" "$recipe" --data-dir "$DATA" --epochs "$EPOCHS" --seed "$seed" \
            --knn-every "$EPOCHS" --checkpoint-every "$EPOCHS" --run-dir "$dir" "${extra[@]}" \
            >"$OUT/logs/$recipe-seed$seed.train.txt" 2>&1
    fi
    "$BIN" eval --run-dir "$dir" >"$OUT/logs/$recipe-seed$seed.eval.txt" 2>&1
    echo "$recipe seed $seed done"
}
export -f one
export OUT DATA EPOCHS WARMUP BIN
printf '%s\n' "${jobs[@]}" | xargs -P "$LANES" -L 1 bash -c 'one $0 $1'
python3 experiments/summarise.py "$OUT"
