//! The exact GELU, `y = x·Φ(x)` with `Φ(x) = (1 + erf(x/√2))/2`, as one pass forward and one
//! backward (`∂x = ∂y·(Φ(x) + x·φ(x))`, `φ` the normal density) over contiguous values, with
//! an `erf` the compiler vectorises in f32.
//!
//! Why this file exists: composed of burn's tensor operations (`kernels::gelu_composed`, the
//! form whose gradient is exact on every backend) the GELU of a ViT's MLP is five full-size
//! passes forward and about as many again in autodiff's backward; burn's CPU backend (`Flex`)
//! computes each `erf` with the scalar `libm::erff`, and its own fused `gelu` calls it in both
//! directions. In an MAE step on ViT-Tiny `erff` alone was 8.7 % of the samples. No crate
//! offers a vectorised `erf` for stable Rust that burn's tensors could use.
//!
//! `erf` in f32: `x·P(x²)/Q(x²)` with `P` of degree 4 and `Q` of degree 6, `x` clamped to
//! ±3.92 (beyond which `erf` rounds to ±1 in f32), fitted for this file by
//! `scripts/fit_erf.py` (least squares on the relative error), the result clamped to ±1: at
//! most 3.9e-7 from the exact value over `[−5, 5]` (6 ulp of the correctly rounded f32 value;
//! `libm::erff` is within 1), no branch, so the loop vectorises. In f64 (the exact tests) it is `libm::erf`. Only IEEE
//! additions, multiplications and a division, no fused multiply-add: every x86-64 CPU gives the
//! same bits.

use rayon::prelude::*;

use super::gemm::Real;

/// Values per parallel task: the passes are a few operations per value, so smaller tasks
/// would cost more in scheduling than they save.
const CHUNK: usize = 1 << 14;

/// `|x|` beyond which `erf(x)` rounds to `±1` in f32.
const ERF_CLAMP: f32 = 3.92;
/// `P`'s coefficients, `t⁰` first (`scripts/fit_erf.py`). The first is the fit's, one f32
/// below `2/√π` (erf's slope at 0), not the constant: the bound was measured with it.
#[allow(clippy::approx_constant)]
const ERF_P: [f32; 5] = [
    1.128_379_1,
    0.185_425_27,
    0.050_958_29,
    0.003_410_957_5,
    0.000_228_120_2,
];
/// `Q`'s coefficients, `t⁰` first (`scripts/fit_erf.py`).
const ERF_Q: [f32; 7] = [
    1.0,
    0.497_661_6,
    0.111_051_165,
    0.014_076_089,
    0.001_016_624_5,
    2.339_331_3e-5,
    -1.165_329_9e-7,
];

/// `erf(x)` in f32, within 3.9e-7 (module docs).
#[inline(always)]
pub fn erf_f32(x: f32) -> f32 {
    let x = x.clamp(-ERF_CLAMP, ERF_CLAMP);
    let t = x * x;
    let p = (((ERF_P[4] * t + ERF_P[3]) * t + ERF_P[2]) * t + ERF_P[1]) * t + ERF_P[0];
    let q = (((((ERF_Q[6] * t + ERF_Q[5]) * t + ERF_Q[4]) * t + ERF_Q[3]) * t + ERF_Q[2]) * t
        + ERF_Q[1])
        * t
        + ERF_Q[0];
    // At the clamp the fit overshoots 1 by an ulp.
    (x * p / q).clamp(-1.0, 1.0)
}

/// `ln 2` split in two: `LN2_HI` has few enough significant bits that `n·LN2_HI` is exact
/// for the `|n| ≤ 126` used here (Cody and Waite's range reduction).
const LN2_HI: f32 = 0.693_145_75;
const LN2_LO: f32 = 1.428_606_8e-6;
/// `1.5·2²³`: adding and subtracting it rounds an f32 of magnitude below 2²² to the nearest
/// integer with additions alone (so the loop vectorises on every x86-64 level).
const ROUNDER: f32 = 12_582_912.0;

/// `eˣ` in f32 for `x ≤ 0` (inputs below −87 give `e⁻⁸⁷`, where the GELU's `x·φ(x)` is
/// below 1e-36): `x = n·ln 2 + r`, `|r| ≤ ln 2/2`, `eʳ` by its Taylor polynomial of degree 6
/// (truncation below 1.3e-7 relative), scaled by `2ⁿ` built from its bits. Within 3e-7
/// relative of the exact value (the unit test); `f32::exp` is a library call per value, which
/// keeps the backward loop from vectorising.
#[inline(always)]
pub fn exp_f32_nonpositive(x: f32) -> f32 {
    let x = x.clamp(-87.0, 0.0);
    let n = (x * core::f32::consts::LOG2_E + ROUNDER) - ROUNDER;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    let p = (((((r * (1.0 / 720.0) + 1.0 / 120.0) * r + 1.0 / 24.0) * r + 1.0 / 6.0) * r + 0.5)
        * r
        + 1.0)
        * r
        + 1.0;
    // n is an integer in [−126, 0]: 2ⁿ is the f32 with exponent field n + 127.
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
    p * scale
}

/// The element types of the GELU kernels: `erf` and `exp` of each.
pub trait GeluReal: Real + core::ops::Sub<Output = Self> + core::ops::Neg<Output = Self> {
    /// The error function.
    fn erf(self) -> Self;
    /// `e^self`, for `self ≤ 0` (what the backward pass needs).
    fn exp(self) -> Self;
    /// The nearest value to `v` (a constant).
    fn constant(v: f64) -> Self;
}

impl GeluReal for f32 {
    #[inline(always)]
    fn erf(self) -> Self {
        erf_f32(self)
    }
    #[inline(always)]
    fn exp(self) -> Self {
        exp_f32_nonpositive(self)
    }
    #[inline(always)]
    fn constant(v: f64) -> Self {
        v as f32
    }
}

impl GeluReal for f64 {
    #[inline(always)]
    fn erf(self) -> Self {
        libm::erf(self)
    }
    #[inline(always)]
    fn exp(self) -> Self {
        f64::exp(self)
    }
    #[inline(always)]
    fn constant(v: f64) -> Self {
        v
    }
}

/// `Φ(x) = (1 + erf(x/√2))/2`.
#[inline(always)]
fn cdf<T: GeluReal>(x: T) -> T {
    let half = T::constant(0.5);
    half + half * (x * T::constant(core::f64::consts::FRAC_1_SQRT_2)).erf()
}

/// `x·Φ(x)` of every value.
pub fn forward<T: GeluReal>(x: &[T]) -> Vec<T> {
    let mut y = vec![T::default(); x.len()];
    y.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .for_each(|(out, x)| pulp::Arch::new().dispatch(Forward { x, out }));
    y
}

/// One chunk of [`forward`], compiled for the widest vector instructions this CPU has
/// (AVX-512, AVX2, else SSE2), chosen at run time by `pulp` (the dispatch the `gemm` crate
/// uses): a `WithSimd` whose body is inlined into each width's function (a closure is not
/// always). The loops use no fused multiply-add, so every width gives the same bits.
struct Forward<'a, T> {
    x: &'a [T],
    out: &'a mut [T],
}

impl<T: GeluReal> pulp::WithSimd for Forward<'_, T> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        for (o, &v) in self.out.iter_mut().zip(self.x) {
            *o = v * cdf(v);
        }
    }
}

/// One chunk of [`backward`], dispatched as [`Forward`].
struct Backward<'a, T> {
    x: &'a [T],
    grad: &'a [T],
    out: &'a mut [T],
}

impl<T: GeluReal> pulp::WithSimd for Backward<'_, T> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        let inv_sqrt_2pi = T::constant(1.0 / (2.0 * core::f64::consts::PI).sqrt());
        let minus_half = T::constant(-0.5);
        for ((o, &v), &g) in self.out.iter_mut().zip(self.x).zip(self.grad) {
            let pdf = inv_sqrt_2pi * (minus_half * v * v).exp();
            *o = g * (cdf(v) + v * pdf);
        }
    }
}

/// `∂x = ∂y·(Φ(x) + x·φ(x))` of every value, `φ(x) = e^(−x²/2)/√(2π)`.
pub fn backward<T: GeluReal>(x: &[T], grad: &[T]) -> Vec<T> {
    assert_eq!(x.len(), grad.len(), "gelu: input and gradient lengths");
    let mut dx = vec![T::default(); x.len()];
    dx.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK).zip(grad.par_chunks(CHUNK)))
        .for_each(|(out, (x, grad))| pulp::Arch::new().dispatch(Backward { x, grad, out }));
    dx
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fitted `erf` against `libm::erf` in f64 on a dense grid of `[−6, 6]` and a
    /// geometric one near 0: within the 3.9e-7 that `scripts/fit_erf.py` measures (the f32
    /// arithmetic is the same on every CPU: no FMA), odd, and ±1 beyond the clamp.
    #[test]
    fn erf_f32_is_within_its_bound() {
        let mut worst = 0f64;
        let grid = (0..=1_200_000).map(|i| -6.0 + i as f64 * 1e-5);
        let small = (0..=800).map(|i| 10f64.powf(-8.0 + i as f64 * 0.01));
        for x in grid.chain(small) {
            let x = x as f32;
            let got = erf_f32(x) as f64;
            let exact = libm::erf(x as f64);
            worst = worst.max((got - exact).abs());
            assert_eq!(erf_f32(-x), -erf_f32(x), "odd at {x}");
        }
        // 3.84e-7 measured by the script on 4.1 million points; the margin is for the grid.
        assert!(worst <= 4.0e-7, "largest error {worst:e}");
        assert_eq!(erf_f32(4.0), 1.0);
        assert_eq!(erf_f32(-100.0), -1.0);
        assert_eq!(erf_f32(0.0), 0.0);
    }

    /// The f32 `eˣ` against f64's on `[−90, 0]`: within 3e-7 relative down to `e⁻⁸⁷`, and
    /// `e⁰ = 1` exactly.
    #[test]
    fn exp_f32_is_within_its_bound() {
        let mut worst = 0f64;
        for i in 0..=900_000 {
            let x = -(i as f32) * 1e-4;
            let got = exp_f32_nonpositive(x) as f64;
            let exact = (x.max(-87.0) as f64).exp();
            worst = worst.max((got - exact).abs() / exact);
        }
        assert!(worst <= 3e-7, "largest relative error {worst:e}");
        assert_eq!(exp_f32_nonpositive(0.0), 1.0);
    }

    /// In f64 the forward pass is `x·(1 + erf(x/√2))/2` with libm's `erf` and the backward
    /// pass agrees with central differences of it (step 1e-6: truncation ~1e-12, rounding
    /// ~1e-10).
    #[test]
    fn f64_values_and_finite_differences() {
        let x = crate::kernels::gemm::test_values(1001, 3)
            .into_iter()
            .map(|v| v * 6.0)
            .collect::<Vec<f64>>();
        let y = forward(&x);
        for (&v, &y) in x.iter().zip(&y) {
            let expected = v * (1.0 + libm::erf(v / core::f64::consts::SQRT_2)) / 2.0;
            assert!((y - expected).abs() <= 1e-15 * (1.0 + v.abs()), "{v}: {y}");
        }
        let g = crate::kernels::gemm::test_values(1001, 4);
        let dx = backward(&x, &g);
        let h = 1e-6;
        for ((&v, &g), &d) in x.iter().zip(&g).zip(&dx) {
            let f = |v: f64| forward(&[v])[0];
            let numeric = g * (f(v + h) - f(v - h)) / (2.0 * h);
            assert!((d - numeric).abs() <= 1e-8, "{v}: {d} vs {numeric}");
        }
    }

    /// f32 against the f64 kernel: the forward pass within 3.9e-7·|x|/2 plus f32's rounding of
    /// the products, the backward within a few ulp of `Φ + x·φ` (bounded by 1.13) times `|∂y|`.
    #[test]
    fn f32_follows_f64() {
        let x64 = crate::kernels::gemm::test_values(20_000, 5)
            .into_iter()
            .map(|v| v * 8.0)
            .collect::<Vec<f64>>();
        let g64 = crate::kernels::gemm::test_values(20_000, 6);
        let x32: Vec<f32> = x64.iter().map(|&v| v as f32).collect();
        let g32: Vec<f32> = g64.iter().map(|&v| v as f32).collect();
        let xr: Vec<f64> = x32.iter().map(|&v| v as f64).collect();
        let gr: Vec<f64> = g32.iter().map(|&v| v as f64).collect();
        let (y32, y64) = (forward(&x32), forward(&xr));
        let (d32, d64) = (backward(&x32, &g32), backward(&xr, &gr));
        for i in 0..x32.len() {
            let v = xr[i].abs();
            let bound = 2.0e-7 * v + 4.0 * f32::EPSILON as f64 * y64[i].abs() + 1e-30;
            assert!(
                (y32[i] as f64 - y64[i]).abs() <= bound,
                "forward at {}",
                xr[i]
            );
            let bound = (2.0e-7 + 8.0 * f32::EPSILON as f64) * 1.13 * gr[i].abs() + 1e-30;
            assert!(
                (d32[i] as f64 - d64[i]).abs() <= bound,
                "backward at {}",
                xr[i]
            );
        }
    }
}
