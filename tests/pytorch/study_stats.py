"""The reference numbers of `recipe study`'s statistics (recipes/src/recipes/study/stats.rs):
scipy's Student-t interval of a mean and its paired t test, on the values the unit test uses.

    pip install scipy && python3 tests/pytorch/study_stats.py
"""
import numpy as np
from scipy import stats

a = np.array([85.12, 85.61, 84.97])
mean, sd = a.mean(), a.std(ddof=1)
lo, hi = stats.t.interval(0.95, len(a) - 1, loc=mean, scale=sd / np.sqrt(len(a)))
print(f"mean {mean!r} sd {sd!r} interval ({lo!r}, {hi!r})")

# Seeds 0, 1, 2 of the arm and of the baseline, paired.
arm = np.array([85.12, 85.61, 84.97])
base = np.array([84.80, 84.90, 84.50])
r = stats.ttest_rel(arm, base)
print(f"mean difference {(arm - base).mean()!r} t {r.statistic!r} p {r.pvalue!r}")
