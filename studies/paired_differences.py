"""Paired differences between two arms of a study that the study's own report does not print.

`recipe study` compares every arm with the baseline only; this compares any two arms of a
finished study from its `study.csv` (a row per run: `arm,seed,<metric>...`), with the same
statistics as the report (recipes/src/recipes/study/stats.rs): for each metric, over the seeds
both arms finished, the mean of the differences `A - B` seed by seed, its 95 % interval (Student
t at n - 1 degrees of freedom), the two-sided paired t test's p, and that p adjusted by Holm's
step-down method over the metrics printed (one comparison is one family). p is printed with 3
significant digits, as in the reports.

    python3 studies/paired_differences.py STUDY_DIR ARM_A ARM_B [--metrics M1,M2,...]
    python3 studies/paired_differences.py studies/mico_mixup mico mixup
    python3 studies/paired_differences.py --self-test

STUDY_DIR is a study's directory (or its study.csv). The metrics default to every column but
`arm`, `seed`, `train_seconds` and `images_per_s`. Python 3 standard library only (no scipy):
Student's t distribution is computed here through the regularised incomplete beta function;
`--self-test` checks it against scipy's numbers for the values of stats.rs's unit test
(tests/pytorch/study_stats.py).
"""

import csv
import math
import os
import sys

CONFIDENCE = 0.95
NOT_METRICS = {"arm", "seed", "train_seconds", "images_per_s"}
LABELS = {
    "knn20_top1": "kNN k=20",
    "knn200_top1": "kNN k=200",
    "probe_top1": "linear probe",
    "few_label_top1": "few-label probe",
    "test_top1": "test (supervised)",
}


def _betacf(a, b, x):
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 1000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            return h
    raise ArithmeticError("incomplete beta: no convergence")


def _betainc(a, b, x):
    """The regularised incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(ln_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(ln_front) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t, df):
    """P(T <= t) for Student's t with df degrees of freedom."""
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t < 0 else 1.0 - tail


def t_quantile(q, df):
    """The q quantile of Student's t with df degrees of freedom (q in (0.5, 1)), by bisection."""
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < q:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < q:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def paired(a, b):
    """a, b: {seed: value}. Of a - b over the seeds both have: (n, mean, (low, high) or None,
    t or None, p or None, the differences in the order of the seeds)."""
    diffs = [a[s] - b[s] for s in sorted(set(a) & set(b))]
    n = len(diffs)
    if n == 0:
        return None
    mean = sum(diffs) / n
    if n == 1:
        return n, mean, None, None, None, diffs
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    half = t_quantile(0.5 + CONFIDENCE / 2.0, n - 1) * sd / math.sqrt(n)
    if sd == 0.0:
        return n, mean, (mean - half, mean + half), None, None, diffs
    t = mean / (sd / math.sqrt(n))
    return n, mean, (mean - half, mean + half), t, 2.0 * t_cdf(-abs(t), n - 1), diffs


def holm(ps):
    """Holm's step-down adjustment of ps, in the order given."""
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    out, running = [0.0] * len(ps), 0.0
    for j, i in enumerate(order):
        running = max(running, min(1.0, (len(ps) - j) * ps[i]))
        out[i] = running
    return out


def p_text(p):
    """3 significant digits (0.2946 as 0.295, 0.035 as 0.0350), below 0.001 as 1.23e-4."""
    if p < 1e-3:
        mantissa, exponent = f"{p:.2e}".split("e")
        return f"{mantissa}e{int(exponent)}"
    decimals = max(2, 2 - math.floor(math.log10(p)))
    return f"{p:.{decimals}f}"


def load(path):
    if os.path.isdir(path):
        path = os.path.join(path, "study.csv")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return path, rows


def compare(path, arm_a, arm_b, metrics=None):
    path, rows = load(path)
    columns = list(rows[0].keys()) if rows else []
    metrics = metrics or [c for c in columns if c not in NOT_METRICS]
    arms = {r["arm"] for r in rows}
    for arm in (arm_a, arm_b):
        if arm not in arms:
            sys.exit(f"error: no arm `{arm}` in {path} (arms: {', '.join(sorted(arms))})")

    def values(arm, metric):
        return {int(r["seed"]): float(r[metric]) for r in rows
                if r["arm"] == arm and r.get(metric) not in (None, "")}

    results = [(m, paired(values(arm_a, m), values(arm_b, m))) for m in metrics]
    results = [(m, r) for m, r in results if r is not None]
    tested = [i for i, (_, r) in enumerate(results) if r[4] is not None]
    adjusted = dict(zip(tested, holm([results[i][1][4] for i in tested])))
    seeds = sorted({int(r["seed"]) for r in rows if r["arm"] == arm_a}
                   & {int(r["seed"]) for r in rows if r["arm"] == arm_b})
    family = "this measure" if len(tested) == 1 else f"these {len(tested)} measures"
    print(f"{path}: `{arm_a}` - `{arm_b}`, paired by seed; the mean difference [95 % interval, "
          f"Student t], the two-sided paired t test's p and p adjusted by Holm's method over "
          f"{family}; the differences seed by seed (seeds {', '.join(map(str, seeds))}).\n")
    print("| metric | pairs | difference | p | p (Holm) | seed by seed |")
    print("|---|---|---|---|---|---|")
    for i, (m, (n, mean, interval, _t, p, diffs)) in enumerate(results):
        diff = f"{mean:+.2f}"
        if interval is not None:
            diff += f" [{interval[0]:+.2f}, {interval[1]:+.2f}]"
        p_cell = p_text(p) if p is not None else "-"
        holm_cell = p_text(adjusted[i]) if i in adjusted else "-"
        by_seed = " / ".join(f"{d:+.2f}" for d in diffs)
        print(f"| {LABELS.get(m, m)} | {n} | {diff} | {p_cell} | {holm_cell} | {by_seed} |")


def self_test():
    """scipy 1.17's numbers for stats.rs's unit test (tests/pytorch/study_stats.py)."""
    a = [85.12, 85.61, 84.97]
    mean = sum(a) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in a) / 2)
    half = t_quantile(0.975, 2) * sd / math.sqrt(3)
    assert abs(mean - half - 84.4018581399866) < 1e-9, mean - half
    assert abs(mean + half - 86.06480852668007) < 1e-9, mean + half
    n, diff, _, t, p, _ = paired({0: 85.12, 1: 85.61, 2: 84.97}, {0: 84.80, 1: 84.90, 2: 84.50})
    assert n == 3 and abs(diff - 0.5) < 1e-12
    assert abs(t - 4.402254531628268) < 1e-9, t
    assert abs(p - 0.0479212468817314) < 1e-12, p
    assert [round(x, 12) for x in holm([0.035, 0.01, 0.2, 0.04])] == [0.105, 0.04, 0.2, 0.105]
    assert [p_text(x) for x in (0.2946, 0.035, 1.0, 0.000123)] == ["0.295", "0.0350", "1.00", "1.23e-4"]
    print("self-test passed: equal to scipy's t interval and paired t test")


def main(argv):
    if argv == ["--self-test"]:
        return self_test()
    metrics = None
    if "--metrics" in argv:
        i = argv.index("--metrics")
        metrics = argv[i + 1].split(",")
        argv = argv[:i] + argv[i + 2:]
    if len(argv) != 3:
        sys.exit(__doc__)
    compare(argv[0], argv[1], argv[2], metrics)


if __name__ == "__main__":
    main(sys.argv[1:])
