//! SSL methods ("frameworks"), one file each, behind one trait, [`SslMethod`]: what every
//! self-supervised method is to the training loop. With it: the [`MethodOutput`] of a step, the
//! [`HasBackbone`] view of a method's networks, and [`init_method`], which builds one
//! reproducibly from a seed. Each method's type below holds its paper, what it does and where its
//! math, defaults and worked values are (`docs/methods.md`).
//!
//! The pieces the methods share:
//! - the networks' two shapes: [`Projected`] (backbone + projector) and [`Predicted`] (with a
//!   predictor); [`PredictedWithCopy`]: a `Predicted` network, the momentum copy of its encoder
//!   and the two views' passes (BYOL's and MoCo v3's);
//! - the momentum copy ([`MomentumEncoder`]), on the EMA update ([`ema_update`],
//!   [`detached_copy`], [`cosine_momentum`]); [`TargetState`], the checkpoint of a method whose
//!   only state is its copy (BYOL, MSN);
//! - the key queue ([`KeyQueue`]);
//! - the masked-image methods' patch masks: which patch tokens of each image the encoder sees,
//!   the gather of the visible tokens and its inverse ([`PatchMask`], MAE's), and masks of
//!   square units that stay in place ([`UnitMask`], SimMIM's); where a step's masks come from
//!   ([`StepMasks`]); the pixels per patch ([`patchify`]) and the fixed 2-D sine-cosine
//!   positions ([`sine_cosine_2d`]);
//! - the views' passes ([`ViewPasses`], on [`fresh_leaves`]);
//! - SMoG's k-means of its memory bank on the rows' device ([`device_kmeans`]);
//! - SimCLR's PGD-hardened negatives (MICO: [`Pgd`], from [`PgdConfig`]) and VIbCReg's
//!   whitening ([`IterNorm`]).
//!
//! The methods:
//! - [`SimClr`]: SimCLR, with NT-Xent, HCL, curricular weighting, Huber NT-Xent, DCL / DCLW or
//!   MACL (and PGD-hardened negatives); [`SupCon`]: supervised contrastive learning (the batch's
//!   labels choose the positives).
//! - [`Moco`]: MoCo v1 / v2 and Light-MoCo (symmetric SoftNCE); [`MocoV3`]: MoCo v3.
//! - [`Byol`]: BYOL; [`SimSiam`]: SimSiam; [`NnClr`]: NNCLR; [`NnByol`] and [`NnSiam`]: BYOL
//!   and SimSiam with NNCLR's nearest-neighbour targets; [`All4One`]: All4One (NNCLR's
//!   neighbour term, a transformer's centroid of the neighbours, a feature-wise term);
//!   [`ReSsl`]: ReSSL; [`Tico`]: TiCo.
//! - [`ProjectedPair`]: two views through one network and a loss of the pair:
//!   [`BarlowTwins`], [`VicReg`], [`VibcReg`] (its projections whitened),
//!   [`Wmse`] (W-MSE: sub-batches whitened by a Cholesky factor), [`FroSsl`] and
//!   [`DirectClr`] (the backbone alone); [`VicRegL`]: VICRegL (VICReg on the global
//!   projections and on local ones matched by feature distance and by location); [`DetCon`]:
//!   DetConS and DetConB (contrastive detection: the feature map pooled over the regions of a
//!   grid carried through each view's crop and flip).
//! - [`EmpSsl`]: EMP-SSL (the coding rate of many patches, each towards its image's mean).
//! - [`SlicedViews`]: every view through one network and an objective of all their projections
//!   along random directions: [`LeJepa`] (SIGReg and invariance, multi-crop, no teacher) and
//!   [`VisReg`] (LeJEPA with centre, scale and a sliced-Wasserstein shape term instead of SIGReg);
//!   [`Mmcr`]: MMCR (nuclear norms of `k` views, momentum network).
//! - [`Swav`]: SwAV; [`Dino`]: DINO (both with multi-crop); [`Ibot`]: iBOT and DINOv2's
//!   objective.
//! - [`Smog`]: SMoG (synchronous momentum grouping: predictions classified against group
//!   features moved by the online projections, the momentum projections' groups as targets;
//!   the groups reset by a k-means of a memory bank on the device).
//! - [`DeepClusterV2`]: DeepCluster v2 (each view's projection classified into its image's
//!   cluster of a k-means of last epoch's projections, by dataset index, per head of prototypes).
//! - [`RotNet`]: rotation prediction (MICO's rotation curricula).
//! - [`Mae`]: MAE; [`SimMim`]: SimMIM; [`Hpm`]: hard patches mining on MAE; [`Ijepa`]: I-JEPA
//!   (joint-embedding prediction); [`Msn`]: MSN and PMSN (masked siamese networks);
//!   [`Aim`]: AIM (autoregressive pixel prediction under prefix-causal attention); [`Capi`]: CAPI
//!   (the clusters an online-clustering teacher assigns the hidden patches, predicted from one
//!   visible block by a cross-attention predictor with rotary positions).
//!
//! A method owns its networks and states. Its trainable part is one module,
//! [`SslMethod::online`]; everything else (key / target networks, queue, loss states) is updated
//! by [`SslMethod::after_step`] once the optimiser has stepped. A training loop therefore reads:
//!
//! ```text
//! let out = method.forward(views, progress);                  // loss + statistics
//! let grads = method.gradients(&out.loss);                    // backward
//! method.set_online(optimiser.step(lr, method.take_online(), grads)); // handed over
//! method.after_step(progress);                                  // EMA, queue
//! ```
//! and never needs to know which method it runs. Any backbone implementing
//! [`Backbone`](curriculum_ssl_models::Backbone) plugs into any method — a user's own network too.

mod aim;
mod aim_head;
mod all4one;
mod all4one_transformer;
mod barlow_twins;
mod branches;
mod byol;
mod capi;
mod capi_predictor;
mod deepcluster_v2;
mod detcon;
mod dino;
mod directclr;
mod ema;
mod emp_ssl;
mod encoder;
mod frossl;
mod hpm;
mod ibot;
mod ijepa;
mod ijepa_masks;
mod ijepa_predictor;
mod iter_norm;
mod lejepa;
mod mae;
mod mae_decoder;
mod masking;
mod mmcr;
mod moco;
mod moco_v3;
mod momentum;
mod msn;
mod nnbyol;
mod nnclr;
mod nnsiam;
mod pgd;
mod projected_pair;
mod queue;
mod ressl;
mod rotnet;
mod running;
mod simclr;
mod simmim;
mod simsiam;
mod sliced_views;
mod smog;
mod ssl_method;
mod supcon;
mod swav;
#[cfg(test)]
pub(crate) mod testing;
mod tico;
mod vibcreg;
mod vicreg;
mod vicregl;
mod visreg;
mod wmse;

pub use aim::{Aim, AimConfig, AimNetwork};
pub use aim_head::{AimHead, AimHeadBlock};
pub use all4one::{All4One, All4OneConfig, All4OneNetwork, All4OneState};
pub use all4one_transformer::{positional_table, sequences, All4OneTransformer, EncoderLayer};
pub use barlow_twins::{BarlowTwins, BarlowTwinsConfig};
pub use branches::{fresh_leaves, ViewPasses};
pub use byol::{Byol, ByolConfig};
pub use capi::{Capi, CapiConfig, CapiHead, CapiNetwork, CapiTerms};
pub use capi_predictor::{rope_table, CapiPredictor, RopeCrossBlock};
pub use deepcluster_v2::{DeepClusterV2, DeepClusterV2Config, DeepClusterV2State};
pub use detcon::{
    grid_regions, pooling_weights, region_slots, union_box, DetCon, DetConConfig, DetConEncoder,
    DetConNetwork, DetConState, DetConVariant,
};
pub use dino::{Dino, DinoConfig, DinoHead, DinoHeadConfig, DinoNetwork, DinoState};
pub use directclr::{DirectClr, DirectClrConfig, Unprojected};
pub use ema::{cosine_momentum, detached_copy, ema_update};
pub use emp_ssl::{EmpSsl, EmpSslConfig};
pub use encoder::{Predicted, PredictedWithCopy, Projected};
pub use frossl::{FroSsl, FroSslConfig};
pub use hpm::{Hpm, HpmConfig, HpmNetwork};
pub use ibot::{Ibot, IbotConfig, IbotNetwork, IbotState};
pub use ijepa::{Ijepa, IjepaConfig, IjepaNetwork};
pub use ijepa_masks::IjepaMasks;
pub use ijepa_predictor::IjepaPredictor;
pub use iter_norm::{IterNorm, IterNormConfig};
pub use lejepa::{LeJepa, LeJepaConfig};
pub use mae::{Mae, MaeConfig, MaeNetwork};
pub use mae_decoder::MaeDecoder;
pub use masking::{patchify, sine_cosine_2d, PatchMask, StepMasks, UnitMask};
pub use mmcr::{Mmcr, MmcrConfig, MmcrState};
pub use moco::{shuffle_permutation, Moco, MocoConfig, MocoState};
pub use moco_v3::{MocoV3, MocoV3Config, MocoV3State};
pub use momentum::MomentumEncoder;
pub use msn::{Msn, MsnConfig, MsnNetwork, MsnStudent};
pub use nnbyol::{NnByol, NnByolConfig, NnByolState};
pub use nnclr::{NnClr, NnClrConfig, NnClrState};
pub use nnsiam::{NnSiam, NnSiamConfig, NnSiamState};
pub use pgd::{attack_copy, Pgd, PgdConfig, PgdStep, MAX_PGD_STEPS};
pub use projected_pair::{PairNetwork, PairObjective, ProjectedPair};
pub use queue::{KeyQueue, KeyQueueConfig, QueueFit, SupportSetState};
pub use ressl::{ReSsl, ReSslConfig, ReSslState};
pub use rotnet::{RotNet, RotNetConfig, RotNetNetwork, RotationBatch, RotationMode};
pub use simclr::{PairLossConfig, SimClr, SimClrConfig, SimClrState};
pub use simmim::{SimMim, SimMimConfig, SimMimNetwork};
pub use simsiam::{SimSiam, SimSiamConfig};
pub use sliced_views::{SlicedObjective, SlicedViews};
pub use smog::{device_kmeans, Smog, SmogConfig, SmogState};
pub use ssl_method::{gradients_without, init_method, stat, HasBackbone, MethodOutput, SslMethod};
pub use ssl_method::{LossAndStats, TargetState, Views, OBJECT_BOXES};
pub use supcon::{SupCon, SupConConfig};
pub use swav::{Swav, SwavConfig, SwavNetwork, SwavState};
pub use tico::{Tico, TicoConfig, TicoState};
pub use vibcreg::{VibcReg, VibcRegConfig, VibcRegNetwork};
pub use vicreg::{VicReg, VicRegConfig};
pub use vicregl::{
    grid_unit, location_grid, LocalProjector, VicRegL, VicRegLConfig, VicRegLNetwork,
};
pub use visreg::{VisReg, VisRegConfig};
pub use wmse::{Wmse, WmseConfig};

pub use crate::base::Progress;
