#!/usr/bin/env bash
# The README's rotation and PGD comparison: `rotnet` vs `rotnet_curriculum` and `simclr` vs
# `simclr_pgd` on the embedded Fashion-MNIST subset, the CPU backbone, the same seeds and epochs;
# kNN (k = 20) top-1 of the last epoch and the training speed, summarised by
# experiments/summarise.py.
#
#   cargo build --release --bin recipe
#   experiments/rotation_pgd.sh       # EPOCHS, SEEDS, PGD_STEPS, LANES, OUT, BIN override
#
# PGD_STEPS (default 2) is the attack's S for simclr_pgd: the recipe's default is Madry et al.'s
# 7, which costs about 9 plain steps per step on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
EPOCHS=${EPOCHS:-8}
SEEDS=${SEEDS:-"0 1 2"}
PGD_STEPS=${PGD_STEPS:-2}
LANES=${LANES:-1}
OUT=${OUT:-runs/rotation-pgd}
BIN=${BIN:-target/release/recipe}
mkdir -p "$OUT/logs"

jobs=()
for seed in $SEEDS; do
    for recipe in rotnet rotnet_curriculum simclr simclr_pgd; do
        jobs+=("$recipe $seed")
    done
done

one() {
    local recipe=$1 seed=$2
    local dir="$OUT/$recipe-seed$seed"
    local extra=()
    if [ "$recipe" = simclr_pgd ]; then extra=(--pgd-steps "$PGD_STEPS"); fi
    if [ ! -f "$dir/summary.md" ]; then
        rm -rf "$dir"
        "$BIN" "$recipe" --epochs "$EPOCHS" --seed "$seed" --knn-every "$EPOCHS" \
            --checkpoint-every "$EPOCHS" --run-dir "$dir" "${extra[@]}" \
            >"$OUT/logs/$recipe-seed$seed.train.txt" 2>&1
    fi
    echo "$recipe seed $seed done"
}
export -f one
export OUT EPOCHS PGD_STEPS BIN
printf '%s\n' "${jobs[@]}" | xargs -P "$LANES" -L 1 bash -c 'one $0 $1'
python3 experiments/summarise.py "$OUT"
