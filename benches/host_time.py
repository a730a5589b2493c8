#!/usr/bin/env python3
"""The host's work per training step, out of a `perf` recording of `recipe bench_step`:
`host_time.py PERF_DATA BENCH_JSON BINARY` (benches/host_time.sh records both).

On lavapipe the kernels run on the host's cores, and cubecl's device thread runs them as it
receives them, so the step's wall time and each thread's CPU time (`cpu_ms_per_step`) mix three
things: the host's work (burn's autodiff and fusion, cubecl's launches, wgpu), the device's
(lavapipe's compiled kernels) and waiting (cubecl's channels between the threads spin with
`pause`, then yield, then sleep, when the thread on the other side is busy). Each cpu-clock
sample of the timed steps goes to one of the three:

- waiting: its call chain passes through `sched_yield`, a sleep or a futex wait, or it landed in
  the binary just after a `pause` instruction (the bytes F3 90 within the 40 before its
  address: the spin loops of cubecl's channels);
- the device: it landed in lavapipe's compiled kernels (`[JIT]`, perf's map of anonymous
  code), in Mesa's driver (`libvulkan_lvp`), LLVM or gallium;
- the host: the rest, by the crate of the first frame in the binary (`burn_fusion`,
  `burn_cubecl_fusion`, `cubecl_runtime`, `burn_autodiff`, `wgpu_core`, ...); samples in libc or
  the kernel with no frame of the binary are `libc` / `kernel`. On cubecl's device thread those
  are mostly Mesa's: the binary allocates with mimalloc, lavapipe with libc's malloc.

The timed steps are the window after the warm-up's last line on stderr (a `write` to fd 2,
recorded as a tracepoint: the last write, or the one before `bench_step`'s `measured steps done`,
which it writes when its steps are done, recognised by its length) for `steps × ms_per_step` of
the bench's JSON. Times are the samples'
periods (cpu-clock: CPU time) summed and divided by the steps. Threads are grouped by name with
digits dropped: the training thread carries the binary's name, burn's fusion server is `DSU-`,
cubecl's device thread `DSD-`."""
import collections
import json
import re
import subprocess
import sys

STEPS_DONE = b"measured steps done\n"
WAIT_FRAMES = ("sched_yield", "nanosleep", "futex_wait", "do_epoll_wait")
DEVICE_DSOS = ("[JIT]", "perf-", "libvulkan_lvp", "libLLVM", "libgallium")


def main():
    data, bench_json, binary = sys.argv[1:4]
    bench = json.load(open(bench_json))
    name = binary.rsplit("/", 1)[-1]
    code = open(binary, "rb").read()
    script = subprocess.run(
        ["perf", "script", "-i", data, "--show-mmap-events",
         "-F", "comm,tid,time,event,period,ip,sym,dso,trace"],
        capture_output=True, text=True, check=True).stdout
    base = offset = None
    samples, writes, current = [], [], None
    for line in script.splitlines():
        if "PERF_RECORD_MMAP" in line:
            m = re.search(r"\[0x([0-9a-f]+)\(0x[0-9a-f]+\) @ 0x([0-9a-f]+)", line)
            if m and base is None and line.rstrip().endswith(binary) and "r-xp" in line:
                base, offset = int(m.group(1), 16), int(m.group(2), 16)
            continue
        m = re.match(r"^\s*(.+?)\s+(\d+)\s+(\d+\.\d+):\s+(\d+)\s+(\S+):", line)
        if m and not line.startswith("\t"):
            t, event = float(m.group(3)), m.group(5)
            if "sys_enter_write" in event:
                count = re.search(r"count: (0x[0-9a-f]+)", line)
                writes.append((t, int(count.group(1), 16) if count else None))
                current = None
            else:
                current = {"comm": m.group(1), "t": t, "ns": int(m.group(4)), "frames": []}
                samples.append(current)
            continue
        m = re.match(r"^\s+([0-9a-f]+)\s+(.*?)\s+\((.*)\)\s*$", line)
        if m and current is not None:
            current["frames"].append((int(m.group(1), 16), m.group(2), m.group(3)))
    if not writes:
        sys.exit("no write to stderr recorded: record with `-e syscalls:sys_enter_write`")
    # The warm-up's last line is the last write before the timed steps. `bench_step` writes one
    # more line after them and the step it reads by phase, `measured steps done` in one write
    # of its own (a binary from before 2026-12-07 does not): the write before it, then.
    window = bench["steps"] * bench["ms_per_step"] / 1e3
    if writes[-1][1] == len(STEPS_DONE):
        if len(writes) < 2:
            sys.exit("no warm-up line before `measured steps done` (run with --warmup 1 or more)")
        start = writes[-2][0]
        if start + window > writes[-1][0]:
            sys.exit("the timed window runs past `measured steps done`: not a bench_step run?")
    else:
        start = writes[-1][0]
    end = start + window

    def file_offset(ip):
        # perf writes a call chain's addresses as offsets in the file, a lone leaf's as the
        # process's address.
        return ip if base is None or ip < base else ip - base + offset

    def classify(frames):
        ip, _, dso = frames[0]
        if any(w in sym for _, sym, _ in frames for w in WAIT_FRAMES):
            return "wait", "yield / sleep"
        if dso.endswith(name):
            at = file_offset(ip)
            if b"\xf3\x90" in code[max(0, at - 40):at]:
                return "wait", "spin"
        # The first frame outside the kernel and libc says whose work it is.
        for _, sym, fdso in frames:
            if "kallsyms" in fdso or "libc.so" in fdso or "[unknown]" in fdso:
                continue
            if any(d in fdso for d in DEVICE_DSOS):
                return "device", "kernels (JIT)" if fdso.startswith(("[JIT]", "perf-")) else \
                    fdso.rsplit("/", 1)[-1].split(".so")[0]
            if fdso.endswith(name):
                if sym.startswith(("mi_", "_mi_")):
                    return "host", "mimalloc"
                m = re.search(r"([a-z_][a-z_0-9]*)::", sym)
                return "host", m.group(1) if m else sym[:40]
            return "host", fdso.rsplit("/", 1)[-1].split(".so")[0]
        return "host", "kernel" if "kallsyms" in dso else dso.rsplit("/", 1)[-1].split(".so")[0]

    steps = bench["steps"]
    by_kind = collections.defaultdict(float)
    by_crate = collections.defaultdict(float)
    for s in samples:
        if not (start <= s["t"] <= end) or not s["frames"]:
            continue
        thread = re.sub(r"\d", "", s["comm"])
        thread = "training" if thread.startswith(re.sub(r"\d", "", name)[:15]) else thread.rstrip("-")
        kind, what = classify(s["frames"])
        by_kind[(thread, kind)] += s["ns"] / 1e6 / steps
        if kind == "host":
            by_crate[(thread, what)] += s["ns"] / 1e6 / steps
    threads = sorted({t for t, _ in by_kind})
    out = {
        "method": bench["method"], "batch_size": bench["batch_size"],
        "image_size": bench["image_size"], "steps": steps, "ms_per_step": bench["ms_per_step"],
        "ms_per_step_by_thread": {t: {k: round(v, 1) for (tt, k), v in sorted(by_kind.items())
                                      if tt == t} for t in threads},
        "host_ms_per_step_by_crate": {t: {c: round(v, 1) for (tt, c), v in
                                          sorted(by_crate.items(), key=lambda x: -x[1])
                                          if tt == t and v >= 0.5} for t in threads},
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
