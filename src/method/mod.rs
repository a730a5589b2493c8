//! SSL methods ("frameworks"), one file each, behind one trait ([`SslMethod`]), plus the pieces
//! they share: the networks' two shapes ([`encoder`]), the momentum copy ([`momentum`], on the
//! EMA update of [`ema`]), the key queue ([`queue`]), the patch masks ([`masking`]) and the
//! views' passes ([`branches`]).
//!
//! The methods:
//! - [`SimClr`]: SimCLR, with NT-Xent, HCL, curricular weighting, Huber NT-Xent, DCL / DCLW or
//!   MACL (and PGD-hardened negatives: the `pgd` module).
//! - [`Moco`]: MoCo v1 / v2 and Light-MoCo (symmetric SoftNCE); [`MocoV3`]: MoCo v3.
//! - [`Byol`]: BYOL; [`SimSiam`]: SimSiam; [`Nnclr`]: NNCLR; [`NnByol`] and [`NnSiam`]: BYOL
//!   and SimSiam with NNCLR's nearest-neighbour targets; [`Ressl`]: ReSSL; [`Tico`]: TiCo.
//! - [`ProjectedPair`]: two views through one network and a loss of the pair:
//!   [`BarlowTwins`], [`VicReg`], [`Vibcreg`] (its projections whitened by `IterNorm`),
//!   [`Wmse`] (W-MSE: sub-batches whitened by a Cholesky factor), [`FroSsl`] and
//!   [`DirectClr`] (the backbone alone).
//! - [`EmpSsl`]: EMP-SSL (the coding rate of many patches, each towards its image's mean).
//! - [`LeJepa`]: LeJEPA (SIGReg and invariance, multi-crop, no teacher); [`Mmcr`]: MMCR
//!   (nuclear norms of `k` views, momentum network).
//! - [`Swav`]: SwAV; [`Dino`]: DINO (both with multi-crop); [`Ibot`]: iBOT and DINOv2's
//!   objective.
//! - [`RotNet`](rotnet::RotNet): rotation prediction (MICO's rotation curricula).
//! - [`Mae`]: MAE; [`SimMim`]: SimMIM; [`Hpm`]: hard patches mining on MAE; [`Ijepa`]: I-JEPA
//!   (joint-embedding prediction); [`Msn`]: MSN and PMSN (masked siamese networks).
//!
//! A method owns its networks and states. Its trainable part is one module,
//! [`SslMethod::online`]; everything else (key / target networks, queue, loss states) is updated
//! by [`SslMethod::after_step`] once the optimiser has stepped. A training loop therefore reads:
//!
//! ```text
//! let out = method.forward(views, progress);                  // loss + statistics
//! let grads = method.gradients(&out.loss);                    // backward
//! method.set_online(optimiser.step(lr, method.online().clone(), grads));
//! method.after_step(progress);                                  // EMA, queue
//! ```
//! and never needs to know which method it runs. Any backbone implementing
//! [`Backbone`](curriculum_ssl_models::Backbone) plugs into any method — a user's own network too.

pub mod barlow_twins;
pub mod branches;
pub mod byol;
pub mod dino;
pub mod directclr;
pub mod ema;
pub mod emp_ssl;
pub mod encoder;
pub mod frossl;
pub mod hpm;
pub mod ibot;
pub mod ijepa;
pub mod iter_norm;
pub mod lejepa;
pub mod mae;
pub mod masking;
pub mod mmcr;
pub mod moco;
pub mod moco_v3;
pub mod momentum;
pub mod msn;
pub mod nnbyol;
pub mod nnclr;
pub mod nnsiam;
pub mod pgd;
pub mod projected_pair;
pub mod queue;
pub mod ressl;
pub mod rotnet;
pub mod running;
pub mod simclr;
pub mod simmim;
pub mod simsiam;
pub mod ssl_method;
pub mod swav;
#[cfg(test)]
pub(crate) mod testing;
pub mod tico;
pub mod vibcreg;
pub mod vicreg;
pub mod wmse;

pub use barlow_twins::{BarlowTwins, BarlowTwinsConfig};
pub use branches::ViewPasses;
pub use byol::{Byol, ByolConfig, ByolState};
pub use dino::{Dino, DinoConfig, DinoHead, DinoHeadConfig, DinoNetwork, DinoState};
pub use directclr::{DirectClr, DirectClrConfig, Unprojected};
pub use emp_ssl::{EmpSsl, EmpSslConfig};
pub use encoder::{Predicted, Projected};
pub use frossl::{FroSsl, FroSslConfig};
pub use hpm::{Hpm, HpmConfig, HpmNetwork};
pub use ibot::{Ibot, IbotConfig, IbotNetwork, IbotState};
pub use ijepa::{Ijepa, IjepaConfig, IjepaMasks, IjepaNetwork, IjepaPredictor};
pub use iter_norm::{IterNorm, IterNormConfig};
pub use lejepa::{LeJepa, LeJepaConfig};
pub use mae::{Mae, MaeConfig, MaeDecoder, MaeNetwork};
pub use masking::{PatchMask, StepMasks, UnitMask};
pub use mmcr::{Mmcr, MmcrConfig, MmcrState};
pub use moco::{Moco, MocoConfig, MocoState};
pub use moco_v3::{MocoV3, MocoV3Config, MocoV3State};
pub use momentum::MomentumEncoder;
pub use msn::{Msn, MsnConfig, MsnNetwork, MsnState, MsnStudent};
pub use nnbyol::{NnByol, NnByolConfig, NnByolState};
pub use nnclr::{Nnclr, NnclrConfig, NnclrState};
pub use nnsiam::{NnSiam, NnSiamConfig, NnSiamState};
pub use projected_pair::{PairNetwork, PairObjective, ProjectedPair};
pub use queue::{KeyQueue, KeyQueueConfig, QueueFit, SupportSetState};
pub use ressl::{Ressl, ResslConfig, ResslState};
pub use simclr::{PairLossConfig, SimClr, SimClrConfig, SimClrState};
pub use simmim::{SimMim, SimMimConfig, SimMimNetwork};
pub use simsiam::{SimSiam, SimSiamConfig};
pub use ssl_method::{gradients_without, init_method, stat, HasBackbone, MethodOutput, SslMethod};
pub use ssl_method::{Views, OBJECT_BOXES};
pub use swav::{Swav, SwavConfig, SwavNetwork, SwavState};
pub use tico::{Tico, TicoConfig, TicoState};
pub use vibcreg::{Vibcreg, VibcregConfig, VibcregNetwork};
pub use vicreg::{VicReg, VicRegConfig};
pub use wmse::{Wmse, WmseConfig};

pub use crate::base::Progress;
