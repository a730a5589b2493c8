#!/usr/bin/env bash
# Writes .ci/mesa_shader_cache.tar.gz: lavapipe's compiled shaders for the GPU-path tests
# (Mesa's shader cache, filled by two runs of tests/gpu_path from an empty cache, or from the
# committed file's with --keep), which .ci/run
# unpacks into the cache CI's run of the tests reads. See docs/gpu.md, "Caches worth keeping".
#
#   scripts/gpu_path_mesa_cache.sh [--keep [--drop-before YYYY-MM-DD]]
#
# --keep: start from the committed file's entries instead of an empty cache, so that the file
# keeps the entries of the CPU kinds it was written on before and adds this machine's (CI may
# run on more than one kind; each kind reads only its own entries).
# --drop-before DATE: with --keep, leave out the committed entries last written before DATE
# (the file keeps each entry's time, so a kind's stale entries are those of the day it was
# written on: `tar -tvzf .ci/mesa_shader_cache.tar.gz` lists them). It refreshes this machine's
# kind while keeping the other kinds' newer entries; an entry file names no CPU kind (its name
# is a hash of the key, the CPU's description inside it), so the date is the only handle.
#
# Mesa (22.3) keys the cache by its own build, LLVM's, and the CPU (its family, model, feature
# flags and core count): a machine that differs in any misses every entry and compiles as it
# would without the file. Run it on a machine of CI's kind after the tests' kernels change (a
# new burn or cubecl, other shapes in the tests): a stale file only makes CI's run slower.
set -euo pipefail
cd "$(dirname "$0")/.."
keep=0
drop_before=""
args=("$@")
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) keep=1 ;;
    --drop-before)
      if [ $# -lt 2 ] || ! date -d "$2" >/dev/null 2>&1 || ! [[ "$2" =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}$ ]]; then
        echo "error: --drop-before needs a date as YYYY-MM-DD, got '${2:-}'" >&2
        exit 2
      fi
      drop_before="$2"
      shift ;;
    *)
      echo "error: unknown argument '$1' in '${args[*]}' (options: --keep, --drop-before DATE)" >&2
      exit 2 ;;
  esac
  shift
done
if [ -n "$drop_before" ] && [ "$keep" = 0 ]; then
  echo "error: --drop-before only applies with --keep" >&2
  exit 2
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export MESA_SHADER_CACHE_DIR="$work/mesa"
export CURRICULUM_SSL_GPU_TESTS=require
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$work}"
mkdir -p "$MESA_SHADER_CACHE_DIR"
if [ "$keep" = 1 ]; then
  tar -xzf .ci/mesa_shader_cache.tar.gz -C "$MESA_SHADER_CACHE_DIR"
  if [ -n "$drop_before" ]; then
    # Mesa's `index` (its record of the cache's size) stays: it is rewritten as entries are added.
    echo "dropped $(find "$MESA_SHADER_CACHE_DIR" -type f ! -name index ! -newermt "$drop_before" \
      -print -delete | wc -l) files written before $drop_before"
  fi
  echo "kept $(find "$MESA_SHADER_CACHE_DIR" -type f | wc -l) files of the committed cache"
fi
target="$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
# Twice, each from the autotune seed alone, as CI runs it: the keys the seed leaves out are tuned
# by timing, and a second run's choices may lead to kernels the first did not compile.
for run in 1 2; do
  rm -rf "$target/tmp/gpu_path_autotune"
  echo "== run $run"
  cargo test --test gpu_path
done
tar -czf .ci/mesa_shader_cache.tar.gz -C "$MESA_SHADER_CACHE_DIR" .
echo "wrote .ci/mesa_shader_cache.tar.gz ($(du -h .ci/mesa_shader_cache.tar.gz | cut -f1)," \
  "$(find "$MESA_SHADER_CACHE_DIR" -type f | wc -l) files)"
