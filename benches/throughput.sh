#!/usr/bin/env bash
# CPU throughput, end to end, against lightly + PyTorch on the same work: a recipe on the full
# Fashion-MNIST training set (60,000 images), the `small` backbone (`--backbone small`, the CPU
# default until 2026-11-27), batch 128, 3 epochs, then benches/pytorch/moco_v2_fmnist.py on the same work, one after the other on the
# same machine. Prints, for each side, training images/s, training wall time, the whole
# process's wall time and CPU use, and kNN top-1 (k = 20, T = 0.07, 60,000 training images as
# the bank, 10,000 test queries), then the ratio.
#
#   cargo build --release --bin recipe
#   benches/throughput.sh                 # moco_v2
#   benches/throughput.sh light_moco
#   EPOCHS=1 SIDES=rust benches/throughput.sh   # EPOCHS, DATA, BIN, OUT, THREADS, WORKERS, SIDES
#
# Training images/s is what both sides measure the same way: steps × 128 over the training
# time of the epochs (the Rust side's `seconds` column of epochs.csv; the peer's `wall_s`), the
# kNN evaluations and the checkpoint writes left out. The process lines (`/usr/bin/time`) show
# everything, start-up and kNN included.
set -euo pipefail
cd "$(dirname "$0")/.."
RECIPE=${1:-moco_v2}
EPOCHS=${EPOCHS:-3}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
BIN=${BIN:-target/release/recipe}
OUT=${OUT:-runs/throughput}
THREADS=${THREADS:-2}
WORKERS=${WORKERS:-2}
SIDES=${SIDES:-"rust pytorch"}
mkdir -p "$OUT"

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "date: $(date -u +%Y-%m-%dT%H:%MZ); load before: $(cut -d' ' -f1-3 /proc/loadavg)"

rust_side() {
    local dir="$OUT/$RECIPE-rust"
    rm -rf "$dir"
    /usr/bin/time -f "%e %U %S" -o "$OUT/rust.time" \
        "$BIN" "$RECIPE" --data-dir "$DATA" --epochs "$EPOCHS" --workers "$WORKERS" --backbone small \
        --knn-every 0 --run-dir "$dir" >"$OUT/rust.log" 2>&1
    python3 - "$dir" "$OUT/rust.time" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(f"{sys.argv[1]}/epochs.csv")))
seconds = sum(float(r["seconds"]) for r in rows)
images = sum(float(r["images_per_s"]) * float(r["seconds"]) for r in rows)
knn = [r["knn20_top1"] for r in rows if r.get("knn20_top1")]
wall, user, sys_ = map(float, open(sys.argv[2]).read().split())
print(f"RESULT side=rust images_per_s={images / seconds:.1f} wall_s={seconds:.1f} "
      f"knn_top1={100 * float(knn[-1]):.2f} "
      f"process_s={wall:.1f} cpu_cores={(user + sys_) / wall:.2f}")
EOF
}

pytorch_side() {
    /usr/bin/time -f "%e %U %S" -o "$OUT/pytorch.time" \
        python3 benches/pytorch/moco_v2_fmnist.py --recipe "$RECIPE" --epochs "$EPOCHS" \
        --data "$DATA" --threads "$THREADS" --workers "$WORKERS" >"$OUT/pytorch.log" 2>&1
    local result
    result=$(grep '^RESULT' "$OUT/pytorch.log")
    read -r wall user sys_ <"$OUT/pytorch.time"
    # The DataLoader's worker processes are children: /usr/bin/time counts their CPU time too.
    echo "$result process_s=$wall cpu_cores=$(python3 -c "print(f'{($user + $sys_) / $wall:.2f}')")"
}

for side in $SIDES; do
    echo "== $side: $RECIPE, $EPOCHS epochs"
    case $side in
        rust) rust_side | tee "$OUT/rust.result" ;;
        pytorch) pytorch_side | tee "$OUT/pytorch.result" ;;
    esac
done

if [ -f "$OUT/rust.result" ] && [ -f "$OUT/pytorch.result" ]; then
    python3 - "$OUT/rust.result" "$OUT/pytorch.result" <<'EOF'
import sys
def parse(path):
    line = open(path).read().split()
    return {k: v for k, v in (f.split("=", 1) for f in line[1:] if "=" in f)}
r, p = parse(sys.argv[1]), parse(sys.argv[2])
print()
print("| side | training images/s | training wall | process wall | CPU cores used | kNN top-1 |")
print("|---|---:|---:|---:|---:|---:|")
for name, d in (("curriculum-ssl (burn Flex)", r), ("lightly + PyTorch", p)):
    print(f"| {name} | {float(d['images_per_s']):.0f} | {float(d['wall_s']):.0f} s | "
          f"{float(d['process_s']):.0f} s | {d['cpu_cores']} | {float(d['knn_top1']):.2f} % |")
print(f"\nratio (ours / peer, training images/s): "
      f"{float(r['images_per_s']) / float(p['images_per_s']):.2f}x")
EOF
fi
