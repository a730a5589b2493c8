#!/usr/bin/env python3
"""Summarises a directory of runs made by an experiments/*.sh script as Markdown tables.

Usage: experiments/summarise.py OUT

Reads OUT/<recipe>-seed<S>/epochs.csv and OUT/logs/<recipe>-seed<S>.eval.txt (the output of
`recipe eval`, when present) and prints, per recipe, the kNN (k = 20) and linear-probe top-1 of
each seed with their mean and range, the training speed, and for runs with batch curation the
rejection rate and the curation's share of the wall time per epoch.
"""
import csv
import re
import sys
from collections import defaultdict
from pathlib import Path


def eval_numbers(path):
    """kNN (k = 20) and linear-probe top-1 from `recipe eval`'s output, in percent."""
    if not path.exists():
        return None, None
    text = path.read_text()
    knn = re.search(r"kNN \(k = 20, T = 0\.07\): top-1 ([0-9.]+)%", text)
    probe = re.search(r"linear probe .*?: test top-1 ([0-9.]+)%", text)
    return (float(knn.group(1)) if knn else None, float(probe.group(1)) if probe else None)


def spread(values):
    values = [v for v in values if v is not None]
    if not values:
        return "–"
    return f"{sum(values) / len(values):.2f} ({min(values):.2f}–{max(values):.2f})"


def main(out):
    out = Path(out)
    runs = defaultdict(dict)
    for run in sorted(out.glob("*-seed*")):
        recipe, seed = run.name.rsplit("-seed", 1)
        if not (run / "epochs.csv").exists():
            continue  # a run that has not finished an epoch yet
        with open(run / "epochs.csv") as f:
            epochs = list(csv.DictReader(f))
        knn, probe = eval_numbers(out / "logs" / f"{run.name}.eval.txt")
        if knn is None and epochs and epochs[-1].get("knn20_top1"):
            knn = 100 * float(epochs[-1]["knn20_top1"])
        runs[recipe][int(seed)] = {"epochs": epochs, "knn": knn, "probe": probe}
    seeds = sorted({s for r in runs.values() for s in r})
    head = " | ".join(f"seed {s}" for s in seeds)
    print(f"| recipe | metric | {head} | mean (min–max) |")
    print("|---|---|" + "---|" * len(seeds) + "---|")
    for recipe, by_seed in runs.items():
        for metric, name in [("probe", "linear top-1"), ("knn", "kNN top-1")]:
            vals = [by_seed.get(s, {}).get(metric) for s in seeds]
            if all(v is None for v in vals):
                continue
            cells = " | ".join("–" if v is None else f"{v:.2f}" for v in vals)
            print(f"| `{recipe}` | {name} | {cells} | {spread(vals)} |")
    print()
    print("| recipe | images/s per seed (training epochs only) |")
    print("|---|---|")
    for recipe, by_seed in runs.items():
        speeds = []
        for s in seeds:
            e = by_seed.get(s, {}).get("epochs", [])
            images = sum(float(r["images_per_s"]) * float(r["seconds"]) for r in e)
            seconds = sum(float(r["seconds"]) for r in e)
            speeds.append(f"{images / seconds:.1f}" if seconds else "–")
        print(f"| `{recipe}` | {', '.join(speeds)} |")
    for recipe, by_seed in runs.items():
        first = next(iter(by_seed.values()))["epochs"]
        if not first or "curation_rejections" not in first[0]:
            continue
        print()
        print(f"`{recipe}`: rejections per epoch (each a redraw), and the curation's share of "
              "the epoch's wall time (measuring every attempt, redrawing the rejected ones)")
        print()
        print("| epoch | " + " | ".join(f"seed {s}" for s in seeds) + " |")
        print("|---|" + "---|" * len(seeds))
        for i in range(len(first)):
            cells = []
            for s in seeds:
                e = by_seed.get(s, {}).get("epochs", [])
                if i >= len(e):
                    cells.append("–")
                    continue
                r = e[i]
                share = float(r.get("curation_seconds") or 0) / float(r["seconds"])
                cells.append(f"{int(float(r['curation_rejections']))} rejections, "
                             f"{100 * share:.1f} %")
            print(f"| {i + 1} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
