//! The DeepCluster v2 loss (documented on `DeepClusterV2Loss`).

use burn::prelude::*;
use burn::tensor::activation::log_softmax;
use burn::tensor::IndexingUpdateOp;

use super::similarity::l2_normalize;
use crate::base::error::{positive, ConfigError};

/// Configuration of [`DeepClusterV2Loss`] (solo-learn's `deepclusterv2` defaults).
#[derive(Config, Debug)]
pub struct DeepClusterV2LossConfig {
    /// Temperature `τ` of the softmax over the prototypes (the paper's and solo-learn's 0.1).
    #[config(default = 0.1)]
    pub temperature: f64,
}

impl DeepClusterV2LossConfig {
    /// Validates the temperature and builds the loss.
    ///
    /// # Errors
    /// A temperature that is not a positive finite number, named `temperature`.
    pub fn init(&self) -> Result<DeepClusterV2Loss, ConfigError> {
        positive("temperature", self.temperature)?;
        Ok(DeepClusterV2Loss {
            temperature: self.temperature,
        })
    }
}

/// The DeepCluster v2 loss. Build it with [`DeepClusterV2LossConfig::init`].
///
/// DeepCluster v2 (Caron et al., "Unsupervised Learning of Visual Features by Contrasting Cluster
/// Assignments", NeurIPS 2020, <https://arxiv.org/abs/2006.09882>, its DeepCluster-v2 variant;
/// see `docs/methods.md#deepcluster-v2`), as solo-learn's `deepclusterv2_loss_func` computes it:
/// each view's projection, L2-normalised, is scored against every head's prototypes (the unit
/// k-means centroids of the last epoch's projections, no gradient) and trained to predict its
/// image's k-means assignment in that head:
///
/// ```text
/// z_vn = y_vn / ‖y_vn‖                          (view v, image n)
/// L    = 1/H Σ_h  Σ_{v,n: a_hn ≥ 0} −log softmax_k(⟨z_vn, c_hk⟩ / τ)[a_hn]  /  #{(v, n): a_hn ≥ 0}
/// ```
///
/// An image without an assignment (`a_hn = −1`: none was clustered yet, the first epoch) is left
/// out (PyTorch's `ignore_index = −1`); a head with no assigned image adds 0 (PyTorch's mean
/// over no element is NaN; here the loss and its gradient are 0).
#[derive(Debug, Clone)]
pub struct DeepClusterV2Loss {
    temperature: f64,
}

/// One head's part of [`DeepClusterV2Loss`]: the summed cross-entropy of its assigned rows and
/// how many rows it sums.
#[derive(Debug, Clone)]
pub struct DeepClusterV2Terms<B: Backend> {
    /// `Σ −log softmax(scores / τ)[a]` over the rows with an assignment, `[1]`.
    pub sum: Tensor<B, 1>,
    /// The rows with an assignment (both views count), `[1]`.
    pub count: Tensor<B, 1>,
}

impl DeepClusterV2Loss {
    /// The temperature `τ`.
    pub fn temperature(&self) -> f64 {
        self.temperature
    }

    /// Each head's summed cross-entropy and count of assigned rows (see [`DeepClusterV2Loss`]).
    ///
    /// # Shapes
    /// - `projections[v]`: `[N, D]` (the projector's outputs, normalised here)
    /// - `prototypes[h]`: `[K_h, D]` (unit rows)
    /// - `assignments[h]`: `[N]`, cluster of each image in head `h`, `−1` for none
    pub fn head_terms<B: Backend>(
        &self,
        projections: &[Tensor<B, 2>],
        prototypes: &[Tensor<B, 2>],
        assignments: &[Tensor<B, 1, Int>],
    ) -> Vec<DeepClusterV2Terms<B>> {
        let z = l2_normalize(Tensor::cat(projections.to_vec(), 0));
        let views = projections.len();
        prototypes
            .iter()
            .zip(assignments)
            .map(|(c, a)| {
                let targets = Tensor::cat(vec![a.clone(); views], 0);
                let [rows] = targets.dims();
                let assigned = targets.clone().greater_equal_elem(0).float();
                let logits = z.clone().matmul(c.clone().transpose()) * (1.0 / self.temperature);
                let log_p = log_softmax(logits, 1)
                    .gather(1, targets.clamp_min(0).reshape([rows, 1]))
                    .reshape([rows]);
                DeepClusterV2Terms {
                    sum: (log_p * assigned.clone()).sum().neg(),
                    count: assigned.sum(),
                }
            })
            .collect()
    }

    /// The loss: each head's summed cross-entropy divided by `divisor(count)`, averaged over the
    /// heads. `divisor` maps a head's own count of assigned rows to a positive divisor: on one
    /// device the count, at least 1 ([`DeepClusterV2Loss::forward`]); on a replica, the count
    /// over every replica, at least 1, divided by their number, so that the replicas' mean loss
    /// is the one-device loss.
    pub fn combine<B: Backend>(
        terms: Vec<DeepClusterV2Terms<B>>,
        divisor: impl Fn(Tensor<B, 1>) -> Tensor<B, 1>,
    ) -> Tensor<B, 1> {
        let heads = terms.len().max(1);
        terms
            .into_iter()
            .map(|t| t.sum / divisor(t.count))
            .reduce(|a, b| a + b)
            .expect("at least one head")
            * (1.0 / heads as f64)
    }

    /// The loss on one device (see [`DeepClusterV2Loss`]).
    ///
    /// # Shapes
    /// - `projections[v]`: `[N, D]`; `prototypes[h]`: `[K_h, D]`; `assignments[h]`: `[N]` → `[1]`
    pub fn forward<B: Backend>(
        &self,
        projections: &[Tensor<B, 2>],
        prototypes: &[Tensor<B, 2>],
        assignments: &[Tensor<B, 1, Int>],
    ) -> Tensor<B, 1> {
        Self::combine(self.head_terms(projections, prototypes, assignments), |c| {
            c.clamp_min(1.0)
        })
    }
}

/// Rows of the memory bank scored against the centroids at once in [`spherical_kmeans`] (the
/// `[rows, K]` scores of 50 000 projections against 3000 centroids would take 600 MB).
const KMEANS_CHUNK: usize = 8192;

/// k-means on the unit sphere, as solo-learn's `KMeans.cluster_memory` (`solo/utils/kmeans.py`)
/// runs it on one process: from the rows `init` of `embeddings` (unit rows) as centroids,
/// `iters` rounds of assigning each row to its most similar centroid (largest dot product) and
/// moving each centroid that has rows to their normalised mean (an empty cluster keeps its
/// centroid), then one last assignment. Returns the centroids `[K, D]` (unit rows) and the
/// assignments `[M]`. The draw of `init` is the caller's (solo-learn: `randperm(M)[:K]`).
///
/// # Shapes
/// - `embeddings`: `[M, D]`; `init`: `[K]` row indices → (`[K, D]`, `[M]`)
pub fn spherical_kmeans<B: Backend>(
    embeddings: Tensor<B, 2>,
    init: Tensor<B, 1, Int>,
    iters: usize,
) -> (Tensor<B, 2>, Tensor<B, 1, Int>) {
    let [m, d] = embeddings.dims();
    let [k] = init.dims();
    let device = embeddings.device();
    let mut centroids = embeddings.clone().select(0, init);
    let assign = |centroids: &Tensor<B, 2>| -> Tensor<B, 1, Int> {
        let parts: Vec<Tensor<B, 1, Int>> = (0..m)
            .step_by(KMEANS_CHUNK)
            .map(|start| {
                let end = (start + KMEANS_CHUNK).min(m);
                embeddings
                    .clone()
                    .slice(start..end)
                    .matmul(centroids.clone().transpose())
                    .argmax(1)
                    .reshape([end - start])
            })
            .collect();
        Tensor::cat(parts, 0)
    };
    for _ in 0..iters {
        let assignments = assign(&centroids);
        let sums = Tensor::<B, 2>::zeros([k, d], &device).select_assign(
            0,
            assignments.clone(),
            embeddings.clone(),
            IndexingUpdateOp::Add,
        );
        let counts = Tensor::<B, 1>::zeros([k], &device)
            .select_assign(
                0,
                assignments,
                Tensor::ones([m], &device),
                IndexingUpdateOp::Add,
            )
            .reshape([k, 1]);
        let filled = counts.clone().greater_elem(0.0).repeat_dim(1, d);
        let means = sums / counts.clamp_min(1.0);
        centroids = l2_normalize(centroids.mask_where(filled, means));
    }
    let assignments = assign(&centroids);
    (centroids, assignments)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loss::testing::{assert_matches_finite_differences, host, matrix, Ad, B as Cpu};

    /// Deterministic values in [-1, 1].
    fn values(n: usize, seed: u64) -> Vec<f64> {
        (0..n)
            .map(|k| ((k as f64 + 1.0) * (seed as f64 * 0.37 + 1.3)).sin())
            .collect()
    }

    fn ints<Bk: Backend>(a: &[i64]) -> Tensor<Bk, 1, Int> {
        Tensor::from_data(TensorData::new(a.to_vec(), [a.len()]), &Default::default())
    }

    fn unit_rows(x: &[f64], d: usize) -> Vec<Vec<f64>> {
        x.chunks(d)
            .map(|r| {
                let n = r.iter().map(|v| v * v).sum::<f64>().sqrt().max(1e-12);
                r.iter().map(|v| v / n).collect()
            })
            .collect()
    }

    /// The loss on the host, from the formula of [`DeepClusterV2Loss`].
    fn brute(y: [&[f64]; 2], protos: &[Vec<f64>], a: &[Vec<i64>], d: usize, tau: f64) -> f64 {
        let z: Vec<Vec<f64>> = y.iter().flat_map(|v| unit_rows(v, d)).collect();
        let mut total = 0.0;
        for (c, a) in protos.iter().zip(a) {
            let c = unit_rows(c, d);
            let (mut sum, mut count) = (0.0, 0.0);
            for (row, zr) in z.iter().enumerate() {
                let target = a[row % a.len()];
                if target < 0 {
                    continue;
                }
                let logits: Vec<f64> = c
                    .iter()
                    .map(|ck| ck.iter().zip(zr).map(|(p, q)| p * q).sum::<f64>() / tau)
                    .collect();
                let max = logits.iter().cloned().fold(f64::MIN, f64::max);
                let lse = max + logits.iter().map(|l| (l - max).exp()).sum::<f64>().ln();
                sum += lse - logits[target as usize];
                count += 1.0;
            }
            total += sum / f64::max(count, 1.0);
        }
        total / protos.len() as f64
    }

    /// The loss equals the formula, and its gradient with respect to both views' projections
    /// matches central finite differences; unassigned images are left out.
    #[test]
    fn deepcluster_v2_loss_matches_the_formula_and_finite_differences() {
        let (n, d) = (4, 3);
        let protos = vec![
            unit_rows(&values(5 * d, 3), d).concat(),
            unit_rows(&values(2 * d, 4), d).concat(),
        ];
        let a = vec![vec![0, 4, -1, 2], vec![1, -1, 0, 0]];
        let loss = DeepClusterV2LossConfig::new().init().unwrap();
        let y1 = values(n * d, 1);
        let y2 = values(n * d, 2);
        let f = |x: &[f64]| {
            let (p, q) = x.split_at(n * d);
            let out = loss.forward::<Cpu>(
                &[matrix(p, [n, d]), matrix(q, [n, d])],
                &[matrix(&protos[0], [5, d]), matrix(&protos[1], [2, d])],
                &[ints(&a[0]), ints(&a[1])],
            );
            host(out)[0]
        };
        let x = [y1.clone(), y2.clone()].concat();
        let expected = brute([&y1, &y2], &protos, &a, d, 0.1);
        assert!((f(&x) - expected).abs() < 1e-12, "{} vs {expected}", f(&x));
        let p = matrix::<Ad>(&y1, [n, d]).require_grad();
        let q = matrix::<Ad>(&y2, [n, d]).require_grad();
        let out = loss.forward(
            &[p.clone(), q.clone()],
            &[matrix(&protos[0], [5, d]), matrix(&protos[1], [2, d])],
            &[ints(&a[0]), ints(&a[1])],
        );
        let grads = out.backward();
        let analytic = [host(p.grad(&grads).unwrap()), host(q.grad(&grads).unwrap())].concat();
        assert_matches_finite_differences(f, &x, &analytic, 1e-3, "deepcluster_v2");
    }

    /// Without any assignment (the first epoch) the loss and its gradient are 0, not NaN.
    #[test]
    fn deepcluster_v2_loss_without_assignments_is_zero() {
        let loss = DeepClusterV2LossConfig::new().init().unwrap();
        let p = matrix::<Ad>(&values(6, 1), [2, 3]).require_grad();
        let out = loss.forward(
            &[p.clone(), p.clone()],
            &[matrix(&unit_rows(&values(6, 2), 3).concat(), [2, 3])],
            &[ints(&[-1, -1])],
        );
        assert_eq!(host(out.clone()), vec![0.0]);
        let g = host(p.grad(&out.backward()).unwrap());
        assert!(g.iter().all(|v| *v == 0.0), "{g:?}");
    }

    /// A temperature that is not positive is refused, naming the field.
    #[test]
    fn deepcluster_v2_loss_refuses_a_bad_temperature() {
        let err = DeepClusterV2LossConfig::new()
            .with_temperature(0.0)
            .init()
            .unwrap_err();
        assert!(err.to_string().contains("temperature"), "{err}");
    }
}
