#!/bin/bash
# The host's work per training step on lavapipe, split from the device's and from waiting:
# `recipe bench_step` under `perf record`, then benches/host_time.py (docs/gpu.md, "The host's
# work per step").
#
#   benches/host_time.sh RECIPE_BINARY OUT_DIR [bench_step options]
#   benches/host_time.sh target/release/recipe /tmp/host --method simclr --batch-size 8 \
#       --image-size 16 --warmup 1 --steps 4
#
# RECIPE_BINARY is a `--features wgpu` build; perf (linux-perf) and Mesa's lavapipe
# (mesa-vulkan-drivers) must be installed, and perf allowed to read tracepoints (root, or
# kernel.perf_event_paranoid <= 1). HOST_TIME_FREQ sets the sampling rate (default 997 Hz).
# Writes OUT_DIR/perf.data, bench.json and host_time.json.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 RECIPE_BINARY OUT_DIR [bench_step options]" >&2
  exit 2
fi
binary=$(realpath "$1")
out=$2
shift 2
[ -x "$binary" ] || { echo "error: $binary is not an executable" >&2; exit 2; }
command -v perf > /dev/null || { echo "error: perf is not installed (linux-perf)" >&2; exit 2; }
mkdir -p "$out"
export CUBECL_AUTOTUNE_LEVEL=${CUBECL_AUTOTUNE_LEVEL:-minimal}
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-$(mktemp -d)}
here=$(dirname "$(realpath "$0")")
# cpu-clock samples with frame-pointer call chains (the kernel's are whole, which is all the
# split needs), and every write to stderr: the warm-up's last line marks the timed steps.
perf record -o "$out/perf.data" -F "${HOST_TIME_FREQ:-997}" -g -e cpu-clock \
  -e syscalls:sys_enter_write --filter 'fd == 2' -- \
  "$binary" bench_step "$@" > "$out/bench.json"
python3 "$here/host_time.py" "$out/perf.data" "$out/bench.json" "$binary" | tee "$out/host_time.json"
