#!/usr/bin/env python3
"""Time to the first training step and peak memory of a recipe run on an image folder.

Starts `recipe ARGS... --run-dir TMP`, polls TMP/steps.csv until it holds `--steps` rows (the
first one: the time to the first step), then stops the run with SIGINT (the recipe's Ctrl-C:
it ends cleanly) and reads its peak resident memory from /proc while it runs (VmHWM).

    python3 benches/stream_first_step.py --recipe target/release/recipe --steps 3 -- \
        simclr --dataset image-folder --data-dir /data/in100k --image-size 224 \
        --backbone lenet5 --batch-size 64 --workers 2 --stream

Prints one line: seconds to the first step, seconds to the last step asked, peak RSS in MiB,
and whether the log said the folder was streamed.
"""
import argparse
import os
import signal
import subprocess
import tempfile
import time


def vm_hwm_kib(pid):
    """Peak resident set size of a process in KiB (0 once it has ended)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--recipe", default="target/release/recipe")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args()
    args = [x for x in a.args if x != "--"]
    run_dir = tempfile.mkdtemp(prefix="stream-first-step-")
    os.rmdir(run_dir)
    log = tempfile.NamedTemporaryFile(prefix="stream-first-step-", suffix=".log", delete=False)
    started = time.monotonic()
    proc = subprocess.Popen(
        [a.recipe, *args, "--run-dir", run_dir, "--no-baselines"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    steps_csv = os.path.join(run_dir, "steps.csv")
    first = last = None
    peak = 0
    while proc.poll() is None and time.monotonic() - started < a.timeout:
        peak = max(peak, vm_hwm_kib(proc.pid))
        try:
            with open(steps_csv) as f:
                rows = sum(1 for _ in f) - 1
        except OSError:
            rows = 0
        now = time.monotonic() - started
        if rows >= 1 and first is None:
            first = now
        if rows >= a.steps:
            last = now
            break
        time.sleep(0.05)
    peak = max(peak, vm_hwm_kib(proc.pid))
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
    with open(log.name) as f:
        text = f.read()
    streamed = "streaming" in text
    if first is None:
        print(f"no step within {a.timeout} s; log {log.name}")
        return
    print(
        f"first step {first:.2f} s, step {a.steps} {last:.2f} s, peak RSS {peak / 1024:.1f} MiB, "
        f"streamed {streamed} (log {log.name})"
    )


if __name__ == "__main__":
    main()
