#!/usr/bin/env python3
"""Writes the GPU-path tests' autotune seed (tests/gpu_path/autotune/) from a cubecl autotune
cache that a cold run of those tests filled.

    CURRICULUM_SSL_GPU_AUTOTUNE_CACHE=/tmp/at cargo test --test gpu_path
    python3 scripts/gpu_path_autotune_seed.py /tmp/at tests/gpu_path/autotune

cubecl keeps one line per tuned key, `{"key": {...}, "value": {"fastest_index": i, "results":
[...]}}`, in `autotune/<cubecl version>/<device>/<operation>.json.log`, and reads back only the
key, its checksum and `fastest_index`. The seed keeps those and drops the measured timings
(`results` empty), so it changes only when a key or a choice does.

Kept are the choices whose kernel is written per unit (thread) or is a fallback: those run the
same on every Vulkan device. A choice of a plane (subgroup) or cube kernel is left out, since
lavapipe's subgroup width follows the CPU's vector width (8 lanes with AVX2, 16 with AVX-512),
and those keys are tuned afresh on the machine that runs the tests.
"""

import json
import sys
from pathlib import Path

# The winners that may depend on the device's subgroup width.
DEVICE_SHAPED = ("plane", "cube", "cmma", "mma", "tma")


def winner(value):
    index = value["fastest_index"]
    for result in value["results"]:
        ok = result["outcome"].get("Ok")
        if ok is not None and ok["index"] == index:
            return ok["name"]
    return None


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
            name = winner(entry["value"])
            if name is None or any(part in name for part in DEVICE_SHAPED):
                left += 1
                continue
            entry["value"]["results"] = []
            lines[json.dumps(entry["key"], sort_keys=True)] = json.dumps(
                entry, separators=(",", ":")
            )
            kept += 1
        out = seed / log.relative_to(cache / "autotune")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("".join(lines[k] + "\n" for k in sorted(lines)))
    print(f"{kept} choices kept, {left} left to tune on the device, in {seed}")


if __name__ == "__main__":
    main()
