//! The two shapes of a method's network (documented on `Projected`).

use burn::prelude::*;
use curriculum_ssl_models::Backbone;

use super::momentum::MomentumEncoder;
use super::ssl_method::HasBackbone;
use crate::base::error::ConfigError;
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

    /// An online network of a backbone made by `backbone`, the projector `projector` gives for
    /// the backbone's feature width and the predictor `predictor`, and the momentum copy of its
    /// encoder (backbone and projector, built the same way, the online weights loaded into it;
    /// momentum `base_momentum` rising to 1 along a cosine): BYOL's and MoCo v3's networks. The
    /// online network's size is checked and its weights drawn before the copy's.
    ///
    /// # Errors
    /// A zero width in a head, a network too large to draw, or a momentum outside `[0, 1]`
    /// (named `base_momentum`).
    pub fn with_momentum_copy(
        backbone: impl Fn(&B::Device) -> M,
        projector: impl Fn(usize) -> MlpHeadConfig,
        predictor: &MlpHeadConfig,
        base_momentum: f64,
        device: &B::Device,
    ) -> Result<(Self, MomentumEncoder<Projected<B, M>>), ConfigError> {
        let online_backbone = backbone(device);
        let projector = projector(online_backbone.feature_dim());
        let online = Self {
            backbone: online_backbone,
            projector: projector.init(device)?,
            predictor: predictor.init(device)?,
        };
        crate::base::seed::check_size(&online, "the online network")?;
        crate::base::seed::materialise(&online);
        let fresh = Projected {
            backbone: backbone(device),
            projector: projector.init(device)?,
        };
        let momentum = MomentumEncoder::new(
            &online.encoder(),
            fresh,
            base_momentum,
            true,
            "base_momentum",
        )?;
        Ok((online, momentum))
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
