//! Two-view pipelines (SimCLR, MoCo v2, BYOL and their small-image variants) with a colour
//! strength knob for curricula, and multi-crop (SwAV, DINO: two global views plus `V` smaller
//! local crops, [`LocalCrops`], [`PipelineConfig::multi_crop`]).
//!
//! A view applies, in this order: random resized crop, horizontal flip, colour jitter (random
//! order per sample), random grayscale, Gaussian blur, solarisation, normalisation. (Flip commutes
//! with the colour operations and with the symmetric blur, so this is the same distribution as
//! torchvision's SimCLR / MoCo v2 / BYOL orders.) Every random choice is drawn per sample from a
//! generator seeded with `(seed, key)`, where `key` is chosen by the caller (e.g. the global step):
//! the same seed and key give the same views, whatever happened before.

use burn::tensor::{backend::Backend, Tensor};
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};

pub use crate::base::geometry::ViewGeometry;

use crate::augment::blur::RandomGaussianBlur;
use crate::augment::colour::{ColorJitter, JitterParams, RandomGrayscale};
use crate::augment::crop::{CropBox, RandomResizedCrop};
use crate::augment::flip::RandomHorizontalFlip;
use crate::augment::host::{self, HostImages, HostJitter, HostView};
use crate::augment::mixup::{Mixup, MixupLambda};
use crate::augment::normalize::{self, Normalize};
use crate::augment::solarize::RandomSolarize;
use crate::base::error::{non_negative, ConfigError};
use crate::base::seed::mix_seed;
use crate::base::Progress;
use crate::curriculum::{
    AutoAugmentState, MixupCurriculum, MixupCurriculumConfig, MixupSchedule, PolicyChoice,
    SelfPacedAutoAugment, SelfPacedAutoAugmentConfig, StrengthCurriculumConfig,
};

/// The operations of one view; `None` switches an operation off.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ViewConfig {
    /// Random resized crop (also fixes the output size).
    pub crop: Option<RandomResizedCrop>,
    /// Horizontal flip.
    pub hflip: Option<RandomHorizontalFlip>,
    /// Colour jitter at strength 1 (the pipeline's `strength` scales it).
    pub jitter: Option<ColorJitter>,
    /// Random grayscale.
    pub grayscale: Option<RandomGrayscale>,
    /// Gaussian blur.
    pub blur: Option<RandomGaussianBlur>,
    /// Solarisation.
    pub solarize: Option<RandomSolarize>,
    /// Normalisation (last).
    pub normalize: Option<Normalize>,
}

/// What an augmenter makes its views from.
#[derive(Debug, Clone)]
pub enum ViewSource<B: Backend> {
    /// A batch of whole images, `[N, C, H, W]` in `[0, 1]`: every view draws its own crop.
    Whole(Tensor<B, 4>),
    /// As [`ViewSource::Cut`], the views left on the host as the loader's bytes, for an augmenter
    /// on the host path ([`Augmenter::with_host_ops`]): they go to `device` once, augmented (an
    /// augmenter on the tensor path uploads them first).
    HostCut {
        /// View 1, view 2, then the local crops, each with its boxes.
        views: Vec<(HostImages, Vec<CropBox>)>,
        /// Where the views go.
        device: B::Device,
    },
    /// Views cut when the images were decoded (the streaming loader): view 1, view 2, then the
    /// local crops, each `[N, C, h, w]` in `[0, 1]` with the box of its original each image
    /// came from. The crops are not drawn again.
    Cut(Vec<(Tensor<B, 4>, Vec<CropBox>)>),
}

impl<B: Backend> ViewSource<B> {
    /// Number of images.
    pub fn len(&self) -> usize {
        match self {
            Self::Whole(x) => x.dims()[0],
            Self::Cut(cuts) => cuts.first().map_or(0, |c| c.0.dims()[0]),
            Self::HostCut { views, .. } => views.first().map_or(0, |c| c.0.shape[0]),
        }
    }

    /// Whether there is no image.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One view's input: a tensor, or bytes on the host ([`ViewSource::HostCut`]).
enum ViewInput<'a, B: Backend> {
    Tensor(Tensor<B, 4>),
    Host(&'a HostImages, &'a B::Device),
}

/// Which published pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Preset {
    /// SimCLR (Chen et al. 2020).
    SimClr,
    /// MoCo v2 (Chen et al. 2020).
    MocoV2,
    /// BYOL (Grill et al. 2020): asymmetric blur and solarisation.
    Byol,
}

/// Two views, an optional mixup of them, a seed and the colour strength.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PipelineConfig {
    /// First view.
    pub view1: ViewConfig,
    /// Second view.
    pub view2: ViewConfig,
    /// Colour strength: multiplies the jitter magnitudes of both views (1, 1.5, 2, 3 in MICO's
    /// tables). A plain number so that a curriculum can set it every epoch.
    pub strength: f64,
    /// Mixup: when set, the second view is replaced by `λ·view1 + (1 − λ)·view2`.
    pub mixup: Option<Mixup>,
    /// A mixup curriculum (MICO): λ (or Beta's α) scheduled over training; exclusive with
    /// `mixup`.
    #[serde(default)]
    pub mixup_curriculum: Option<MixupCurriculumConfig>,
    /// A strength curriculum (MICO): a multiplier of the colour jitter and the grayscale
    /// probability, scheduled over training.
    #[serde(default)]
    pub strength_curriculum: Option<StrengthCurriculumConfig>,
    /// MICO's self-paced AutoAugment: a learned sub-policy applied to both views before the
    /// normalisation.
    #[serde(default)]
    pub auto_augment: Option<SelfPacedAutoAugmentConfig>,
    /// Multi-crop: `count` local crops of every image besides the two global views (SwAV,
    /// DINO); only a method whose loss takes them accepts them.
    #[serde(default)]
    pub local_crops: Option<LocalCrops>,
    /// Seed of the per-sample random choices.
    pub seed: u64,
}

/// The most local crops per image [`PipelineConfig::validate`] takes.
pub const MAX_LOCAL_CROPS: usize = 32;

/// The local crops of multi-crop (Caron et al., SwAV, NeurIPS 2020, §3.2,
/// <https://arxiv.org/abs/2006.09882>): `count` small views of every image, each with its own
/// draws of `view`'s operations (whose random resized crop fixes their size). The colour
/// strength, the strength curriculum and the AutoAugment sub-policy apply to them as to the two
/// global views; mixup mixes only the global views.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LocalCrops {
    /// Local crops per image (`V`; SwAV's 6 on ImageNet, DINO's 6 to 10).
    pub count: usize,
    /// The operations of a local crop.
    pub view: ViewConfig,
}

fn normalize_for(side: usize, channels: usize) -> Normalize {
    match (channels, side <= 64) {
        (1, _) => Normalize::new(
            &normalize::FASHION_MNIST_MEAN,
            &normalize::FASHION_MNIST_STD,
        ),
        (_, true) => Normalize::new(&normalize::CIFAR10_MEAN, &normalize::CIFAR10_STD),
        _ => Normalize::new(&normalize::IMAGENET_MEAN, &normalize::IMAGENET_STD),
    }
}

impl PipelineConfig {
    /// A published pipeline for square images of `side` pixels with `channels` channels.
    ///
    /// For `side >= 96` the papers' ImageNet settings; for small images (`side < 96`, e.g.
    /// CIFAR 32×32, Fashion-MNIST 28×28) the common small-image variants: SimCLR with colour
    /// strength 0.5 and no blur (SimCLR's CIFAR setting), MoCo v2 and BYOL with a 3-pixel blur
    /// kernel. Normalisation: Fashion-MNIST statistics for one channel, CIFAR-10 statistics for
    /// small RGB images, ImageNet statistics otherwise.
    pub fn preset(preset: Preset, side: usize, channels: usize) -> Self {
        let small = side < 96;
        let blur_k = RandomGaussianBlur::kernel_for(side);
        let blur = |p: f64| {
            Some(RandomGaussianBlur {
                kernel_size: blur_k,
                sigma: (0.1, 2.0),
                p,
            })
        };
        let crop = |min_scale: f64| {
            Some(RandomResizedCrop {
                size: (side, side),
                scale: (min_scale, 1.0),
                ratio: (3.0 / 4.0, 4.0 / 3.0),
            })
        };
        let hflip = Some(RandomHorizontalFlip { p: 0.5 });
        let grayscale = Some(RandomGrayscale { p: 0.2 });
        let normalize = Some(normalize_for(side, channels));
        let (view1, view2) = match preset {
            Preset::SimClr => {
                let v = ViewConfig {
                    crop: crop(0.08),
                    hflip,
                    jitter: Some(ColorJitter::simclr(if small { 0.5 } else { 1.0 })),
                    grayscale,
                    blur: if small { None } else { blur(0.5) },
                    solarize: None,
                    normalize,
                };
                (v.clone(), v)
            }
            Preset::MocoV2 => {
                let v = ViewConfig {
                    crop: crop(0.2),
                    hflip,
                    jitter: Some(ColorJitter {
                        brightness: 0.4,
                        contrast: 0.4,
                        saturation: 0.4,
                        hue: 0.1,
                        p: 0.8,
                    }),
                    grayscale,
                    blur: blur(0.5),
                    solarize: None,
                    normalize,
                };
                (v.clone(), v)
            }
            Preset::Byol => {
                let base = ViewConfig {
                    crop: crop(0.08),
                    hflip,
                    jitter: Some(ColorJitter {
                        brightness: 0.4,
                        contrast: 0.4,
                        saturation: 0.2,
                        hue: 0.1,
                        p: 0.8,
                    }),
                    grayscale,
                    blur: blur(1.0),
                    solarize: Some(RandomSolarize {
                        threshold: 0.5,
                        p: 0.0,
                    }),
                    normalize,
                };
                let mut v2 = base.clone();
                v2.blur = blur(0.1);
                v2.solarize = Some(RandomSolarize {
                    threshold: 0.5,
                    p: 0.2,
                });
                (base, v2)
            }
        };
        Self {
            view1,
            view2,
            strength: 1.0,
            mixup: None,
            mixup_curriculum: None,
            strength_curriculum: None,
            auto_augment: None,
            local_crops: None,
            seed: 0,
        }
    }

    /// Multi-crop on `preset`'s operations for square images of `side` pixels: two global crops
    /// of scale `global_scale` at `side` pixels and `count` local crops of scale `local_scale`
    /// at `local_side(side)` pixels (`96` for `224`: SwAV's and DINO's ImageNet setting, scaled
    /// for small images: 14 px for CIFAR's 32, 12 px for Fashion-MNIST's 28). The blur kernel of
    /// the local crops follows their size. SwAV: global `(0.14, 1)`, local `(0.05, 0.14)`; DINO:
    /// global `(0.4, 1)` (`(0.14, 1)` in its small-image runs), local `(0.05, 0.4)`.
    pub fn multi_crop(
        preset: Preset,
        side: usize,
        channels: usize,
        count: usize,
        global_scale: (f64, f64),
        local_scale: (f64, f64),
    ) -> Self {
        let mut config = Self::preset(preset, side, channels);
        for view in [&mut config.view1, &mut config.view2] {
            if let Some(crop) = &mut view.crop {
                crop.scale = global_scale;
            }
        }
        let small = Self::local_side(side);
        let mut local = config.view1.clone();
        local.crop = Some(RandomResizedCrop {
            size: (small, small),
            scale: local_scale,
            ratio: (3.0 / 4.0, 4.0 / 3.0),
        });
        if let Some(blur) = &mut local.blur {
            blur.kernel_size = RandomGaussianBlur::kernel_for(small);
            // BYOL's and DINO's first view always blurs; a local crop blurs half of the time.
            blur.p = blur.p.min(0.5);
        }
        local.solarize = None;
        config.local_crops = (count > 0).then_some(LocalCrops { count, view: local });
        config
    }

    /// The side of a local crop for global views of `side` pixels: `side · 96 / 224`, at least 8
    /// (224 → 96, 96 → 41, 32 → 14, 28 → 12).
    pub fn local_side(side: usize) -> usize {
        ((side as f64 * 96.0 / 224.0).round() as usize).max(8)
    }

    /// SimCLR for `side × side` images with `channels` channels (see [`PipelineConfig::preset`]).
    pub fn simclr(side: usize, channels: usize) -> Self {
        Self::preset(Preset::SimClr, side, channels)
    }

    /// MoCo v2 for `side × side` images (see [`PipelineConfig::preset`]).
    pub fn moco_v2(side: usize, channels: usize) -> Self {
        Self::preset(Preset::MocoV2, side, channels)
    }

    /// BYOL for `side × side` images (see [`PipelineConfig::preset`]).
    pub fn byol(side: usize, channels: usize) -> Self {
        Self::preset(Preset::Byol, side, channels)
    }

    /// Checks every setting for input images with `channels` channels.
    pub fn validate(&self, channels: usize) -> Result<(), ConfigError> {
        non_negative("strength", self.strength)?;
        let local = self.local_crops.as_ref().map(|l| &l.view);
        if let Some(l) = &self.local_crops {
            if l.count == 0 {
                return Err(ConfigError::new(
                    "local_crops.count",
                    "must be at least 1 (leave local_crops out for none)",
                ));
            }
            // Every local crop is a pass of the network each step: 2³² of them held a run at
            // its first step (the `recipe` binary's --local-crops took at most 32; the setting
            // did not).
            if l.count > MAX_LOCAL_CROPS {
                return Err(ConfigError::new(
                    "local_crops.count",
                    format!(
                        "at most {MAX_LOCAL_CROPS} local crops per image (SwAV's 6, DINO's 6 to \
                         10), got {}",
                        l.count
                    ),
                ));
            }
            if l.view.crop.is_none() {
                return Err(ConfigError::new(
                    "local_crops.view.crop",
                    "a local crop needs a random resized crop (it fixes the crops' size)",
                ));
            }
        }
        for v in [&self.view1, &self.view2].into_iter().chain(local) {
            if let Some(c) = &v.crop {
                c.validate()?;
            }
            if let Some(f) = &v.hflip {
                f.validate()?;
            }
            if let Some(j) = &v.jitter {
                j.validate()?;
                j.scaled(self.strength).validate()?;
            }
            if let Some(g) = &v.grayscale {
                g.validate()?;
            }
            if let Some(b) = &v.blur {
                match &v.crop {
                    Some(c) => b.validate_for(c.size.0, c.size.1)?,
                    None => b.validate()?,
                }
            }
            if let Some(s) = &v.solarize {
                s.validate()?;
            }
            if let Some(n) = &v.normalize {
                n.validate_for(channels)?;
            }
        }
        let mixes = self.mixup.is_some() || self.mixup_curriculum.is_some();
        if self.mixup.is_some() && self.mixup_curriculum.is_some() {
            return Err(ConfigError::new(
                "mixup_curriculum",
                "a fixed mixup and a mixup curriculum cannot both be set",
            ));
        }
        if let Some(c) = &self.mixup_curriculum {
            c.init()?;
        }
        if let Some(c) = &self.strength_curriculum {
            c.validate()?;
            for v in [&self.view1, &self.view2].into_iter().chain(local) {
                if let Some(j) = &v.jitter {
                    j.scaled(self.strength * c.target).validate()?;
                }
            }
        }
        if let (Some(a), Some(b)) = (&self.view1.crop, &self.view2.crop) {
            if mixes && a.size != b.size {
                return Err(ConfigError::new(
                    "mixup",
                    format!(
                        "views of different sizes {:?} and {:?} cannot be mixed",
                        a.size, b.size
                    ),
                ));
            }
        }
        if let Some(m) = &self.mixup {
            m.validate()?;
        }
        if let Some(a) = &self.auto_augment {
            a.init()?;
        }
        Ok(())
    }

    /// Validates and builds the augmenter for images with `channels` channels.
    pub fn init(self, channels: usize) -> Result<Augmenter, ConfigError> {
        self.validate(channels)?;
        let mixup_schedule = self
            .mixup_curriculum
            .as_ref()
            .map(|c| c.init())
            .transpose()?;
        let auto_augment = self.auto_augment.as_ref().map(|c| c.init()).transpose()?;
        Ok(Augmenter {
            config: self,
            channels,
            mixup_schedule,
            auto_augment,
            shard: None,
            host_ops: false,
        })
    }
}

/// Two augmented views of a batch.
#[derive(Debug, Clone)]
pub struct TwoViews<B: Backend> {
    /// First view `[N, C, H, W]`.
    pub view1: Tensor<B, 4>,
    /// Second view (the mixed one when mixup is on).
    pub view2: Tensor<B, 4>,
    /// The λ of each sample when mixup is on.
    pub lambdas: Option<Vec<f32>>,
    /// The scheduled knobs of this batch, by name (e.g. `mixup_lambda`), for the logs.
    pub knobs: Vec<(&'static str, f64)>,
    /// The self-paced AutoAugment sub-policy applied to this batch, to be passed back with the
    /// batch's loss to [`Augmenter::observe`].
    pub policy: Option<PolicyChoice>,
    /// Where each image of each view came from: `geometry[v][n]` for view `v + 1` and image
    /// `n`. With mixup, `view2` is a blend of `view1` and the second augmented view, whose
    /// geometry `geometry[1]` describes.
    pub geometry: [Vec<ViewGeometry>; 2],
    /// The local crops of multi-crop, `[N, C, h, w]` each (empty without
    /// [`PipelineConfig::local_crops`]).
    pub locals: Vec<Tensor<B, 4>>,
}

/// The capability an adaptive augmentation ([`Augmenter::is_adaptive`]) needs from a hook: the
/// loop's losses fed back to [`Augmenter::observe`]
/// (`curriculum_ssl::hooks::SelfPacedAutoAugmentHook`).
pub const LOSS_FEEDBACK: &str = "loss_feedback";

/// The adaptive (loss-driven) states of an augmenter, saved in checkpoints.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AugmenterState {
    /// The self-paced AutoAugment's magnitudes and running losses.
    pub auto_augment: Option<AutoAugmentState>,
}

/// A validated pipeline. Cheap to clone; holds no random state (see the module docs). Its only
/// state is what an adaptive curriculum learned from the losses ([`AugmenterState`]).
#[derive(Debug, Clone)]
pub struct Augmenter {
    config: PipelineConfig,
    channels: usize,
    mixup_schedule: Option<MixupSchedule>,
    auto_augment: Option<SelfPacedAutoAugment>,
    /// Data-parallel: `(rank, replicas)` of the replica whose shard this augmenter sees.
    shard: Option<(usize, usize)>,
    /// Whether the operations after the crop run on the host ([`Augmenter::with_host_ops`]).
    host_ops: bool,
}

impl Augmenter {
    /// The channels of the images the pipeline was built for ([`PipelineConfig::init`]).
    pub fn channels(&self) -> usize {
        self.channels
    }

    /// Makes this the augmenter of data-parallel replica `rank` of `replicas`, whose batches are
    /// its shard (rows `rank·n .. (rank+1)·n` of each global batch of `replicas·n` images): every
    /// random draw is made for the whole global batch, from the one-device stream, and the
    /// replica keeps its rows. The views are then those of a one-device run of the global batch,
    /// image for image, whatever the number of replicas (drawing parameters costs next to
    /// nothing; the pixels are only augmented for the shard).
    ///
    /// The self-paced AutoAugment draws its coins the same way; it learns from the replicas' mean
    /// loss, the same on every replica, so its magnitudes stay equal.
    ///
    /// # Errors
    /// A rank out of range.
    pub fn set_shard(&mut self, rank: usize, replicas: usize) -> Result<(), ConfigError> {
        if replicas == 0 || rank >= replicas {
            return Err(ConfigError::new(
                "devices",
                format!("replica {rank} of {replicas} does not exist"),
            ));
        }
        self.shard = (replicas > 1).then_some((rank, replicas));
        Ok(())
    }

    /// Runs each view's operations after the crop (flip, colour jitter, grayscale, blur,
    /// solarisation, normalisation) on the host, image by image on every core
    /// ([`crate::augment::host`]), instead of as tensor operations on the batch's device: for a
    /// backend that computes on the CPU, where it is several times faster (one pass per
    /// operation over an image in cache, against chains of whole-batch passes); off by default,
    /// for the GPU. The draws are the same either way, and so are the views but for f32
    /// rounding in the contrast's mean and the blur's sums. A self-paced AutoAugment sub-policy
    /// still runs as tensor operations (before a tensor normalisation).
    pub fn with_host_ops(mut self, on: bool) -> Self {
        self.host_ops = on;
        self
    }

    /// Whether the operations after the crop run on the host ([`Augmenter::with_host_ops`]).
    pub fn host_ops(&self) -> bool {
        self.host_ops
    }

    /// How many images to draw for a batch of `n` (the global batch under a shard), and this
    /// batch's first row among them.
    fn draw_span(&self, n: usize) -> (usize, usize) {
        match self.shard {
            Some((rank, replicas)) => (n * replicas, rank * n),
            None => (n, 0),
        }
    }

    /// This batch's `n` rows of draws made for [`Augmenter::draw_span`].
    fn own<T>(&self, all: Vec<T>, n: usize) -> Vec<T> {
        let (_, first) = self.draw_span(n);
        all.into_iter().skip(first).take(n).collect()
    }

    /// What the adaptive curricula learned (for checkpoints).
    pub fn state(&self) -> AugmenterState {
        AugmenterState {
            auto_augment: self.auto_augment.as_ref().map(|a| a.state().clone()),
        }
    }

    /// Restores a saved state.
    ///
    /// # Errors
    /// If the state does not belong to this configuration.
    pub fn load_state(&mut self, state: AugmenterState) -> Result<(), ConfigError> {
        match (&mut self.auto_augment, state.auto_augment) {
            (Some(a), Some(s)) => a.load_state(s),
            (None, None) => Ok(()),
            _ => Err(ConfigError::new(
                "auto_augment",
                "the saved state and the configuration disagree on whether it is on",
            )),
        }
    }

    /// Whether the views depend on the losses of earlier batches (the self-paced AutoAugment
    /// learns from them): such views cannot be drawn before the step before has run.
    pub fn is_adaptive(&self) -> bool {
        self.auto_augment.is_some()
    }

    /// Feeds the loss of a batch back to the adaptive curricula (the self-paced AutoAugment),
    /// with the [`TwoViews::policy`] the batch was augmented with.
    pub fn observe(&mut self, progress: Progress, policy: Option<PolicyChoice>, loss: f64) {
        if let (Some(a), Some(choice)) = (&mut self.auto_augment, policy) {
            a.observe(progress, choice, loss);
        }
    }

    /// The settings.
    pub fn config(&self) -> &PipelineConfig {
        &self.config
    }

    /// Sets the colour strength (the curriculum knob), checking it.
    pub fn set_strength(&mut self, strength: f64) -> Result<(), ConfigError> {
        let mut c = self.config.clone();
        c.strength = strength;
        c.validate(self.channels)?;
        self.config = c;
        Ok(())
    }

    /// Drives the mixup by a curriculum (for example one with a user's own scheduler); replaces
    /// the configured one.
    pub fn with_mixup_schedule(mut self, schedule: MixupSchedule) -> Self {
        self.config.mixup = None;
        self.mixup_schedule = Some(schedule);
        self
    }

    /// Applies one view's operations, drawing from `rng`.
    ///
    /// # Panics
    /// If `x` does not have the channel count given to [`PipelineConfig::init`].
    pub fn view<B: Backend>(
        &self,
        view: &ViewConfig,
        x: Tensor<B, 4>,
        rng: &mut StdRng,
    ) -> Tensor<B, 4> {
        self.view_at_strength(view, x, rng, 1.0)
    }

    /// As [`Augmenter::view`], with the colour jitter and the grayscale probability multiplied
    /// by `multiplier` (a strength curriculum's value).
    pub fn view_at_strength<B: Backend>(
        &self,
        view: &ViewConfig,
        x: Tensor<B, 4>,
        rng: &mut StdRng,
        multiplier: f64,
    ) -> Tensor<B, 4> {
        self.view_with(view, ViewInput::Tensor(x), rng, multiplier, None, None)
            .0
    }

    /// One view: the view's operations, then the AutoAugment sub-policy (if chosen), then the
    /// normalisation; with the geometry of each image (the draws are those of the operations
    /// themselves: reporting them draws nothing more).
    ///
    /// With `cut` (the boxes a streaming loader cut `x` from, in its originals' pixels), `x` is
    /// the view's crop already: the crop is not drawn again, and the geometry reports `cut`.
    fn view_with<B: Backend>(
        &self,
        view: &ViewConfig,
        input: ViewInput<'_, B>,
        rng: &mut StdRng,
        multiplier: f64,
        policy: Option<PolicyChoice>,
        cut: Option<&[CropBox]>,
    ) -> (Tensor<B, 4>, Vec<ViewGeometry>) {
        let [n, c, h, w] = match &input {
            ViewInput::Tensor(x) => x.dims(),
            ViewInput::Host(images, _) => images.dims(),
        };
        assert_eq!(
            c, self.channels,
            "the pipeline was built for {} channels",
            self.channels
        );
        let whole = CropBox {
            top: 0,
            left: 0,
            height: h,
            width: w,
        };
        let mut geometry = vec![
            ViewGeometry {
                crop: whole,
                flipped: false,
                output: [h, w],
            };
            n
        ];
        let mut input = input;
        let (all, _) = self.draw_span(n);
        if let Some(cut) = cut {
            for (g, b) in geometry.iter_mut().zip(cut) {
                g.crop = *b;
            }
        } else if let Some(crop) = &view.crop {
            let boxes = self.own(crop.sample(rng, all, h, w), n);
            let ViewInput::Tensor(x) = input else {
                unreachable!("views on the host come with their cuts")
            };
            input = ViewInput::Tensor(crop.apply(x, &boxes));
            for (g, b) in geometry.iter_mut().zip(&boxes) {
                g.crop = *b;
                g.output = [crop.size.0, crop.size.1];
            }
        }
        // Every draw first, in the pipeline's order (applying draws nothing), then the
        // operations, as tensor operations or on the host.
        let flip = view.hflip.map(|f| self.own(f.sample(rng, all), n));
        if let Some(flags) = &flip {
            for (g, &flip) in geometry.iter_mut().zip(flags) {
                g.flipped = flip;
            }
        }
        let jitter = view.jitter.map(|j| {
            let j = j.scaled(self.config.strength * multiplier);
            let params = j.sample(rng, all);
            let params = JitterParams {
                apply: self.own(params.apply, n),
                order: self.own(params.order, n),
                factors: self.own(params.factors, n),
            };
            (j, params)
        });
        let grayscale = view.grayscale.map(|g| {
            let g = RandomGrayscale {
                p: (g.p * multiplier).min(1.0),
            };
            let flags = self.own(g.sample(rng, all), n);
            (g, flags)
        });
        let blur = view.blur.map(|b| (b, self.own(b.sample(rng, all), n)));
        let solarize = view.solarize.map(|s| (s, self.own(s.sample(rng, all), n)));
        let policy = self.auto_augment.as_ref().zip(policy);
        let mut x = if self.host_ops {
            let kernels: Option<Vec<Option<Vec<f32>>>> = blur.as_ref().map(|(b, kernels)| {
                kernels
                    .iter()
                    .map(|k| (!b.is_identity(k)).then(|| k.iter().map(|&v| v as f32).collect()))
                    .collect()
            });
            let ops = HostView {
                flip: flip.as_deref(),
                jitter: jitter.as_ref().map(|(j, p)| HostJitter {
                    enabled: j.enabled(),
                    apply: &p.apply,
                    order: &p.order,
                    factors: &p.factors,
                }),
                grayscale: grayscale.as_ref().map(|(_, f)| f.as_slice()),
                blur: kernels.as_deref(),
                solarize: solarize.as_ref().map(|(s, f)| (s.threshold, f.as_slice())),
                // After a sub-policy, as tensor operations.
                normalize: view.normalize.as_ref().filter(|_| policy.is_none()),
            };
            match input {
                ViewInput::Tensor(x) => host::apply(x, &ops),
                ViewInput::Host(images, device) => host::apply_bytes(images, &ops, device),
            }
        } else {
            let mut x = match input {
                ViewInput::Tensor(x) => x,
                ViewInput::Host(images, device) => images.to_device(device),
            };
            if let (Some(f), Some(flags)) = (&view.hflip, &flip) {
                x = f.apply(x, flags);
            }
            if let Some((j, params)) = &jitter {
                x = j.apply(x, params);
            }
            if let Some((g, flags)) = &grayscale {
                x = g.apply(x, flags);
            }
            if let Some((b, kernels)) = &blur {
                x = b.apply(x, kernels);
            }
            if let Some((s, flags)) = &solarize {
                x = s.apply(x, flags);
            }
            x
        };
        if let Some((a, choice)) = policy {
            x = a.apply_rows(x, choice, rng, self.draw_span(n));
        }
        if let Some(nz) = &view.normalize {
            if !self.host_ops || policy.is_some() {
                x = nz.apply(x);
            }
        }
        (x, geometry)
    }

    /// The generator for batch `key` (independent of any earlier call).
    pub fn rng(&self, key: u64) -> StdRng {
        StdRng::seed_from_u64(mix_seed(self.config.seed, key))
    }

    /// Two views of the batch `x` (`[N, C, H, W]`, floats in `[0, 1]`), reproducible from
    /// `(seed, key)`. A mixup curriculum reads its value at step `key` of a one-epoch run; the
    /// trainer calls [`Augmenter::two_views_at`] with the real progress.
    pub fn two_views<B: Backend>(&self, x: Tensor<B, 4>, key: u64) -> TwoViews<B> {
        let step = key as usize;
        self.two_views_at(
            x,
            Progress {
                step,
                total_steps: step + 1,
                epoch: 0,
                total_epochs: 1,
            },
        )
    }

    /// Two views of the batch `x` at `progress` (draws keyed by `progress.step`): the scheduled
    /// knobs (the mixup curriculum) take their value at `progress` and are reported in
    /// [`TwoViews::knobs`].
    pub fn two_views_at<B: Backend>(&self, x: Tensor<B, 4>, progress: Progress) -> TwoViews<B> {
        self.redrawn_views(x, progress, 0)
    }

    /// As [`Augmenter::two_views_at`], for the `attempt`-th redraw of the batch (batch
    /// curation): attempt 0 is [`Augmenter::two_views_at`] itself; every other attempt draws
    /// from its own stream keyed by `(step, attempt)`.
    pub fn redrawn_views<B: Backend>(
        &self,
        x: Tensor<B, 4>,
        progress: Progress,
        attempt: usize,
    ) -> TwoViews<B> {
        self.redrawn_views_from(&ViewSource::Whole(x), progress, attempt)
    }

    /// As [`Augmenter::redrawn_views`], from whole images or from views a streaming loader cut
    /// when it decoded them ([`ViewSource::Cut`]: every operation but the crop, which was drawn
    /// there; a redraw changes everything but the crops).
    ///
    /// # Panics
    /// If a [`ViewSource::Cut`] does not hold one cut per view (2, plus the local crops).
    pub fn redrawn_views_from<B: Backend>(
        &self,
        source: &ViewSource<B>,
        progress: Progress,
        attempt: usize,
    ) -> TwoViews<B> {
        let locals_wanted = self.config.local_crops.as_ref().map_or(0, |l| l.count);
        let cuts = match source {
            ViewSource::Whole(_) => None,
            ViewSource::Cut(cuts) => Some(cuts.len()),
            ViewSource::HostCut { views, .. } => Some(views.len()),
        };
        if let Some(cuts) = cuts {
            assert_eq!(
                cuts,
                2 + locals_wanted,
                "one cut per view: 2 global views and {locals_wanted} local crops"
            );
        }
        let input = |v: usize| -> (ViewInput<'_, B>, Option<&[CropBox]>) {
            match source {
                ViewSource::Whole(x) => (ViewInput::Tensor(x.clone()), None),
                ViewSource::Cut(cuts) => (
                    ViewInput::Tensor(cuts[v].0.clone()),
                    Some(cuts[v].1.as_slice()),
                ),
                ViewSource::HostCut { views, device } => (
                    ViewInput::Host(&views[v].0, device),
                    Some(views[v].1.as_slice()),
                ),
            }
        };
        let key = match attempt {
            0 => progress.step as u64,
            a => mix_seed(progress.step as u64, a as u64),
        };
        let mut rng = self.rng(key);
        let n = source.len();
        let mut knobs = Vec::new();
        let multiplier = match &self.config.strength_curriculum {
            Some(c) => {
                let m = c.multiplier(progress);
                knobs.push(("strength", m));
                m
            }
            None => 1.0,
        };
        let policy = self.auto_augment.as_ref().map(|a| {
            let choice = a.choose(progress, &mut rng);
            knobs.push(("aa_policy", choice.index as f64));
            knobs.push(("aa_magnitude", choice.magnitude));
            choice
        });
        let (x1, cut1) = input(0);
        let (view1, geometry1) =
            self.view_with(&self.config.view1, x1, &mut rng, multiplier, policy, cut1);
        let (x2, cut2) = input(1);
        let (view2, geometry2) =
            self.view_with(&self.config.view2, x2, &mut rng, multiplier, policy, cut2);
        let geometry = [geometry1, geometry2];
        let mixup = match &self.mixup_schedule {
            Some(schedule) => {
                let draw = schedule.draw(progress, &mut rng);
                knobs.push((schedule.knob(), draw.scheduled));
                if schedule.mode() == MixupCurriculum::BetaAlpha {
                    knobs.push(("mixup_lambda", draw.lambda));
                }
                Some(Mixup {
                    lambda: MixupLambda::Fixed(draw.lambda),
                })
            }
            None => self.config.mixup,
        };
        let (view2, lambdas) = match mixup {
            Some(m) => {
                let lambdas = self.own(m.sample(&mut rng, self.draw_span(n).0), n);
                (m.apply(view1.clone(), view2, &lambdas), Some(lambdas))
            }
            None => (view2, None),
        };
        // The local crops draw last: a pipeline without them draws as it always did.
        let locals = match &self.config.local_crops {
            Some(l) => (0..l.count)
                .map(|i| {
                    let (xi, cut) = input(2 + i);
                    self.view_with(&l.view, xi, &mut rng, multiplier, policy, cut)
                        .0
                })
                .collect(),
            None => Vec::new(),
        };
        TwoViews {
            view1,
            view2,
            lambdas,
            knobs,
            policy,
            geometry,
            locals,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::augment::crop::resized_crop;
    use crate::augment::flip::hflip_where;
    use burn::backend::NdArray;
    use burn::tensor::TensorData;

    /// f64, as every unit test of the crate: NdArray's float precision is shared by the tests of
    /// one binary, and the f64 gradient checks need it.
    type B = NdArray<f64>;

    fn images(n: usize, h: usize, w: usize) -> Tensor<B, 4> {
        let v: Vec<f64> = (0..n * h * w)
            .map(|i| ((i * 37) % 101) as f64 / 100.0)
            .collect();
        Tensor::from_data(TensorData::new(v, [n, 1, h, w]), &Default::default())
    }

    fn host(x: Tensor<B, 4>) -> Vec<f64> {
        x.into_data().to_vec().unwrap()
    }

    /// Crops and flips only (the operations that move pixels), then the normalisation.
    fn geometric(side: usize) -> PipelineConfig {
        let mut p = PipelineConfig::simclr(side, 1);
        for v in [&mut p.view1, &mut p.view2] {
            v.jitter = None;
            v.grayscale = None;
            v.blur = None;
            v.solarize = None;
        }
        p.view2.crop = Some(RandomResizedCrop::new(6));
        p.seed = 5;
        p
    }

    /// The geometry is what the operations drew (the same generator, drawn in the same order,
    /// gives the same boxes and flags), and it rebuilds each view from the input images.
    #[test]
    fn geometry_reports_the_drawn_crops_and_flips() {
        let (n, h, w) = (6, 10, 10);
        let aug = geometric(h).init(1).unwrap();
        let x = images(n, h, w);
        let views = aug.two_views(x.clone(), 3);
        let config = aug.config().clone();
        let mut rng = aug.rng(3);
        for (v, view) in [&config.view1, &config.view2].into_iter().enumerate() {
            let crop = view.crop.unwrap();
            let boxes = crop.sample(&mut rng, n, h, w);
            let flags = view.hflip.unwrap().sample(&mut rng, n);
            let got = &views.geometry[v];
            assert_eq!(got.len(), n);
            for i in 0..n {
                assert_eq!(got[i].crop, boxes[i], "view {v} image {i}");
                assert_eq!(got[i].flipped, flags[i], "view {v} image {i}");
                assert_eq!(got[i].output, [crop.size.0, crop.size.1]);
            }
            let rebuilt = view.normalize.as_ref().unwrap().apply(hflip_where(
                resized_crop(x.clone(), &boxes, crop.size.0, crop.size.1),
                &flags,
            ));
            let view_pixels = if v == 0 {
                views.view1.clone()
            } else {
                views.view2.clone()
            };
            assert_eq!(host(view_pixels), host(rebuilt), "view {v}");
        }
        // Second view of another size: its own output size.
        assert_eq!(views.geometry[1][0].output, [6, 6]);
        assert!(views.geometry[0].iter().any(|g| g.flipped));
        assert!(views.geometry[0].iter().any(|g| !g.flipped));
    }

    /// Views cut at decode time skip the crop: each view is its cut, flipped by the flags the
    /// generator draws first (no crop is drawn before them), and the geometry reports the cut's
    /// boxes (in the originals' pixels) and the cut's size.
    #[test]
    fn views_cut_at_decode_time_are_not_cropped_again() {
        let n = 4;
        let aug = geometric(10).init(1).unwrap();
        let cut1 = images(n, 10, 10);
        let cut2 = images(n, 6, 6).mul_scalar(0.5);
        let boxes: Vec<CropBox> = (0..n)
            .map(|i| CropBox {
                top: i,
                left: 2 * i,
                height: 30 + i,
                width: 40,
            })
            .collect();
        let source = ViewSource::Cut(vec![
            (cut1.clone(), boxes.clone()),
            (cut2.clone(), boxes.clone()),
        ]);
        let progress = Progress {
            step: 7,
            total_steps: 8,
            epoch: 0,
            total_epochs: 1,
        };
        let views = aug.redrawn_views_from(&source, progress, 0);
        let config = aug.config().clone();
        let mut rng = aug.rng(7);
        for (v, (view, cut)) in [(&config.view1, cut1), (&config.view2, cut2)]
            .into_iter()
            .enumerate()
        {
            let flags = view.hflip.unwrap().sample(&mut rng, n);
            let side = cut.dims()[2];
            for i in 0..n {
                assert_eq!(views.geometry[v][i].crop, boxes[i]);
                assert_eq!(views.geometry[v][i].output, [side, side]);
                assert_eq!(views.geometry[v][i].flipped, flags[i]);
            }
            let rebuilt = view
                .normalize
                .as_ref()
                .unwrap()
                .apply(hflip_where(cut, &flags));
            let got = if v == 0 {
                views.view1.clone()
            } else {
                views.view2.clone()
            };
            assert_eq!(host(got), host(rebuilt), "view {v}");
        }
    }

    /// A view without a crop comes from the whole image, at the input size.
    #[test]
    fn a_view_without_a_crop_reports_the_whole_image() {
        let mut p = geometric(8);
        p.view1.crop = None;
        p.view1.hflip = None;
        let aug = p.init(1).unwrap();
        let views = aug.two_views(images(3, 8, 7), 0);
        for g in &views.geometry[0] {
            assert_eq!(
                *g,
                ViewGeometry {
                    crop: CropBox {
                        top: 0,
                        left: 0,
                        height: 8,
                        width: 7
                    },
                    flipped: false,
                    output: [8, 7],
                }
            );
        }
    }

    /// Replicas' shards get the views of the one-device batch, image for image, with every
    /// random operation of SimCLR's and BYOL's pipelines, mixup and the self-paced AutoAugment.
    #[test]
    fn shards_draw_the_views_of_the_whole_batch() {
        let (n, side) = (6, 12);
        let x = images(n, side, side);
        for mut config in [
            PipelineConfig::simclr(side, 1),
            PipelineConfig::byol(side, 1),
        ] {
            config.mixup = Some(Mixup {
                lambda: MixupLambda::Beta { alpha: 1.0 },
            });
            let whole = config.clone().init(1).unwrap().two_views(x.clone(), 7);
            for replicas in [2usize, 3] {
                let shard = n / replicas;
                let (mut v1, mut v2, mut lambdas) = (Vec::new(), Vec::new(), Vec::new());
                for rank in 0..replicas {
                    let mut aug = config.clone().init(1).unwrap();
                    aug.set_shard(rank, replicas).unwrap();
                    let views = aug.two_views(x.clone().narrow(0, rank * shard, shard), 7);
                    v1.extend(host(views.view1));
                    v2.extend(host(views.view2));
                    lambdas.extend(views.lambdas.unwrap());
                    assert_eq!(
                        views.geometry[0][..],
                        whole.geometry[0][rank * shard..(rank + 1) * shard]
                    );
                }
                assert_eq!(v1, host(whole.view1.clone()), "{replicas} replicas");
                assert_eq!(v2, host(whole.view2.clone()), "{replicas} replicas");
                assert_eq!(&lambdas, whole.lambdas.as_ref().unwrap());
            }
        }
        // The self-paced AutoAugment's coins too (magnitudes raised so that its operations
        // act), at several steps.
        let mut aa = PipelineConfig::simclr(side, 1);
        aa.auto_augment = Some(SelfPacedAutoAugmentConfig::new().with_initial_magnitude(0.6));
        for step in 0..4 {
            let whole = aa.clone().init(1).unwrap().two_views(x.clone(), step);
            let mut v1 = Vec::new();
            for rank in 0..2 {
                let mut aug = aa.clone().init(1).unwrap();
                aug.set_shard(rank, 2).unwrap();
                v1.extend(host(
                    aug.two_views(x.clone().narrow(0, rank * 3, 3), step).view1,
                ));
            }
            assert_eq!(v1, host(whole.view1), "AutoAugment, step {step}");
        }
        let err = aa.init(1).unwrap().set_shard(2, 2).unwrap_err();
        assert_eq!(err.field, "devices");
    }

    /// Multi-crop: the local crops come at their own size, as many as asked, each with its own
    /// draws; the global views are those the pipeline draws without local crops (the local
    /// crops draw last); replicas' shards get the whole batch's local crops, image for image.
    #[test]
    fn local_crops_draw_after_the_global_views_and_shard_like_them() {
        let (n, side) = (6, 28);
        let x = images(n, side, side);
        let config = PipelineConfig::multi_crop(Preset::Byol, side, 1, 3, (0.4, 1.0), (0.05, 0.4));
        let local = config.local_crops.clone().unwrap();
        assert_eq!(local.count, 3);
        assert_eq!(local.view.crop.unwrap().size, (12, 12));
        assert_eq!(local.view.solarize, None);
        assert_eq!(local.view.blur.unwrap().p, 0.5);
        assert_eq!(config.view1.crop.unwrap().scale, (0.4, 1.0));
        let views = config.clone().init(1).unwrap().two_views(x.clone(), 5);
        assert_eq!(views.locals.len(), 3);
        for l in &views.locals {
            assert_eq!(l.dims(), [n, 1, 12, 12]);
        }
        assert_ne!(host(views.locals[0].clone()), host(views.locals[1].clone()));
        let mut two = config.clone();
        two.local_crops = None;
        let plain = two.init(1).unwrap().two_views(x.clone(), 5);
        assert!(plain.locals.is_empty());
        assert_eq!(host(plain.view1), host(views.view1.clone()));
        assert_eq!(host(plain.view2), host(views.view2.clone()));
        for rank in 0..2 {
            let mut aug = config.clone().init(1).unwrap();
            aug.set_shard(rank, 2).unwrap();
            let shard = aug.two_views(x.clone().narrow(0, rank * 3, 3), 5);
            for (mine, whole) in shard.locals.iter().zip(&views.locals) {
                assert_eq!(
                    host(mine.clone()),
                    host(whole.clone().narrow(0, rank * 3, 3))
                );
            }
        }
        let mut bad = config.clone();
        bad.local_crops.as_mut().unwrap().count = 0;
        assert_eq!(bad.init(1).unwrap_err().field, "local_crops.count");
        let mut bad = config;
        bad.local_crops.as_mut().unwrap().view.crop = None;
        assert_eq!(bad.init(1).unwrap_err().field, "local_crops.view.crop");
    }
}
