#!/usr/bin/env bash
# The README's SPL-ADVisE comparison (the paper's Table 1, Fashion-MNIST, on the CPU):
# `spl_advise` vs `spld` vs `random_sampling` on the full Fashion-MNIST training set, the CPU
# student (the small ResNet, Adam 1e-3), batch 128, the same epochs and steps, 3 seeds; test
# top-1 of every epoch, summarised and plotted by experiments/spl_advise_summary.py.
#
#   cargo build --release --bin recipe
#   experiments/spl_advise.sh      # EPOCHS, SEEDS, LANES, DATA, OUT, BIN override
set -euo pipefail
cd "$(dirname "$0")/.."
EPOCHS=${EPOCHS:-5}
SEEDS=${SEEDS:-"0 1 2"}
LANES=${LANES:-2}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
OUT=${OUT:-runs/spl-advise}
BIN=${BIN:-target/release/recipe}
mkdir -p "$OUT/logs"

one() {
    local recipe=$1 seed=$2
    local dir="$OUT/$recipe-seed$seed"
    if [ ! -f "$dir/checkpoints/latest" ] || ! grep -q "^$EPOCHS," "$dir/epochs.csv" 2>/dev/null; then
        rm -rf "$dir"
        "$BIN" "$recipe" --data-dir "$DATA" --epochs "$EPOCHS" --seed "$seed" \
            --checkpoint-every "$EPOCHS" --run-dir "$dir" \
            >"$OUT/logs/$recipe-seed$seed.txt" 2>&1
    fi
    echo "$recipe seed $seed done"
}
export -f one
export OUT BIN EPOCHS DATA

for seed in $SEEDS; do
    for recipe in spl_advise spld random_sampling; do
        echo "$recipe $seed"
    done
done | xargs -P "$LANES" -L 1 bash -c 'one "$@"' _
python3 experiments/spl_advise_summary.py "$OUT"
