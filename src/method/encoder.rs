//! The two shapes of a method's network (documented on `Projected`).

use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::{Backbone, TrainableBackbone};

use super::branches::ViewThreads;
use super::momentum::MomentumEncoder;
use super::ssl_method::{HasBackbone, MethodOutput};
use crate::base::error::ConfigError;
use crate::base::Progress;
use crate::head::{MlpHead, MlpHeadConfig};

/// A backbone and a projection head: the projections of a batch.
///
/// The two shapes of a method's network, shared by every method that has them: an encoder
/// ([`Projected`]: backbone + projector; SimCLR, MoCo, TiCo, Barlow Twins, VICReg, and the
/// momentum copies of BYOL and MoCo v3) and an encoder with a predictor ([`Predicted`]: BYOL,
/// SimSiam, MoCo v3, NNCLR). A method's record keys are its fields' names (`backbone`,
/// `projector`, `predictor`), so checkpoints written when each method had a struct of its own
/// load into these (`tests/methods.rs` reads a checkpoint of that layout).
///
/// lightly and solo-learn write the same two shapes out in every method (`backbone`,
/// `projection_head`, `prediction_head`); here they are two types.
#[derive(Module, Debug)]
pub struct Projected<B: Backend, M> {
    /// Feature extractor.
    pub backbone: M,
    /// Projection head.
    pub projector: MlpHead<B>,
}

impl<B: Backend, M> HasBackbone<M> for Projected<B, M> {
    fn backbone(&self) -> &M {
        &self.backbone
    }
}

impl<B: Backend, M: Backbone<B>> Projected<B, M> {
    /// An online network of a backbone made by `backbone` and the projector `projector` gives
    /// for the backbone's feature width, and its momentum copy (built the same way, the online
    /// weights loaded into it; momentum `base_momentum` rising to 1 along a cosine): TiCo's,
    /// ReSSL's and MMCR's networks.
    ///
    /// # Errors
    /// A zero width in the projector, or a momentum outside `[0, 1]` (named `base_momentum`).
    pub fn with_momentum_copy(
        backbone: impl Fn(&B::Device) -> M,
        projector: impl Fn(usize) -> MlpHeadConfig,
        base_momentum: f64,
        device: &B::Device,
    ) -> Result<(Self, MomentumEncoder<Self>), ConfigError> {
        let online_backbone = backbone(device);
        let projector = projector(online_backbone.feature_dim());
        let online = Self {
            backbone: online_backbone,
            projector: projector.init(device)?,
        };
        let fresh = Self {
            backbone: backbone(device),
            projector: projector.init(device)?,
        };
        let momentum = MomentumEncoder::new(&online, fresh, base_momentum, true, "base_momentum")?;
        Ok((online, momentum))
    }

    /// The projections of a batch.
    ///
    /// # Shapes
    /// - `images`: `[N, C, H, W]` → `[N, output_dim]`
    pub fn forward(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        self.projector
            .forward(self.backbone.forward_features(images))
    }

    /// The projections of `groups` equal batches stacked along the first axis (a method's
    /// views of one batch), each as [`Projected::forward`] gives it on its own
    /// ([`Backbone::forward_features_grouped`], [`MlpHead::forward_grouped`]).
    ///
    /// # Shapes
    /// - `images`: `[groups · N, C, H, W]` → `[groups · N, output_dim]`
    pub fn forward_grouped(&self, images: Tensor<B, 4>, groups: usize) -> Tensor<B, 2> {
        self.projector.forward_grouped(
            self.backbone.forward_features_grouped(images, groups),
            groups,
        )
    }
}

/// A backbone, a projection head and a prediction head on the projections.
#[derive(Module, Debug)]
pub struct Predicted<B: Backend, M> {
    /// Feature extractor.
    pub backbone: M,
    /// Projection head.
    pub projector: MlpHead<B>,
    /// Prediction head.
    pub predictor: MlpHead<B>,
}

impl<B: Backend, M> HasBackbone<M> for Predicted<B, M> {
    fn backbone(&self) -> &M {
        &self.backbone
    }
}

impl<B: Backend, M: Backbone<B>> Predicted<B, M> {
    /// The projections of a batch.
    ///
    /// # Shapes
    /// - `images`: `[N, C, H, W]` → `[N, output_dim]`
    pub fn project(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        self.projector
            .forward(self.backbone.forward_features(images))
    }

    /// The projections of a batch and the predictions from them.
    ///
    /// # Shapes
    /// - `images`: `[N, C, H, W]` → (`[N, output_dim]`, `[N, prediction_dim]`)
    pub fn forward(&self, images: Tensor<B, 4>) -> (Tensor<B, 2>, Tensor<B, 2>) {
        self.forward_grouped(images, 1)
    }

    /// The projections and predictions of `groups` equal batches stacked along the first axis,
    /// each as [`Predicted::forward`] gives it on its own ([`Projected::forward_grouped`]).
    ///
    /// # Shapes
    /// - `images`: `[groups · N, C, H, W]` → (`[groups · N, output_dim]`,
    ///   `[groups · N, prediction_dim]`)
    pub fn forward_grouped(
        &self,
        images: Tensor<B, 4>,
        groups: usize,
    ) -> (Tensor<B, 2>, Tensor<B, 2>) {
        let z = self.projector.forward_grouped(
            self.backbone.forward_features_grouped(images, groups),
            groups,
        );
        let p = self.predictor.forward_grouped(z.clone(), groups);
        (z, p)
    }

    /// The network of `backbone`, `projector` and the predictor `predictor` builds.
    ///
    /// # Errors
    /// A zero width in the predictor.
    pub(crate) fn with_predictor(
        backbone: M,
        projector: MlpHead<B>,
        predictor: &MlpHeadConfig,
        device: &B::Device,
    ) -> Result<Self, ConfigError> {
        Ok(Self {
            backbone,
            projector,
            predictor: predictor.init(device)?,
        })
    }

    /// The encoder without its predictor (sharing its tensors: the source of a momentum copy,
    /// [`MomentumEncoder::new`](super::MomentumEncoder::new)).
    pub fn encoder(&self) -> Projected<B, M> {
        Projected {
            backbone: self.backbone.clone(),
            projector: self.projector.clone(),
        }
    }
}

/// An online network `online` makes of a backbone made by `backbone` and the projector
/// `projector` gives for the backbone's feature width (its size checked and its weights drawn),
/// and the momentum copy `copy` makes of it with a fresh encoder (backbone and projector, built
/// the same way): BYOL's and MoCo v3's networks ([`PredictedWithCopy`]), SMoG's and All4One's.
///
/// # Errors
/// A zero width in the projector, a network too large to draw, or what `online` or `copy`
/// refuse.
pub(crate) fn online_with_copy<B: Backend, M: Backbone<B>, N: Module<B>>(
    backbone: impl Fn(&B::Device) -> M,
    projector: impl Fn(usize) -> MlpHeadConfig,
    online: impl FnOnce(M, MlpHead<B>) -> Result<N, ConfigError>,
    copy: impl FnOnce(&N, Projected<B, M>) -> Result<MomentumEncoder<Projected<B, M>>, ConfigError>,
    device: &B::Device,
) -> Result<(N, MomentumEncoder<Projected<B, M>>), ConfigError> {
    let online_backbone = backbone(device);
    let projector = projector(online_backbone.feature_dim());
    let online = online(online_backbone, projector.init(device)?)?;
    crate::base::seed::check_size(&online, "the online network")?;
    crate::base::seed::materialise(&online);
    let fresh = Projected {
        backbone: backbone(device),
        projector: projector.init(device)?,
    };
    let copy = copy(&online, fresh)?;
    Ok((online, copy))
}

/// An online [`Predicted`] network, the momentum copy of its encoder (backbone and projector) and
/// the two views' passes through them: BYOL's online network and target, MoCo v3's query and
/// momentum encoders. Build it with [`PredictedWithCopy::new`], run a step with
/// [`PredictedWithCopy::step`]; `predicted_with_copy!(field)` writes a method's `SslMethod` items
/// that reach it.
#[derive(Debug, Clone)]
pub struct PredictedWithCopy<B: Backend, M: Backbone<B>> {
    /// The online network.
    pub(crate) online: Predicted<B, M>,
    /// The momentum copy of its encoder.
    pub(crate) copy: MomentumEncoder<Projected<B, M>>,
    /// The two views' online passes back-propagated on two threads, when on.
    pub(crate) view_threads: ViewThreads<B, Predicted<B, M>>,
}

impl<B: Backend, M: Backbone<B>> PredictedWithCopy<B, M> {
    /// An online network of a backbone made by `backbone`, the projector `projector` gives for
    /// the backbone's feature width and the predictor `predictor`, and the momentum copy of its
    /// encoder (backbone and projector, built the same way, the online weights loaded into it;
    /// momentum `base_momentum` rising to 1 along a cosine). The online network's size is checked
    /// and its weights drawn before the copy's.
    ///
    /// # Errors
    /// A zero width in a head, a network too large to draw, or a momentum outside `[0, 1]`
    /// (named `base_momentum`).
    pub fn new(
        backbone: impl Fn(&B::Device) -> M,
        projector: impl Fn(usize) -> MlpHeadConfig,
        predictor: &MlpHeadConfig,
        base_momentum: f64,
        device: &B::Device,
    ) -> Result<Self, ConfigError> {
        let (online, copy) = online_with_copy(
            backbone,
            projector,
            |backbone, projector| Predicted::with_predictor(backbone, projector, predictor, device),
            |online, fresh| {
                let encoder = online.encoder();
                MomentumEncoder::new(&encoder, fresh, base_momentum, true, "base_momentum")
            },
            device,
        )?;
        Ok(Self {
            online,
            copy,
            view_threads: ViewThreads::default(),
        })
    }

    /// The momentum copy: its network and its momentum schedule.
    pub fn copy(&self) -> &MomentumEncoder<Projected<B, M>> {
        &self.copy
    }

    /// After an optimiser step: the copy moves towards the online encoder
    /// ([`MomentumEncoder::update`]).
    pub fn update(&mut self, progress: Progress) {
        self.copy.update(&self.online, progress);
    }
}

impl<B: AutodiffBackend, M: TrainableBackbone<B>> PredictedWithCopy<B, M> {
    /// A step on two views: the online predictions of the two views (on the view threads when
    /// they are on, as `ViewThreads::passes` runs them) and the copy's projections of them
    /// (detached) into `loss`; the step's output is that loss, the copy's momentum at
    /// `progress` (the `momentum` column) and the copy's projections as the step's embeddings.
    ///
    /// # Shapes
    /// - `views`: two `[N, C, H, W]`; `loss` receives two `[N, prediction_dim]` and two
    ///   `[N, output_dim]`
    pub fn step(
        &mut self,
        views: [Tensor<B, 4>; 2],
        progress: Progress,
        loss: impl FnOnce([Tensor<B, 2>; 2], [Tensor<B, 2>; 2]) -> Tensor<B, 1>,
    ) -> MethodOutput<B> {
        let (predictions, _) =
            self.view_threads
                .passes(&self.online, views.clone(), true, |net, x, groups| {
                    (net.forward_grouped(x, groups).1, ())
                });
        self.copy_step(views, progress, |projections| {
            loss(predictions, projections)
        })
    }

    /// [`PredictedWithCopy::step`] with the online predictions stacked, `[p1; p2]`, when the
    /// views go through the networks as one batch
    /// ([`ViewThreads::stacked`](super::branches::ViewThreads::stacked)): `loss` receives them,
    /// not split (on a fusion backend the split's slices under autodiff and the gradient's
    /// copies back into one tensor cost operations of the stream), and the copy's projections
    /// of the two views (detached, split as in [`PredictedWithCopy::step`]). `Err` with the
    /// views otherwise, for [`PredictedWithCopy::step`].
    ///
    /// # Shapes
    /// - `views`: two `[N, C, H, W]`; `loss` receives `[2N, prediction_dim]` and two
    ///   `[N, output_dim]`
    pub fn step_stacked(
        &mut self,
        views: [Tensor<B, 4>; 2],
        progress: Progress,
        loss: impl FnOnce(Tensor<B, 2>, [Tensor<B, 2>; 2]) -> Tensor<B, 1>,
    ) -> Result<MethodOutput<B>, [Tensor<B, 4>; 2]> {
        let predictions =
            match self
                .view_threads
                .stacked(&self.online, views.clone(), |net, x, groups| {
                    net.forward_grouped(x, groups).1
                }) {
                Ok(predictions) => predictions,
                Err(_) => return Err(views),
            };
        Ok(self.copy_step(views, progress, |projections| {
            loss(predictions, projections)
        }))
    }

    /// The copy's projections of `views` (detached) into `loss`, and the step's output: that
    /// loss, the copy's momentum at `progress` and the projections as the step's embeddings.
    fn copy_step(
        &mut self,
        views: [Tensor<B, 4>; 2],
        progress: Progress,
        loss: impl FnOnce([Tensor<B, 2>; 2]) -> Tensor<B, 1>,
    ) -> MethodOutput<B> {
        let copy = self.copy.network();
        let projections = self.view_threads.both(views, |x, groups| {
            copy.forward_grouped(x.detach(), groups).detach()
        });
        let embeddings = projections.clone();
        self.copy.output(loss(projections), progress, embeddings)
    }

    /// The method became one replica of a data-parallel run: the views' passes stay on its
    /// thread (`ViewThreads::replicated`).
    pub(crate) fn replicated(&mut self) {
        self.view_threads.replicated();
    }
}

/// The [`SslMethod`](super::SslMethod) items of a method whose networks are the
/// [`PredictedWithCopy`] in its field `$networks`: `online_in!` on its online network and view
/// threads, and `after_step` moving the copy ([`PredictedWithCopy::update`]). Written inside the
/// `impl SslMethod for …` block.
macro_rules! predicted_with_copy {
    ($networks:ident) => {
        $crate::method::ssl_method::online_in!($networks.online, $networks.view_threads);

        fn after_step(&mut self, progress: $crate::base::Progress) {
            self.$networks.update(progress);
        }
    };
}
pub(crate) use predicted_with_copy;
