#!/usr/bin/env bash
# Seven of the method table's newer rows against their lightly + PyTorch replicas (issue 69 item
# 3): one epoch of the full Fashion-MNIST (60,000 images) per side, one after the other on the
# same machine, for frossl, wmse, macl, directclr, nnsiam, mmcr and emp_ssl (the recipes' own
# defaults; the CPU default backbone `small-2x`, named explicitly so that both sides stay on
# it), then benches/pytorch/table_fmnist.py --recipe NAME, whose docstring lists every setting
# with the Rust file it mirrors and what differs. Prints each side's training images/s and kNN top-1, then
# a table of all of them.
#
#   cargo build --release --bin recipe
#   benches/table_fmnist.sh                       # all seven
#   benches/table_fmnist.sh mmcr frossl           # some of them
#   EPOCHS=1 DATA=... BIN=... OUT=... THREADS=2 WORKERS=2 SEED=0 SIDES="rust pytorch" \
#       benches/table_fmnist.sh
#
# Measured as benches/throughput.sh: training images/s = the batch's images (not views or
# patches) x steps over the training time of the epochs (ours: epochs.csv's `seconds` and
# `images_per_s`; the peer's `wall_s`), kNN and checkpoint writes left out; kNN top-1 at k = 20,
# T = 0.07 with the 60,000 training images as the bank and the 10,000 test images as queries
# (ours: epochs.csv's `knn20_top1` of the last epoch; `--knn-every 0` scores it at the end only,
# `--no-baselines` skips the untrained network's and the pixels' scores, which the peer does not
# compute). The process lines (`/usr/bin/time`) show everything, start-up and kNN included.
set -euo pipefail
cd "$(dirname "$0")/.."
RECIPES=${*:-"frossl wmse macl directclr nnsiam mmcr emp_ssl"}
EPOCHS=${EPOCHS:-1}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
BIN=${BIN:-target/release/recipe}
OUT=${OUT:-runs/table_fmnist}
THREADS=${THREADS:-2}
WORKERS=${WORKERS:-2}
SEED=${SEED:-0}
SIDES=${SIDES:-"rust pytorch"}
mkdir -p "$OUT"

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "date: $(date -u +%Y-%m-%dT%H:%MZ); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "recipes: $RECIPES; $EPOCHS epoch(s), seed $SEED, $WORKERS loader workers, peer $THREADS torch threads"

rust_side() {
    local recipe=$1 dir="$OUT/$1-rust"
    rm -rf "$dir"
    /usr/bin/time -f "%e %U %S" -o "$OUT/$recipe-rust.time" \
        "$BIN" "$recipe" --dataset fashion-mnist --data-dir "$DATA" --epochs "$EPOCHS" \
        --backbone small-2x --seed "$SEED" --workers "$WORKERS" --knn-every 0 --no-baselines \
        --run-dir "$dir" >"$OUT/$recipe-rust.log" 2>&1 || return 1
    python3 - "$recipe" "$dir" "$OUT/$recipe-rust.time" <<'EOF'
import csv, sys
recipe, run_dir, time_file = sys.argv[1:4]
rows = list(csv.DictReader(open(f"{run_dir}/epochs.csv")))
seconds = sum(float(r["seconds"]) for r in rows)
images = sum(float(r["images_per_s"]) * float(r["seconds"]) for r in rows)
knn = [r["knn20_top1"] for r in rows if r.get("knn20_top1")]
knn_top1 = 100 * float(knn[-1]) if knn else float("nan")
wall, user, sys_ = map(float, open(time_file).read().split())
print(f"RESULT side=rust recipe={recipe} images_per_s={images / seconds:.2f} wall_s={seconds:.2f} "
      f"knn_top1={knn_top1:.2f} process_s={wall:.1f} cpu_cores={(user + sys_) / wall:.2f}")
EOF
}

pytorch_side() {
    local recipe=$1
    /usr/bin/time -f "%e %U %S" -o "$OUT/$recipe-pytorch.time" \
        python3 benches/pytorch/table_fmnist.py --recipe "$recipe" --epochs "$EPOCHS" \
        --data "$DATA" --threads "$THREADS" --workers "$WORKERS" --seed "$SEED" \
        >"$OUT/$recipe-pytorch.log" 2>&1 || return 1
    local result wall user sys_
    result=$(grep '^RESULT' "$OUT/$recipe-pytorch.log") || return 1
    read -r wall user sys_ <"$OUT/$recipe-pytorch.time"
    # The DataLoader's worker processes are children: /usr/bin/time counts their CPU time too.
    echo "$result process_s=$wall cpu_cores=$(python3 -c "print(f'{($user + $sys_) / $wall:.2f}')")"
}

for recipe in $RECIPES; do
    for side in $SIDES; do
        echo "== $recipe, $side ($(date -u +%H:%MZ))"
        case $side in
            rust | pytorch) ;;
            *) echo "unknown side $side (rust, pytorch)" >&2; exit 2 ;;
        esac
        # A side that fails (a non-finite loss ends both: see mmcr in benches/README.md) is
        # recorded as failed, with the tail of its log, and the others still run.
        if "${side}_side" "$recipe" >"$OUT/$recipe-$side.result.tmp"; then
            mv "$OUT/$recipe-$side.result.tmp" "$OUT/$recipe-$side.result"
        else
            echo "RESULT side=$side recipe=$recipe failed=1" >"$OUT/$recipe-$side.result"
            rm -f "$OUT/$recipe-$side.result.tmp"
            tail -n 3 "$OUT/$recipe-$side.log" | sed 's/^/    /'
        fi
        cat "$OUT/$recipe-$side.result"
    done
done

python3 - "$OUT" $RECIPES <<'EOF'
import os, sys
out, recipes = sys.argv[1], sys.argv[2:]
def parse(path):
    if not os.path.isfile(path):
        return None
    fields = open(path).read().split()
    return {k: v for k, v in (f.split("=", 1) for f in fields[1:] if "=" in f)}
def num(d, key, fmt):
    if d == "failed":
        return "failed"
    return format(float(d[key]), fmt) if d and key in d else "–"
print()
print("| recipe | ours images/s | lightly images/s | ratio (ours / peer) | ours kNN top-1 % | "
      "lightly kNN top-1 % | ours process s | lightly process s |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for r in recipes:
    ours, peer = parse(f"{out}/{r}-rust.result"), parse(f"{out}/{r}-pytorch.result")
    ours = ours if ours and "failed" not in ours else ("failed" if ours else None)
    peer = peer if peer and "failed" not in peer else ("failed" if peer else None)
    ratio = (f"{float(ours['images_per_s']) / float(peer['images_per_s']):.2f}x"
             if isinstance(ours, dict) and isinstance(peer, dict) else "–")
    print(f"| `{r}` | {num(ours, 'images_per_s', '.0f')} | {num(peer, 'images_per_s', '.0f')} | "
          f"{ratio} | {num(ours, 'knn_top1', '.2f')} | {num(peer, 'knn_top1', '.2f')} | "
          f"{num(ours, 'process_s', '.0f')} | {num(peer, 'process_s', '.0f')} |")
EOF
