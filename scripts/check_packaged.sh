#!/usr/bin/env bash
# Checks the crates as a user would get them from crates.io (issue 70): packages the workspace
# (`cargo package --workspace --no-verify`), unpacks the .crate files, and builds a crate
# outside the workspace that depends on them by version — the unpacked crates stand in for
# crates.io through `[patch.crates-io]`, nothing of the workspace's path — with the README's
# Rust examples as its programs. Then checks that it builds the renamed, patched collective
# layer (its Cargo.lock holds it) and not upstream's burn-collective.
#
#   scripts/check_packaged.sh    # 3 minutes on 2 cores the first time, 45 s once its target is built
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
cargo package --workspace --no-verify --allow-dirty --quiet
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/crates"
for c in target/package/*.crate; do tar xzf "$c" -C "$work/crates"; done
dep="$work/dependent"
mkdir -p "$dep/src/bin"
cat > "$dep/Cargo.toml" <<TOML
[package]
name = "dependent"
version = "0.0.0"
edition = "2021"
publish = false

[workspace]

[dependencies]
curriculum-ssl = "0.1.0"
curriculum-ssl-models = "0.1.0"
burn = { version = "=0.21.0", features = ["autodiff", "flex"] }

[patch.crates-io]
curriculum-ssl = { path = "$work/crates/curriculum-ssl-0.1.0" }
curriculum-ssl-models = { path = "$work/crates/curriculum-ssl-models-0.1.0" }
curriculum-ssl-collective = { path = "$work/crates/curriculum-ssl-collective-0.21.0" }
curriculum-ssl-communication = { path = "$work/crates/curriculum-ssl-communication-0.21.0" }
# What vendor/burn-autodiff/PATCHED.md asks a dependent to add (the patched autodiff is not
# packaged: it keeps burn's name).
burn-autodiff = { path = "$root/vendor/burn-autodiff" }
TOML
echo "fn main() {}" > "$dep/src/main.rs"
# The README's compiled Rust blocks (rust,no_run), one program each.
python3 - "$root/README.md" "$dep/src/bin" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
blocks = re.findall(r"```rust,no_run\n(.*?)```", text, re.S)
assert blocks, "no rust,no_run block in the README"
for i, block in enumerate(blocks):
    open(f"{sys.argv[2]}/readme_{i}.rs", "w").write(block)
print(f"{len(blocks)} README examples")
PY
cp Cargo.lock "$dep/Cargo.lock"
(cd "$dep" && CARGO_TARGET_DIR="$root/target/package/dependent" cargo build --bins)
# What the build uses (a lockfile lists every optional dependency, burn's own burn-collective
# too, so its names alone say nothing): the renamed collective layer, from the packaged crate.
tree="$(cd "$dep" && cargo tree --offline -e normal --prefix none)"
if grep -q '^burn-collective ' <<<"$tree"; then
  echo "error: the dependent builds upstream's burn-collective" >&2
  exit 1
fi
grep -q "^curriculum-ssl-collective v0.21.0 ($work/crates/curriculum-ssl-collective-0.21.0)" <<<"$tree"
grep -q '^name = "curriculum-ssl-collective"$' "$dep/Cargo.lock"
echo "a crate on the packaged crates builds the README's examples and the packaged collective layer"
