#!/usr/bin/env python3
"""Writes the GPU-path tests' autotune seed (tests/gpu_path/autotune/) from a cubecl autotune
cache that a run of those tests filled.

    CURRICULUM_SSL_GPU_AUTOTUNE_CACHE=/tmp/at cargo test --test gpu_path
    python3 scripts/gpu_path_autotune_seed.py /tmp/at tests/gpu_path/autotune

cubecl keeps one line per tuned key, `{"key": {...}, "value": {"fastest_index": i, "results":
[...]}}`, in `autotune/<cubecl version>/<device>/<operation>.json.log`, and reads back only the
key, its checksum and `fastest_index`. The seed keeps those and drops the measured timings
(`results` empty), so it changes only when a key or a choice does. A cache that started from
the seed (the tests' own folder, `target/tmp/gpu_path_autotune`, after a run) holds the seed's
lines, whose results are empty, and the keys the run tuned: both are kept (a key tuned again,
the later line), so a run that tuned only the seed's missing keys is enough to rewrite it.

Every choice is kept, a plane (subgroup) or cube kernel's too: Mesa 22.3's lavapipe (Debian 12's,
what CI installs) runs 256-bit vectors on every x86-64 CPU with AVX, AVX-512 ones included
(`llvmpipe (LLVM 15.0.6, 256 bits)`, subgroup size 8 in `vulkaninfo`), so a choice holds on
every machine CI may use. On a device where it would not be the fastest it is still a correct
kernel (the tests' tolerances hold for every candidate).

The matrix products are the exception (`MATMUL_FALLBACK`): whatever the run chose, the seed
names each key's first candidate, the one burn's tuners keep as the fallback — burn-cubecl's
naive kernel for a plain product, and for burn-fusion's fused product its fallback, the product
and the fused element-wise work as kernels of their own. Timing picked tiled kernels
(`SimpleUnit` at its smallest or largest tile), whose blueprint follows the shapes, so every
shape compiled a large kernel of its own: lavapipe spent most of the tests' time compiling them.
From an empty Mesa shader cache the GPU-path tests took 466 s with the timed choices and 109 s
with these (2 cores, 2026-12-06). On a GPU none of them is what autotune picks (a CUDA device
takes the tensor-core kernels, which lavapipe cannot run), so the tests lose no kernel a GPU
run would use; they still check every product against the CPU.
"""

import json
import sys
from pathlib import Path

# The autotuned matrix products whose seed names the fallback (candidate 0) for every key.
MATMUL_FALLBACK = {
    "burn_cubecl-kernel-matmul-tune-base.json.log",
    "burn_cubecl_fusion-optim-matmul-tune.json.log",
}


def chosen(value):
    """Whether the line names a choice: a seed's line (no results), or a tuned key whose
    fastest index is among its results that ran."""
    if not value["results"]:
        return True
    index = value["fastest_index"]
    return any(
        (result["outcome"].get("Ok") or {}).get("index") == index
        for result in value["results"]
    )


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    cache, seed = Path(sys.argv[1]), Path(sys.argv[2])
    logs = sorted((cache / "autotune").glob("*/*/*.json.log"))
    if not logs:
        sys.exit(f"no autotune/<version>/<device>/*.json.log under {cache}")
    kept = left = 0
    for log in logs:
        lines = {}
        for line in log.read_text().splitlines():
            if not line.strip():
                continue
            entry = json.loads(line)
            if not chosen(entry["value"]):
                left += 1
                continue
            entry["value"]["results"] = []
            if log.name in MATMUL_FALLBACK:
                entry["value"]["fastest_index"] = 0
            lines[json.dumps(entry["key"], sort_keys=True)] = json.dumps(
                entry, separators=(",", ":")
            )
        kept += len(lines)
        out = seed / log.relative_to(cache / "autotune")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("".join(lines[k] + "\n" for k in sorted(lines)))
    print(f"{kept} choices kept in {seed} ({left} lines without a choice that ran left out)")


if __name__ == "__main__":
    main()
