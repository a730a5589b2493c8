//! Hard negative sampling for contrastive learning, HCL (documented on `HclLoss`).

use burn::prelude::*;

use super::shape_checks::assert_min_batch;
use super::similarity::TwoViewSimilarities;
use crate::base::error::{non_negative, positive, ConfigError};
use crate::base::schedule::SchedulerConfig;
use crate::base::Progress;

/// Configuration of [`HclLoss`].
#[derive(Config, Debug)]
pub struct HclLossConfig {
    /// Temperature `τ`.
    #[config(default = 0.5)]
    pub temperature: f64,
    /// Class prior `τ⁺` of the debiasing term, in `[0, 1)`.
    #[config(default = 0.1)]
    pub tau_plus: f64,
    /// Concentration `β >= 0` of the hard-negative importance weights.
    #[config(default = 1.0)]
    pub beta: f64,
    /// MICO's hardness curriculum (§3.3): `β` from this schedule instead of `beta` (values in
    /// `[0, 1000]`).
    #[config(default = "None")]
    pub beta_schedule: Option<SchedulerConfig>,
    /// MICO's hard-positive weighting (§3.3 eq. 3): the constant `k` of `e^{(k − β)s⁺/τ}`
    /// (finite, `>= 0`); `None` (the default) weighs every positive pair alike.
    #[config(default = "None")]
    pub hard_positive_k: Option<f64>,
}

impl HclLossConfig {
    /// Validates the hyperparameters and builds the loss.
    pub fn init(&self) -> Result<HclLoss, ConfigError> {
        positive("temperature", self.temperature)?;
        non_negative("tau_plus", self.tau_plus)?;
        if self.tau_plus >= 1.0 {
            return Err(ConfigError::new(
                "tau_plus",
                format!("must lie in [0, 1), got {}", self.tau_plus),
            ));
        }
        non_negative("beta", self.beta)?;
        if let Some(s) = &self.beta_schedule {
            s.validate("beta_schedule", 0.0, 1000.0)?;
        }
        if let Some(k) = self.hard_positive_k {
            non_negative("hard_positive_k", k)?;
        }
        Ok(HclLoss {
            temperature: self.temperature,
            tau_plus: self.tau_plus,
            beta: self.beta,
            beta_schedule: self.beta_schedule.clone(),
            hard_positive_k: self.hard_positive_k,
        })
    }
}

/// HCL / DCL loss. Build it with [`HclLossConfig::init`].
///
/// Hard negative sampling for contrastive learning, HCL (Robinson et al. 2020,
/// <https://arxiv.org/abs/2010.04592>), with the debiased contrastive loss (DCL) and NT-Xent as
/// special cases; see `docs/methods.md#hcl`.
///
/// Follows joshr17/HCL `image/main.py`: per anchor, the `N = 2B − 2` negatives
/// `neg = exp(s/τ)`, `pos = exp(s⁺/τ)`, importance `imp = neg^β`,
/// `reweight = Σ(imp·neg) / mean(imp)`,
/// `Ng = max((−τ⁺·N·pos + reweight)/(1 − τ⁺), N·e^{−1/τ})`,
/// `loss = mean −log(pos / (pos + Ng))`.
/// `β = 0` gives the debiased loss, `β = 0, τ⁺ = 0` gives NT-Xent.
///
/// Every exponential is computed as `exp((s − 1)/τ)`, i.e. divided by `e^{1/τ}`: `Ng` and `pos`
/// are linear in that factor and the loss is a ratio, so the value is unchanged while nothing
/// overflows for small temperatures. The importance weights are shifted by each row's largest
/// negative similarity instead (they too only enter as a ratio), so that a large `β/τ` cannot
/// underflow all of them to 0. MICO's curriculum on `β` (<https://arxiv.org/abs/2301.06916>,
/// §3.3) passes the scheduled value
/// to [`HclLoss::forward_with_beta`].
///
/// **Hard positives** (MICO §3.3 eq. 3, `q(x⁺) ∝ e^{(k − β) f(x)ᵀf(x⁺)}`, the same `β` and
/// scheduler as the negatives, `k` a constant so that `k − β` falls as `β` grows). A SimCLR batch
/// has one positive per anchor, so a distribution over "the" positive would be a single point.
/// We read eq. 3 as a distribution over the batch's `2B` positive pairs instead, in the same
/// importance-weighting form HCL uses for negatives: each anchor's loss is weighted by
/// `w_i = e^{(k − β)s⁺_i/τ} / mean_j e^{(k − β)s⁺_j/τ}` (mean 1, so `k = β` gives plain HCL).
/// While `k − β > 0` the easy pairs (similar views) weigh more; once `β` passes `k`, the hard
/// ones (dissimilar views) do. The weights are sampling probabilities, so they carry no
/// gradient; they are shifted by the batch's largest `s⁺` like the negatives' weights. Off by
/// default ([`HclLossConfig::hard_positive_k`]); the paper gives no value of `k`.
#[derive(Debug, Clone)]
pub struct HclLoss {
    temperature: f64,
    tau_plus: f64,
    beta: f64,
    beta_schedule: Option<SchedulerConfig>,
    hard_positive_k: Option<f64>,
}

impl HclLoss {
    /// The `β` at `progress`: the schedule's value, or the fixed `beta`.
    pub fn beta_at(&self, progress: Progress) -> f64 {
        self.beta_schedule
            .as_ref()
            .map_or(self.beta, |s| s.value(progress))
    }

    /// Whether `β` follows a schedule.
    pub fn is_scheduled(&self) -> bool {
        self.beta_schedule.is_some()
    }

    /// Mean HCL loss over the `2B` anchors with the configured `β`.
    ///
    /// # Shapes
    /// - `z1`, `z2`: `[B, D]` with `B >= 2` (normalised here); output: `[1]`
    pub fn forward<B: Backend>(&self, z1: Tensor<B, 2>, z2: Tensor<B, 2>) -> Tensor<B, 1> {
        self.forward_with_beta(z1, z2, self.beta)
    }

    /// The exponent `k − β` of the hard-positive weights at a given `β`, when they are on.
    pub fn hard_positive_exponent(&self, beta: f64) -> Option<f64> {
        self.hard_positive_k.map(|k| k - beta)
    }

    /// Mean HCL loss with a given `β` (for a curriculum on the hardness), the anchors weighted by
    /// the hard-positive weights when [`HclLossConfig::hard_positive_k`] is set.
    ///
    /// # Shapes
    /// - `z1`, `z2`: `[B, D]` with `B >= 2` (normalised here); output: `[1]`
    ///
    /// # Panics
    /// If `beta` is negative or not finite, or on the shape errors of [`HclLoss::forward`].
    pub fn forward_with_beta<B: Backend>(
        &self,
        z1: Tensor<B, 2>,
        z2: Tensor<B, 2>,
        beta: f64,
    ) -> Tensor<B, 1> {
        assert_min_batch("HCL", "z1", z1.dims(), 2);
        self.weighted(TwoViewSimilarities::new("HCL", z1, z2), beta)
    }

    /// HCL at a given `β` whose negatives come from other batches (e.g. hardened by PGD): each
    /// anchor of `[z1; z2]` keeps its clean positive, and its negatives (weighted and debiased
    /// as usual) are the other images' rows of `[n1; n2]`. Equal to
    /// [`HclLoss::forward_with_beta`] when `n1 = z1` and `n2 = z2`.
    ///
    /// # Shapes
    /// - `z1`, `z2`, `n1`, `n2`: `[B, D]` with `B >= 2`; output: `[1]`
    ///
    /// # Panics
    /// As [`HclLoss::forward_with_beta`], or if the negatives' shapes differ from `z1`'s.
    pub fn forward_with_negatives<B: Backend>(
        &self,
        z1: Tensor<B, 2>,
        z2: Tensor<B, 2>,
        n1: Tensor<B, 2>,
        n2: Tensor<B, 2>,
        beta: f64,
    ) -> Tensor<B, 1> {
        assert_min_batch("HCL", "z1", z1.dims(), 2);
        self.weighted(
            TwoViewSimilarities::with_negatives("HCL", z1, z2, n1, n2),
            beta,
        )
    }

    /// The mean of the anchors' losses, weighted by the hard-positive weights when they are on.
    fn weighted<B: Backend>(&self, views: TwoViewSimilarities<B>, beta: f64) -> Tensor<B, 1> {
        let (per_anchor, positive) = self.per_anchor(views, beta);
        match self.hard_positive_exponent(beta) {
            None => per_anchor.mean(),
            Some(exponent) => {
                let positive = positive.detach();
                let max = positive.clone().max();
                let importance =
                    ((positive - max.unsqueeze()) * (exponent / self.temperature)).exp();
                let weights = importance.clone() / importance.mean().unsqueeze();
                (per_anchor * weights).mean()
            }
        }
    }

    /// Each anchor's HCL loss and its positive similarity `s⁺`, both `[2B, 1]`.
    fn per_anchor<B: Backend>(
        &self,
        views: TwoViewSimilarities<B>,
        beta: f64,
    ) -> (Tensor<B, 2>, Tensor<B, 2>) {
        assert!(
            beta.is_finite() && beta >= 0.0,
            "HCL: beta must be finite and >= 0, got {beta}"
        );
        let [n, _] = views.sim.dims();
        let batch = n / 2;
        let negatives_per_anchor = (n - 2) as f64;
        let tau = self.temperature;
        let device = views.sim.device();
        let positive = views.sim.clone().gather(1, views.positive_index.clone());
        let negative_mask = negatives_mask::<B>(batch, &device);
        let not_negative = negative_mask.clone().equal_elem(0.0);
        let shifted = views.sim.clone().sub_scalar(1.0);
        let neg = (shifted / tau).exp() * negative_mask.clone();
        // The importance weights only enter as a ratio (Σ imp·neg / mean imp): shift each row by
        // its largest negative similarity so that the largest weight is exactly 1. Unshifted,
        // exp(β(s − 1)/τ) underflows to 0 for every negative at large β/τ in f32 (0/0).
        let row_max = views
            .sim
            .clone()
            .mask_fill(not_negative.clone(), -2.0)
            .max_dim(1)
            .detach();
        let exponent = (views.sim - row_max) * (beta / tau);
        let importance = exponent.mask_fill(not_negative, -1.0e4).exp() * negative_mask;
        let reweight =
            (importance.clone() * neg).sum_dim(1) / (importance.sum_dim(1) / negatives_per_anchor);
        let log_pos = positive.clone().sub_scalar(1.0) / tau;
        let pos = log_pos.clone().exp();
        let ng = ((pos.clone() * (-self.tau_plus * negatives_per_anchor) + reweight)
            / (1.0 - self.tau_plus))
            .clamp_min(negatives_per_anchor * (-2.0 / tau).exp());
        ((pos + ng).log() - log_pos, positive)
    }
}

/// `[2B, 2B]` float mask: 1 for the `2B − 2` negatives of each anchor, 0 on the diagonal and at
/// the positive.
fn negatives_mask<B: Backend>(batch: usize, device: &B::Device) -> Tensor<B, 2> {
    let n = 2 * batch;
    let mut mask = vec![1.0f64; n * n];
    for i in 0..n {
        mask[i * n + i] = 0.0;
        mask[i * n + (i + batch) % n] = 0.0;
    }
    Tensor::from_data(TensorData::new(mask, [n, n]), device)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loss::NtXentLossConfig;
    use burn::backend::NdArray;

    type B = NdArray<f64>;

    fn unit(v: &[f64; 3]) -> [f64; 3] {
        let n = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
        [v[0] / n, v[1] / n, v[2] / n]
    }

    fn dot(a: [f64; 3], b: [f64; 3]) -> f64 {
        a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
    }

    /// For each anchor of `[z1; z2]` (plain f64, independent of the tensor code): its clean
    /// positive similarity and its similarities to the `2B − 2` other images' candidates.
    fn similarities(z: &[[f64; 3]], candidates: &[[f64; 3]]) -> Vec<(f64, Vec<f64>)> {
        let n = z.len();
        let b = n / 2;
        (0..n)
            .map(|i| {
                let p = (i + b) % n;
                let negs = (0..n)
                    .filter(|&j| j != i && j != p)
                    .map(|j| dot(unit(&z[i]), unit(&candidates[j])))
                    .collect();
                (dot(unit(&z[i]), unit(&z[p])), negs)
            })
            .collect()
    }

    fn nt_xent_reference(z: &[[f64; 3]], c: &[[f64; 3]], tau: f64) -> f64 {
        let rows = similarities(z, c);
        rows.iter()
            .map(|(s_pos, negs)| {
                let pos = (s_pos / tau).exp();
                let all = pos + negs.iter().map(|s| (s / tau).exp()).sum::<f64>();
                -(pos / all).ln()
            })
            .sum::<f64>()
            / rows.len() as f64
    }

    fn hcl_reference(z: &[[f64; 3]], c: &[[f64; 3]], tau: f64, tau_plus: f64, beta: f64) -> f64 {
        let rows = similarities(z, c);
        rows.iter()
            .map(|(s_pos, negs)| {
                let count = negs.len() as f64;
                let pos = (s_pos / tau).exp();
                let imp: Vec<f64> = negs.iter().map(|s| (beta * s / tau).exp()).collect();
                let reweight = imp
                    .iter()
                    .zip(negs)
                    .map(|(w, s)| w * (s / tau).exp())
                    .sum::<f64>()
                    / (imp.iter().sum::<f64>() / count);
                let ng = ((-tau_plus * count * pos + reweight) / (1.0 - tau_plus))
                    .max(count * (-1.0 / tau).exp());
                -(pos / (pos + ng)).ln()
            })
            .sum::<f64>()
            / rows.len() as f64
    }

    fn tensor(rows: &[[f64; 3]]) -> Tensor<B, 2> {
        let flat: Vec<f64> = rows.iter().flatten().copied().collect();
        Tensor::from_data(TensorData::new(flat, [rows.len(), 3]), &Default::default())
    }

    /// Negatives from other batches (PGD's hardened views): each anchor keeps its clean positive
    /// and is contrasted with the other images' candidates, as a plain-f64 evaluation of the
    /// formulas gives; with the clean views as candidates, the ordinary losses exactly.
    #[test]
    fn negatives_from_other_batches_follow_the_reference() {
        let z1 = [[1.0, 0.2, -0.3], [0.1, 0.9, 0.4], [-0.5, 0.3, 0.8]];
        let z2 = [[0.8, 0.4, -0.1], [0.3, 1.1, 0.2], [-0.2, -0.1, 0.9]];
        let n1 = [[0.9, 0.5, 0.1], [-0.4, 0.7, 0.6], [0.2, 0.2, 1.0]];
        let n2 = [[0.6, -0.3, 0.4], [0.5, 0.8, -0.2], [-0.7, 0.1, 0.5]];
        let z: Vec<[f64; 3]> = z1.iter().chain(&z2).copied().collect();
        let n: Vec<[f64; 3]> = n1.iter().chain(&n2).copied().collect();
        let tau = 0.5;
        let nt = NtXentLossConfig::new()
            .with_temperature(tau)
            .init()
            .unwrap();
        let got = nt
            .forward_with_negatives(tensor(&z1), tensor(&z2), tensor(&n1), tensor(&n2))
            .into_scalar();
        let want = nt_xent_reference(&z, &n, tau);
        assert!((got - want).abs() < 1e-14, "{got} vs {want}");
        let same = nt
            .forward_with_negatives(tensor(&z1), tensor(&z2), tensor(&z1), tensor(&z2))
            .into_scalar();
        let plain = nt.forward(tensor(&z1), tensor(&z2)).into_scalar();
        assert!((same - plain).abs() < 1e-15, "{same} vs {plain}");
        assert!((plain - nt_xent_reference(&z, &z, tau)).abs() < 1e-14);
        for beta in [0.0, 1.0, 4.0] {
            let hcl = HclLossConfig::new()
                .with_temperature(tau)
                .with_tau_plus(0.1)
                .init()
                .unwrap();
            let got = hcl
                .forward_with_negatives(tensor(&z1), tensor(&z2), tensor(&n1), tensor(&n2), beta)
                .into_scalar();
            let want = hcl_reference(&z, &n, tau, 0.1, beta);
            assert!((got - want).abs() < 1e-13, "beta {beta}: {got} vs {want}");
            let same = hcl
                .forward_with_negatives(tensor(&z1), tensor(&z2), tensor(&z1), tensor(&z2), beta)
                .into_scalar();
            let plain = hcl
                .forward_with_beta(tensor(&z1), tensor(&z2), beta)
                .into_scalar();
            assert!(
                (same - plain).abs() < 1e-15,
                "beta {beta}: {same} vs {plain}"
            );
        }
    }
}
