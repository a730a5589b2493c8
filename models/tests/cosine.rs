//! `kernels::cosine_op::mean_cosine_op` (the negative cosine loss's operation on the GPU
//! backends) against the composed form and against central differences, in f64.

use burn::prelude::*;
use curriculum_ssl_models::kernels::cosine_op::mean_cosine_op;

use crate::common::{f64s, values, Exact as B};

const EPSILON: f64 = 1e-12;

/// The loss as `loss::NegativeCosineLoss` composes it: `x / √max(Σx², ε²)` a row, the rows'
/// products summed and averaged, the targets detached.
fn composed(p: Tensor<B, 2>, z: Tensor<B, 2>) -> Tensor<B, 1> {
    let normalise = |x: Tensor<B, 2>| {
        x.clone()
            / x.powi_scalar(2)
                .sum_dim(1)
                .clamp_min(EPSILON * EPSILON)
                .sqrt()
    };
    (normalise(p) * normalise(z.detach())).sum_dim(1).mean()
}

/// The mean cosine of plain f64 rows, for the central differences.
fn by_hand(p: &[f64], z: &[f64], d: usize) -> f64 {
    let rows = p.len() / d;
    let norm = |r: &[f64]| r.iter().map(|v| v * v).sum::<f64>().sqrt().max(EPSILON);
    (0..rows)
        .map(|i| {
            let (a, b) = (&p[i * d..][..d], &z[i * d..][..d]);
            let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
            dot / (norm(a) * norm(b))
        })
        .sum::<f64>()
        / rows as f64
}

/// The operation's value and `∂p` equal the composed form's (1e-12 relative: f64 sums of 7
/// terms in another order) on rows of very different norms, one of them zero (its norm
/// clamped: the composed rule passes no gradient through the clamp, and the operation's
/// `∂p` there is `z_i·a_i`, 10¹² times the others: compared relatively). `z` is tracked and
/// gets no gradient from either. The value is the cosines by hand (1e-14), and `∂p` central
/// differences of them (step 1e-6 on entries of size ~1: truncation ~1e-12; 1e-8 absolute) on
/// the rows whose norm is not clamped.
#[test]
fn mean_cosine_op_equals_the_composed_form_and_central_differences() {
    let (rows, d) = (5, 7);
    let mut ps: Vec<f64> = (0..rows * d)
        .map(|i| ((i * 37 % 23) as f64 / 7.0 - 1.3) * (1.0 + (i / d) as f64))
        .collect();
    ps[2 * d..3 * d].iter_mut().for_each(|v| *v = 0.0);
    let zs: Vec<f64> = (0..rows * d)
        .map(|i| ((i * 11 % 13) as f64 - 6.0) / 5.0)
        .collect();
    let dims = [rows, d];
    let run = |op: bool| {
        let p = f64s(&ps, dims).require_grad();
        let z = f64s(&zs, dims).require_grad();
        let out = if op {
            mean_cosine_op(p.clone(), z.clone(), EPSILON)
        } else {
            composed(p.clone(), z.clone())
        };
        let grads = out.clone().mul_scalar(-2.0).sum().backward();
        assert!(z.grad(&grads).is_none(), "z got a gradient (op: {op})");
        (values(out.inner()), values(p.grad(&grads).unwrap()))
    };
    let ((value, dp), (value_c, dp_c)) = (run(true), run(false));
    let close =
        |a: f64, b: f64, tolerance: f64| (a - b).abs() <= tolerance * a.abs().max(b.abs()).max(1.0);
    assert!(
        close(value[0], value_c[0], 1e-12),
        "{value:?} against {value_c:?}"
    );
    assert!(close(value[0], by_hand(&ps, &zs, d), 1e-14));
    for (k, (a, b)) in dp.iter().zip(&dp_c).enumerate() {
        assert!(
            (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1.0),
            "∂p[{k}]: {a} against {b}"
        );
    }
    let h = 1e-6;
    for k in (0..rows * d).filter(|k| k / d != 2) {
        let (mut plus, mut minus) = (ps.clone(), ps.clone());
        plus[k] += h;
        minus[k] -= h;
        let fd = -2.0 * (by_hand(&plus, &zs, d) - by_hand(&minus, &zs, d)) / (2.0 * h);
        assert!((dp[k] - fd).abs() < 1e-8, "∂p[{k}]: {} against {fd}", dp[k]);
    }
    // The clamped row's gradient is `−2/N · z_i/(ε·‖z_i‖)`: the clamp's, not a NaN.
    let norm_z: f64 = zs[2 * d..3 * d].iter().map(|v| v * v).sum::<f64>().sqrt();
    for j in 0..d {
        let expected = -2.0 / rows as f64 * zs[2 * d + j] / (EPSILON * norm_z);
        assert!(
            close(dp[2 * d + j], expected, 1e-12),
            "{} against {expected}",
            dp[2 * d + j]
        );
    }
}
