//! CAPI's clustering loss (documented on `CapiLoss`).

use burn::prelude::*;

use crate::base::error::{positive, ConfigError};

/// Configuration of [`CapiLoss`]: lightly 1.6's `CAPILoss` defaults.
#[derive(Config, Debug)]
pub struct CapiLossConfig {
    /// Temperature of the teacher's logits before the Sinkhorn–Knopp balancing (0.06).
    #[config(default = 0.06)]
    pub teacher_temperature: f64,
    /// Temperature of the student's logits in the cross-entropy (0.12).
    #[config(default = 0.12)]
    pub student_temperature: f64,
    /// Sinkhorn–Knopp iterations (3).
    #[config(default = 3)]
    pub sinkhorn_iterations: usize,
    /// Added to every denominator of the Sinkhorn–Knopp normalisations (lightly's 1e-8).
    #[config(default = 1e-8)]
    pub epsilon: f64,
}

impl CapiLossConfig {
    /// Builds the loss.
    ///
    /// # Errors
    /// A temperature that is not positive, or a negative `epsilon`, named.
    pub fn init(&self) -> Result<CapiLoss, ConfigError> {
        positive("teacher_temperature", self.teacher_temperature)?;
        positive("student_temperature", self.student_temperature)?;
        if !(self.epsilon >= 0.0 && self.epsilon.is_finite()) {
            return Err(ConfigError::new(
                "epsilon",
                format!("must be finite and at least 0, got {}", self.epsilon),
            ));
        }
        Ok(CapiLoss {
            teacher_temperature: self.teacher_temperature,
            student_temperature: self.student_temperature,
            iterations: self.sinkhorn_iterations,
            epsilon: self.epsilon,
        })
    }
}

/// The reductions over the batch that the Sinkhorn–Knopp balancing makes: on one device the
/// identity, on the replicas of a data-parallel run the maximum and the sum over every replica
/// of each replica's own reduction (lightly's `all_reduce` MAX and SUM), so that the replicas
/// balance the global batch as one device would.
pub struct BatchReductions<'a, B: Backend> {
    /// The maximum over the replicas of a `[1, S, K]` per-replica maximum.
    pub max: &'a dyn Fn(Tensor<B, 3>) -> Tensor<B, 3>,
    /// The sum over the replicas of a `[1, S, K]` per-replica sum.
    pub sum: &'a dyn Fn(Tensor<B, 3>) -> Tensor<B, 3>,
}

/// lightly's positionwise Sinkhorn–Knopp (`sinkhorn_knopp` of `lightly/loss/capi_loss.py`):
/// for every position `s` on its own, `q = exp(x − max_b x)` then, `iterations` times, each
/// cluster's column divided by its sum over the batch (plus `ε`) and each token's row by its sum
/// over the clusters (plus `ε`):
///
/// ```text
/// q_bsk ← q_bsk / (Σ_b' q_b'sk + ε)      (balance the batch)
/// q_bsk ← q_bsk / (Σ_k' q_bsk' + ε)      (each token a distribution over the clusters)
/// ```
///
/// No factor `1/B` or `1/K` (unlike SwAV's [`sinkhorn`](super::sinkhorn)); balancing per
/// position avoids the positional collapse the paper describes. `reductions` makes the batch
/// reductions global on replicas (`None`: this batch alone). No gradient flows through it.
///
/// # Shapes
/// - `logits`: `[B, S, K]` → `[B, S, K]`
pub fn positionwise_sinkhorn<B: Backend>(
    logits: Tensor<B, 3>,
    iterations: usize,
    epsilon: f64,
    reductions: Option<&BatchReductions<'_, B>>,
) -> Tensor<B, 3> {
    let q = logits.detach();
    let mut shift = q.clone().max_dim(0);
    if let Some(r) = reductions {
        shift = (r.max)(shift);
    }
    let mut q = (q - shift).exp();
    for _ in 0..iterations {
        let mut over_batch = q.clone().sum_dim(0);
        if let Some(r) = reductions {
            over_batch = (r.sum)(over_batch);
        }
        q = q / over_batch.add_scalar(epsilon);
        q = q.clone() / q.sum_dim(2).add_scalar(epsilon);
    }
    q.detach()
}

/// CAPI's loss. Build it with [`CapiLossConfig::init`].
///
/// CAPI (Darcet et al., "Cluster and Predict Latent Patches for Improved Masked Image Modeling",
/// 2025, <https://arxiv.org/abs/2502.08769>) as lightly 1.6's `CAPILoss`: the teacher's cluster
/// logits `t` (`[B, S, K]`, every patch of the image) become soft assignments by the
/// positionwise Sinkhorn–Knopp ([`positionwise_sinkhorn`]) at temperature `τ_t`, and the student's
/// logits `s` (`[B, Q, K]`, the predicted patches) are trained to predict them:
///
/// ```text
/// A = sinkhorn(t / τ_t)                                  (no gradient; over all S positions)
/// ℓ = −(1 / (B·Q)) Σ_b Σ_q Σ_k A[b, index_bq, k] · log softmax(s_bq / τ_s)_k
/// ```
///
/// `index` picks the predicted patches' positions after the balancing (lightly's
/// `teacher_index`); without it `Q = S` and the positions are aligned. The same loss with the
/// teacher's own logits as `s` trains the teacher's clustering head (lightly's "clustering
/// loss": the targets carry no gradient, the second argument does). The math and the defaults
/// are in `docs/methods.md#capi-loss`.
#[derive(Debug, Clone)]
pub struct CapiLoss {
    teacher_temperature: f64,
    student_temperature: f64,
    iterations: usize,
    epsilon: f64,
}

impl CapiLoss {
    /// The teacher's soft assignments: [`positionwise_sinkhorn`] of `teacher_logits / τ_t`
    /// (detached), the batch reductions global through `reductions` on replicas.
    ///
    /// # Shapes
    /// - `teacher_logits`: `[B, S, K]` → `[B, S, K]`
    pub fn assignments<B: Backend>(
        &self,
        teacher_logits: Tensor<B, 3>,
        reductions: Option<&BatchReductions<'_, B>>,
    ) -> Tensor<B, 3> {
        positionwise_sinkhorn(
            teacher_logits
                .detach()
                .mul_scalar(1.0 / self.teacher_temperature),
            self.iterations,
            self.epsilon,
            reductions,
        )
    }

    /// The cross-entropy of `student_logits / τ_s` against `assignments` already at the
    /// student's positions: the mean over the batch and the positions.
    ///
    /// # Shapes
    /// - `assignments`, `student_logits`: `[B, Q, K]` → `[1]`
    ///
    /// # Panics
    /// If the shapes differ.
    pub fn cross_entropy<B: Backend>(
        &self,
        assignments: Tensor<B, 3>,
        student_logits: Tensor<B, 3>,
    ) -> Tensor<B, 1> {
        assert_eq!(
            assignments.dims(),
            student_logits.dims(),
            "CapiLoss: assignments {:?} and student logits {:?} differ",
            assignments.dims(),
            student_logits.dims()
        );
        // A product with 1/τ rather than a division: upstream burn-autodiff 0.21's backward of a
        // scalar division rounds the divisor through f32 (patched in this workspace, not in one
        // that embeds the crate).
        let log_p = curriculum_ssl_models::kernels::log_softmax(
            student_logits.mul_scalar(1.0 / self.student_temperature),
            2,
        );
        (assignments.detach() * log_p).sum_dim(2).neg().mean()
    }

    /// lightly's `CAPILoss.forward`: the assignments of `teacher_logits`
    /// ([`CapiLoss::assignments`]), gathered along the positions at `teacher_index` when given
    /// (`torch.gather(A, 1, index)`), against `student_logits` ([`CapiLoss::cross_entropy`]).
    ///
    /// # Shapes
    /// - `teacher_logits`: `[B, S, K]`, `student_logits`: `[B, Q, K]`, `teacher_index`: `[B, Q]`
    ///   (positions below `S`; `None`: `Q = S`) → `[1]`
    pub fn forward<B: Backend>(
        &self,
        teacher_logits: Tensor<B, 3>,
        student_logits: Tensor<B, 3>,
        teacher_index: Option<Tensor<B, 2, Int>>,
        reductions: Option<&BatchReductions<'_, B>>,
    ) -> Tensor<B, 1> {
        let assignments = self.assignments(teacher_logits, reductions);
        let assignments = match teacher_index {
            Some(index) => {
                let [b, q] = index.dims();
                let k = assignments.dims()[2];
                let index = index.reshape([b, q, 1]).expand([b, q, k]);
                assignments.gather(1, index)
            }
            None => assignments,
        };
        self.cross_entropy(assignments, student_logits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loss::testing::{assert_matches_finite_differences, host, Ad, B};

    fn tensor<Bk: Backend>(values: &[f64], shape: [usize; 3]) -> Tensor<Bk, 3> {
        Tensor::from_data(TensorData::new(values.to_vec(), shape), &Default::default())
    }

    fn values(n: usize, phase: f64) -> Vec<f64> {
        (0..n)
            .map(|i| 3.0 * (0.71 * i as f64 + phase).sin())
            .collect()
    }

    /// The Sinkhorn–Knopp loop written out on the host, position by position.
    fn host_sinkhorn(x: &[f64], [b, s, k]: [usize; 3], iterations: usize) -> Vec<f64> {
        let at = |i: usize, p: usize, c: usize| (i * s + p) * k + c;
        let mut q = vec![0.0; x.len()];
        for p in 0..s {
            for c in 0..k {
                let max = (0..b).map(|i| x[at(i, p, c)]).fold(f64::MIN, f64::max);
                for i in 0..b {
                    q[at(i, p, c)] = (x[at(i, p, c)] - max).exp();
                }
            }
            for _ in 0..iterations {
                for c in 0..k {
                    let sum: f64 = (0..b).map(|i| q[at(i, p, c)]).sum();
                    for i in 0..b {
                        q[at(i, p, c)] /= sum + 1e-8;
                    }
                }
                for i in 0..b {
                    let sum: f64 = (0..k).map(|c| q[at(i, p, c)]).sum();
                    for c in 0..k {
                        q[at(i, p, c)] /= sum + 1e-8;
                    }
                }
            }
        }
        q
    }

    /// Against the loop written out on the host; every token's assignment sums to 1 (to 1e-7:
    /// the `ε` of the last division) and, with many iterations, each cluster's mass over the batch
    /// at each position is `B / K` (balanced per position, lightly's `test__is_positionwise`);
    /// a position's assignments do not depend on another position's logits.
    #[test]
    fn the_sinkhorn_balances_each_position_on_its_own() {
        let shape = [4, 3, 2];
        let x = values(24, 0.3);
        let got = host(positionwise_sinkhorn(tensor::<B>(&x, shape), 3, 1e-8, None));
        let want = host_sinkhorn(&x, shape, 3);
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-15, "{g} vs {w}");
        }
        for row in got.chunks(2) {
            assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-7, "{row:?}");
        }
        let many = host(positionwise_sinkhorn(
            tensor::<B>(&x, shape),
            200,
            1e-8,
            None,
        ));
        for p in 0..3 {
            for c in 0..2 {
                let mass: f64 = (0..4).map(|i| many[(i * 3 + p) * 2 + c]).sum();
                assert!(
                    (mass - 2.0).abs() < 1e-6,
                    "position {p} cluster {c}: {mass}"
                );
            }
        }
        // One image's logit at position 2 (a shift of every image's would cancel in the
        // balance over the batch).
        let mut y = x.clone();
        y[2 * 2] += 5.0;
        let other = host(positionwise_sinkhorn(tensor::<B>(&y, shape), 3, 1e-8, None));
        assert_eq!(got[..4], other[..4]);
        assert_ne!(got[4..6], other[4..6]);
    }

    /// The loss against its formula computed on the host, with and without an index; the
    /// teacher's logits get no gradient, the student's gradient equals central finite
    /// differences.
    #[test]
    fn the_loss_is_the_cross_entropy_against_the_gathered_assignments() {
        let loss = CapiLossConfig::new().init().unwrap();
        let (b, s, q, k) = (3, 4, 2, 5);
        let t = values(b * s * k, 0.1);
        let st = values(b * q * k, 1.7);
        let index = [[3, 0], [1, 2], [2, 3]];
        let a = host_sinkhorn(
            &t.iter().map(|v| v / 0.06).collect::<Vec<_>>(),
            [b, s, k],
            3,
        );
        let expected = |st: &[f64]| -> f64 {
            let mut total = 0.0;
            for i in 0..b {
                for j in 0..q {
                    let row: Vec<f64> = (0..k).map(|c| st[(i * q + j) * k + c] / 0.12).collect();
                    let max = row.iter().cloned().fold(f64::MIN, f64::max);
                    let lse = max + row.iter().map(|v| (v - max).exp()).sum::<f64>().ln();
                    for c in 0..k {
                        total -= a[(i * s + index[i][j]) * k + c] * (row[c] - lse);
                    }
                }
            }
            total / (b * q) as f64
        };
        let index_tensor = || {
            let flat: Vec<i64> = index.iter().flatten().map(|&p| p as i64).collect();
            Tensor::<Ad, 2, Int>::from_data(TensorData::new(flat, [b, q]), &Default::default())
        };
        let teacher = tensor::<Ad>(&t, [b, s, k]).require_grad();
        let student = tensor::<Ad>(&st, [b, q, k]).require_grad();
        let value = loss.forward(teacher.clone(), student.clone(), Some(index_tensor()), None);
        let got: f64 = value.clone().into_scalar();
        assert!(
            (got - expected(&st)).abs() < 1e-12,
            "{got} vs {}",
            expected(&st)
        );
        let grads = value.backward();
        assert!(teacher.grad(&grads).is_none());
        let analytic = host(student.grad(&grads).unwrap());
        assert_matches_finite_differences(expected, &st, &analytic, 1e-2, "student logits");
        // Without an index the student's positions are the teacher's.
        let aligned = loss.forward(
            tensor::<B>(&t, [b, s, k]),
            tensor::<B>(&t, [b, s, k]),
            None,
            None,
        );
        let mut want = 0.0;
        for (row, arow) in t.chunks(k).zip(a.chunks(k)) {
            let row: Vec<f64> = row.iter().map(|v| v / 0.12).collect();
            let max = row.iter().cloned().fold(f64::MIN, f64::max);
            let lse = max + row.iter().map(|v| (v - max).exp()).sum::<f64>().ln();
            want -= arow
                .iter()
                .zip(&row)
                .map(|(p, v)| p * (v - lse))
                .sum::<f64>();
        }
        want /= (b * s) as f64;
        let aligned: f64 = aligned.into_scalar();
        assert!((aligned - want).abs() < 1e-12, "{aligned} vs {want}");
    }

    #[test]
    fn impossible_settings_are_named() {
        let e = CapiLossConfig::new()
            .with_teacher_temperature(0.0)
            .init()
            .unwrap_err();
        assert_eq!(e.field, "teacher_temperature");
        let e = CapiLossConfig::new()
            .with_student_temperature(-1.0)
            .init()
            .unwrap_err();
        assert_eq!(e.field, "student_temperature");
        let e = CapiLossConfig::new().with_epsilon(-1.0).init().unwrap_err();
        assert_eq!(e.field, "epsilon");
    }
}
