#!/bin/bash
# Where the time goes, row by row: a perf profile of each backbone's forward + backward at batch
# 64 (benches/backbones.rs) and of the ResNet-18 training step at batch 128 (`recipe
# bench_step`), each grouped into categories by benches/perf_categories.py. The first seconds
# of each (model set-up, the first iterations' page faults) are left out with `perf record -D`.
# Usage, after building with line tables:
#   CARGO_PROFILE_RELEASE_DEBUG=line-tables-only CARGO_PROFILE_BENCH_DEBUG=line-tables-only \
#     cargo build --release --bin recipe
#   CARGO_PROFILE_RELEASE_DEBUG=line-tables-only CARGO_PROFILE_BENCH_DEBUG=line-tables-only \
#     cargo bench --bench backbones --no-run
#   benches/profile_rows.sh            # every row; ROWS="resnet18_cifar:4 step:simclr:12" for some
# Each row is NAME:SECONDS_SKIPPED (backbones) or step:METHOD:SECONDS_SKIPPED.
# Needs perf and llvm-addr2line; writes OUT (default: a fresh temporary directory).
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=${CARGO_TARGET_DIR:-target}
BENCH=${BENCH:-$(ls -t "$TARGET"/release/deps/backbones-* | grep -v '\.d$' | head -1)}
RECIPE=${RECIPE:-$TARGET/release/recipe}
OUT=${OUT:-$(mktemp -d)}
ROWS=${ROWS:-"resnet18_cifar:4 resnet34_cifar:6 resnet50_cifar:11 wrn_16_8:8 wrn_28_10:18 vgg16_bn:3
  mobilenet_v3_large:3 mobilenet_v3_small:3 lenet5:3 efficientnet_b0:3 efficientnet_b1:4
  step:simclr:12 step:moco_v2:8 step:byol:16 step:simsiam:12"}
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); profiles in $OUT"
for row in $ROWS; do
  skip=${row##*:}
  case $row in
    step:*)
      method=${row#step:}; method=${method%%:*}
      perf record -q -F 499 -D $((skip * 1000)) -o "$OUT/step_$method.data" \
        "$RECIPE" bench_step --method "$method" --batch-size 128 --steps 5 --warmup 2 \
        > "$OUT/step_$method.log" 2>&1
      echo "== ResNet-18 $method step, batch 128 (first $skip s left out)"
      grep '^{' "$OUT/step_$method.log" || true
      python3 benches/perf_categories.py "$OUT/step_$method.data" "$RECIPE"
      ;;
    *)
      name=${row%%:*}
      BACKBONES=$name perf record -q -F 499 -D $((skip * 1000)) -o "$OUT/$name.data" \
        "$BENCH" --bench --profile-time $((skip + 20)) > "$OUT/$name.log" 2>&1
      echo "== $name forward + backward, batch 64 (first $skip s left out)"
      python3 benches/perf_categories.py "$OUT/$name.data" "$BENCH"
      ;;
  esac
done
