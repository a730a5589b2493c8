#!/usr/bin/env bash
# Writes .ci/mesa_shader_cache.tar.gz: lavapipe's compiled shaders for the GPU-path tests
# (Mesa's shader cache, filled by two runs of tests/gpu_path from an empty cache, or from the
# committed file's with --keep), which .ci/run
# unpacks into the cache CI's run of the tests reads. See docs/gpu.md, "Caches worth keeping".
#
#   scripts/gpu_path_mesa_cache.sh [--keep]
#
# --keep: start from the committed file's entries instead of an empty cache, so that the file
# keeps the entries of the CPU kinds it was written on before and adds this machine's (CI may
# run on more than one kind; each kind reads only its own entries).
#
# Mesa (22.3) keys the cache by its own build, LLVM's, and the CPU (its family, model, feature
# flags and core count): a machine that differs in any misses every entry and compiles as it
# would without the file. Run it on a machine of CI's kind after the tests' kernels change (a
# new burn or cubecl, other shapes in the tests): a stale file only makes CI's run slower.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -gt 1 ] || { [ -n "${1:-}" ] && [ "$1" != "--keep" ]; }; then
  echo "error: unknown arguments '$*' (the only option is --keep)" >&2
  exit 2
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export MESA_SHADER_CACHE_DIR="$work/mesa"
export CURRICULUM_SSL_GPU_TESTS=require
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$work}"
mkdir -p "$MESA_SHADER_CACHE_DIR"
if [ "${1:-}" = "--keep" ]; then
  tar -xzf .ci/mesa_shader_cache.tar.gz -C "$MESA_SHADER_CACHE_DIR"
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
