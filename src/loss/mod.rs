//! Contrastive and metric-learning objectives, one file per idea.
//!
//! The last column is the objective's section of `docs/methods.md` in the repository: its math,
//! defaults, the choices made where paper and public code differ, and its worked values.
//!
//! | file | objective | paper | `docs/methods.md` |
//! |---|---|---|---|
//! | [`nt_xent`] | NT-Xent (SimCLR) | <https://arxiv.org/abs/2002.05709> | `#nt-xent` |
//! | [`info_nce`] | InfoNCE against a queue (MoCo), symmetric form | <https://arxiv.org/abs/1911.05722> | `#infonce-with-a-queue` |
//! | [`soft_nce`] | SoftNCE soft targets on the nearest negatives (Light-MoCo) | <https://arxiv.org/abs/2212.07158> | `#softnce` |
//! | [`negative_cosine`] | negative cosine with stop-gradient (SimSiam / BYOL) | <https://arxiv.org/abs/2011.10566> | `#negative-cosine` |
//! | [`hcl`] | hard-negative sampling, debiased contrastive loss (HCL / DCL) | <https://arxiv.org/abs/2010.04592> | `#hcl` |
//! | [`curricular`] | curricular weighting of hard negatives, adaptive `t` | <https://doi.org/10.1016/j.ins.2024.120534> | `#curricular-weighting` |
//! | [`huber`] | Huber-regularised NT-Xent ("bad batches") | <https://arxiv.org/abs/2403.19579> | `#huber-regularised-nt-xent` |
//! | [`soft_target`] | soft-target cross-entropy for mixed queries (MixCo) | <https://arxiv.org/abs/2010.06300> | `#soft-target-cross-entropy` |
//! | [`magnet`] | magnet loss (SPL-ADVisE embedding network) | <https://arxiv.org/abs/1511.05939> | `#magnet-loss` |
//! | [`barlow_twins`] | cross-correlation towards the identity (Barlow Twins) | <https://arxiv.org/abs/2103.03230> | `#barlow-twins-loss` |
//! | [`vicreg`] | variance, invariance, covariance (VICReg) | <https://arxiv.org/abs/2105.04906> | `#vicreg-loss` |
//! | [`emp_ssl`] | total coding rate of many patches up, each patch towards its image's mean (EMP-SSL) | <https://arxiv.org/abs/2304.03977> | `#emp-ssl-loss` |
//! | [`wmse`] | whitened sub-batches (Cholesky), cosine distance between the views (W-MSE) | <https://arxiv.org/abs/2007.06346> | `#w-mse-loss` |
//! | [`vibcreg`] | VICReg's invariance and variance, covariance on the normalised correlation (VIbCReg) | <https://arxiv.org/abs/2109.00783> | `#vibcreg-loss` |
//! | [`dcl`] | decoupled contrastive loss and its weighted form (DCL / DCLW) | <https://arxiv.org/abs/2110.06848> | `#dcl-and-dclw` |
//! | [`directclr`] | NT-Xent on the representation's first `d₀` coordinates, no projector (DirectCLR) | <https://arxiv.org/abs/2110.09348> | `#directclr` |
//! | [`frossl`] | log Frobenius norm of the trace-normalised covariance plus invariance (FroSSL) | <https://arxiv.org/abs/2310.02903> | `#frossl-loss` |
//! | [`macl`] | model-aware temperature and re-weighted anchors (MACL) | <https://arxiv.org/abs/2207.07874> | `#macl` |
//! | [`lejepa`] | SIGReg (sketched isotropic Gaussian regulariser) plus invariance to the global views' mean (LeJEPA) | <https://arxiv.org/abs/2511.08544> | `#lejepa` |
//! | [`swav`] | swapped prediction of Sinkhorn–Knopp codes (SwAV) | <https://arxiv.org/abs/2006.09882> | `#swav-loss` |
//! | [`moco_v3`] | in-batch InfoNCE scaled by 2τ (MoCo v3) | <https://arxiv.org/abs/2104.02057> | `#moco-v3-loss` |
//! | [`nnclr`] | nearest neighbour from a support set as the positive (NNCLR) | <https://arxiv.org/abs/2104.14548> | `#nnclr-loss` |
//! | [`mmcr`] | the centroids' nuclear norm up, each image's views' down (MMCR) | <https://arxiv.org/abs/2303.03307> | `#mmcr-loss` |
//! | [`ressl`] | a strong view's relation to a queue learns a weak view's, sharpened (ReSSL) | <https://arxiv.org/abs/2107.09282> | `#ressl-loss` |
//! | [`tico`] | transformation invariance and covariance contrast (TiCo) | <https://arxiv.org/abs/2206.10698> | `#tico-loss` |
//! | [`dino`] | self-distillation with centring and sharpening (DINO) | <https://arxiv.org/abs/2104.14294> | `#dino-loss` |
//! | [`ibot`] | masked patch-token self-distillation (iBOT, DINOv2) | <https://arxiv.org/abs/2111.07832> | `#ibot-patch-loss` |
//! | [`koleo`] | nearest-neighbour spreading regulariser (KoLeo, DINOv2) | <https://arxiv.org/abs/1806.03198> | `#koleo` |
//! | [`msn`] | masked anchors' prototype assignments against the target's, mean-entropy or power-law prior (MSN, PMSN) | <https://arxiv.org/abs/2204.07141> | `#msn-loss` |
//!
//! Every objective has a `#[derive(Config)]` config carrying the paper's defaults; `init()`
//! validates the hyperparameters and returns a [`ConfigError`](crate::base::error::ConfigError) naming
//! the field when one is impossible. `forward` is generic over the backend and returns a
//! one-element tensor (the batch mean, unless the objective says otherwise). Projections are
//! L2-normalised inside the losses that work on cosine similarities, as lightly does.
//!
//! Shapes that cannot be combined (two views of different sizes, a queue of another width)
//! are bugs in the calling training step, not user input: the forward panics with a message that
//! names the loss and both shapes.

pub mod barlow_twins;
pub mod curricular;
pub mod dcl;
pub mod dino;
pub mod directclr;
pub mod emp_ssl;
pub mod frossl;
pub mod hcl;
pub mod huber;
pub mod ibot;
pub mod info_nce;
pub mod koleo;
pub mod lejepa;
pub mod macl;
pub mod magnet;
pub mod mmcr;
pub mod moco_v3;
pub mod msn;
pub mod negative_cosine;
pub mod nnclr;
pub mod nt_xent;
pub mod ressl;
pub(crate) mod shape_checks;
pub mod similarity;
pub mod soft_nce;
pub mod soft_target;
pub mod swav;
#[cfg(test)]
mod testing;
pub mod tico;
pub mod vibcreg;
pub mod vicreg;
pub mod wmse;
pub mod worked_examples;

pub use barlow_twins::{BarlowTwinsLoss, BarlowTwinsLossConfig};
pub use curricular::{CurricularLoss, CurricularLossConfig, CurricularOutput, CurricularState};
pub use dcl::{DclLoss, DclLossConfig};
pub use dino::{DinoLoss, DinoLossConfig};
pub use directclr::{DirectClrLoss, DirectClrLossConfig};
pub use emp_ssl::{EmpSslLoss, EmpSslLossConfig, EmpSslTerms};
pub use frossl::{FroSslLoss, FroSslLossConfig, FroSslTerms};
pub use hcl::{HclLoss, HclLossConfig};
pub use huber::{HuberNtXentLoss, HuberNtXentLossConfig};
pub use ibot::{IbotPatchLoss, IbotPatchLossConfig};
pub use info_nce::{InfoNceLoss, InfoNceLossConfig};
pub use koleo::{KoLeoLoss, KoLeoLossConfig};
pub use lejepa::{LeJepaLoss, LeJepaLossConfig, LeJepaTerms};
pub use macl::{MaclLoss, MaclLossConfig, MaclOutput};
pub use magnet::{MagnetLoss, MagnetLossConfig};
pub use mmcr::{MmcrLoss, MmcrLossConfig};
pub use moco_v3::{MocoV3Loss, MocoV3LossConfig};
pub use msn::{MsnLoss, MsnLossConfig, MsnTerms};
pub use negative_cosine::{NegativeCosineLoss, NegativeCosineLossConfig};
pub use nnclr::{NnclrLoss, NnclrLossConfig};
pub use nt_xent::{NtXentLoss, NtXentLossConfig};
pub use ressl::{ResslLoss, ResslLossConfig};
pub use similarity::l2_normalize;
pub use soft_nce::{AlphaSchedule, SoftNceLoss, SoftNceLossConfig, SoftNceWeights};
pub use soft_target::{SoftTargetCrossEntropy, SoftTargetCrossEntropyConfig};
pub use swav::{sinkhorn, sinkhorn_balance, SwavLoss, SwavLossConfig};
pub use tico::{TicoLoss, TicoLossConfig};
pub use vibcreg::{VibcregLoss, VibcregLossConfig, VibcregTerms};
pub use vicreg::{VicRegLoss, VicRegLossConfig, VicRegTerms};
pub use wmse::{WmseLoss, WmseLossConfig};
