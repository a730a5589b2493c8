//! The SwAV loss (documented on `SwavLoss`).

use burn::prelude::*;

use super::similarity::stop_gradient;
use crate::base::error::{positive, ConfigError};

/// Configuration of [`SwavLoss`].
#[derive(Config, Debug)]
pub struct SwavLossConfig {
    /// Temperature `τ` of the predictions' softmax (the paper's 0.1).
    #[config(default = 0.1)]
    pub temperature: f64,
    /// Sinkhorn–Knopp iterations (the paper's 3).
    #[config(default = 3)]
    pub sinkhorn_iterations: usize,
    /// `ε` of Sinkhorn–Knopp: the codes are `exp(S / ε)` normalised (the paper's 0.05).
    #[config(default = 0.05)]
    pub sinkhorn_epsilon: f64,
}

impl SwavLossConfig {
    /// Validates the hyperparameters and builds the loss.
    ///
    /// # Errors
    /// A temperature or `ε` that is not positive, or no Sinkhorn iteration.
    pub fn init(&self) -> Result<SwavLoss, ConfigError> {
        positive("temperature", self.temperature)?;
        positive("sinkhorn_epsilon", self.sinkhorn_epsilon)?;
        if self.sinkhorn_iterations == 0 {
            return Err(ConfigError::new(
                "sinkhorn_iterations",
                "must be at least 1 (the codes would not be balanced over the prototypes)",
            ));
        }
        Ok(SwavLoss {
            temperature: self.temperature,
            iterations: self.sinkhorn_iterations,
            epsilon: self.sinkhorn_epsilon,
        })
    }
}

/// The SwAV loss. Build it with [`SwavLossConfig::init`].
///
/// The SwAV loss (Caron et al., "Unsupervised Learning of Visual Features by Contrasting Cluster
/// Assignments", NeurIPS 2020, <https://arxiv.org/abs/2006.09882>; see
/// `docs/methods.md#swav-loss`): swapped prediction of codes computed online by Sinkhorn–Knopp.
///
/// For every global view `i`, its codes `Q_i = sinkhorn(S_i)` are computed from its prototype
/// scores `S_i = z_i Cᵀ` (`[N, K]`, cosines: `z` and the prototypes `C` are unit vectors),
/// without gradient, optionally together with the scores of a queue of earlier batches' global
/// views (the codes of the current batch are kept). Every other view `v` (the other global view
/// and all local crops) predicts them:
///
/// ```text
/// ℓ(v, Q) = −(1/N) Σ_n Σ_k Q_nk · log softmax(S_v / τ)_nk
/// L = (1 / |G|) Σ_{i ∈ G} (1 / (V_total − 1)) Σ_{v ≠ i} ℓ(v, Q_i)
/// ```
///
/// as SwAV's code and lightly's `SwaVLoss` average them. Sinkhorn–Knopp (the paper's
/// Algorithm 1, 3 iterations, `ε = 0.05`): `Q = exp(S/ε)ᵀ / Σ`, then alternately rows
/// (prototypes) to `1/K` and columns (images) to `1/B`, and finally `B·Q`, so that each image's
/// code sums to 1 and the prototypes share the batch equally.
#[derive(Debug, Clone)]
pub struct SwavLoss {
    temperature: f64,
    iterations: usize,
    epsilon: f64,
}

/// Sinkhorn–Knopp codes of the prototype scores `scores` (SwAV's Algorithm 1): each row (image)
/// sums to 1, each column (prototype) to `B/K`. No gradient flows through them.
///
/// `exp(S/ε)` is computed as `exp((S − max S)/ε)`: the shift cancels in the first normalisation
/// (the result is the same), and scores that are not cosines cannot overflow.
///
/// # Shapes
/// - `scores`: `[B, K]` → `[B, K]`
pub fn sinkhorn<B: Backend>(scores: Tensor<B, 2>, iterations: usize, epsilon: f64) -> Tensor<B, 2> {
    let scores = stop_gradient(scores);
    let max = scores.clone().max().reshape([1, 1]);
    sinkhorn_balance((scores - max).mul_scalar(1.0 / epsilon).exp(), iterations)
}

/// The balancing loop of Sinkhorn–Knopp on non-negative weights `q` (`[B, K]`, an image per
/// row): `q` is divided by its sum, then, `iterations` times, every prototype's total weight is
/// made equal and every image's row made to sum `1/B`; the result is scaled by `B`, so that
/// every row sums to 1 (with 0 iterations: `B·q / Σq`). No gradient flows
/// through it. [`sinkhorn`] runs it on `exp(S/ε)` (SwAV); MSN on sharpened probabilities
/// ([`MsnLoss`](super::MsnLoss)).
///
/// # Shapes
/// - `q`: `[B, K]` → `[B, K]`
pub fn sinkhorn_balance<B: Backend>(q: Tensor<B, 2>, iterations: usize) -> Tensor<B, 2> {
    let [b, _] = q.dims();
    // [K, B]: prototypes along the rows, as in the papers' code.
    let q = stop_gradient(q).transpose();
    let mut q = q.clone() / q.sum().reshape([1, 1]);
    for _ in 0..iterations {
        q = q.clone() / q.clone().sum_dim(1);
        q = q.clone() / q.clone().sum_dim(0);
        q = q.mul_scalar(1.0 / (b as f64));
    }
    q.mul_scalar(b as f64).transpose()
}

impl SwavLoss {
    /// Sinkhorn–Knopp codes of `scores` with this loss's iterations and `ε` ([`sinkhorn`]).
    ///
    /// # Shapes
    /// - `scores`: `[B, K]` → `[B, K]`
    pub fn codes<B: Backend>(&self, scores: Tensor<B, 2>) -> Tensor<B, 2> {
        sinkhorn(scores, self.iterations, self.epsilon)
    }

    /// `ℓ(v, Q) = −(1/N) Σ_n Σ_k Q_nk log softmax(S_v/τ)_nk`: how well the scores `scores`
    /// predict the codes `codes`.
    ///
    /// # Shapes
    /// - `scores`, `codes`: `[N, K]` → `[1]`
    pub fn prediction<B: Backend>(
        &self,
        scores: Tensor<B, 2>,
        codes: Tensor<B, 2>,
    ) -> Tensor<B, 1> {
        let [n, _] = scores.dims();
        let log_p = curriculum_ssl_models::kernels::log_softmax(
            scores.mul_scalar(1.0 / self.temperature),
            1,
        );
        (codes * log_p).sum().neg().mul_scalar(1.0 / (n as f64))
    }

    /// The loss of the global views' scores `global` and the local crops' `local`, with the
    /// codes of each global view computed by Sinkhorn–Knopp on its scores (followed by the
    /// queue's scores for that view, `queue[i]`, when given).
    ///
    /// # Shapes
    /// - `global[i]`, `local[v]`: `[N, K]`; `queue[i]`: `[Q, K]` → `[1]`
    ///
    /// # Panics
    /// With fewer than one global view and two views in all, or scores of different shapes.
    pub fn forward<B: Backend>(
        &self,
        global: &[Tensor<B, 2>],
        local: &[Tensor<B, 2>],
        queue: Option<&[Tensor<B, 2>]>,
    ) -> Tensor<B, 1> {
        let codes = global
            .iter()
            .enumerate()
            .map(|(i, s)| match queue {
                Some(queue) => {
                    let n = s.dims()[0];
                    let all = Tensor::cat(vec![s.clone(), queue[i].clone()], 0);
                    self.codes(all).slice(0..n)
                }
                None => self.codes(s.clone()),
            })
            .collect::<Vec<_>>();
        self.forward_with_codes(global, local, &codes)
    }

    /// The loss with the codes of each global view given (`codes[i]` for `global[i]`), e.g.
    /// computed on the scores of every replica's images in a data-parallel run. No gradient
    /// flows into the codes.
    ///
    /// # Shapes
    /// - `global[i]`, `local[v]`, `codes[i]`: `[N, K]` → `[1]`
    ///
    /// # Panics
    /// With fewer than one global view and two views in all, or scores of different shapes.
    pub fn forward_with_codes<B: Backend>(
        &self,
        global: &[Tensor<B, 2>],
        local: &[Tensor<B, 2>],
        codes: &[Tensor<B, 2>],
    ) -> Tensor<B, 1> {
        let views = global.len() + local.len();
        assert!(
            !global.is_empty() && views >= 2 && codes.len() == global.len(),
            "SwavLoss: needs a global view and two views in all, and one code per global view \
             (got {} global, {} local, {} codes)",
            global.len(),
            local.len(),
            codes.len()
        );
        let shape = global[0].dims();
        for s in global.iter().chain(local).chain(codes) {
            assert_eq!(
                s.dims(),
                shape,
                "SwavLoss: scores of shape {:?} and {:?}",
                s.dims(),
                shape
            );
        }
        // Σ_i Σ_{v ≠ i} CE(q_i, p_v) regrouped by view: each view's log-softmax is taken once
        // and meets the sum of the other global views' codes (every local crop meets all of
        // them), V log-softmaxes instead of G·(V − 1).
        let n = shape[0];
        let codes: Vec<Tensor<B, 2>> = codes.iter().map(|q| stop_gradient(q.clone())).collect();
        let others = |skip: Option<usize>| -> Option<Tensor<B, 2>> {
            codes
                .iter()
                .enumerate()
                .filter(|(i, _)| Some(*i) != skip)
                .map(|(_, q)| q.clone())
                .reduce(|a, b| a + b)
        };
        let all_codes = others(None);
        let mut total: Option<Tensor<B, 1>> = None;
        for (v, s) in global.iter().chain(local).enumerate() {
            let targets = if v < global.len() {
                others(Some(v))
            } else {
                all_codes.clone()
            };
            let Some(targets) = targets else { continue };
            let log_p = curriculum_ssl_models::kernels::log_softmax(
                s.clone().mul_scalar(1.0 / self.temperature),
                1,
            );
            let term = (targets * log_p).sum();
            total = Some(match total {
                Some(acc) => acc + term,
                None => term,
            });
        }
        total
            .expect("two views in all")
            .neg()
            .mul_scalar(1.0 / ((n * (views - 1) * global.len()) as f64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    type B = NdArray<f64>;

    fn scores(n: usize, k: usize, shift: f64) -> Tensor<B, 2> {
        let values: Vec<f64> = (0..n * k)
            .map(|e| (0.37 * e as f64 + shift).sin() * 0.9)
            .collect();
        Tensor::from_data(TensorData::new(values, [n, k]), &Default::default())
    }

    fn host(x: Tensor<B, 2>) -> Vec<f64> {
        x.into_data().convert::<f64>().to_vec().unwrap()
    }

    /// After enough iterations the codes are doubly stochastic in SwAV's sense: each image's
    /// code sums to 1 and each prototype receives `B/K` of the batch.
    #[test]
    fn sinkhorn_balances_images_and_prototypes() {
        let (b, k) = (6, 4);
        let q = sinkhorn(scores(b, k, 0.2), 200, 0.2);
        let q = host(q);
        for n in 0..b {
            let row: f64 = q[n * k..(n + 1) * k].iter().sum();
            assert!((row - 1.0).abs() < 1e-12, "image {n}: {row}");
        }
        for j in 0..k {
            let column: f64 = (0..b).map(|n| q[n * k + j]).sum();
            assert!(
                (column - b as f64 / k as f64).abs() < 1e-9,
                "prototype {j}: {column}"
            );
        }
    }

    /// With one iteration on a single image the code is the softmax of `S/ε` (the row step
    /// divides each prototype by its only entry, the column step re-normalises the image).
    #[test]
    fn one_image_one_iteration_is_uniform() {
        // Rows to 1/K per prototype for a single image make every entry equal: the code is
        // uniform whatever the scores.
        let q = host(sinkhorn(scores(1, 5, 0.4), 1, 0.05));
        for v in q {
            assert!((v - 0.2).abs() < 1e-14);
        }
    }

    #[test]
    fn impossible_settings_are_named() {
        let e = SwavLossConfig::new()
            .with_temperature(0.0)
            .init()
            .unwrap_err();
        assert_eq!(e.field, "temperature");
        let e = SwavLossConfig::new()
            .with_sinkhorn_iterations(0)
            .init()
            .unwrap_err();
        assert_eq!(e.field, "sinkhorn_iterations");
    }
}
