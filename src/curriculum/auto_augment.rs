use burn::config::Config;
use burn::tensor::{backend::Backend, Tensor};
use rand::rngs::StdRng;
use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::augment::blur::{gaussian_blur, gaussian_kernel1d, RandomGaussianBlur};
use crate::augment::colour::{adjust_brightness, adjust_contrast};
use crate::augment::solarize::solarize;
use crate::augment::{bernoulli, per_sample, per_sample_mask, select_where};
use crate::base::error::{in_range, ConfigError};
use crate::base::schedule::{Pace, SchedulerConfig};
use crate::base::Progress;

/// One operation of a sub-policy; its strength comes from the sub-policy's magnitude `m`.
#[derive(Config, Debug, Copy, PartialEq, Eq)]
pub enum AugmentOp {
    /// `clamp(f·x, 0, 1)` with `f = 1 ± 0.9·m`.
    Brightness,
    /// Blend with the mean luma, factor `1 ± 0.9·m`.
    Contrast,
    /// Invert the pixels `>= 1 − m`.
    Solarize,
    /// Keep `8 − 4m` bits per value (`⌊x·2ᵇ⌋ / 2ᵇ`, `b` possibly fractional).
    Posterize,
    /// Gaussian blur with `σ = 2m` (kernel sized to the image).
    Blur,
}

/// An operation applied with probability `p` per image.
#[derive(Config, Debug, Copy, PartialEq)]
pub struct PolicyOp {
    /// The operation.
    pub op: AugmentOp,
    /// Probability per image, in `[0, 1]`.
    pub p: f64,
}

/// A sub-policy: two operations applied in order.
#[derive(Config, Debug, Copy, PartialEq)]
pub struct SubPolicy {
    /// First operation.
    pub first: PolicyOp,
    /// Second operation.
    pub second: PolicyOp,
}

/// The policy set.
#[derive(Config, Debug, PartialEq)]
pub struct AutoAugmentPolicy {
    /// The sub-policies (MICO: 5).
    pub sub_policies: Vec<SubPolicy>,
}

impl AutoAugmentPolicy {
    /// Our 5 × 2 default set (AutoAugment-style probabilities; MICO publishes no list).
    pub fn mico_default() -> Self {
        let op = |op, p| PolicyOp { op, p };
        let sub = |a, b| SubPolicy {
            first: a,
            second: b,
        };
        use AugmentOp::*;
        Self {
            sub_policies: vec![
                sub(op(Brightness, 0.8), op(Contrast, 0.8)),
                sub(op(Solarize, 0.5), op(Brightness, 0.6)),
                sub(op(Posterize, 0.6), op(Contrast, 0.6)),
                sub(op(Blur, 0.5), op(Solarize, 0.3)),
                sub(op(Contrast, 0.7), op(Posterize, 0.4)),
            ],
        }
    }
}

/// Configuration of [`SelfPacedAutoAugment`] (saved in the run's configuration).
#[derive(Config, Debug, PartialEq)]
pub struct SelfPacedAutoAugmentConfig {
    /// The policy set.
    #[config(default = "AutoAugmentPolicy::mico_default()")]
    pub policy: AutoAugmentPolicy,
    /// The ceiling `S(progress)` of every magnitude, non-decreasing, values in `[0, 1]`
    /// (default: linear 0.2 → 1 over the steps).
    #[config(default = "SchedulerConfig::Linear { start: 0.2, end: 1.0, pace: Pace::Step }")]
    pub ceiling: SchedulerConfig,
    /// Magnitude of every sub-policy at the start, in `[0, 1]`.
    #[config(default = 0.1)]
    pub initial_magnitude: f64,
    /// Controller gain `η` of `m̂ = m + η(v − ½)`.
    #[config(default = 0.1)]
    pub controller_gain: f64,
    /// Self-paced bound `δ` on the change of a magnitude between two batches, in `(0, 1]`.
    #[config(default = 0.02)]
    pub max_change: f64,
    /// Momentum of the running losses, in `[0, 1)`.
    #[config(default = 0.9)]
    pub loss_momentum: f64,
    /// `ε` of the draw `∝ v + ε`, so that no sub-policy is abandoned, `> 0`.
    #[config(default = 0.1)]
    pub exploration: f64,
}

impl SelfPacedAutoAugmentConfig {
    /// Validates the settings and builds the curriculum at its initial state.
    ///
    /// # Errors
    /// Naming the field at fault: an empty policy, a probability or magnitude outside `[0, 1]`,
    /// a decreasing ceiling (it would force a magnitude down faster than `δ`).
    pub fn init(&self) -> Result<SelfPacedAutoAugment, ConfigError> {
        if self.policy.sub_policies.is_empty() {
            return Err(ConfigError::new("policy", "needs at least one sub-policy"));
        }
        for s in &self.policy.sub_policies {
            in_range("policy.p", s.first.p, 0.0, 1.0, false)?;
            in_range("policy.p", s.second.p, 0.0, 1.0, false)?;
        }
        self.ceiling.validate("ceiling", 0.0, 1.0)?;
        let decreasing = match &self.ceiling {
            SchedulerConfig::Constant { .. } => false,
            SchedulerConfig::Steps { values, .. } => values.windows(2).any(|w| w[1] < w[0]),
            SchedulerConfig::Linear { start, end, .. }
            | SchedulerConfig::Cosine { start, end, .. } => end < start,
        };
        if decreasing {
            return Err(ConfigError::new(
                "ceiling",
                "must not decrease (a falling ceiling would move a magnitude faster than \
                 max_change)",
            ));
        }
        in_range("initial_magnitude", self.initial_magnitude, 0.0, 1.0, false)?;
        in_range("controller_gain", self.controller_gain, 0.0, 10.0, false)?;
        in_range("max_change", self.max_change, 0.0, 1.0, true)?;
        in_range("loss_momentum", self.loss_momentum, 0.0, 0.999_999, false)?;
        in_range("exploration", self.exploration, 0.0, 1e3, true)?;
        let n = self.policy.sub_policies.len();
        Ok(SelfPacedAutoAugment {
            config: self.clone(),
            state: AutoAugmentState {
                magnitudes: vec![self.initial_magnitude; n],
                losses: vec![None; n],
                mean_loss: None,
            },
        })
    }
}

/// What the curriculum learned so far (saved in checkpoints).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AutoAugmentState {
    /// Magnitude of each sub-policy.
    pub magnitudes: Vec<f64>,
    /// Running loss of the batches each sub-policy augmented (`None` before the first).
    pub losses: Vec<Option<f64>>,
    /// Running loss of all batches.
    pub mean_loss: Option<f64>,
}

/// The sub-policy chosen for one batch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PolicyChoice {
    /// Index of the sub-policy.
    pub index: usize,
    /// Its magnitude for this batch.
    pub magnitude: f64,
}

/// MICO's self-paced AutoAugment: draws a sub-policy per batch, applies it, and learns the
/// magnitudes from the losses ([`SelfPacedAutoAugment::observe`]).
///
/// MICO's normalised AutoAugment with a self-paced magnitude (H. Fang, "Curriculum SSL: An
/// Efficient And Effective Data Augmentation For Contrastive Learning", §3.4, eq. 5, Figure 3;
/// <https://arxiv.org/abs/2301.06916>).
///
/// The paper follows AutoAugment (Cubuk et al. 2019, <https://arxiv.org/abs/1805.09501>): a set
/// of 5 sub-policies of 2 operations each, whose magnitudes a controller learns during training;
/// an auxiliary "training scheduler" module restricts and guides each update of the magnitudes
/// so that they cannot jump between batches, implemented with self-paced learning (eq. 5,
/// `min_{w, v ∈ [0,1]ⁿ} Σ L(yᵢ, g(xᵢ, w)) + f(v; λ)`, `v` the policies' importance, `λ` the pace).
/// It gives neither the operations, nor the controller, nor `f`. What we chose, and why:
///
/// - **Operations** (all batched on the backend, per-sample random): brightness and contrast
///   (factor `1 ± 0.9·m`, the sign drawn per image, AutoAugment's range), solarisation
///   (threshold `1 − m`), posterisation (`8 − 4m` bits, AutoAugment's 4–8) and Gaussian blur
///   (`σ = 2m`). They work on one-channel images (Fashion-MNIST) as on RGB; geometric operations
///   are left to the crops of the base pipeline.
/// - **Sub-policies**: 5 × 2 operations with AutoAugment-style probabilities
///   ([`AutoAugmentPolicy::mico_default`]). One sub-policy is drawn per batch (keyed by the step,
///   so the choice repeats after a resume) and applied to both views, each view drawing its own
///   per-image coins; every sub-policy has one magnitude `m ∈ [0, 1]`.
/// - **Importance `v` (eq. 5)**: with the linear self-paced regulariser
///   `f(v; λ) = λ Σᵢ (½vᵢ² − vᵢ)`, the minimiser for fixed losses is `vᵢ = max(0, 1 − Lᵢ/λ)`
///   (Jiang et al. 2015). `Lᵢ` is a running mean (momentum `loss_momentum`) of the training loss
///   of the batches sub-policy `i` augmented; the pace is `λ = 2·L̄`, twice the running mean of
///   all batches, so a sub-policy as hard as the average gets `v = ½`, an easier one more.
/// - **Controller**: after each step the applied sub-policy's magnitude is pushed towards harder
///   augmentation when it is easy and back when it is hard, `m̂ = m + η(vᵢ − ½)`, and sub-policies
///   are drawn with probability `∝ vᵢ + ε`. It learns from the training loss alone — there is no
///   validation set in self-supervised pre-training, and no reinforcement-learning search (whose
///   cost the paper's curriculum is meant to avoid).
/// - **Self-paced normalisation** (the smoothing): the applied change is bounded,
///   `m ← clamp(m + clamp(m̂ − m, −δ, δ), 0, S(progress))`, where `S` is a non-decreasing
///   scheduler ([`SchedulerConfig`], the "training scheduler" of Figure 3). So a magnitude moves
///   by at most `δ` per batch whatever the losses do, and never above the schedule's ceiling.
///
/// The state (magnitudes, running losses) is a pure function of the losses seen; it is saved in
/// every checkpoint, so a run resumes exactly.
///
/// The math, the defaults, the paper followed and the worked values are in
/// `docs/methods.md#self-paced-autoaugment`.
#[derive(Debug, Clone)]
pub struct SelfPacedAutoAugment {
    config: SelfPacedAutoAugmentConfig,
    state: AutoAugmentState,
}

impl SelfPacedAutoAugment {
    /// The settings.
    pub fn config(&self) -> &SelfPacedAutoAugmentConfig {
        &self.config
    }

    /// The learned state.
    pub fn state(&self) -> &AutoAugmentState {
        &self.state
    }

    /// Restores a saved state.
    ///
    /// # Errors
    /// If it has another number of sub-policies or values outside their ranges.
    pub fn load_state(&mut self, state: AutoAugmentState) -> Result<(), ConfigError> {
        let n = self.config.policy.sub_policies.len();
        if state.magnitudes.len() != n || state.losses.len() != n {
            return Err(ConfigError::new(
                "auto_augment",
                format!(
                    "the saved state has {} sub-policies, the configuration {n}",
                    state.magnitudes.len()
                ),
            ));
        }
        for &m in &state.magnitudes {
            in_range("auto_augment.magnitudes", m, 0.0, 1.0, false)?;
        }
        self.state = state;
        Ok(())
    }

    /// The importance `v = max(0, 1 − L/λ)` with `λ = 2·L̄` of each sub-policy (½ before its
    /// first batch).
    pub fn importance(&self) -> Vec<f64> {
        self.state
            .losses
            .iter()
            .map(|l| match (l, self.state.mean_loss) {
                (Some(l), Some(mean)) if mean > 0.0 => (1.0 - l / (2.0 * mean)).max(0.0),
                _ => 0.5,
            })
            .collect()
    }

    /// The sub-policy of a batch, drawn `∝ v + ε` from `rng`, with its magnitude under the
    /// ceiling at `progress`.
    pub fn choose(&self, progress: Progress, rng: &mut StdRng) -> PolicyChoice {
        let weights: Vec<f64> = self
            .importance()
            .iter()
            .map(|v| v + self.config.exploration)
            .collect();
        let total: f64 = weights.iter().sum();
        let mut u = rng.random::<f64>() * total;
        let mut index = weights.len() - 1;
        for (i, w) in weights.iter().enumerate() {
            if u < *w {
                index = i;
                break;
            }
            u -= w;
        }
        let ceiling = self.config.ceiling.value(progress);
        PolicyChoice {
            index,
            magnitude: self.state.magnitudes[index].min(ceiling),
        }
    }

    /// Applies a chosen sub-policy to a batch (floats in `[0, 1]`), drawing each image's coins
    /// from `rng`.
    ///
    /// # Shapes
    /// - `x`: `[N, C, H, W]`; output: the same
    pub fn apply<B: Backend>(
        &self,
        x: Tensor<B, 4>,
        choice: PolicyChoice,
        rng: &mut StdRng,
    ) -> Tensor<B, 4> {
        let n = x.dims()[0];
        self.apply_rows(x, choice, rng, (n, 0))
    }

    /// As [`SelfPacedAutoAugment::apply`] for rows `first .. first + N` of a batch of `all`
    /// images (a data-parallel replica's shard): the coins are drawn for the `all` images, as on
    /// one device, and the shard keeps its own.
    ///
    /// # Shapes
    /// - `x`: `[N, C, H, W]`; output: the same
    pub fn apply_rows<B: Backend>(
        &self,
        x: Tensor<B, 4>,
        choice: PolicyChoice,
        rng: &mut StdRng,
        (all, first): (usize, usize),
    ) -> Tensor<B, 4> {
        let sub = self.config.policy.sub_policies[choice.index];
        let x = apply_op(x, sub.first, choice.magnitude, rng, (all, first));
        apply_op(x, sub.second, choice.magnitude, rng, (all, first))
    }

    /// Learns from the loss of a batch augmented by `choice`: updates the running losses, then
    /// moves the sub-policy's magnitude by at most `max_change` towards the controller's
    /// proposal, under the ceiling at `progress`. Non-finite losses are ignored.
    pub fn observe(&mut self, progress: Progress, choice: PolicyChoice, loss: f64) {
        if !loss.is_finite() || choice.index >= self.state.magnitudes.len() {
            return;
        }
        let rho = self.config.loss_momentum;
        let running = |old: Option<f64>| Some(old.map_or(loss, |o| rho * o + (1.0 - rho) * loss));
        self.state.mean_loss = running(self.state.mean_loss);
        self.state.losses[choice.index] = running(self.state.losses[choice.index]);
        let v = self.importance()[choice.index];
        let m = self.state.magnitudes[choice.index];
        let proposal = m + self.config.controller_gain * (v - 0.5);
        let delta = self.config.max_change;
        let ceiling = self.config.ceiling.value(progress);
        self.state.magnitudes[choice.index] =
            (m + (proposal - m).clamp(-delta, delta)).clamp(0.0, ceiling.max(0.0));
    }
}

/// One operation at magnitude `m`, applied to each image with probability `op.p`.
/// The coins are drawn for the `all` images of the batch whose rows `first ..` are `x`'s.
fn apply_op<B: Backend>(
    x: Tensor<B, 4>,
    op: PolicyOp,
    m: f64,
    rng: &mut StdRng,
    (all, first): (usize, usize),
) -> Tensor<B, 4> {
    let [n, _, h, w] = x.dims();
    let every_flag = bernoulli(rng, op.p, all);
    // No draw more when no image of the whole batch is hit: the one-device stream.
    if !every_flag.iter().any(|&f| f) {
        return x;
    }
    let device = x.device();
    let signed_factors = |rng: &mut StdRng| -> Vec<f32> {
        let every: Vec<f32> = (0..all)
            .map(|_| {
                let sign = if rng.random::<bool>() { 1.0 } else { -1.0 };
                (1.0 + sign * 0.9 * m) as f32
            })
            .collect();
        every[first..first + n].to_vec()
    };
    let flags = every_flag[first..first + n].to_vec();
    let out = match op.op {
        AugmentOp::Brightness => {
            let f = signed_factors(rng);
            adjust_brightness(x.clone(), per_sample::<B>(&f, &device))
        }
        AugmentOp::Contrast => {
            let f = signed_factors(rng);
            adjust_contrast(x.clone(), per_sample::<B>(&f, &device))
        }
        AugmentOp::Solarize => solarize(x.clone(), 1.0 - m),
        AugmentOp::Posterize => posterize(x.clone(), 8.0 - 4.0 * m),
        AugmentOp::Blur => {
            let sigma = 2.0 * m;
            if sigma < 1e-3 {
                x.clone()
            } else {
                let k = RandomGaussianBlur::kernel_for(h.min(w));
                let kernel = gaussian_kernel1d(k, sigma);
                gaussian_blur(x.clone(), &vec![kernel; n])
            }
        }
    };
    select_where(per_sample_mask::<B>(&flags, &device), out, x)
}

/// Keeps `bits` bits per value: `⌊x·2^bits⌋ / 2^bits`, clamped to `[0, 1]` (8 bits leave 8-bit
/// images as they are).
pub fn posterize<B: Backend>(x: Tensor<B, 4>, bits: f64) -> Tensor<B, 4> {
    let levels = 2f64.powf(bits);
    (x * levels).floor().div_scalar(levels).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;
    use burn::tensor::TensorData;
    use rand::SeedableRng;

    type B = NdArray<f64>;

    fn at(step: usize) -> Progress {
        Progress {
            step,
            total_steps: 1000,
            epoch: step / 100,
            total_epochs: 10,
        }
    }

    fn choice(index: usize) -> PolicyChoice {
        PolicyChoice {
            index,
            magnitude: 0.0,
        }
    }

    /// The smoothing property: whatever the losses (here alternating between 0.01 and 100, the
    /// worst inter-batch difference), no magnitude moves by more than `δ` between two batches
    /// nor rises above the ceiling; without the bound the same controller jumps.
    #[test]
    fn magnitudes_cannot_jump_between_batches() {
        let config = SelfPacedAutoAugmentConfig::new().with_controller_gain(5.0);
        let mut smooth = config.init().unwrap();
        let mut raw = config.clone().with_max_change(1.0).init().unwrap();
        let mut largest_raw_jump: f64 = 0.0;
        for step in 0..400 {
            let loss = if step % 2 == 0 { 0.01 } else { 100.0 };
            let i = step % 5;
            let before = smooth.state().magnitudes.clone();
            smooth.observe(at(step), choice(i), loss);
            for (j, (a, b)) in before.iter().zip(&smooth.state().magnitudes).enumerate() {
                assert!(
                    (a - b).abs() <= 0.02 + 1e-15,
                    "step {step} policy {j}: {a} -> {b}"
                );
                if j != i {
                    assert_eq!(a, b, "only the applied sub-policy moves");
                }
                let ceiling = 0.2 + 0.8 * step as f64 / 1000.0;
                assert!(*b <= ceiling + 1e-15, "step {step}: {b} above {ceiling}");
            }
            let raw_before = raw.state().magnitudes[i];
            raw.observe(at(step), choice(i), loss);
            largest_raw_jump = largest_raw_jump.max((raw.state().magnitudes[i] - raw_before).abs());
        }
        assert!(largest_raw_jump > 0.1, "unbounded: {largest_raw_jump}");
    }

    /// The controller raises the magnitude of a sub-policy whose batches are easy (low loss)
    /// and lowers that of one whose batches are hard, by the bounded step each time.
    #[test]
    fn easy_policies_get_stronger_and_hard_ones_weaker() {
        let mut aa = SelfPacedAutoAugmentConfig::new()
            .with_initial_magnitude(0.1)
            .with_ceiling(SchedulerConfig::Constant { value: 1.0 })
            .init()
            .unwrap();
        for step in 0..10 {
            aa.observe(at(step), choice(0), 1.0); // easy
            aa.observe(at(step), choice(1), 3.0); // hard
        }
        let m = &aa.state().magnitudes;
        assert!(m[0] > 0.1 && m[1] < 0.1, "{m:?}");
        // v = max(0, 1 − L/(2L̄)): after the first two batches L̄ = 0.9·1 + 0.1·3 = 1.2, the
        // first policy's L = 1 (v = 1 − 1/2.4) and the second's L = 3 (1 − 3/2.4 < 0, so 0).
        let mut fresh = aa.config().init().unwrap();
        fresh.observe(at(0), choice(0), 1.0);
        assert_eq!(fresh.importance()[0], 0.5, "alone, a policy is the average");
        fresh.observe(at(0), choice(1), 3.0);
        let v = fresh.importance();
        assert_eq!(v[1], 0.0, "{v:?}");
        assert!((v[0] - (1.0 - 1.0 / 2.4)).abs() < 1e-12, "{v:?}");
        assert_eq!(v[2], 0.5, "unseen");
    }

    /// Draws follow `v + ε`: a sub-policy with `v = 0` is drawn only through `ε`.
    #[test]
    fn draws_follow_the_importance() {
        let mut aa = SelfPacedAutoAugmentConfig::new()
            .with_policy(AutoAugmentPolicy {
                sub_policies: AutoAugmentPolicy::mico_default().sub_policies[..2].to_vec(),
            })
            .init()
            .unwrap();
        aa.load_state(AutoAugmentState {
            magnitudes: vec![0.5, 0.5],
            losses: vec![Some(0.0), Some(10.0)],
            mean_loss: Some(1.0),
        })
        .unwrap();
        assert_eq!(aa.importance(), vec![1.0, 0.0]);
        let mut rng = StdRng::seed_from_u64(3);
        let n = 20_000;
        let first = (0..n)
            .filter(|_| aa.choose(at(999), &mut rng).index == 0)
            .count() as f64
            / n as f64;
        // P(first) = (1 + 0.1) / (1 + 0.1 + 0 + 0.1) = 0.9167.
        assert!((first - 1.1 / 1.2).abs() < 0.01, "{first}");
        // The magnitude handed out is capped by the ceiling: 0.2 at the start.
        assert_eq!(aa.choose(at(0), &mut rng).magnitude, 0.2);
    }

    #[test]
    fn operations_move_known_pixels() {
        let d = Default::default();
        let x =
            Tensor::<B, 4>::from_data(TensorData::new(vec![0.1, 0.5, 0.8, 1.0], [1, 1, 2, 2]), &d);
        let host = |t: Tensor<B, 4>| t.into_data().to_vec::<f64>().unwrap();
        // Solarize at m = 0.3: threshold 0.7, so 0.8 -> 0.2 and 1.0 -> 0.
        assert_eq!(
            host(solarize(x.clone(), 1.0 - 0.3)),
            vec![0.1, 0.5, 1.0 - 0.8, 0.0]
        );
        // Posterize to 2 bits: floor(4x)/4.
        assert_eq!(host(posterize(x.clone(), 2.0)), vec![0.0, 0.5, 0.75, 1.0]);
        // With p = 1 every image is changed, with p = 0 none; m = 0 leaves brightness alone.
        let mut rng = StdRng::seed_from_u64(0);
        let op = |op, p| PolicyOp { op, p };
        let bright = host(apply_op(
            x.clone(),
            op(AugmentOp::Brightness, 1.0),
            0.5,
            &mut rng,
            (1, 0),
        ));
        let ratio = bright[0] / 0.1;
        assert!(
            (ratio - 1.45).abs() < 1e-6 || (ratio - 0.55).abs() < 1e-6,
            "{ratio}"
        );
        assert_eq!(
            host(apply_op(
                x.clone(),
                op(AugmentOp::Blur, 0.0),
                0.5,
                &mut rng,
                (1, 0)
            )),
            host(x.clone())
        );
        assert_eq!(
            host(apply_op(
                x.clone(),
                op(AugmentOp::Brightness, 1.0),
                0.0,
                &mut rng,
                (1, 0)
            )),
            host(x)
        );
    }

    #[test]
    fn bad_settings_are_refused_by_name() {
        let err = SelfPacedAutoAugmentConfig::new()
            .with_ceiling(SchedulerConfig::reverse_cosine())
            .init()
            .unwrap_err();
        assert_eq!(err.field, "ceiling");
        let err = SelfPacedAutoAugmentConfig::new()
            .with_max_change(0.0)
            .init()
            .unwrap_err();
        assert_eq!(err.field, "max_change");
        let mut aa = SelfPacedAutoAugmentConfig::new().init().unwrap();
        let err = aa
            .load_state(AutoAugmentState {
                magnitudes: vec![0.1],
                losses: vec![None],
                mean_loss: None,
            })
            .unwrap_err();
        assert!(err.to_string().contains("sub-policies"), "{err}");
    }
}
