//! SMoG's loss: predictions against synchronously grouped momentum features (documented on
//! `SmogLoss`).

use burn::prelude::*;
use burn::tensor::activation::log_softmax;

use super::similarity::l2_normalize;
use crate::base::error::{in_range, positive, ConfigError};

/// Configuration of [`SmogLoss`] (lightly 1.6's `SMoGPrototypes` and its example's defaults).
#[derive(Config, Debug)]
pub struct SmogLossConfig {
    /// Temperature `τ` of the logits against the group features (the paper's and lightly's
    /// example's 0.1).
    #[config(default = 0.1)]
    pub temperature: f64,
    /// Momentum `β` of the group features (the paper's and lightly's example's 0.99): a group
    /// moves to `β·g + (1 − β)·mean` of the features assigned to it.
    #[config(default = 0.99)]
    pub beta: f64,
}

impl SmogLossConfig {
    /// Validates the settings and builds the loss.
    ///
    /// # Errors
    /// A temperature that is not a positive finite number (`temperature`); a `beta` outside
    /// `[0, 1]` (`beta`).
    pub fn init(&self) -> Result<SmogLoss, ConfigError> {
        positive("temperature", self.temperature)?;
        in_range("beta", self.beta, 0.0, 1.0, false)?;
        Ok(SmogLoss {
            temperature: self.temperature,
            beta: self.beta,
        })
    }
}

/// The outcome of one SMoG step's loss ([`SmogLoss::forward`]).
#[derive(Debug, Clone)]
pub struct SmogOutput<B: Backend> {
    /// The cross-entropy, mean over this replica's rows, `[1]`.
    pub loss: Tensor<B, 1>,
    /// The group features after the step's synchronous momentum update, `[K, D]` (carrying the
    /// gradient of the features that moved them; detach before keeping them).
    pub groups: Tensor<B, 2>,
    /// The group each momentum feature was assigned to (the targets), `[N]`.
    pub assignments: Tensor<B, 1, Int>,
}

/// The SMoG loss. Build it with [`SmogLossConfig::init`].
///
/// SMoG (Pang et al., "Unsupervised Visual Representation Learning by Synchronous Momentum
/// Grouping", ECCV 2022, <https://arxiv.org/abs/2207.06167>; see `docs/methods.md#smog`), as
/// lightly 1.6's `SMoGPrototypes` and its example compute it. With `K` group features `g`, the
/// online projections `z` and predictions `p` of one view and the momentum projections `z'` of
/// the other:
///
/// ```text
/// a'_i  = argmax_k cos(z'_i, g_k)                      (targets: the groups before the update)
/// a_i   = argmax_k cos(z_i, g_k)
/// ĝ_k   = β·g_k + (1 − β)·mean{ z_i : a_i = k }        (groups no row was assigned to stay)
/// L     = −1/N Σ_i log softmax_k( cos(p_i, ĝ_k) / τ )[a'_i]
/// ```
///
/// `ĝ` carries the gradient of `z` (lightly's update writes the online projections into the
/// groups with their autograd graph), so `z` receives `(1 − β)/|group|` of the gradient of the
/// groups the logits compare against; the targets `a'` carry none. The means are of the
/// projections as they are (lightly does not normalise them; the cosines do). On replicas
/// `z` is the global batch's (gathered) and `p`, `z'` this replica's rows: every replica moves
/// the groups alike, and the replicas' mean loss is the one-device loss.
#[derive(Debug, Clone)]
pub struct SmogLoss {
    temperature: f64,
    beta: f64,
}

impl SmogLoss {
    /// The temperature `τ`.
    pub fn temperature(&self) -> f64 {
        self.temperature
    }

    /// The groups' momentum `β`.
    pub fn beta(&self) -> f64 {
        self.beta
    }

    /// The group of each row of `x`: the group feature of the largest cosine (lightly's
    /// `assign_groups`; the first of equal ones), without gradient.
    ///
    /// # Shapes
    /// - `x`: `[N, D]`, `groups`: `[K, D]` → `[N]`
    pub fn assign<B: Backend>(&self, x: Tensor<B, 2>, groups: Tensor<B, 2>) -> Tensor<B, 1, Int> {
        let [n, _] = x.dims();
        l2_normalize(x.detach())
            .matmul(l2_normalize(groups.detach()).transpose())
            .argmax(1)
            .reshape([n])
    }

    /// The synchronous momentum update of the groups by the rows of `x` (lightly's
    /// `get_updated_group_features`): each group with rows assigned to it moves to
    /// `β·g + (1 − β)·mean`, the others stay. The result carries `x`'s gradient.
    ///
    /// # Shapes
    /// - `x`: `[N, D]`, `groups`: `[K, D]` → `[K, D]`
    pub fn updated_groups<B: Backend>(
        &self,
        x: Tensor<B, 2>,
        groups: Tensor<B, 2>,
    ) -> Tensor<B, 2> {
        let [k, _] = groups.dims();
        let assigned = host_indices(self.assign(x.clone(), groups.clone()));
        let (means, present) = assigned_means(x, &assigned, k);
        let moved = groups.clone() * self.beta + means * (1.0 - self.beta);
        // A 0/1 blend: exact on either side.
        moved * present.clone() + groups * (present.neg() + 1.0)
    }

    /// The mean cross-entropy of the logits `cos(p_i, g_k)/τ` against the groups `targets`.
    ///
    /// # Shapes
    /// - `predictions`: `[N, D]`, `groups`: `[K, D]`, `targets`: `[N]` → `[1]`
    pub fn cross_entropy<B: Backend>(
        &self,
        predictions: Tensor<B, 2>,
        groups: Tensor<B, 2>,
        targets: Tensor<B, 1, Int>,
    ) -> Tensor<B, 1> {
        let [n, _] = predictions.dims();
        // A product by 1/τ, not a division: upstream burn-autodiff 0.21 back-propagates
        // `div_scalar` through the divisor's f32 inverse (a 2.4e-8 relative error at τ = 0.3
        // against lightly; patched in this workspace, not in one that embeds the crate).
        let logits = l2_normalize(predictions).matmul(l2_normalize(groups).transpose())
            * (1.0 / self.temperature);
        log_softmax(logits, 1)
            .gather(1, targets.reshape([n, 1]))
            .mean()
            .neg()
            .reshape([1])
    }

    /// One step's loss: the momentum projections `momentum` assigned to the groups `groups` as
    /// they were (the targets), the groups moved by `encoded` (the online projections: this
    /// replica's, or every replica's gathered), and the cross-entropy of `predictions` against
    /// the moved groups.
    ///
    /// # Shapes
    /// - `predictions`: `[N, D]`, `encoded`: `[M, D]`, `momentum`: `[N, D]`, `groups`:
    ///   `[K, D]` → loss `[1]`, groups `[K, D]`, assignments `[N]`
    pub fn forward<B: Backend>(
        &self,
        predictions: Tensor<B, 2>,
        encoded: Tensor<B, 2>,
        momentum: Tensor<B, 2>,
        groups: Tensor<B, 2>,
    ) -> SmogOutput<B> {
        let groups = groups.detach();
        let assignments = self.assign(momentum, groups.clone());
        let moved = self.updated_groups(encoded, groups);
        let loss = self.cross_entropy(predictions, moved.clone(), assignments.clone());
        SmogOutput {
            loss,
            groups: moved,
            assignments,
        }
    }
}

/// The mean of the rows of `x` assigned to each of `k` clusters (`assigned[i]` the cluster of
/// row `i`; zero for a cluster without rows) and whether each cluster has rows (1 or 0). The
/// means carry `x`'s gradient. SMoG's group update and its k-means' step.
///
/// # Shapes
/// - `x`: `[N, D]`, `assigned`: `N` clusters below `k` → (`[k, D]`, `[k, 1]`)
pub(crate) fn assigned_means<B: Backend>(
    x: Tensor<B, 2>,
    assigned: &[usize],
    k: usize,
) -> (Tensor<B, 2>, Tensor<B, 2>) {
    let device = x.device();
    let n = assigned.len();
    let mut one_hot = vec![0.0; n * k];
    let mut counts = vec![0usize; k];
    for (i, &a) in assigned.iter().enumerate() {
        one_hot[i * k + a] = 1.0;
        counts[a] += 1;
    }
    let one_hot = Tensor::<B, 2>::from_data(TensorData::new(one_hot, [n, k]), &device);
    let column =
        |values: Vec<f64>| Tensor::<B, 2>::from_data(TensorData::new(values, [k, 1]), &device);
    let present = column(counts.iter().map(|&c| f64::from(u8::from(c > 0))).collect());
    let inverse_counts = column(counts.iter().map(|&c| 1.0 / c.max(1) as f64).collect());
    (one_hot.transpose().matmul(x) * inverse_counts, present)
}

/// An index tensor's values on the host.
pub(crate) fn host_indices<B: Backend>(indices: Tensor<B, 1, Int>) -> Vec<usize> {
    indices
        .into_data()
        .convert::<i64>()
        .to_vec::<i64>()
        .expect("indices convert to i64")
        .into_iter()
        .map(|i| i as usize)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loss::testing::{assert_matches_finite_differences, host, Ad, B as Cpu};

    fn matrix<Bk: Backend>(values: &[f64], shape: [usize; 2]) -> Tensor<Bk, 2> {
        Tensor::from_data(TensorData::new(values.to_vec(), shape), &Default::default())
    }

    /// Deterministic values in [-1, 1].
    fn values(n: usize, seed: u64) -> Vec<f64> {
        (0..n)
            .map(|k| ((k as f64 + 1.0) * (seed as f64 * 0.37 + 1.3)).sin())
            .collect()
    }

    fn unit(row: &[f64]) -> Vec<f64> {
        let norm = row.iter().map(|v| v * v).sum::<f64>().sqrt().max(1e-12);
        row.iter().map(|v| v / norm).collect()
    }

    fn dot(x: &[f64], y: &[f64]) -> f64 {
        x.iter().zip(y).map(|(a, b)| a * b).sum()
    }

    fn argmax_cos(row: &[f64], g: &[f64], k: usize, d: usize) -> usize {
        let r = unit(row);
        (0..k)
            .map(|j| dot(&r, &unit(&g[j * d..(j + 1) * d])))
            .enumerate()
            .fold(
                (0, f64::MIN),
                |best, (j, c)| if c > best.1 { (j, c) } else { best },
            )
            .0
    }

    /// The loss recomputed on the host from [`SmogLoss`]'s formula, row by row.
    #[allow(clippy::too_many_arguments)]
    fn brute(
        p: &[f64],
        z: &[f64],
        zm: &[f64],
        g: &[f64],
        n: usize,
        m: usize,
        k: usize,
        d: usize,
        tau: f64,
        beta: f64,
    ) -> (f64, Vec<f64>) {
        let mut moved = g.to_vec();
        for j in 0..k {
            let rows: Vec<usize> = (0..m)
                .filter(|&i| argmax_cos(&z[i * d..(i + 1) * d], g, k, d) == j)
                .collect();
            if rows.is_empty() {
                continue;
            }
            for c in 0..d {
                let mean = rows.iter().map(|&i| z[i * d + c]).sum::<f64>() / rows.len() as f64;
                moved[j * d + c] = beta * g[j * d + c] + (1.0 - beta) * mean;
            }
        }
        let mut total = 0.0;
        for i in 0..n {
            let target = argmax_cos(&zm[i * d..(i + 1) * d], g, k, d);
            let pi = unit(&p[i * d..(i + 1) * d]);
            let logits: Vec<f64> = (0..k)
                .map(|j| dot(&pi, &unit(&moved[j * d..(j + 1) * d])) / tau)
                .collect();
            let max = logits.iter().cloned().fold(f64::MIN, f64::max);
            let lse = max + logits.iter().map(|l| (l - max).exp()).sum::<f64>().ln();
            total += lse - logits[target];
        }
        (total / n as f64, moved)
    }

    /// The loss and the moved groups equal the formula recomputed on the host, with a group no
    /// row is assigned to (it stays) and more encoded rows than predictions (the gathered
    /// global batch of a replica).
    #[test]
    fn the_loss_and_the_moved_groups_are_the_formula() {
        let (n, m, k, d) = (4, 6, 5, 3);
        let (p, z, zm) = (values(n * d, 1), values(m * d, 2), values(n * d, 3));
        let mut g = values(k * d, 4);
        // A group far from every row: nobody is assigned to it.
        g[3 * d..4 * d].copy_from_slice(&[0.0, 0.0, 1e-3]);
        let loss = SmogLossConfig::new()
            .with_temperature(0.3)
            .with_beta(0.9)
            .init()
            .unwrap();
        let out = loss.forward(
            matrix::<Cpu>(&p, [n, d]),
            matrix(&z, [m, d]),
            matrix(&zm, [n, d]),
            matrix(&g, [k, d]),
        );
        let (expected, moved) = brute(&p, &z, &zm, &g, n, m, k, d, 0.3, 0.9);
        let got = host(out.loss)[0];
        assert!((got - expected).abs() < 1e-12, "{got} vs {expected}");
        let got_groups = host(out.groups);
        for (a, b) in got_groups.iter().zip(&moved) {
            assert!((a - b).abs() < 1e-14, "{a} vs {b}");
        }
        assert_eq!(
            &got_groups[3 * d..4 * d],
            &g[3 * d..4 * d],
            "an empty group stays"
        );
    }

    /// Gathered rows: the replicas' mean loss is the whole batch's loss, and every replica
    /// moves the groups alike.
    #[test]
    fn the_replicas_mean_is_the_whole_batchs_loss() {
        let (n, k, d) = (6, 4, 3);
        let (p, z, zm, g) = (
            values(n * d, 5),
            values(n * d, 6),
            values(n * d, 7),
            values(k * d, 8),
        );
        let loss = SmogLossConfig::new().init().unwrap();
        let whole = loss.forward(
            matrix::<Cpu>(&p, [n, d]),
            matrix(&z, [n, d]),
            matrix(&zm, [n, d]),
            matrix(&g, [k, d]),
        );
        let half = n / 2 * d;
        let parts: Vec<_> = (0..2)
            .map(|r| {
                loss.forward(
                    matrix::<Cpu>(&p[r * half..(r + 1) * half], [n / 2, d]),
                    matrix(&z, [n, d]),
                    matrix(&zm[r * half..(r + 1) * half], [n / 2, d]),
                    matrix(&g, [k, d]),
                )
            })
            .collect();
        let mean = parts.iter().map(|o| host(o.loss.clone())[0]).sum::<f64>() / 2.0;
        assert!((mean - host(whole.loss)[0]).abs() < 1e-12);
        for part in &parts {
            assert_eq!(host(part.groups.clone()), host(whole.groups.clone()));
        }
    }

    /// The gradients with respect to the predictions and to the online projections (through the
    /// moved groups) match central finite differences; the momentum projections and the old
    /// groups receive none.
    #[test]
    fn the_gradients_match_finite_differences() {
        let (n, k, d) = (5, 3, 4);
        let loss = SmogLossConfig::new()
            .with_temperature(0.5)
            .with_beta(0.7)
            .init()
            .unwrap();
        let zm = values(n * d, 9);
        let g = values(k * d, 10);
        let x: Vec<f64> = [values(n * d, 11), values(n * d, 12)].concat();
        let run = |x: &[f64]| -> (f64, Vec<f64>, bool) {
            let p = matrix::<Ad>(&x[..n * d], [n, d]).require_grad();
            let z = matrix::<Ad>(&x[n * d..], [n, d]).require_grad();
            let m = matrix::<Ad>(&zm, [n, d]).require_grad();
            let groups = matrix::<Ad>(&g, [k, d]).require_grad();
            let out = loss.forward(p.clone(), z.clone(), m.clone(), groups.clone());
            let value = host(out.loss.clone())[0];
            let grads = out.loss.backward();
            let untouched = m.grad(&grads).is_none() && groups.grad(&grads).is_none();
            let g: Vec<f64> = [p, z]
                .iter()
                .flat_map(|t| t.grad(&grads).map(host).unwrap_or_else(|| vec![0.0; n * d]))
                .collect();
            (value, g, untouched)
        };
        let (_, analytic, untouched) = run(&x);
        assert!(untouched, "no gradient to the targets or the old groups");
        assert!(
            analytic[n * d..].iter().any(|g| *g != 0.0),
            "the projections move the groups"
        );
        assert_matches_finite_differences(|x| run(x).0, &x, &analytic, 1e-3, "SMoG");
    }

    #[test]
    fn bad_settings_are_named() {
        let e = SmogLossConfig::new()
            .with_temperature(0.0)
            .init()
            .unwrap_err();
        assert_eq!(e.field, "temperature");
        let e = SmogLossConfig::new().with_beta(1.5).init().unwrap_err();
        assert_eq!(e.field, "beta");
    }
}
