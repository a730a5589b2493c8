#!/usr/bin/env bash
# The production path on a GPU in one call: the `recipe` binary (built elsewhere with
# `--features cuda`, or `--features wgpu` for the rehearsal on Mesa's lavapipe) against PyTorch on
# the same work, within a time budget, writing one markdown table and one JSON under the output
# directory. docs/gpu.md#the-gpu-check says what each row means and what it found.
#
#   scripts/gpu_check.sh [--recipe PATH] [--recipe-lock PATH] [--data DIR] [--out DIR]
#                        [--budget SECONDS] [--quick]
#
#   --recipe   the recipe binary (default: target/release/recipe)
#   --recipe-lock  a second build of it with cubecl-common's re-entrant device lock
#              (scripts/build_device_lock.sh: no server threads, the training thread runs the
#              fusion and the launches); its f32 steps are timed beside the first's
#   --data     the full Fashion-MNIST IDX files (default: /usr/share/datasets/fashion-mnist)
#   --out      where gpu_check.md, gpu_check.json and logs.tar.gz go (default: $OUT, else
#              ./gpu_check)
#   --budget   seconds for all sections together (default 480); a section that no longer fits is
#              recorded as skipped, never started. The report and the logs are rewritten under
#              --out after every section (a call stopped from outside keeps them); give the call
#              itself about a minute more than the budget for the final packing
#   --only     a comma-separated list of sections to run (a rerun of some), the others skipped
#   --steps N, --warmup N   the timed and warm-up steps of the step sections (default 20, 5)
#   --section-limit S   every section's time limit (default: each its own)
#   --kernel-cache DIR  cubecl's caches of compiled kernels (PTX) and autotune results, read and
#              written there (default: a fresh one); the run leaves them packed in the output
#              directory as autotune_cache.tar.gz (autotune's choices, small), ptx_cache.tar.xz
#              and nv_cache.tar.xz (the driver's machine code): unpacked under .gpu/ and
#              carried, they spare the next call the first step's compilations and tuning
#              (lavapipe: 215.8 s -> 20.2 s; the H200: minutes -> 2.7 s for ResNet-18's SimCLR)
#   --warm-limit S   phase 1's time limit (default 240)
#   --quick    tiny sizes (batch 16 on 16-pixel views, 2 timed steps, 1-epoch runs on 512
#              images): the rehearsal on a CPU or a software GPU, where only the backend differs
#
# Two phases. First, every process that compiles kernels runs at once (the GPU machine has 16
# cores; cubecl compiles each kernel with NVRTC on the thread that launches it, so one process
# uses one core while it compiles and tunes, and the H200's first ResNet-18 step took over 140 s
# that way), sharing one kernel cache (cubecl's cache files are safe for several processes, each
# reading the others' entries as it writes its own). Autotune measures its candidates on a GPU the
# other processes share: its choices are made under load and kept in the cache the timed phase
# reads. Then the timed sections, one at a time, with the kernels compiled.
#   phase 1, at once, each at most --warm-limit seconds (default 240):
#   worked_values        every loss's worked value on the device against the f64 reference
#   run_mico_moco_small  two epochs of mico_moco on the small backbone; its run directory comes
#                        back for `recipe eval` on the CPU (a checkpoint written on CUDA)
#   run_light_moco, run_simclr, run_byol, run_dino   two epochs on the embedded subset (ResNet-18,
#                        DINO with multi-crop): the kNN at initialisation and after
#   warm_<method>_<precision>   one ResNet-18 step of the timed step sections' shapes
#   warm_moco_v2_epoch   one epoch of moco_v2 on the embedded subset: the kernels of the timed
#                        full-set epoch (same batch and image size)
#   phase 2, one after the other (peak GPU memory read from nvidia-smi as the rise over idle):
#   step_*               the training step of SimCLR, MoCo v2, BYOL (ResNet-18, CIFAR stem,
#                        batch 256, 32x32): `recipe bench_step` f32 (with cubecl's memory
#                        readings), PyTorch eager f32 (with its allocator's, --memory),
#                        PyTorch's step with every layer 64 times narrower on one thread (the
#                        same operators on tiny tensors: its host's pace, step_pytorch_narrow_f32),
#                        PyTorch bf16 (autocast; benches/pytorch/train_step.py), ours bf16
#   kernels_*_ours_f32   the same steps with every kernel timed (`--profile-kernels`): kernels
#                        per step, the device's time in them by name
#   epoch_light_moco_ours  one epoch of light_moco (the card's recipe) on the 60,000 images,
#                        and its kNN
#   memory_moco_v2_ours_f32  MoCo v2's step with cubecl's memory logger at its full level: every
#                        reservation and each new page of its pools (logs/cubecl_memory.log)
#   step_*_ours_f32_lock  with --recipe-lock: the f32 steps of the build without server threads
#   epoch_moco_v2_*      one epoch of moco_v2 on the 60,000 images, ours, then
#                        benches/pytorch/moco_v2_fmnist.py with a torchvision DataLoader
#   step_pytorch_compile_f32         PyTorch's step under torch.compile (slow to compile: last)
# (Two replicas on the one GPU against one are not run: with burn 0.21's fusion two replicas on
# one device panic in the collective's all-reduce; docs/gpu.md.)
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)

recipe=$repo/target/release/recipe
recipe_lock=
data=/usr/share/datasets/fashion-mnist
out=${OUT:-gpu_check}
budget=480
quick=0
only=
kernel_cache=
section_limit=
steps_arg=
warmup_arg=
warm_limit=240
while [ $# -gt 0 ]; do
  case "$1" in
    --recipe) recipe=$2; shift 2 ;;
    --recipe-lock) recipe_lock=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --only) only=,$2,; shift 2 ;;
    --steps) steps_arg=$2; shift 2 ;;
    --section-limit) section_limit=$2; shift 2 ;;
    --kernel-cache) kernel_cache=$2; shift 2 ;;
    --warmup) warmup_arg=$2; shift 2 ;;
    --warm-limit) warm_limit=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set /{/^set /!p}' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument $1 (--help lists them)" >&2; exit 2 ;;
  esac
done
[ -x "$recipe" ] || { echo "gpu_check.sh: no executable recipe binary at $recipe" >&2; exit 2; }
if [ -n "$recipe_lock" ]; then
  [ -x "$recipe_lock" ] || { echo "gpu_check.sh: no executable recipe binary at $recipe_lock (--recipe-lock)" >&2; exit 2; }
  recipe_lock=$(cd "$(dirname "$recipe_lock")" && pwd)/$(basename "$recipe_lock")
fi
[ -d "$data" ] || { echo "gpu_check.sh: no data directory $data" >&2; exit 2; }
# Paths as the caller gave them (relative to the caller's directory), then from the repository.
recipe=$(cd "$(dirname "$recipe")" && pwd)/$(basename "$recipe")
data=$(cd "$data" && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
if [ -n "$kernel_cache" ]; then
  mkdir -p "$kernel_cache"
  kernel_cache=$(cd "$kernel_cache" && pwd)
fi
cd "$repo" || exit 2
work=$(mktemp -d)
logs=$work/logs
mkdir -p "$logs" "$work/runs"
sections=$work/sections.jsonl
: > "$sections"
python=${PYTHON:-python3}
# The binary runs in a directory of its own whose cubecl.toml keeps cubecl's caches (compiled
# kernels: off by default in cubecl 0.10, so every process compiled every kernel again; autotune
# results) in one place and logs each compilation and autotune: the first step on a GPU compiles
# and tunes every kernel of the network, and the logs say where its time went.
kernel_cache=${kernel_cache:-$work/kernel_cache}
mkdir -p "$kernel_cache" "$work/cwd"
cat > "$work/cwd/cubecl.toml" <<EOF
[compilation]
cache = { file = "$kernel_cache/ptx" }
[compilation.logger]
level = "basic"
file = "$logs/cubecl_compilation.log"
[autotune]
cache = { file = "$kernel_cache/autotune" }
[autotune.logger]
level = "full"
file = "$logs/cubecl_autotune.log"
EOF
# The driver's own cache of PTX compiled to machine code (else every process JIT-compiles each
# kernel again even when cubecl's cache skipped NVRTC).
export CUDA_CACHE_PATH=$kernel_cache/nv CUDA_CACHE_MAXSIZE=4294967296
ours=(sh -c 'cd "$0" && exec "$@"' "$work/cwd" "$recipe")
ours_lock=(sh -c 'cd "$0" && exec "$@"' "$work/cwd" "$recipe_lock")
# The memory section's directory: the same configuration, and cubecl's memory logger at its full
# level (every reservation, each new page with the pools' state) into its own log.
mkdir -p "$work/cwd_memory"
cp "$work/cwd/cubecl.toml" "$work/cwd_memory/cubecl.toml"
cat >> "$work/cwd_memory/cubecl.toml" <<EOF
[memory.logger]
level = "full"
file = "$logs/cubecl_memory.log"
EOF
ours_memory=(sh -c 'cd "$0" && exec "$@"' "$work/cwd_memory" "$recipe")
export PYTHONUNBUFFERED=1 RUST_BACKTRACE=1
export CUBECL_AUTOTUNE_LEVEL=${CUBECL_AUTOTUNE_LEVEL:-minimal}
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-$work}
# NVRTC (burn's CUDA kernels are compiled at run time): the CUDA toolkit's or PyTorch's copy.
for dir in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
  $("$python" -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  [ -d "$dir" ] && export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done

if [ "$quick" = 1 ]; then
  batch=16 side=16 steps=2 warmup=1 epochs=1
  tiny=$work/tiny
  "$python" - "$data" "$tiny" <<'EOF' || { echo "gpu_check.sh: could not make the --quick data" >&2; exit 1; }
import gzip, os, struct, sys
src, dst = sys.argv[1:]
os.makedirs(dst, exist_ok=True)
def read(name):
    for n in (name, name + ".gz"):
        p = os.path.join(src, n)
        if os.path.exists(p):
            return (gzip.open if p.endswith(".gz") else open)(p, "rb").read()
    sys.exit(f"no {name} in {src}")
for prefix, n in (("train", 512), ("t10k", 128)):
    im, lb = read(f"{prefix}-images-idx3-ubyte"), read(f"{prefix}-labels-idx1-ubyte")
    open(f"{dst}/{prefix}-images-idx3-ubyte", "wb").write(struct.pack(">IIII", 2051, n, 28, 28) + im[16:16 + n * 784])
    open(f"{dst}/{prefix}-labels-idx1-ubyte", "wb").write(struct.pack(">II", 2049, n) + lb[8:8 + n])
EOF
  subset=(--data-dir "$tiny" --batch-size 32)
  full=(--data-dir "$tiny" --batch-size 32)
  torch_full=(--data "$tiny" --max-steps 4 --knn-subset 128 --workers 0)
else
  batch=256 side=32 steps=20 warmup=5 epochs=2
  subset=()
  full=(--data-dir "$data")
  torch_full=(--data "$data" --workers 8)
fi

steps=${steps_arg:-$steps}
warmup=${warmup_arg:-$warmup}
started=$SECONDS
# gpu_reading: "MIB UTIL" (memory used, and the share of the last sampling period in which a
# kernel ran, in %), or nothing without nvidia-smi.
gpu_reading() {
  command -v nvidia-smi >/dev/null 2>&1 || return 0
  local v
  v=$(nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader,nounits 2>/dev/null | head -1 | tr -d ' ')
  case $v in *,*) ;; *) return 0 ;; esac
  case ${v%,*}${v#*,} in ''|*[!0-9]*) return 0 ;; esac
  echo "${v%,*} ${v#*,}"
}

# count PATTERN FILE: matching lines, 0 when none or no file.
count() {
  local n
  n=$(grep -c "$1" "$2" 2>/dev/null)
  echo "${n:-0}"
}

# The report and the logs under --out after every section, so that a call stopped from outside
# (the GPU machine's time limit) still returns what ran.
publish() {
  "$python" scripts/gpu_check_report.py "$work" "$out" --budget "$budget" --elapsed $(( SECONDS - started )) > /dev/null 2>&1
  tar -C "$work" -czf "$out/logs.tar.gz.part" logs sections.jsonl \
    $(cd "$work" && find runs -name '*.csv' -o -name 'recipe.toml' 2>/dev/null | grep -v '^runs/mico_moco_small/') 2>/dev/null \
    && mv "$out/logs.tar.gz.part" "$out/logs.tar.gz"
}

# cubecl's caches (autotune results, PTX) in one file, the driver's machine code in another
# (each file that comes back from the GPU machine is limited in size).
pack_caches() {
  local base
  base=$(basename "$kernel_cache")
  # Autotune's choices: small, and what spares the next call the tuning (most of the first
  # step's compilations are autotune's candidates).
  [ -e "$kernel_cache/autotune" ] && tar -C "$kernel_cache/.." -czf "$out/autotune_cache.tar.gz" "$base/autotune" 2>/dev/null
  # The compiled kernels: PTX text and the driver's machine code, xz on every core (gzip left
  # them over the 16 MiB a returned file may have on 2026-11-27).
  [ -e "$kernel_cache/ptx" ] && tar -C "$kernel_cache/.." -cf - "$base/ptx" 2>/dev/null | xz -T0 -3 > "$out/ptx_cache.tar.xz"
  [ -d "$kernel_cache/nv" ] && tar -C "$kernel_cache/.." -cf - "$base/nv" 2>/dev/null | xz -T0 -3 > "$out/nv_cache.tar.xz"
  return 0
}

# section NAME LIMIT CMD...: runs CMD with its output in logs/NAME.log if at least 20 s of the
# budget are left, for at most LIMIT seconds (or what is left), sampling the GPU's memory.
section() {
  local name=$1 limit=${section_limit:-$2}
  shift 2
  if [ -n "$only" ] && [[ "$only" != *",$name,"* ]]; then
    return
  fi
  local left=$(( budget - (SECONDS - started) ))
  if [ "$left" -lt 20 ]; then
    echo "== $name: skipped, ${left} s of the budget left"
    printf '{"name":"%s","rc":null,"seconds":0,"skipped":true}\n' "$name" >> "$sections"
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  [ -n "$phase_limit" ] && [ "$limit" -gt "$phase_limit" ] && limit=$phase_limit
  echo "== $name (at most $limit s)"
  local idle
  idle=$(gpu_reading)
  idle=${idle%% *}
  local t0=$SECONDS
  local compiled0 tuned0
  compiled0=$(count 'Compiling kernel' "$logs/cubecl_compilation.log")
  tuned0=$(count 'Fastest result' "$logs/cubecl_autotune.log")
  timeout --kill-after=5 "$limit" "$@" > "$logs/$name.log" 2>&1 &
  local pid=$! peak=${idle:-0} now tick=0
  local reading=
  while kill -0 "$pid" 2>/dev/null; do
    # Phase 1's sections read the GPU only for their progress lines (13 processes polling
    # nvidia-smi twice a second would take cores from the compilers, and one section's peak
    # cannot be told from the others' there).
    if [ -z "$in_background" ] || [ $(( (tick + 1) % 20 )) -eq 0 ]; then
      reading=$(gpu_reading)
      now=${reading%% *}
    fi
    if [ -z "$in_background" ]; then
      [ -n "$now" ] && [ "$now" -gt "$peak" ] && peak=$now
      # Every reading, for the utilisation during the timed steps (the end of a step section):
      # near 100 % says the GPU's kernels bound the step, far below it that the host does.
      [ -n "$reading" ] && echo "$(( SECONDS - t0 )) $reading" >> "$logs/$name.gpu"
    fi
    sleep 0.5
    # Every 10 s: how far cubecl got (kernels compiled, shapes tuned), so a section stopped at
    # its limit still says whether it was compiling, tuning or stuck.
    tick=$(( tick + 1 ))
    if [ $(( tick % 20 )) -eq 0 ]; then
      echo "$(( SECONDS - t0 )) s: $(( $(count 'Compiling kernel' "$logs/cubecl_compilation.log") - compiled0 )) kernels compiled, $(( $(count 'Fastest result' "$logs/cubecl_autotune.log") - tuned0 )) shapes tuned, GPU ${now:-?} MiB" >> "$logs/$name.progress"
    fi
  done
  wait "$pid"
  local rc=$?
  local peak_json=null
  # In phase 1 the GPU's reading is every process's together: no peak of one section.
  [ -n "$idle" ] && [ -z "$in_background" ] && peak_json=$(( peak - idle ))
  printf '{"name":"%s","rc":%d,"seconds":%d,"gpu_mib":%s}\n' "$name" "$rc" $(( SECONDS - t0 )) "$peak_json" >> "$sections"
  echo "   $name: rc $rc, $(( SECONDS - t0 )) s"
  tail -n 3 "$logs/$name.log" | sed 's/^/   /'
  [ -z "$in_background" ] && publish
  return 0
}

# at_once NAME LIMIT CMD...: a phase-1 section, started in the background (collected by `wait`).
in_background=
phase_limit=
at_once() {
  ( in_background=1 section "$@" ) &
}

{
  echo "date: $(date -u +%FT%TZ)"
  echo "recipe: $("$recipe" --version 2>&1)"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  command -v nvidia-smi >/dev/null && nvidia-smi | grep -o 'CUDA Version: [0-9.]*'
  "$python" -c 'import torch, torchvision; print("torch", torch.__version__, "torchvision", torchvision.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no cuda")' 2>&1
  nproc | sed 's/^/cpus: /'
} > "$logs/environment.log" 2>&1
cat "$logs/environment.log"
torch_device=cpu
"$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null && torch_device=cuda

# Phase 1: everything that compiles kernels, at once.
phase_limit=$warm_limit
at_once worked_values 120 "${ours[@]}" worked_values
at_once run_mico_moco_small 240 "${ours[@]}" mico_moco ${subset[@]+"${subset[@]}"} --backbone small --epochs "$epochs" --knn-every 1 --checkpoint-every 1 --run-dir "$work/runs/mico_moco_small"
for r in light_moco simclr byol dino; do
  at_once "run_$r" 240 "${ours[@]}" "$r" ${subset[@]+"${subset[@]}"} --epochs "$epochs" --knn-every 1 --run-dir "$work/runs/$r"
done
for p in f32 bf16; do
  for m in simclr moco_v2 byol; do
    at_once "warm_${m}_$p" 240 "${ours[@]}" bench_step --method "$m" --batch-size "$batch" --image-size "$side" --steps 1 --warmup 1 --precision "$p"
  done
done
# The full-set epoch's kernels: the same recipe, batch and image size on the embedded subset.
at_once warm_moco_v2_epoch 240 "${ours[@]}" moco_v2 ${subset[@]+"${subset[@]}"} --epochs 1 --knn-every 0 --run-dir "$work/runs/moco_v2_warm"
wait
phase_limit=
publish
pack_caches

# Phase 2: the timed sections, one at a time.
step=(--batch-size "$batch" --image-size "$side" --steps "$steps" --warmup "$warmup")
torch_step=(benches/pytorch/train_step.py --device "$torch_device" --batch "$batch" --image-size "$side" --steps "$steps" --warmup "$warmup" --json)
for m in simclr moco_v2 byol; do
  section "step_${m}_ours_f32" 90 "${ours[@]}" bench_step --method "$m" "${step[@]}"
done
section step_pytorch_eager_f32 90 "$python" "${torch_step[@]}" --memory simclr moco_v2 byol
# PyTorch's host pace: its step with tiny layers on one CPU thread (docs/gpu.md, "PyTorch's host
# work per step").
section step_pytorch_narrow_f32 90 "$python" "${torch_step[@]}" --threads 1 --width-divisor 64 simclr moco_v2 byol
section step_pytorch_eager_bf16 90 "$python" "${torch_step[@]}" --precision bf16 simclr moco_v2 byol
for m in simclr moco_v2 byol; do
  section "step_${m}_ours_bf16" 90 "${ours[@]}" bench_step --method "$m" "${step[@]}" --precision bf16
done
# Each kernel of our step timed on the device (cubecl's profiling: every launch waits for the
# previous one), so that the step's time splits into the kernels' and the host's.
for m in simclr moco_v2 byol; do
  section "kernels_${m}_ours_f32" 60 "${ours[@]}" bench_step --method "$m" --batch-size "$batch" --image-size "$side" --steps 2 --warmup 1 --profile-kernels
done
# The card's recipe: one epoch on the full training set, and its kNN.
section epoch_light_moco_ours 120 "${ours[@]}" light_moco "${full[@]}" --epochs 1 --run-dir "$work/runs/light_moco_full"
# Where MoCo v2's memory goes: its step with every reservation and page logged (the pools'
# state at each new page: cubecl_memory.log, in logs.tar.gz).
section memory_moco_v2_ours_f32 60 "${ours_memory[@]}" bench_step --method moco_v2 --batch-size "$batch" --image-size "$side" --steps 2 --warmup 1
# Without the server threads (--recipe-lock): the same kernels, from the same caches; after
# what issue 66 asks the call for, before the full-set MoCo v2 epochs.
if [ -n "$recipe_lock" ]; then
  for m in simclr moco_v2 byol; do
    section "step_${m}_ours_f32_lock" 90 "${ours_lock[@]}" bench_step --method "$m" "${step[@]}"
  done
fi
section epoch_moco_v2_ours 150 "${ours[@]}" moco_v2 "${full[@]}" --epochs 1 --run-dir "$work/runs/moco_v2_full"
section epoch_moco_v2_pytorch 150 "$python" benches/pytorch/moco_v2_fmnist.py --device "$torch_device" --backbone resnet18 --epochs 1 "${torch_full[@]}"
section step_pytorch_compile_f32 150 "$python" "${torch_step[@]}" --compile simclr moco_v2 byol

publish
"$python" scripts/gpu_check_report.py "$work" "$out" --budget "$budget" --elapsed $(( SECONDS - started ))
pack_caches
# The small run comes back whole, for `recipe eval` on the CPU.
[ -d "$work/runs/mico_moco_small" ] && tar -C "$work/runs" -czf "$out/mico_moco_small.tar.gz" mico_moco_small
rm -rf "$work"
echo "gpu_check: $out/gpu_check.md, $out/gpu_check.json"
