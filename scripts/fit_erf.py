"""Fits the f32 error function of models/src/kernels/gelu.rs and checks it.

erf(x) ~ x * P(x^2) / Q(x^2), P of degree 4 and Q of degree 6 in t = x^2 (Q's constant term 1),
on |x| <= 3.92 (beyond it erf(x) rounds to +-1 in f32, and the kernel clamps x there). The fit is
linear least squares on the relative error, reweighted by the last iterate's denominator
(Sanathanan-Koerner), in f64; the kernel clamps the result to [-1, 1]. The check evaluates the kernel's Horner scheme in f32 arithmetic on
4.1 million points of [-5, 5] (and a geometric grid near 0) against math.erf.

    python3 scripts/fit_erf.py    # prints the coefficients and the f32 errors
"""
import math

import numpy as np

CLAMP = 3.92


def fit(p_degree=4, q_degree=6, iterations=30):
    x = np.concatenate([np.linspace(1e-4, CLAMP, 20000), np.geomspace(1e-6, 1e-2, 200)])
    f = np.array([math.erf(v) for v in x]) / x
    t = x * x
    q_last = np.ones_like(t)
    for _ in range(iterations):
        a = np.hstack([
            np.vstack([t**k for k in range(p_degree + 1)]).T,
            -(f[:, None] * np.vstack([t**k for k in range(1, q_degree + 1)]).T),
        ])
        w = 1.0 / (np.abs(q_last) * f)
        sol, *_ = np.linalg.lstsq(a * w[:, None], f * w, rcond=None)
        p = sol[: p_degree + 1]
        q = np.concatenate([[1.0], sol[p_degree + 1:]])
        q_last = np.polyval(q[::-1], t)
    return p, q


def erf_f32(p, q, x):
    """The kernel's arithmetic, in f32."""
    f32 = np.float32
    x = np.clip(x.astype(f32), f32(-CLAMP), f32(CLAMP))
    t = x * x
    num = f32(p[-1])
    for c in p[-2::-1]:
        num = num * t + f32(c)
    den = f32(q[-1])
    for c in q[-2::-1]:
        den = den * t + f32(c)
    return np.clip(x * num / den, f32(-1), f32(1))


def main():
    p, q = fit()
    print("P:", ", ".join(f"{np.float32(c)!r}" for c in p))
    print("Q:", ", ".join(f"{np.float32(c)!r}" for c in q))
    x = np.concatenate([np.linspace(-5, 5, 4_000_001), np.geomspace(1e-8, 1, 100_000)])
    x = x.astype(np.float32)
    exact = np.array([math.erf(float(v)) for v in x])
    got = erf_f32(p, q, x).astype(np.float64)
    rounded = exact.astype(np.float32)
    ulps = np.abs(got - rounded) / np.spacing(np.abs(rounded)).astype(np.float64)
    nonzero = exact != 0
    relative = np.abs(got - exact)[nonzero] / np.abs(exact)[nonzero]
    print(f"max error {np.abs(got - exact).max():.3e} absolute, {relative.max():.3e} relative, "
          f"{ulps.max():.0f} ulp of the correctly rounded f32 value; erf(0) = {got[~nonzero]}")


if __name__ == "__main__":
    main()
