#!/usr/bin/env python3
"""Summarises experiments/spl_advise.sh: test top-1 of the last epoch per method (mean and
spread over the seeds), beside the paper's Table 1, and a plot of test top-1 against the epoch.

    python3 experiments/spl_advise_summary.py runs/spl-advise

Reads each run's epochs.csv; writes spl_advise_accuracy.png and summary.md into the folder.
Needs matplotlib (pip install matplotlib) for the plot.
"""
import csv
import statistics
import sys
from pathlib import Path

PAPER = {"spl_advise": 94.12, "spld": 93.17, "random_sampling": 92.77}
LABEL = {"spl_advise": "SPL-ADVisE", "spld": "SPLD (pixel k-means)", "random_sampling": "random"}


def main(folder: Path) -> None:
    curves = {}
    for run in sorted(folder.glob("*-seed*")):
        method, seed = run.name.rsplit("-seed", 1)
        rows = list(csv.DictReader(open(run / "epochs.csv"))) if (run / "epochs.csv").exists() else []
        if not rows:
            continue
        curves.setdefault(method, {})[int(seed)] = rows
    lines = [
        "| selection | test top-1, last epoch (mean ± sd over seeds) | seeds | epochs | s/epoch | "
        "selected in the last epoch | paper (ResNet-18, GPU) |",
        "|---|---|---|---|---|---|---|",
    ]
    for method in ["spl_advise", "spld", "random_sampling"]:
        runs = curves.get(method, {})
        if not runs:
            continue
        last = [100 * float(r[-1]["test_top1"]) for r in runs.values()]
        epochs = min(len(r) for r in runs.values())
        seconds = statistics.mean(float(x["seconds"]) for r in runs.values() for x in r)
        selected = statistics.mean(100 * float(r[-1]["selected_fraction"]) for r in runs.values())
        sd = statistics.stdev(last) if len(last) > 1 else 0.0
        lines.append(
            f"| {LABEL[method]} | {statistics.mean(last):.2f} ± {sd:.2f} ({', '.join(f'{v:.2f}' for v in last)}) "
            f"| {len(last)} | {epochs} | {seconds:.0f} | {selected:.0f} % | {PAPER[method]} |"
        )
    text = "\n".join(lines)
    print(text)
    (folder / "summary.md").write_text(text + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for method, colour in zip(["spl_advise", "spld", "random_sampling"], ["C0", "C1", "C2"]):
        runs = curves.get(method, {})
        if not runs:
            continue
        epochs = min(len(r) for r in runs.values())
        mean = [statistics.mean(100 * float(r[e]["test_top1"]) for r in runs.values()) for e in range(epochs)]
        for r in runs.values():
            ax.plot(range(1, len(r) + 1), [100 * float(x["test_top1"]) for x in r], color=colour, alpha=0.25)
        ax.plot(range(1, epochs + 1), mean, color=colour, label=f"{LABEL[method]} (mean of {len(runs)})")
    ax.set_xlabel("epoch")
    ax.set_ylabel("test top-1 (%)")
    ax.set_title("Fashion-MNIST, small ResNet student, CPU")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(folder / "spl_advise_accuracy.png", dpi=110)
    print(f"plot: {folder / 'spl_advise_accuracy.png'}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "runs/spl-advise"))
