//! `kernels::contrastive_op` (SimCLR's NT-Xent and MoCo's InfoNCE as operations on the GPU
//! backends) against the composed forms of burn's operations and against central differences
//! of the losses computed by hand, in f64.

use burn::prelude::*;
use burn::tensor::activation::log_softmax;
use burn::tensor::TensorData;
use curriculum_ssl_models::kernels::contrastive_op::{info_nce_op, nt_xent_op};

use crate::common::{f64s, values, Exact as B};

const EPSILON: f64 = 1e-12;
const TEMPERATURE: f64 = 0.3;

/// `x / √max(Σx², ε²)` a row, as `loss::l2_normalize` composes it.
fn normalise(x: Tensor<B, 2>) -> Tensor<B, 2> {
    x.clone()
        / x.powi_scalar(2)
            .sum_dim(1)
            .clamp_min(EPSILON * EPSILON)
            .sqrt()
}

/// NT-Xent as `loss::NtXentLoss` composes it: unit rows, their similarities over `τ`, the
/// diagonal masked, `−log softmax` at each anchor's positive, averaged. The similarities are
/// multiplied by `1/τ`, not divided by `τ`, as the library writes it: upstream burn-autodiff 0.21
/// takes a scalar division's derivative in f32 (`/ τ` gave gradients 2e-8 apart from the
/// definition's in f64; this workspace's copy is patched, vendor/burn-autodiff/PATCHED.md).
fn nt_xent_composed(z: Tensor<B, 2>) -> Tensor<B, 1> {
    let [rows, _] = z.dims();
    let device = z.device();
    let z = normalise(z);
    let logits = z
        .clone()
        .matmul(z.transpose())
        .mul_scalar(1.0 / TEMPERATURE);
    let diagonal = Tensor::<B, 2>::eye(rows, &device).greater_elem(0.5);
    let logits = logits.mask_fill(diagonal, -1.0e9);
    let index: Vec<i64> = (0..rows).map(|i| ((i + rows / 2) % rows) as i64).collect();
    let index =
        Tensor::<B, 1, Int>::from_data(TensorData::new(index, [rows]), &device).reshape([rows, 1]);
    log_softmax(logits, 1).gather(1, index).mean().neg()
}

/// InfoNCE as `loss::InfoNceLoss` composes it: unit queries and keys (the keys detached), the
/// queue as given and detached, `−log softmax` at the positive of `[q̂·k̂, q̂·queueᵀ] / τ`.
fn info_nce_composed(q: Tensor<B, 2>, k: Tensor<B, 2>, queue: Tensor<B, 2>) -> Tensor<B, 1> {
    let q = normalise(q);
    let k = normalise(k.detach());
    let positive = (q.clone() * k).sum_dim(1);
    let negatives = q.matmul(queue.detach().transpose());
    let logits = Tensor::cat(vec![positive, negatives], 1).mul_scalar(1.0 / TEMPERATURE);
    log_softmax(logits, 1).narrow(1, 0, 1).mean().neg()
}

/// Unit rows of plain f64 values (norms clamped below at ε).
fn unit_rows(x: &[f64], d: usize) -> Vec<Vec<f64>> {
    x.chunks(d)
        .map(|r| {
            let n = r.iter().map(|v| v * v).sum::<f64>().sqrt().max(EPSILON);
            r.iter().map(|v| v / n).collect()
        })
        .collect()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// `−log softmax` at `target` of `logits`, by the definition.
fn cross_entropy(logits: &[f64], target: usize) -> f64 {
    logits.iter().map(|l| l.exp()).sum::<f64>().ln() - logits[target]
}

/// NT-Xent of plain f64 rows `[z1; z2]`, by the definition.
fn nt_xent_by_hand(z: &[f64], d: usize) -> f64 {
    let rows = unit_rows(z, d);
    let n = rows.len();
    (0..n)
        .map(|i| {
            let others: Vec<usize> = (0..n).filter(|&j| j != i).collect();
            let logits: Vec<f64> = others
                .iter()
                .map(|&j| dot(&rows[i], &rows[j]) / TEMPERATURE)
                .collect();
            let target = others.iter().position(|&j| j == (i + n / 2) % n).unwrap();
            cross_entropy(&logits, target)
        })
        .sum::<f64>()
        / n as f64
}

/// InfoNCE of plain f64 rows, by the definition.
fn info_nce_by_hand(q: &[f64], k: &[f64], queue: &[f64], d: usize) -> f64 {
    let (q, k) = (unit_rows(q, d), unit_rows(k, d));
    (0..q.len())
        .map(|i| {
            let mut logits = vec![dot(&q[i], &k[i]) / TEMPERATURE];
            logits.extend(queue.chunks(d).map(|r| dot(&q[i], r) / TEMPERATURE));
            cross_entropy(&logits, 0)
        })
        .sum::<f64>()
        / q.len() as f64
}

/// Values of different norms, row `zero` all zeros.
fn rows_with_a_zero(rows: usize, d: usize, zero: usize, seed: usize) -> Vec<f64> {
    let mut x: Vec<f64> = (0..rows * d)
        .map(|i| (((i * 37 + seed * 11) % 23) as f64 / 7.0 - 1.3) * (1.0 + (i / d) as f64 * 0.7))
        .collect();
    x[zero * d..(zero + 1) * d]
        .iter_mut()
        .for_each(|v| *v = 0.0);
    x
}

/// Row `row` of `x` scaled to a norm under ε (entries about 1e-14): its norm is floored, yet
/// its unit row is not zero, so the normalisation's backward must leave out its projection
/// there (burn's `clamp_min` passes no gradient to the norm) for the two forms to agree.
fn shrink(x: &mut [f64], row: usize, d: usize) {
    x[row * d..(row + 1) * d]
        .iter_mut()
        .for_each(|v| *v *= 1e-14);
}

fn close(a: f64, b: f64, tolerance: f64) -> bool {
    (a - b).abs() <= tolerance * a.abs().max(b.abs()).max(1.0)
}

/// The operation's value and `∂z` equal the composed form's (1e-12 relative: f64 sums of a
/// few terms in another order; the gradients of the rows whose norm is floored, a zero row and
/// one of norm ~1e-14 ([`shrink`]), are `1/ε` times the others' and compared relatively), the
/// value NT-Xent by its definition (1e-13), and `∂z` central differences of that (step 1e-6 on
/// entries of size ~1: truncation ~1e-12, rounding ~5e-10; 1e-8 absolute) on the rows whose
/// norm is not floored. The composed form is this file's copy of `loss::NtXentLoss`'s (the
/// loss's own is compared with the operation on lavapipe by the GPU-path loss tests). Three images, so each anchor has four
/// negatives; the loss is scaled by −2 so that the incoming gradient is not one.
#[test]
fn nt_xent_op_equals_the_composed_form_and_central_differences() {
    let (rows, d) = (6, 5);
    let mut zs = rows_with_a_zero(rows, d, 4, 1);
    shrink(&mut zs, 1, d);
    let run = |op: bool| {
        let z = f64s(&zs, [rows, d]).require_grad();
        let out = if op {
            nt_xent_op(z.clone(), TEMPERATURE, EPSILON)
        } else {
            nt_xent_composed(z.clone())
        };
        let grads = out.clone().mul_scalar(-2.0).sum().backward();
        (values(out.inner()), values(z.grad(&grads).unwrap()))
    };
    let ((value, dz), (value_c, dz_c)) = (run(true), run(false));
    assert!(
        close(value[0], value_c[0], 1e-12),
        "{value:?} against {value_c:?}"
    );
    let expected = nt_xent_by_hand(&zs, d);
    assert!(
        close(value[0], expected, 1e-13),
        "{} against {expected}",
        value[0]
    );
    for (k, (a, b)) in dz.iter().zip(&dz_c).enumerate() {
        assert!(close(*a, *b, 1e-12), "∂z[{k}]: {a} against {b}");
    }
    let h = 1e-6;
    for k in (0..rows * d).filter(|k| k / d != 4 && k / d != 1) {
        let (mut plus, mut minus) = (zs.clone(), zs.clone());
        plus[k] += h;
        minus[k] -= h;
        let fd = -2.0 * (nt_xent_by_hand(&plus, d) - nt_xent_by_hand(&minus, d)) / (2.0 * h);
        assert!((dz[k] - fd).abs() < 1e-8, "∂z[{k}]: {} against {fd}", dz[k]);
    }
}

/// As above for InfoNCE: four queries (one zero, one of norm ~1e-14) against their keys and a
/// queue of six unit rows; the operation takes the keys as unit rows, the composed form
/// normalises them; the keys (either form's) and the queue are tracked and
/// get no gradient from either form. The unit queries the operation hands back are
/// `q / max(‖q‖, ε)` by hand (1e-15; the zero row stays zero, the tiny one is floored),
/// untracked.
#[test]
fn info_nce_op_equals_the_composed_form_and_central_differences() {
    let (rows, d, queue_len) = (4, 5, 6);
    let mut qs = rows_with_a_zero(rows, d, 1, 2);
    shrink(&mut qs, 3, d);
    let ks = rows_with_a_zero(rows, d, 3, 3)
        .iter()
        .map(|v| v + 0.25)
        .collect::<Vec<_>>();
    let queue: Vec<f64> = unit_rows(&rows_with_a_zero(queue_len, d, 0, 5)[d..], d)
        .into_iter()
        .chain(std::iter::once(vec![0.6, 0.0, -0.8, 0.0, 0.0]))
        .flatten()
        .collect();
    let run = |op: bool| {
        let q = f64s(&qs, [rows, d]).require_grad();
        let k = f64s(&ks, [rows, d]).require_grad();
        let bank = f64s(&queue, [queue_len, d]).require_grad();
        // The operation takes unit keys (`loss::InfoNceLoss` normalises a caller's first).
        let unit_keys = f64s(&unit_rows(&ks, d).concat(), [rows, d]).require_grad();
        let out = if op {
            let (out, unit) = info_nce_op(
                q.clone(),
                unit_keys.clone(),
                bank.clone(),
                TEMPERATURE,
                EPSILON,
            );
            assert!(!unit.is_require_grad(), "the unit queries are tracked");
            for (row, got) in values(unit.inner()).chunks(d).enumerate() {
                let q = &qs[row * d..(row + 1) * d];
                let norm = q.iter().map(|v| v * v).sum::<f64>().sqrt().max(EPSILON);
                for (g, v) in got.iter().zip(q) {
                    assert!((g - v / norm).abs() < 1e-15, "unit query {row}: {got:?}");
                }
            }
            out
        } else {
            info_nce_composed(q.clone(), k.clone(), bank.clone())
        };
        let grads = out.clone().mul_scalar(-2.0).sum().backward();
        assert!(k.grad(&grads).is_none(), "k got a gradient (op: {op})");
        assert!(
            unit_keys.grad(&grads).is_none(),
            "the unit keys got a gradient (op: {op})"
        );
        assert!(
            bank.grad(&grads).is_none(),
            "the queue got a gradient (op: {op})"
        );
        (values(out.inner()), values(q.grad(&grads).unwrap()))
    };
    let ((value, dq), (value_c, dq_c)) = (run(true), run(false));
    assert!(
        close(value[0], value_c[0], 1e-12),
        "{value:?} against {value_c:?}"
    );
    let expected = info_nce_by_hand(&qs, &ks, &queue, d);
    assert!(
        close(value[0], expected, 1e-13),
        "{} against {expected}",
        value[0]
    );
    for (i, (a, b)) in dq.iter().zip(&dq_c).enumerate() {
        assert!(close(*a, *b, 1e-12), "∂q[{i}]: {a} against {b}");
    }
    let h = 1e-6;
    for i in (0..rows * d).filter(|i| i / d != 1 && i / d != 3) {
        let (mut plus, mut minus) = (qs.clone(), qs.clone());
        plus[i] += h;
        minus[i] -= h;
        let fd = -2.0
            * (info_nce_by_hand(&plus, &ks, &queue, d) - info_nce_by_hand(&minus, &ks, &queue, d))
            / (2.0 * h);
        assert!((dq[i] - fd).abs() < 1e-8, "∂q[{i}]: {} against {fd}", dq[i]);
    }
}

/// Without a tracked input the operations give the same value and record nothing.
#[test]
fn untracked_inputs_give_the_same_values() {
    let (rows, d) = (4, 3);
    let zs = rows_with_a_zero(rows, d, 0, 7);
    let tracked = nt_xent_op(f64s(&zs, [rows, d]).require_grad(), TEMPERATURE, EPSILON);
    let plain = nt_xent_op(f64s(&zs, [rows, d]), TEMPERATURE, EPSILON);
    assert_eq!(values(tracked.inner()), values(plain.clone().inner()));
    assert!(!plain.is_require_grad());
    let q = f64s(&zs, [rows, d]);
    let keys: Vec<f64> = unit_rows(&zs.iter().map(|v| v + 0.5).collect::<Vec<_>>(), d).concat();
    let (loss, _) = info_nce_op(q.clone(), f64s(&keys, [rows, d]), q, TEMPERATURE, EPSILON);
    let expected = info_nce_by_hand(&zs, &keys, &zs, d);
    assert!(close(values(loss.inner())[0], expected, 1e-13));
}
