//! PGD-hardened negatives for SimCLR / HCL (documented on `Pgd`).

use burn::config::Config;
use burn::module::AutodiffModule;
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::Distribution;

use crate::augment::normalize::Normalize;
use crate::base::error::{non_negative, ConfigError};
use crate::base::schedule::{Pace, Scheduler, SchedulerConfig};
use crate::base::Progress;

/// The most ascent steps [`PgdConfig::init`] takes.
pub const MAX_PGD_STEPS: usize = 100;

/// The PGD attack on negatives and its schedule (a burn [`Config`], saved in the run's
/// configuration).
#[derive(Config, Debug, PartialEq)]
pub struct PgdConfig {
    /// Number of ascent steps S (Madry et al.: 7).
    #[config(default = 7)]
    pub steps: usize,
    /// Step size a, in pixel units of `[0, 1]` (Madry et al.: 2/255).
    #[config(default = "2.0 / 255.0")]
    pub step_size: f64,
    /// Radius ε of the L∞ ball around the clean images (Madry et al.: 8/255).
    #[config(default = "8.0 / 255.0")]
    pub epsilon: f64,
    /// Start from a uniform random point of the ε-ball (Madry et al.) instead of the clean
    /// images (MICO eq. 4). The draw uses the backend's generator (seeded per step by the trainer).
    #[config(default = false)]
    pub random_start: bool,
    /// Strength `s ∈ [0, 1]` over training, scaling a and ε (0: off); `None`: full strength
    /// throughout. Default: `(0, 1/3, 2/3, 1)`, 4 steps per epoch pace.
    #[config(default = "Some(PgdConfig::default_schedule())")]
    pub schedule: Option<SchedulerConfig>,
    /// The share `f ∈ [0, 1]` of the S steps made over training (`round(f·S)` steps, at least
    /// one while the attack is on); `None` (the default): all S whenever the attack is on.
    #[config(default = "None")]
    pub steps_schedule: Option<SchedulerConfig>,
    /// The per-channel normalisation of the images [`Pgd::attack_views`] is given (the views'),
    /// so that a, ε and the pixel range are in units of `[0, 1]` pixels; `None`: the images are
    /// plain pixels.
    #[config(default = "None")]
    pub normalize: Option<Normalize>,
}

impl PgdConfig {
    /// The default strength schedule: off for the first quarter of the run, then a third, two
    /// thirds and all of a and ε.
    pub fn default_schedule() -> SchedulerConfig {
        SchedulerConfig::Steps {
            values: vec![0.0, 1.0 / 3.0, 2.0 / 3.0, 1.0],
            pace: Pace::Epoch,
        }
    }

    /// Checks the values and builds the attack.
    ///
    /// # Errors
    /// Naming the field: a negative or non-finite step size or ε, a schedule value outside
    /// `[0, 1]`.
    pub fn init(&self) -> Result<Pgd, ConfigError> {
        // Each ascent step is a forward and backward pass of the whole network: 2³² of them
        // held a run at its first attacked step (the `recipe` binary's --pgd-steps took at most
        // 100; `method.pgd.steps` did not).
        if self.steps > MAX_PGD_STEPS {
            return Err(ConfigError::new(
                "pgd.steps",
                format!(
                    "at most {MAX_PGD_STEPS} ascent steps (Madry et al.: 7), got {}",
                    self.steps
                ),
            ));
        }
        non_negative("pgd.step_size", self.step_size)?;
        non_negative("pgd.epsilon", self.epsilon)?;
        if let Some(s) = &self.schedule {
            s.validate("pgd.schedule", 0.0, 1.0)?;
        }
        if let Some(s) = &self.steps_schedule {
            s.validate("pgd.steps_schedule", 0.0, 1.0)?;
        }
        if let Some(n) = &self.normalize {
            n.validate_for(n.mean.len())
                .map_err(|e| ConfigError::new("pgd.normalize", e.to_string()))?;
        }
        Ok(Pgd {
            steps: self.steps,
            step_size: self.step_size,
            epsilon: self.epsilon,
            random_start: self.random_start,
            schedule: self.schedule.clone().map(Scheduler::from),
            steps_schedule: self.steps_schedule.clone().map(Scheduler::from),
            normalize: self.normalize.clone(),
        })
    }
}

/// The attack at one point of training.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PgdStep {
    /// Number of ascent steps (0: off).
    pub steps: usize,
    /// Step size a.
    pub step_size: f64,
    /// Radius ε.
    pub epsilon: f64,
    /// Start from a random point of the ball.
    pub random_start: bool,
}

impl PgdStep {
    /// Whether the attack changes anything.
    pub fn is_on(&self) -> bool {
        self.steps > 0 && self.epsilon > 0.0 && (self.step_size > 0.0 || self.random_start)
    }
}

/// A validated PGD attack with its schedule. Build it with [`PgdConfig::init`].
///
/// PGD-hardened negatives for SimCLR / HCL (H. Fang, "Curriculum SSL: An Efficient And Effective
/// Data Augmentation For Contrastive Learning", <https://arxiv.org/abs/2301.06916>, §3.3 eq. 4),
/// with the projected gradient ascent of Madry et al. 2018 ("Towards Deep Learning Models
/// Resistant to Adversarial Attacks", <https://arxiv.org/abs/1706.06083>).
///
/// After hard-negative sampling with a moderate β, MICO makes the negatives harder still by
/// moving their pixels so that the contrastive loss rises:
///
/// ```text
/// x⁰ = x (the clean images)          x^{t+1} = Π( x^t + a·sign(∇ₓ L(θ, x^t)) ),  t < S
/// ```
///
/// where `Π` projects onto the L∞ ball of radius ε around the clean images intersected with the
/// pixel range `[0, 1]`. The hardened images are returned detached, and the ordinary training step
/// then runs on them. [`Pgd::attack`] does this for any loss written as a closure of the images;
/// which images are the negatives and how they enter the loss is the closure's choice (for
/// SimCLR: the anchors' projections computed once and detached, the closure projecting the
/// candidate negatives and returning the NT-Xent or HCL loss).
///
/// **No gradient reaches the weights.** Each step asks for the gradient with respect to the
/// images only: the loss is back-propagated into a fresh gradient container that is dropped after
/// the images' gradient has been read; no optimiser is involved and the closure's module is never
/// changed. Two costs remain with the closure: its parameters' gradients are computed and thrown
/// away, and a BatchNorm in training mode moves its running statistics at every attack forward.
/// Run the closure on [`attack_copy`] of the network — the same weights without gradient
/// tracking, with running statistics of its own — to avoid both.
///
/// **Cost.** S extra forward and backward passes (through the closure) per training step.
///
/// **Schedule.** Whether the attack runs and how strong it is follows a scheduled strength
/// `s ∈ [0, 1]` ([`PgdConfig::schedule`]): the step size and ε are `s·a` and `s·ε`, and `s = 0`
/// turns the attack off (no extra pass). MICO suggests hardening the negatives only after
/// hard-negative sampling has done its part, so the default starts without it: a 4-step schedule
/// per epoch `(0, 1/3, 2/3, 1)`. MICO gives no values for S, a and ε; the defaults are Madry et
/// al.'s CIFAR-10 training attack (S = 7, a = 2/255, ε = 8/255, in units of the `[0, 1]` pixel
/// range). The attack works on images in `[0, 1]`: with normalised views, set
/// [`PgdConfig::normalize`] to the views' normalisation and call [`Pgd::attack_views`], which
/// undoes it, attacks the pixels and applies it again (the closure sees normalised images).
#[derive(Debug, Clone)]
pub struct Pgd {
    steps: usize,
    step_size: f64,
    epsilon: f64,
    random_start: bool,
    schedule: Option<Scheduler>,
    steps_schedule: Option<Scheduler>,
    normalize: Option<Normalize>,
}

impl Pgd {
    /// Replaces the strength schedule by a user's (values clamped to `[0, 1]`).
    pub fn with_scheduler(mut self, scheduler: Scheduler) -> Self {
        self.schedule = Some(scheduler);
        self
    }

    /// The strength `s ∈ [0, 1]` at `progress` (1 without a schedule).
    pub fn strength(&self, progress: Progress) -> f64 {
        self.schedule
            .as_ref()
            .map_or(1.0, |s| s.value(progress, 0.0, 1.0))
    }

    /// The attack at `progress`: `s·a`, `s·ε`, the scheduled share of the S steps, and no step
    /// when `s = 0`.
    pub fn at(&self, progress: Progress) -> PgdStep {
        let s = self.strength(progress);
        let steps = match &self.steps_schedule {
            None => self.steps,
            Some(f) => ((f.value(progress, 0.0, 1.0) * self.steps as f64).round() as usize).max(1),
        };
        PgdStep {
            steps: if s > 0.0 { steps.min(self.steps) } else { 0 },
            step_size: s * self.step_size,
            epsilon: s * self.epsilon,
            random_start: self.random_start,
        }
    }

    /// Hardens `clean` against `loss` with the attack at `progress` (see [`Pgd`]).
    pub fn attack<B: AutodiffBackend>(
        &self,
        clean: Tensor<B, 4>,
        progress: Progress,
        loss: impl FnMut(Tensor<B, 4>) -> Tensor<B, 1>,
    ) -> Tensor<B, 4> {
        pgd_attack(clean, self.at(progress), loss)
    }

    /// Hardens normalised views (normalised with [`PgdConfig::normalize`]): the normalisation is
    /// undone, the pixels are attacked as [`Pgd::attack`] does, and the result is normalised
    /// again; `loss` is given normalised images. Without a normalisation, [`Pgd::attack`].
    ///
    /// # Shapes
    /// - `views`: `[N, C, H, W]`, C the normalisation's channel count; `loss` returns `[1]`.
    pub fn attack_views<B: AutodiffBackend>(
        &self,
        views: Tensor<B, 4>,
        progress: Progress,
        mut loss: impl FnMut(Tensor<B, 4>) -> Tensor<B, 1>,
    ) -> Tensor<B, 4> {
        match &self.normalize {
            None => self.attack(views, progress, loss),
            Some(n) => {
                let pixels = n.invert(views.detach());
                let hard = self.attack(pixels, progress, |x| loss(n.apply(x)));
                n.apply(hard)
            }
        }
    }
}

/// The network as the attack should see it: the same weights, not tracked for gradients (only
/// the images' gradient is computed), and BatchNorm running statistics of its own, so that the
/// attack's forward passes leave the trained network's untouched.
pub fn attack_copy<B: AutodiffBackend, M: AutodiffModule<B>>(module: &M) -> M {
    M::from_inner(module.valid()).no_grad()
}

/// Projected gradient ascent on the images (MICO eq. 4): from the clean images (or a uniform
/// random point of the ε-ball), `step.steps` times `x ← Π(x + a·sign(∇ₓ loss(x)))`, `Π` the
/// clamp to `[max(x₀ − ε, 0), min(x₀ + ε, 1)]`. Returns the hardened images, detached. With the
/// attack off ([`PgdStep::is_on`]) the clean images come back without calling `loss`.
///
/// Gradients are taken with respect to the images only (see [`Pgd`]); a
/// step where `loss` does not depend on the images leaves them where they are.
///
/// # Shapes
/// - `clean`: `[N, C, H, W]`, values in `[0, 1]`; `loss` returns `[1]`.
pub(crate) fn pgd_attack<B: AutodiffBackend>(
    clean: Tensor<B, 4>,
    step: PgdStep,
    mut loss: impl FnMut(Tensor<B, 4>) -> Tensor<B, 1>,
) -> Tensor<B, 4> {
    if !step.is_on() {
        return clean.detach();
    }
    let x0 = clean.inner();
    let lo = x0.clone().sub_scalar(step.epsilon).clamp_min(0.0);
    let hi = x0.clone().add_scalar(step.epsilon).clamp_max(1.0);
    let project = |x: Tensor<B::InnerBackend, 4>| x.max_pair(lo.clone()).min_pair(hi.clone());
    let mut x = if step.random_start {
        let noise = Tensor::random(
            x0.shape(),
            Distribution::Uniform(-step.epsilon, step.epsilon),
            &x0.device(),
        );
        project(x0.add(noise))
    } else {
        x0
    };
    for _ in 0..step.steps {
        let probe = Tensor::<B, 4>::from_inner(x.clone()).require_grad();
        let grads = loss(probe.clone()).backward();
        if let Some(g) = probe.grad(&grads) {
            x = project(x.add(g.sign().mul_scalar(step.step_size)));
        }
    }
    Tensor::from_inner(x)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loss::NtXentLossConfig;
    use burn::backend::{Autodiff, NdArray};
    use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig};

    type Inner = NdArray<f64>;
    type Ad = Autodiff<Inner>;

    fn host<const D: usize>(x: Tensor<Inner, D>) -> Vec<f64> {
        x.into_data().iter::<f64>().collect()
    }

    fn full(steps: usize, step_size: f64, epsilon: f64) -> PgdStep {
        PgdStep {
            steps,
            step_size,
            epsilon,
            random_start: false,
        }
    }

    #[test]
    fn linear_loss_moves_each_pixel_by_the_clipped_sign_steps() {
        // L(x) = Σ w·x: the gradient is w, so each pixel moves by a·sign(w) per step, clipped to
        // the ε-ball and [0, 1]: 3 steps of 0.1 with ε = 0.25 reach ±0.25.
        let device = Default::default();
        let clean = [0.5, 0.1, 0.95, 0.5, 0.3, 0.0];
        let w = [1.0, -2.0, 0.5, 0.0, -0.1, 3.0];
        let x = Tensor::<Ad, 4>::from_data(TensorData::new(clean.to_vec(), [1, 1, 2, 3]), &device);
        let wt = Tensor::<Ad, 4>::from_data(TensorData::new(w.to_vec(), [1, 1, 2, 3]), &device);
        let out = pgd_attack(x, full(3, 0.1, 0.25), |x| x.mul(wt.clone()).sum());
        assert!(!out.is_require_grad());
        // 0.5 + 0.25; 0.1 − 0.25 → 0; 0.95 + 0.25 → 1; w = 0 stays; 0.3 − 0.25; 0.0 + 0.25.
        let want = [0.75, 0.0, 1.0, 0.5, 0.05, 0.25];
        let got = host(out.inner());
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-15, "{got:?}");
        }
        // Two steps of 0.1 stay inside the ball: 0.5 + 0.2.
        let x = Tensor::<Ad, 4>::from_data(TensorData::new(clean.to_vec(), [1, 1, 2, 3]), &device);
        let two = host(pgd_attack(x, full(2, 0.1, 0.25), |x| x.mul(wt.clone()).sum()).inner());
        assert!((two[0] - 0.7).abs() < 1e-15);
        assert!((two[4] - 0.1).abs() < 1e-15);
    }

    /// A small projector with a BatchNorm: flatten, linear, BatchNorm.
    #[derive(Module, Debug)]
    struct Net<B: Backend> {
        fc: Linear<B>,
        bn: BatchNorm<B>,
    }

    impl<B: Backend> Net<B> {
        fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 2> {
            let [n, c, h, w] = x.dims();
            self.bn.forward(self.fc.forward(x.reshape([n, c * h * w])))
        }
    }

    fn images(seed: usize, n: usize) -> Tensor<Ad, 4> {
        let v: Vec<f64> = (0..n * 8)
            .map(|i| ((i * 37 + seed * 11) % 23) as f64 / 22.0)
            .collect();
        Tensor::from_data(TensorData::new(v, [n, 2, 2, 2]), &Default::default())
    }

    fn parameters(net: &Net<Ad>) -> Vec<f64> {
        let mut v = host(net.fc.weight.val().inner());
        v.extend(host(net.fc.bias.as_ref().unwrap().val().inner()));
        v.extend(host(net.bn.gamma.val().inner()));
        v.extend(host(net.bn.beta.val().inner()));
        v.extend(host(net.bn.running_mean.value().inner()));
        v.extend(host(net.bn.running_var.value().inner()));
        v
    }

    #[test]
    fn hardened_negatives_raise_nt_xent_within_the_ball_and_leave_the_network_alone() {
        let device = Default::default();
        let net: Net<Ad> = crate::base::seed::init_module::<Ad, _>(&device, 5, |d| Net {
            fc: LinearConfig::new(8, 4).init(d),
            bn: BatchNormConfig::new(4).init(d),
        });
        let before = parameters(&net);
        let nt_xent = NtXentLossConfig::new()
            .with_temperature(0.5)
            .init()
            .unwrap();
        let anchors = images(1, 6);
        let clean = images(2, 6);
        let copy = attack_copy(&net);
        let z1 = copy.forward(anchors).detach();
        let loss_of = |x: Tensor<Ad, 4>| nt_xent.forward(z1.clone(), copy.forward(x));
        let clean_loss = loss_of(clean.clone()).into_scalar();
        let pgd = PgdConfig::new()
            .with_steps(5)
            .with_step_size(0.02)
            .with_epsilon(0.05)
            .with_schedule(None)
            .init()
            .unwrap();
        let progress = Progress::default();
        let hard = pgd.attack(clean.clone(), progress, &loss_of);
        let hard_loss = loss_of(hard.clone()).into_scalar();
        assert!(
            hard_loss > clean_loss + 1e-3,
            "clean {clean_loss}, hardened {hard_loss}"
        );
        let (c, h) = (host(clean.clone().inner()), host(hard.inner()));
        let moved = c
            .iter()
            .zip(&h)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        assert!(moved <= 0.05 + 1e-15, "{moved}");
        assert!(moved > 0.02, "the attack moved the pixels: {moved}");
        assert!(h.iter().all(|v| (0.0..=1.0).contains(v)));
        // Neither the weights nor the BatchNorm statistics of the network moved.
        assert_eq!(parameters(&net), before);
        // The attack on the network itself (no copy) does not change its parameters either.
        let z1 = net.forward(images(1, 6)).detach();
        let _ = pgd.attack(clean, progress, |x| {
            nt_xent.forward(z1.clone(), net.forward(x))
        });
        let after = parameters(&net);
        let weights = 4 * 8 + 4 + 4 + 4;
        assert_eq!(after[..weights], before[..weights]);
        // ... but its BatchNorm statistics moved with every attack forward: why the copy.
        assert_ne!(after[weights..], before[weights..]);
    }

    #[test]
    fn random_start_stays_in_the_ball_and_range() {
        let device = Default::default();
        let clean = images(3, 4);
        let step = PgdStep {
            steps: 2,
            step_size: 0.01,
            epsilon: 0.1,
            random_start: true,
        };
        let out = crate::base::seed::with_seed::<Ad, _>(&device, 9, || {
            pgd_attack(clean.clone(), step, |x| x.powi_scalar(2).sum())
        });
        let (c, o) = (host(clean.inner()), host(out.inner()));
        assert!(c.iter().zip(&o).all(|(a, b)| (a - b).abs() <= 0.1 + 1e-15));
        assert!(o.iter().all(|v| (0.0..=1.0).contains(v)));
        assert!(c.iter().zip(&o).any(|(a, b)| a != b));
    }

    #[test]
    fn schedule_starts_without_the_attack_and_scales_a_and_epsilon() {
        let pgd = PgdConfig::new().init().unwrap();
        let at = |epoch| Progress {
            step: epoch,
            total_steps: 8,
            epoch,
            total_epochs: 8,
        };
        assert!(!pgd.at(at(0)).is_on());
        assert!(!pgd.at(at(1)).is_on());
        let third = pgd.at(at(2));
        assert_eq!(third.steps, 7);
        assert!((third.epsilon - 8.0 / 255.0 / 3.0).abs() < 1e-15);
        assert!((third.step_size - 2.0 / 255.0 / 3.0).abs() < 1e-15);
        let last = pgd.at(at(7));
        assert_eq!(
            (last.steps, last.step_size, last.epsilon),
            (7, 2.0 / 255.0, 8.0 / 255.0)
        );
        // Off: the clean images come back and the loss is never evaluated.
        let x = images(4, 2);
        let out = pgd.attack(x.clone(), at(0), |_| panic!("no pass while off"));
        assert_eq!(host(out.inner()), host(x.inner()));
        let json = serde_json::to_string(&PgdConfig::new()).unwrap();
        let back: PgdConfig = serde_json::from_str(&json).unwrap();
        assert_eq!(back, PgdConfig::new());
        let err = PgdConfig::new().with_epsilon(-1.0).init().unwrap_err();
        assert_eq!(err.field, "pgd.epsilon");
    }

    /// S too can follow a schedule: a linear share 0 → 1 per epoch over 8 epochs of S = 7 makes
    /// round(f·7) steps, at least one while the attack is on.
    #[test]
    fn the_number_of_steps_follows_its_schedule() {
        let pgd = PgdConfig::new()
            .with_schedule(None)
            .with_steps_schedule(Some(SchedulerConfig::Linear {
                start: 0.0,
                end: 1.0,
                pace: Pace::Epoch,
            }))
            .init()
            .unwrap();
        let at = |epoch| Progress {
            step: epoch,
            total_steps: 8,
            epoch,
            total_epochs: 8,
        };
        let steps: Vec<usize> = (0..8).map(|e| pgd.at(at(e)).steps).collect();
        // f = e/8 at epoch e: round(7e/8) = 0 (at least 1), 1, 2, 3, 4 (3.5 rounds up), 4, 5, 6.
        assert_eq!(steps, [1, 1, 2, 3, 4, 4, 5, 6]);
        assert!(steps.windows(2).all(|w| w[0] <= w[1]), "{steps:?}");
        let err = PgdConfig::new()
            .with_steps_schedule(Some(SchedulerConfig::Constant { value: 2.0 }))
            .init()
            .unwrap_err();
        assert_eq!(err.field, "pgd.steps_schedule");
    }
}
