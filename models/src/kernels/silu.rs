//! SiLU (swish), `y = x·σ(x)` with `σ(x) = 1/(1 + e⁻ˣ)`, as one pass forward and one backward
//! (`∂x = ∂y·σ(x)·(1 + x·(1 − σ(x)))`) over contiguous values, with an `exp` the compiler
//! vectorises in f32.
//!
//! Why this file exists: burn's `activation::silu` is `x · sigmoid(x)`, two full-size passes
//! forward and about four backward under autodiff, and burn's CPU backend (`Flex`) computes each
//! `exp` of the sigmoid with a scalar library call: on EfficientNet (SiLU after every
//! convolution) `exp` alone was 12 % of a forward + backward pass (benches/README.md, "Where the
//! rest goes, row by row").
//!
//! `σ` from `e = e^(−|x|)` (never above 1, so no overflow): `1/(1 + e)` for `x ≥ 0`, `e/(1 + e)`
//! below, and `1 − σ` as the other of the two. In f32, `e` is
//! [`exp_f32_nonpositive`](super::gelu::exp_f32_nonpositive) (within 3e-7 relative, arguments
//! below −87 taken as −87: there `x·σ(x)` is below 2e-36 either way); in f64 (the exact tests)
//! it is `f64::exp`. Only IEEE additions, multiplications and divisions, no fused multiply-add:
//! every x86-64 CPU gives the same bits.

use rayon::prelude::*;

use super::gelu::GeluReal;

/// The element types of the SiLU kernels (`f32`, `f64`): the GELU's, with order and division.
pub trait SiluReal: GeluReal + PartialOrd + core::ops::Div<Output = Self> {}

impl<T: GeluReal + PartialOrd + core::ops::Div<Output = T>> SiluReal for T {}

/// Values per parallel task, as the GELU's.
const CHUNK: usize = 1 << 14;

/// `(σ(x), 1 − σ(x)) = (σ(x), σ(−x))`, both from `e = e^(−|x|)`: `1/(1 + e)` and `e/(1 + e)`,
/// so that neither is a difference of nearly equal values (`1 − σ(x)` computed as such loses
/// its relative accuracy where `σ(x)` nears 1).
#[inline(always)]
fn sigmoid_pair<T: SiluReal>(x: T) -> (T, T) {
    let zero = T::default();
    let magnitude = if x < zero { -x } else { x };
    let e = (-magnitude).exp();
    let large = T::ONE / (T::ONE + e);
    let small = e * large;
    if x < zero {
        (small, large)
    } else {
        (large, small)
    }
}

/// `x·σ(x)` of every value.
pub fn forward<T: SiluReal>(x: &[T]) -> Vec<T> {
    let mut y = vec![T::default(); x.len()];
    y.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .for_each(|(out, x)| pulp::Arch::new().dispatch(Forward { x, out }));
    y
}

/// One chunk of [`forward`], compiled for the widest vector instructions this CPU has (the
/// GELU's dispatch: `pulp` picks AVX-512, AVX2 or SSE2 at run time; no fused multiply-add, so
/// every width gives the same bits).
struct Forward<'a, T> {
    x: &'a [T],
    out: &'a mut [T],
}

impl<T: SiluReal> pulp::WithSimd for Forward<'_, T> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        for (o, &v) in self.out.iter_mut().zip(self.x) {
            *o = v * sigmoid_pair(v).0;
        }
    }
}

/// One chunk of [`backward`], dispatched as [`Forward`].
struct Backward<'a, T> {
    x: &'a [T],
    grad: &'a [T],
    out: &'a mut [T],
}

impl<T: SiluReal> pulp::WithSimd for Backward<'_, T> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        for ((o, &v), &g) in self.out.iter_mut().zip(self.x).zip(self.grad) {
            let (s, complement) = sigmoid_pair(v);
            *o = g * (s * (T::ONE + v * complement));
        }
    }
}

/// `∂x = ∂y·σ(x)·(1 + x·(1 − σ(x)))` of every value.
pub fn backward<T: SiluReal>(x: &[T], grad: &[T]) -> Vec<T> {
    assert_eq!(x.len(), grad.len(), "silu: input and gradient lengths");
    let mut dx = vec![T::default(); x.len()];
    dx.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK).zip(grad.par_chunks(CHUNK)))
        .for_each(|(out, (x, grad))| pulp::Arch::new().dispatch(Backward { x, grad, out }));
    dx
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In f64 the forward pass is `x/(1 + e⁻ˣ)` to rounding, and the backward pass agrees with
    /// central differences of it (step 1e-6: truncation ~1e-12, rounding ~1e-10), on values up
    /// to ±40 (both branches of `σ`, and its saturation).
    #[test]
    fn f64_values_and_finite_differences() {
        let x = crate::kernels::gemm::test_values(2001, 7)
            .into_iter()
            .map(|v| v * 40.0)
            .collect::<Vec<f64>>();
        let y = forward(&x);
        for (&v, &y) in x.iter().zip(&y) {
            let expected = v / (1.0 + (-v).exp());
            assert!((y - expected).abs() <= 1e-15 * (1.0 + v.abs()), "{v}: {y}");
        }
        let g = crate::kernels::gemm::test_values(2001, 8);
        let dx = backward(&x, &g);
        let h = 1e-6;
        for ((&v, &g), &d) in x.iter().zip(&g).zip(&dx) {
            let f = |v: f64| forward(&[v])[0];
            let numeric = g * (f(v + h) - f(v - h)) / (2.0 * h);
            assert!((d - numeric).abs() <= 1e-8, "{v}: {d} vs {numeric}");
        }
        assert_eq!(forward(&[0.0f64]), vec![0.0]);
        assert_eq!(backward(&[0.0f64], &[1.0]), vec![0.5]);
    }

    /// f32 against the f64 kernel on the same (f32-rounded) inputs. `σ` and `1 − σ` are each
    /// within 3e-7 relative (the `exp`'s bound, scaled by `e/(1 + e) ≤ 1`) plus a few ulp of
    /// rounding, so the forward pass `x·σ` is within `(6e-7 + 4ε)·|y| + 2e-36` (the last term:
    /// inputs below −87, where the `exp` stops at `e⁻⁸⁷`). The backward factor
    /// `σ·(1 + x·(1 − σ))` moves by at most `3e-7·(σ + 2|x|σ(1 − σ)) ≤ 3e-7·1.45` (`|x|σ(x)σ(−x)
    /// ≤ 0.224`) plus rounding: within `(9e-7 + 8ε)·|∂y|`. Values up to ±100.
    #[test]
    fn f32_follows_f64() {
        let x64 = crate::kernels::gemm::test_values(20_000, 9)
            .into_iter()
            .map(|v| v * 100.0)
            .collect::<Vec<f64>>();
        let g64 = crate::kernels::gemm::test_values(20_000, 10);
        let x32: Vec<f32> = x64.iter().map(|&v| v as f32).collect();
        let g32: Vec<f32> = g64.iter().map(|&v| v as f32).collect();
        let xr: Vec<f64> = x32.iter().map(|&v| v as f64).collect();
        let gr: Vec<f64> = g32.iter().map(|&v| v as f64).collect();
        let (y32, y64) = (forward(&x32), forward(&xr));
        let (d32, d64) = (backward(&x32, &g32), backward(&xr, &gr));
        let eps = f32::EPSILON as f64;
        for i in 0..x32.len() {
            let bound = (6e-7 + 4.0 * eps) * y64[i].abs() + 2e-36;
            assert!(
                (y32[i] as f64 - y64[i]).abs() <= bound,
                "forward at {}: {} vs {}",
                xr[i],
                y32[i],
                y64[i]
            );
            let bound = (9e-7 + 8.0 * eps) * gr[i].abs() + 1e-30;
            assert!(
                (d32[i] as f64 - d64[i]).abs() <= bound,
                "backward at {}: {} vs {}",
                xr[i],
                d32[i],
                d64[i]
            );
        }
    }
}
