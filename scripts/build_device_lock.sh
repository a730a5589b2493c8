#!/usr/bin/env bash
# Builds the `recipe` binary a second way for the GPU check's comparison (docs/gpu.md, "Without
# the server threads"): with cubecl-common's re-entrant device lock in place of its channels to a
# server thread per service (burn's fusion server, cubecl's device), so that the training thread
# runs the fusion and the launches itself. cubecl-common 0.10 chooses the channels at compile time
# on every target with threads (no feature or setting picks the lock), hence a patched copy of
# the crate, given to cargo for this build only; the workspace, its Cargo.toml and its Cargo.lock
# are left as they were.
#
#   scripts/build_device_lock.sh [cargo build options]
#   CUDARC_CUDA_VERSION=13000 scripts/build_device_lock.sh --features cuda
#   scripts/build_device_lock.sh --features wgpu      # the rehearsal on lavapipe
#
# Writes target/device-lock/release/recipe (a target directory of its own: every crate above
# cubecl-common builds again, about 15 minutes on 2 cores). The patch is
# scripts/device_lock/cubecl-common-0.10.0.patch; `patch` (Debian's package) applies it.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
command -v patch > /dev/null || { echo "error: patch is not installed (apt-get install patch)" >&2; exit 2; }
command -v python3 > /dev/null || { echo "error: python3 is not installed (it reads cargo metadata)" >&2; exit 2; }
version=0.10.0
patch_file=$repo/scripts/device_lock/cubecl-common-$version.patch
target=$repo/target/device-lock
# Where cargo keeps cubecl-common's source (fetched if missing).
metadata=$(cargo metadata --format-version 1 --locked) || {
  echo "error: cargo metadata failed (above): cubecl-common's source cannot be found" >&2
  exit 2
}
source=$(printf '%s' "$metadata" | python3 -c '
import json, os, sys
version = sys.argv[1]
for p in json.load(sys.stdin)["packages"]:
    if p["name"] == "cubecl-common" and p["version"] == version:
        print(os.path.dirname(p["manifest_path"]))
        break
' "$version")
[ -n "$source" ] && [ -d "$source" ] || {
  echo "error: cubecl-common $version is not in this workspace's dependencies (the patch is for that version)" >&2
  exit 2
}
copy=$target/cubecl-common-$version
rm -rf "$copy"
mkdir -p "$target"
cp -r "$source" "$copy"
chmod -R u+w "$copy"
patch -p1 -d "$copy" --quiet < "$patch_file"
# A patch given to cargo rewrites Cargo.lock (the crate's source becomes a path): the
# workspace's own is put back afterwards, whatever the build's outcome.
saved=$(mktemp)
cp Cargo.lock "$saved"
trap 'cp "$saved" Cargo.lock; rm -f "$saved"' EXIT
cargo build --release --bin recipe --target-dir "$target" \
  --config "patch.crates-io.cubecl-common.path = \"$copy\"" "$@"
echo "built $target/release/recipe (cubecl-common with its re-entrant device lock)"
