//! The loss of Masked Siamese Networks and PMSN (documented on `MsnLoss`).

use burn::prelude::*;
use curriculum_ssl_models::kernels::{log_softmax, softmax};

use super::similarity::{l2_normalize, stop_gradient};
use super::swav::sinkhorn_balance;
use crate::base::error::{non_negative, positive, ConfigError};

/// Configuration of [`MsnLoss`].
#[derive(Config, Debug)]
pub struct MsnLossConfig {
    /// Temperature `τ` of the prototype assignments (0.1).
    #[config(default = 0.1)]
    pub temperature: f64,
    /// Sharpening temperature `T` of the targets (0.25).
    #[config(default = 0.25)]
    pub target_sharpen_temperature: f64,
    /// Sinkhorn–Knopp iterations on the targets (3; 0 switches the balancing off).
    #[config(default = 3)]
    pub sinkhorn_iterations: usize,
    /// Weight `λ` of the regulariser (1; 0 switches it off).
    #[config(default = 1.0)]
    pub regularization_weight: f64,
    /// PMSN's power-law prior: the exponent `s` of `q_k ∝ k^(−s)` (PMSN's 0.25); `None`: MSN's
    /// mean-entropy maximisation (a uniform prior, matched the other way round).
    #[config(default = "None")]
    pub power_law_exponent: Option<f64>,
}

impl MsnLossConfig {
    /// Validates the hyperparameters and builds the loss.
    ///
    /// # Errors
    /// A temperature that is not positive, a negative weight or exponent.
    pub fn init(&self) -> Result<MsnLoss, ConfigError> {
        positive("temperature", self.temperature)?;
        positive(
            "target_sharpen_temperature",
            self.target_sharpen_temperature,
        )?;
        non_negative("regularization_weight", self.regularization_weight)?;
        if let Some(s) = self.power_law_exponent {
            non_negative("power_law_exponent", s)?;
        }
        Ok(MsnLoss {
            config: self.clone(),
        })
    }
}

/// The MSN / PMSN loss. Build it with [`MsnLossConfig::init`].
///
/// The loss of Masked Siamese Networks (Assran et al., "Masked Siamese Networks for
/// Label-Efficient Learning", ECCV 2022, <https://arxiv.org/abs/2204.07141>) and its prior-matching
/// form PMSN (Assran et al., "The Hidden Uniform Cluster Prior in Self-Supervised Learning", ICLR
/// 2023, <https://arxiv.org/abs/2210.07277>); see `docs/methods.md#msn-loss`.
///
/// The anchors (masked views) and the target (the unmasked view, through the EMA network) are
/// compared by their soft assignments to `K` learned prototypes `P`. With `z` the L2-normalised
/// rows, `V` anchor views of each of `N` images (view-major, `[V·N, D]`) and targets `[N, D]`:
///
/// ```text
/// p(z)  = softmax(z·P̂ᵀ / τ)                                    (anchors; P̂: normalised rows)
/// t(z)  = sinkhorn(softmax(z·P̂ᵀ / (τ·T)))                     (targets, no gradient)
/// CE    = (1 / VN) Σ_anchors −⟨t(target of its image), log p(anchor)⟩
/// p̄     = (1 / VN) Σ_anchors p(anchor)
/// R_MSN = Σ_k p̄_k log p̄_k + log K          = KL(p̄ ‖ uniform)    (mean-entropy maximisation)
/// R_PMSN = Σ_k q_k (log q_k − log p̄_k)     = KL(q ‖ p̄),  q_k ∝ k^(−s)    (power-law prior)
/// L     = CE + λ·R
/// ```
///
/// as lightly's `MSNLoss` and `PMSNLoss` (lightly 1.6) and the authors' code: sharpening by
/// `T` (0.25) is `p^(1/T)` renormalised, computed here as the softmax at temperature `τ·T`, the
/// same numbers without raising small probabilities to a power; `sinkhorn` is
/// [`sinkhorn_balance`] (3 iterations, 0 to switch it off). The gradient flows into the anchors
/// and the prototypes, never into the targets. The regulariser's mean is over every anchor of
/// the batch: on data-parallel replicas the method sums it over replicas before
/// [`MsnLoss::regularization`] (the authors' `AllReduce` of the mean), and balances the
/// targets of the global batch.
#[derive(Debug, Clone)]
pub struct MsnLoss {
    config: MsnLossConfig,
}

/// The loss and its two terms, each `[1]`.
#[derive(Debug, Clone)]
pub struct MsnTerms<B: Backend> {
    /// `CE + λ·R`.
    pub loss: Tensor<B, 1>,
    /// The cross-entropy of the anchors against the targets.
    pub cross_entropy: Tensor<B, 1>,
    /// The regulariser `R` (before its weight).
    pub regularization: Tensor<B, 1>,
}

impl MsnLoss {
    /// The settings.
    pub fn config(&self) -> &MsnLossConfig {
        &self.config
    }

    /// The prototype logits `ẑ·P̂ᵀ` of `x` at temperature `temperature`.
    fn logits<B: Backend>(
        x: Tensor<B, 2>,
        prototypes: Tensor<B, 2>,
        temperature: f64,
    ) -> Tensor<B, 2> {
        l2_normalize(x)
            .matmul(l2_normalize(prototypes).transpose())
            .mul_scalar(1.0 / temperature)
    }

    /// `log p(x)`: the log-assignments of the rows of `x` to the prototypes, `softmax` at `τ`.
    ///
    /// # Shapes
    /// - `x`: `[M, D]`, `prototypes`: `[K, D]` → `[M, K]`
    pub fn log_assignments<B: Backend>(
        &self,
        x: Tensor<B, 2>,
        prototypes: Tensor<B, 2>,
    ) -> Tensor<B, 2> {
        log_softmax(Self::logits(x, prototypes, self.config.temperature), 1)
    }

    /// The sharpened target assignments of `targets`, before the Sinkhorn balancing (which needs
    /// the global batch: [`MsnLoss::balance`]). No gradient.
    ///
    /// # Shapes
    /// - `targets`: `[N, D]`, `prototypes`: `[K, D]` → `[N, K]`
    pub fn sharpened<B: Backend>(
        &self,
        targets: Tensor<B, 2>,
        prototypes: Tensor<B, 2>,
    ) -> Tensor<B, 2> {
        let c = &self.config;
        softmax(
            Self::logits(
                stop_gradient(targets),
                stop_gradient(prototypes),
                c.temperature * c.target_sharpen_temperature,
            ),
            1,
        )
    }

    /// The sharpened assignments of the batch's targets, balanced by Sinkhorn–Knopp (unchanged
    /// with 0 iterations).
    ///
    /// # Shapes
    /// - `sharpened`: `[N, K]` → `[N, K]`
    pub fn balance<B: Backend>(&self, sharpened: Tensor<B, 2>) -> Tensor<B, 2> {
        match self.config.sinkhorn_iterations {
            0 => sharpened,
            n => sinkhorn_balance(sharpened, n),
        }
    }

    /// The cross-entropy of the anchors' log-assignments (`V` views of the `N` images,
    /// view-major) against their images' targets, averaged over the anchors.
    ///
    /// # Shapes
    /// - `log_anchors`: `[V·N, K]`, `targets`: `[N, K]` → `[1]`
    ///
    /// # Panics
    /// If the anchors are not a whole number of views of the targets' images.
    pub fn cross_entropy<B: Backend>(
        &self,
        log_anchors: Tensor<B, 2>,
        targets: Tensor<B, 2>,
    ) -> Tensor<B, 1> {
        let [m, k] = log_anchors.dims();
        let [n, kt] = targets.dims();
        assert!(
            k == kt && n > 0 && m % n == 0,
            "MsnLoss: anchors {:?} are not views of targets {:?}",
            log_anchors.dims(),
            targets.dims()
        );
        let targets = stop_gradient(targets).repeat_dim(0, m / n);
        (targets * log_anchors)
            .sum()
            .neg()
            .mul_scalar(1.0 / m as f64)
            .reshape([1])
    }

    /// The regulariser `R` of the anchors' mean assignment `p̄` (`[1, K]`): MSN's
    /// `Σ p̄ log p̄ + log K`, or PMSN's `KL(q ‖ p̄)` with the power-law prior.
    ///
    /// # Shapes
    /// - `mean`: `[1, K]` → `[1]`
    pub fn regularization<B: Backend>(&self, mean: Tensor<B, 2>) -> Tensor<B, 1> {
        let [_, k] = mean.dims();
        match self.config.power_law_exponent {
            None => (mean.clone() * mean.log())
                .sum()
                .add_scalar((k as f64).ln())
                .reshape([1]),
            Some(s) => {
                let prior = power_law(k, s);
                let log_prior: Vec<f64> = prior.iter().map(|q| q.ln()).collect();
                let device = mean.device();
                let q = Tensor::<B, 2>::from_data(TensorData::new(prior, [1, k]), &device);
                let log_q = Tensor::<B, 2>::from_data(TensorData::new(log_prior, [1, k]), &device);
                (q * (log_q - mean.log())).sum().reshape([1])
            }
        }
    }

    /// The loss on one device: anchors `[V·N, D]` (view-major), targets `[N, D]`, prototypes
    /// `[K, D]`.
    ///
    /// # Shapes
    /// - `anchors`: `[V·N, D]`, `targets`: `[N, D]`, `prototypes`: `[K, D]` → `[1]` each
    pub fn forward<B: Backend>(
        &self,
        anchors: Tensor<B, 2>,
        targets: Tensor<B, 2>,
        prototypes: Tensor<B, 2>,
    ) -> MsnTerms<B> {
        let targets = self.balance(self.sharpened(targets, prototypes.clone()));
        let log_anchors = self.log_assignments(anchors, prototypes);
        let cross_entropy = self.cross_entropy(log_anchors.clone(), targets);
        let regularization = self.regularization(log_anchors.exp().mean_dim(0));
        self.combine(cross_entropy, regularization)
    }

    /// `CE + λ·R` with both terms.
    pub fn combine<B: Backend>(
        &self,
        cross_entropy: Tensor<B, 1>,
        regularization: Tensor<B, 1>,
    ) -> MsnTerms<B> {
        let loss = if self.config.regularization_weight > 0.0 {
            cross_entropy.clone()
                + regularization
                    .clone()
                    .mul_scalar(self.config.regularization_weight)
        } else {
            cross_entropy.clone()
        };
        MsnTerms {
            loss,
            cross_entropy,
            regularization,
        }
    }
}

/// PMSN's power-law prior over `k` prototypes: `q_j ∝ j^(−s)`, `j = 1..k`, summing to 1.
pub(crate) fn power_law(k: usize, s: f64) -> Vec<f64> {
    let raw: Vec<f64> = (1..=k).map(|j| (j as f64).powf(-s)).collect();
    let total: f64 = raw.iter().sum();
    raw.into_iter().map(|q| q / total).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, NdArray};

    type Ad = Autodiff<NdArray<f64>>;

    fn matrix(rows: usize, cols: usize, f: impl Fn(usize) -> f64) -> Tensor<Ad, 2> {
        let values: Vec<f64> = (0..rows * cols).map(f).collect();
        Tensor::from_data(TensorData::new(values, [rows, cols]), &Default::default())
    }

    fn host(x: Tensor<Ad, 2>) -> Vec<f64> {
        x.into_data().to_vec().unwrap()
    }

    /// Sharpening at `T` equals `p^(1/T)` renormalised, computed the papers' way here.
    #[test]
    fn sharpening_is_the_power_of_the_assignments_renormalised() {
        let loss = MsnLossConfig::new().init().unwrap();
        let t = matrix(3, 4, |e| (0.7 * e as f64).sin());
        let p = matrix(5, 4, |e| (0.3 * e as f64 + 1.0).cos());
        let ours = host(loss.sharpened(t.clone(), p.clone()));
        let probs = host(loss.log_assignments(t, p).exp());
        for row in 0..3 {
            let powered: Vec<f64> = probs[row * 5..row * 5 + 5]
                .iter()
                .map(|q| q.powf(4.0))
                .collect();
            let sum: f64 = powered.iter().sum();
            for j in 0..5 {
                assert!((ours[row * 5 + j] - powered[j] / sum).abs() < 1e-14);
            }
        }
    }

    /// MSN's regulariser is 0 at the uniform mean and `log K` at a one-hot one (in the limit);
    /// PMSN's is 0 at its prior and its prior sums to 1, decreasing.
    #[test]
    fn the_regularisers_vanish_at_their_priors() {
        let msn = MsnLossConfig::new().init().unwrap();
        let uniform = matrix(1, 4, |_| 0.25);
        let r: f64 = msn.regularization(uniform).into_scalar();
        assert!(r.abs() < 1e-15);
        let peaked = matrix(1, 4, |j| if j == 0 { 1.0 - 3e-12 } else { 1e-12 });
        let r: f64 = msn.regularization(peaked).into_scalar();
        assert!((r - 4f64.ln()).abs() < 1e-9, "{r}");
        let pmsn = MsnLossConfig::new()
            .with_power_law_exponent(Some(0.25))
            .init()
            .unwrap();
        let q = power_law(6, 0.25);
        assert!((q.iter().sum::<f64>() - 1.0).abs() < 1e-15);
        assert!(q.windows(2).all(|w| w[0] > w[1]));
        let r: f64 = pmsn.regularization(matrix(1, 6, |j| q[j])).into_scalar();
        assert!(r.abs() < 1e-15);
    }

    /// The prototypes' gradient equals a central finite difference of the loss (the targets'
    /// assignments use the prototypes too, without gradient, so they are held fixed here).
    #[test]
    fn the_prototypes_gradient_matches_finite_differences() {
        let loss = MsnLossConfig::new()
            .with_power_law_exponent(Some(0.25))
            .init()
            .unwrap();
        let anchors = matrix(6, 3, |e| (0.9 * e as f64 + 0.2).sin());
        let targets = matrix(3, 3, |e| (0.4 * e as f64 - 0.5).cos());
        let p0 = host(matrix(4, 3, |e| (1.3 * e as f64).sin() + 0.1));
        let fixed_targets = loss.balance(loss.sharpened(
            targets,
            Tensor::from_data(TensorData::new(p0.clone(), [4, 3]), &Default::default()),
        ));
        let value = |p: &[f64]| -> Tensor<Ad, 1> {
            let p = Tensor::<Ad, 2>::from_data(
                TensorData::new(p.to_vec(), [4, 3]),
                &Default::default(),
            );
            let log_a = loss.log_assignments(anchors.clone(), p);
            let ce = loss.cross_entropy(log_a.clone(), fixed_targets.clone());
            loss.combine(ce, loss.regularization(log_a.exp().mean_dim(0)))
                .loss
        };
        let p =
            Tensor::<Ad, 2>::from_data(TensorData::new(p0.clone(), [4, 3]), &Default::default())
                .require_grad();
        let log_a = loss.log_assignments(anchors.clone(), p.clone());
        let ce = loss.cross_entropy(log_a.clone(), fixed_targets.clone());
        let l = loss
            .combine(ce, loss.regularization(log_a.exp().mean_dim(0)))
            .loss;
        let analytic: Vec<f64> = p.grad(&l.backward()).unwrap().into_data().to_vec().unwrap();
        let h = 1e-6;
        for i in 0..12 {
            let mut up = p0.clone();
            up[i] += h;
            let mut down = p0.clone();
            down[i] -= h;
            let numeric: f64 = (value(&up).into_scalar() - value(&down).into_scalar()) / (2.0 * h);
            assert!(
                (numeric - analytic[i]).abs() < 1e-7 * numeric.abs().max(1.0),
                "prototype entry {i}: {numeric} vs {}",
                analytic[i]
            );
        }
    }

    #[test]
    fn impossible_settings_are_named() {
        let e = MsnLossConfig::new()
            .with_temperature(0.0)
            .init()
            .unwrap_err();
        assert_eq!(e.field, "temperature");
        let e = MsnLossConfig::new()
            .with_power_law_exponent(Some(-1.0))
            .init()
            .unwrap_err();
        assert_eq!(e.field, "power_law_exponent");
    }
}
