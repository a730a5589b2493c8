#!/usr/bin/env python3
"""gpu_check.sh's report: reads the sections' records and logs from its work directory and writes
gpu_check.md (the tables) and gpu_check.json (every number) to the output directory.

    python3 scripts/gpu_check_report.py WORK_DIR OUT_DIR [--budget S] [--elapsed S]
"""

import argparse
import json
import math
import re
from pathlib import Path

KNN = re.compile(
    r"kNN \(k = 20, T = 0\.07\): top-1 ([0-9.]+)% \(at initialisation ([0-9.]+)%"
)
DONE = re.compile(r"done in ([^:]+): (\d+) steps, ([0-9.]+) images/s")
RESULT = re.compile(r"^RESULT (.*)$", re.M)


def read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def json_lines(text: str):
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                pass


def fmt(x, spec=".1f"):
    if not isinstance(x, (int, float)) or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return format(x, spec)


def cell(text) -> str:
    """One line of text for a markdown table cell."""
    return str(text).splitlines()[0].replace("|", "\\|") if str(text) else ""


def finite(value):
    """NaN (what PyTorch's side writes for peak memory on the CPU) as null, for strict JSON."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


def busy_at_end(text: str):
    """The mean of nvidia-smi's utilisation readings (lines "SECONDS MIB PERCENT") over the last
    40 % of a section's time, where a step section runs its timed steps; None without readings.
    A section with several methods (PyTorch's) mixes them."""
    rows = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and all(p.isdigit() for p in parts):
            rows.append((int(parts[0]), int(parts[2])))
    if not rows:
        return None
    end = rows[-1][0]
    tail = [u for t, u in rows if t >= 0.6 * end]
    return sum(tail) / len(tail)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("work", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--budget", type=int, default=None)
    ap.add_argument("--elapsed", type=int, default=None)
    args = ap.parse_args()
    logs = args.work / "logs"
    sections = list(json_lines(read(args.work / "sections.jsonl")))
    for s_ in sections:
        s_["progress"] = read(logs / f"{s_['name']}.progress").strip().splitlines()
    report = {
        "environment": read(logs / "environment.log").strip().splitlines(),
        "budget_s": args.budget,
        "elapsed_s": args.elapsed,
        "sections": sections,
    }

    # Training steps: one row per (side, mode, method).
    steps = []
    for s in sections:
        name = s["name"]
        if not name.startswith("step_"):
            continue
        util = busy_at_end(read(logs / f"{name}.gpu"))
        for rec in json_lines(read(logs / f"{name}.log")):
            rec = dict(rec)
            if "_ours_" in name:
                rec["side"] = "ours"
                rec["gpu_mib"] = s.get("gpu_mib")
                if name.endswith("_lock"):
                    rec["backend"] = f"{rec.get('backend', '?')}, device lock"
            else:
                rec["side"] = "pytorch"
                if (rec.get("width_divisor") or 1) > 1:
                    rec["backend"] = f"{rec.get('backend', '?')}, widths /{rec['width_divisor']}, 1 thread"
            rec["section"] = name
            rec["gpu_busy_end_pct"] = util
            steps.append(rec)
    report["steps"] = steps

    # Our steps with every kernel timed (--profile-kernels): the device's time in kernels against
    # the unprofiled step's time of the same method (step_<method>_ours_f32).
    kernels = {}
    for s in sections:
        name = s["name"]
        if not name.startswith("kernels_"):
            continue
        method = name[len("kernels_"):].rsplit("_ours_", 1)[0]
        recs = list(json_lines(read(logs / f"{name}.log")))
        if not recs:
            kernels[method] = {"rc": s["rc"]}
            continue
        rec = recs[-1]
        plain = [r for r in steps if r.get("section") == f"step_{method}_ours_f32" and "ms_per_step" in r]
        kernels[method] = {
            "rc": s["rc"],
            "kernels_per_step": rec.get("kernels_per_step"),
            "kernel_ms_per_step": rec.get("kernel_ms_per_step"),
            "step_ms": plain[0]["ms_per_step"] if plain else None,
            "issue_ms_per_step": plain[0].get("issue_ms_per_step") if plain else None,
            "top": (rec.get("kernel_ms_by_name") or [])[:10],
            "kernels_by_phase": [(p.get("phase"), p.get("kernels")) for p in rec.get("kernels_by_phase") or []],
        }
    report["kernels"] = kernels

    # The memory section: MoCo v2's readings, and the state of cubecl's pools at the last new
    # page of the device's memory ("Main GPU Memory") from its full memory log.
    memory = {}
    for s in sections:
        if not s["name"].startswith("memory_"):
            continue
        recs = list(json_lines(read(logs / f"{s['name']}.log")))
        log = read(logs / "cubecl_memory.log").splitlines()
        starts = [i for i, line in enumerate(log) if line.startswith("[Main GPU Memory]") and "Allocated a new memory page" in line]
        dump = []
        if starts:
            for line in log[starts[-1]:]:
                if line.startswith("[") and dump:
                    break
                if re.search(r"Pool|Page StorageId|Slices|bytes reserved|Bytes in use|^## |efficiency", line):
                    dump.append(line.rstrip())
        memory[s["name"]] = {"rc": s["rc"], "gpu_mib": s.get("gpu_mib"),
                             "memory_mib": recs[-1].get("memory_mib") if recs else None,
                             "pages": len(starts),
                             "pools_at_last_page": dump[:120]}
    report["memory"] = memory

    # Recipe runs: kNN at initialisation and at the end, throughput.
    runs = {}
    for s in sections:
        name = s["name"]
        if not (name.startswith("run_") or name.startswith("epoch_")):
            continue
        text = read(logs / f"{name}.log")
        row = {"rc": s["rc"], "seconds": s["seconds"], "gpu_mib": s.get("gpu_mib")}
        if m := KNN.search(text):
            row["knn_top1"], row["knn_init_top1"] = float(m.group(1)), float(m.group(2))
        if m := DONE.search(text):
            row["steps"], row["images_per_s"] = int(m.group(2)), float(m.group(3))
        if m := RESULT.search(text):
            fields = dict(kv.split("=", 1) for kv in m.group(1).split() if "=" in kv)
            row["pytorch"] = fields
            for key in ("images_per_s", "knn_top1"):
                try:
                    row[key] = float(fields[key])
                except (KeyError, ValueError):
                    pass
        runs[name] = row
    report["runs"] = runs

    wv = read(logs / "worked_values.log").strip().splitlines()
    report["worked_values"] = wv[-1] if wv else None
    # Phase 1's warm-up processes: how long the first step took while every kernel was compiled
    # and tuned (all phase-1 processes at once).
    warm = {}
    for s in sections:
        name = s["name"]
        if not name.startswith("warm_"):
            continue
        recs = list(json_lines(read(logs / f"{name}.log")))
        warm[name] = {"rc": s["rc"], "seconds": s["seconds"],
                      "first_step_s": recs[0].get("warmup_s") if recs else None,
                      "last_lines": read(logs / f"{name}.log").strip().splitlines()[-2:]}
    report["warm"] = warm
    # cubecl's logs (gpu_check.sh's cubecl.toml): how many kernels were compiled and tuned.
    report["cubecl"] = {
        "compilation_log_lines": len(read(logs / "cubecl_compilation.log").splitlines()),
        "autotune_log_lines": len(read(logs / "cubecl_autotune.log").splitlines()),
    }


    md = ["# GPU check", "", "```text", *report["environment"], "```", ""]
    md += [f"worked_values: {report['worked_values']}", ""]
    if warm:
        md += ["## Phase 1: kernels compiled and tuned (all at once)", "",
               "| section | rc | s | first step s | last line |", "|---|---:|---:|---:|---|"]
        for name, w in warm.items():
            md.append(f"| {name} | {w['rc']} | {w['seconds']} | {fmt(w['first_step_s'], '.1f')} | "
                      f"{cell(w['last_lines'][-1] if w['last_lines'] else '')[:120]} |")
        md += ["", f"cubecl's logs of the whole check: {report['cubecl']['compilation_log_lines']} "
               f"compilation and {report['cubecl']['autotune_log_lines']} autotune lines", ""]
    md += ["## Training step (ResNet-18, CIFAR stem, fixed views)", "",
           "| method | backend | precision | ms/step | images/s | warm-up s | peak GPU MiB | GPU busy % (end) | first → last loss |",
           "|---|---|---|---:|---:|---:|---:|---:|---|"]
    for r in sorted(steps, key=lambda r: (str(r.get("method", "")), r["side"], str(r.get("backend", "")), str(r.get("precision", "")))):
        if "error" in r:
            md.append(f"| {cell(r.get('method', '?'))} | {cell(r.get('backend', '?'))} | {cell(r.get('precision', '?'))} | "
                      f"error: {cell(r['error'])[:100]} | | | | | |")
            continue
        mem = r.get("gpu_mib") if r["side"] == "ours" else r.get("peak_reserved_mib")
        md.append(
            f"| {cell(r.get('method', '?'))} | {cell(r.get('backend', '?'))} | {cell(r.get('precision', '?'))} | {fmt(r.get('ms_per_step'), '.2f')} | "
            f"{fmt(r.get('images_per_s'), '.0f')} | {fmt(r.get('warmup_s'), '.1f')} | {fmt(mem, '.0f') if isinstance(mem, (int, float)) else '–'} | "
            f"{fmt(r.get('gpu_busy_end_pct'), '.0f')} | "
            f"{fmt(r.get('first_loss'), '.4f')} → {fmt(r.get('last_loss'), '.4f')} |")
    md += ["", "Peak GPU memory: ours = the rise of nvidia-smi's reading over the idle one during the "
           "process; PyTorch = torch.cuda.max_memory_reserved. GPU busy: nvidia-smi's utilisation, "
           "the mean over the last 40 % of the section (the timed steps; PyTorch's section holds "
           "its three methods).", ""]
    mem_rows = [r for r in steps if isinstance(r.get("memory_mib"), dict)]
    if mem_rows:
        md += ["## Memory of a step (MiB)", "",
               "| method | backend | precision | between steps | after forward | after backward | peak allocated | reserved | nvidia-smi rise |",
               "|---|---|---|---:|---:|---:|---:|---:|---:|"]
        for r in sorted(mem_rows, key=lambda r: (str(r.get("method", "")), r["side"], str(r.get("precision", "")))):
            m = r["memory_mib"]
            if r["side"] == "ours":
                peak = max(m.get(k, 0) for k in ("after_forward", "after_backward", "after_optimiser"))
                reserved, rise = m.get("reserved"), r.get("gpu_mib")
            else:
                peak, reserved, rise = m.get("peak"), r.get("peak_reserved_mib"), None
            md.append(f"| {cell(r.get('method', '?'))} | {cell(r.get('backend', '?'))} | {cell(r.get('precision', '?'))} | {fmt(m.get('between_steps'), '.0f')} | "
                      f"{fmt(m.get('after_forward'), '.0f')} | {fmt(m.get('after_backward'), '.0f')} | {fmt(peak, '.0f')} | "
                      f"{fmt(reserved, '.0f')} | {fmt(rise, '.0f')} |")
        md += ["", "In use at each phase's end of one more step, the device synchronised: ours from cubecl's "
               "memory management (its peak is the largest of the readings: cubecl keeps no high-water mark "
               "of live bytes), PyTorch's from torch.cuda.memory_allocated, its peak max_memory_allocated. "
               "Reserved: cubecl's pages (they are never given back) and torch.cuda.max_memory_reserved.", ""]
    if kernels:
        md += ["## Our kernels, each timed (`--profile-kernels`)", "",
               "| method | kernels / step | in kernels ms / step | step ms (unprofiled) | issue ms / step | ten longest kernels (ms / step) |",
               "|---|---:|---:|---:|---:|---|"]
        for method, k in kernels.items():
            top = ", ".join(f"{cell(n)} {fmt(ms, '.2f')}" for n, ms in k.get("top", []))
            md.append(f"| {method} | {fmt(k.get('kernels_per_step'), '.0f')} | {fmt(k.get('kernel_ms_per_step'), '.2f')} | "
                      f"{fmt(k.get('step_ms'), '.2f')} | {fmt(k.get('issue_ms_per_step'), '.2f')} | {top} |")
        md += ["", "The device's time in kernels against the unprofiled step's: where the step is much "
               "longer, the GPU waits for the host (burn's fusion and autodiff issuing the kernels).", ""]
    for name, m in memory.items():
        md += [f"## {name}: cubecl's pools", "", f"rc {m['rc']}, nvidia-smi rise {m['gpu_mib']} MiB, "
               f"readings {m['memory_mib']}, {m['pages']} new pages of the device's memory; the pools at the last one:", "",
               "```text", *m["pools_at_last_page"], "```", ""]
    md += ["## Runs", "", "| section | rc | s | kNN k=20 init → end | images/s | peak GPU MiB |",
           "|---|---:|---:|---|---:|---:|"]
    for name, r in runs.items():
        knn = f"{fmt(r.get('knn_init_top1'), '.2f')} → {fmt(r.get('knn_top1'), '.2f')}"
        md.append(f"| {name} | {r['rc']} | {r['seconds']} | {knn} | {fmt(r.get('images_per_s'), '.0f')} | "
                  f"{r['gpu_mib'] if r.get('gpu_mib') is not None else '–'} |")
    md += ["", "## Sections", "", "| section | rc | seconds | cubecl at the last reading |",
           "|---|---:|---:|---|"]
    for s in sections:
        progress = s.get("progress") or []
        md.append(f"| {s['name']} | {'skipped' if s.get('skipped') else s['rc']} | {s['seconds']} | "
                  f"{progress[-1] if progress else ''} |")
    md.append("")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_check.json").write_text(json.dumps(finite(report), indent=1) + "\n")
    (args.out / "gpu_check.md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
