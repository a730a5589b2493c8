#!/usr/bin/env python3
"""The operations burn's fusion stream runs per training step, by kind (docs/gpu.md, "The fourth
cut").

Every operation a step records on a GPU backend passes through burn's fusion thread: it is
registered, matched against the stored plans and run in one of them, so their number is what the
host's work per step follows (more steadily than a profile's milliseconds, which move by 10 % from
one run to the next on two cores). burn logs each plan it runs as a table of its operations at
`BURN_FUSION_LOG=full`; this counts the rows of those tables after the warm-up.

    BURN_FUSION_LOG=full CUBECL_AUTOTUNE_LEVEL=minimal recipe bench_step --method simclr \\
        --batch-size 4 --image-size 8 --warmup 2 --steps 2 > bench.json 2> fusion.log
    benches/fusion_ops.py fusion.log bench.json

`recipe` is a `--features wgpu` (or `cuda`) build. The counted steps are the timed ones and, on a
GPU backend, the one more step `bench_step` runs phase by phase for the memory readings (its
`memory_mib`): the same operations. The count stops at `bench_step`'s `measured steps done` line:
after it the run ends and burn's fusion releases every tensor of the model (MoCo v2: about 350
releases, which counts before 2026-12-07 took for 118 a step). A log without the line (a binary
from before it) is refused unless `--to-end` is given. Prints JSON: operations per step and the
largest kinds.
"""

import collections
import json
import sys


def count(log_lines, to_end=False):
    """Operation kinds in the plans' tables after the last `warm-up step` line, up to the
    `measured steps done` line (to the end of the log with `to_end`)."""
    starts = [i for i, line in enumerate(log_lines) if line.startswith("warm-up step")]
    if not starts:
        raise SystemExit("error: no `warm-up step` line in the log (run with --warmup 1 or more)")
    ends = [i for i, line in enumerate(log_lines) if line.startswith("measured steps done")]
    if not ends and not to_end:
        raise SystemExit(
            "error: no `measured steps done` line in the log (a recipe binary from before "
            "2026-12-07?); --to-end counts the run's final releases too")
    end = ends[-1] if ends and not to_end else len(log_lines)
    kinds = collections.Counter()
    for line in log_lines[starts[-1]:end]:
        fields = line.split()
        # A table row: its index, the block's label on its first row, then the operation.
        if len(fields) < 2 or not fields[0].isdigit():
            continue
        for field in fields[1:]:
            if "::" in field or field in ("Drop", "Custom"):
                kinds[field] += 1
                break
    return kinds


def main():
    args = [a for a in sys.argv[1:] if a != "--to-end"]
    if len(args) != 2:
        print("usage: fusion_ops.py [--to-end] FUSION_LOG BENCH_JSON", file=sys.stderr)
        sys.exit(2)
    with open(args[0], errors="replace") as f:
        lines = f.read().split("\n")
    with open(args[1]) as f:
        bench = json.load(f)
    steps = bench["steps"] + (1 if bench.get("memory_mib") else 0)
    kinds = count(lines, to_end="--to-end" in sys.argv[1:])
    total = sum(kinds.values())
    if total == 0:
        raise SystemExit("error: no plan tables after the warm-up (was BURN_FUSION_LOG=full set?)")
    print(json.dumps({
        "method": bench["method"],
        "steps_counted": steps,
        "ops_per_step": round(total / steps, 1),
        "by_kind": {k: round(v / steps, 1) for k, v in kinds.most_common(12)},
    }, indent=1))


if __name__ == "__main__":
    main()
