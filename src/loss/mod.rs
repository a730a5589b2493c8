//! Contrastive and metric-learning objectives, one file per idea.
//!
//! The last column is the objective's section of `docs/methods.md` in the repository: its math,
//! defaults, the choices made where paper and public code differ, and its worked values. The
//! first column links each loss's page: its paper, its definition and the choices made.
//!
//! | loss | objective | paper | `docs/methods.md` |
//! |---|---|---|---|
//! | [`NtXentLoss`] | NT-Xent (SimCLR) | <https://arxiv.org/abs/2002.05709> | `#nt-xent` |
//! | [`InfoNceLoss`] | InfoNCE against a queue (MoCo), symmetric form | <https://arxiv.org/abs/1911.05722> | `#infonce-with-a-queue` |
//! | [`SoftNceLoss`] | SoftNCE soft targets on the nearest negatives (Light-MoCo) | <https://arxiv.org/abs/2212.07158> | `#softnce` |
//! | [`NegativeCosineLoss`] | negative cosine with stop-gradient (SimSiam / BYOL) | <https://arxiv.org/abs/2011.10566> | `#negative-cosine` |
//! | [`HclLoss`] | hard-negative sampling, debiased contrastive loss (HCL / DCL) | <https://arxiv.org/abs/2010.04592> | `#hcl` |
//! | [`CurricularLoss`] | curricular weighting of hard negatives, adaptive `t` | <https://doi.org/10.1016/j.ins.2024.120534> | `#curricular-weighting` |
//! | [`HuberNtXentLoss`] | Huber-regularised NT-Xent ("bad batches") | <https://arxiv.org/abs/2403.19579> | `#huber-regularised-nt-xent` |
//! | [`SoftTargetCrossEntropy`] | soft-target cross-entropy for mixed queries (MixCo) | <https://arxiv.org/abs/2010.06300> | `#soft-target-cross-entropy` |
//! | [`MagnetLoss`] | magnet loss (SPL-ADVisE embedding network) | <https://arxiv.org/abs/1511.05939> | `#magnet-loss` |
//! | [`BarlowTwinsLoss`] | cross-correlation towards the identity (Barlow Twins) | <https://arxiv.org/abs/2103.03230> | `#barlow-twins-loss` |
//! | [`VicRegLoss`] | variance, invariance, covariance (VICReg) | <https://arxiv.org/abs/2105.04906> | `#vicreg-loss` |
//! | [`VicRegLLoss`] | VICReg on the global projections plus VICReg on local projections matched by feature distance and by location (VICRegL) | <https://arxiv.org/abs/2210.01571> | `#vicregl` |
//! | [`EmpSslLoss`] | total coding rate of many patches up, each patch towards its image's mean (EMP-SSL) | <https://arxiv.org/abs/2304.03977> | `#emp-ssl-loss` |
//! | [`WmseLoss`] | whitened sub-batches (Cholesky), cosine distance between the views (W-MSE) | <https://arxiv.org/abs/2007.06346> | `#w-mse-loss` |
//! | [`VibcRegLoss`] | VICReg's invariance and variance, covariance on the normalised correlation (VIbCReg) | <https://arxiv.org/abs/2109.00783> | `#vibcreg-loss` |
//! | [`DclLoss`] | decoupled contrastive loss and its weighted form (DCL / DCLW) | <https://arxiv.org/abs/2110.06848> | `#dcl-and-dclw` |
//! | [`DirectClrLoss`] | NT-Xent on the representation's first `d₀` coordinates, no projector (DirectCLR) | <https://arxiv.org/abs/2110.09348> | `#directclr` |
//! | [`FroSslLoss`] | log Frobenius norm of the trace-normalised covariance plus invariance (FroSSL) | <https://arxiv.org/abs/2310.02903> | `#frossl-loss` |
//! | [`MaclLoss`] | model-aware temperature and re-weighted anchors (MACL) | <https://arxiv.org/abs/2207.07874> | `#macl` |
//! | [`LeJepaLoss`] | SIGReg (sketched isotropic Gaussian regulariser) plus invariance to the global views' mean (LeJEPA) | <https://arxiv.org/abs/2511.08544> | `#lejepa` |
//! | [`SwavLoss`] | swapped prediction of Sinkhorn–Knopp codes (SwAV) | <https://arxiv.org/abs/2006.09882> | `#swav-loss` |
//! | [`MocoV3Loss`] | in-batch InfoNCE scaled by 2τ (MoCo v3) | <https://arxiv.org/abs/2104.02057> | `#moco-v3-loss` |
//! | [`SupConLoss`] | NT-Xent whose positives are every row of the anchor's label (SupCon, solo-learn's form) | <https://arxiv.org/abs/2004.11362> | `#supcon-loss` |
//! | [`NnClrLoss`] | nearest neighbour from a support set as the positive (NNCLR) | <https://arxiv.org/abs/2104.14548> | `#nnclr-loss` |
//! | [`MmcrLoss`] | the centroids' nuclear norm up, each image's views' down (MMCR) | <https://arxiv.org/abs/2303.03307> | `#mmcr-loss` |
//! | [`ReSslLoss`] | a strong view's relation to a queue learns a weak view's, sharpened (ReSSL) | <https://arxiv.org/abs/2107.09282> | `#ressl-loss` |
//! | [`TicoLoss`] | transformation invariance and covariance contrast (TiCo) | <https://arxiv.org/abs/2206.10698> | `#tico-loss` |
//! | [`DinoLoss`] | self-distillation with centring and sharpening (DINO) | <https://arxiv.org/abs/2104.14294> | `#dino-loss` |
//! | [`IbotPatchLoss`] | masked patch-token self-distillation (iBOT, DINOv2) | <https://arxiv.org/abs/2111.07832> | `#ibot-patch-loss` |
//! | [`KoLeoLoss`] | nearest-neighbour spreading regulariser (KoLeo, DINOv2) | <https://arxiv.org/abs/1806.03198> | `#koleo` |
//! | [`MsnLoss`] | masked anchors' prototype assignments against the target's, mean-entropy or power-law prior (MSN, PMSN) | <https://arxiv.org/abs/2204.07141> | `#msn-loss` |
//! | [`VisRegLoss`] | centre, scale and sliced-Wasserstein shape towards the standard normal, plus invariance to the global views' mean (VISReg) | <https://arxiv.org/abs/2606.02572> | `#visreg` |
//! | [`DetConSLoss`], [`DetConBLoss`] | contrastive detection: mask-pooled regions against the same region of the same image in the other view, every other region a negative (DetCon) | <https://arxiv.org/abs/2103.10957> | `#detcon` |
//! | [`SmogLoss`] | predictions against synchronously momentum-updated group features, the momentum projections' groups as targets (SMoG) | <https://arxiv.org/abs/2207.06167> | `#smog` |
//! | [`DeepClusterV2Loss`] | each view's projection predicts its image's k-means cluster of the last epoch, per head of prototypes (DeepCluster v2) | <https://arxiv.org/abs/2006.09882> | `#deepcluster-v2` |
//! | [`AimLoss`] | each patch's normalised pixels predicted from the patches before it under prefix-causal attention, on the non-prefix patches (AIM) | <https://arxiv.org/abs/2401.08541> | `#aim` |
//! | [`All4OneLoss`] | nearest-neighbour contrast, a transformer's centroid of the neighbours contrasted with the shifted sequence's, and a feature-wise redundancy reduction (All4One) | <https://arxiv.org/abs/2303.09417> | `#all4one-loss` |
//! | [`CapiLoss`] | the teacher's cluster logits balanced by a positionwise Sinkhorn–Knopp, predicted by the student's at the masked patches (CAPI, lightly's) | <https://arxiv.org/abs/2502.08769> | `#capi-loss` |
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
//!
//! Besides the losses: [`l2_normalize`] (row-wise), [`sinkhorn`] and [`sinkhorn_balance`]
//! (SwAV's and MSN's codes), [`top_k_indices`] (SoftNCE's chunked top-K, also the kNN
//! monitor's), [`mixup_targets`] (MixCo's targets for [`SoftTargetCrossEntropy`]) and
//! [`worked_values`]: every [`WorkedValue`] of `docs/methods.md#worked-values`, on any backend.

mod aim;
mod all4one;
mod barlow_twins;
mod capi;
mod curricular;
mod dcl;
mod deepcluster_v2;
mod detcon;
mod dino;
mod directclr;
mod emp_ssl;
mod frossl;
mod hcl;
mod huber;
mod ibot;
mod info_nce;
mod koleo;
mod lejepa;
mod macl;
mod magnet;
mod mmcr;
mod moco_v3;
mod msn;
mod negative_cosine;
mod nnclr;
mod nt_xent;
mod ressl;
pub(crate) mod shape_checks;
mod similarity;
mod smog;
mod soft_nce;
mod soft_target;
mod supcon;
mod swav;
#[cfg(test)]
mod testing;
mod tico;
mod vibcreg;
mod vicreg;
mod vicregl;
mod visreg;
mod wmse;
mod worked_examples;

pub use aim::{AimLoss, AimLossConfig, AimTarget};
pub use all4one::{All4OneInputs, All4OneLoss, All4OneLossConfig, All4OneTerms};
pub use barlow_twins::{BarlowTwinsLoss, BarlowTwinsLossConfig};
pub use capi::{positionwise_sinkhorn, BatchReductions, CapiLoss, CapiLossConfig};
pub use curricular::{CurricularLoss, CurricularLossConfig, CurricularOutput, CurricularState};
pub use dcl::{DclLoss, DclLossConfig};
pub use deepcluster_v2::{
    spherical_kmeans, DeepClusterV2Loss, DeepClusterV2LossConfig, DeepClusterV2Terms,
};
pub use detcon::{DetConBLoss, DetConBLossConfig, DetConSLoss, DetConSLossConfig};
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
pub use negative_cosine::{NegativeCosineForm, NegativeCosineLoss, NegativeCosineLossConfig};
pub use nnclr::{NnClrLoss, NnClrLossConfig};
pub use nt_xent::{NtXentLoss, NtXentLossConfig};
pub use ressl::{ReSslLoss, ReSslLossConfig};
pub use similarity::l2_normalize;
pub(crate) use similarity::safe_norm;
pub(crate) use smog::{assigned_means, host_indices};
pub use smog::{SmogLoss, SmogLossConfig, SmogOutput};
pub use soft_nce::{top_k_indices, AlphaSchedule, SoftNceLoss, SoftNceLossConfig, SoftNceWeights};
pub use soft_target::{mixup_targets, SoftTargetCrossEntropy, SoftTargetCrossEntropyConfig};
pub use supcon::{SupConLoss, SupConLossConfig};
pub use swav::{sinkhorn, sinkhorn_balance, SwavLoss, SwavLossConfig};
pub use tico::{TicoLoss, TicoLossConfig};
pub use vibcreg::{VibcRegLoss, VibcRegLossConfig, VibcRegTerms};
pub use vicreg::{VicRegLoss, VicRegLossConfig, VicRegTerms};
pub use vicregl::{VicRegLLoss, VicRegLLossConfig, VicRegLTerms, VicRegLView};
pub use visreg::{VisRegLoss, VisRegLossConfig, VisRegTerms};
pub use wmse::{WmseLoss, WmseLossConfig};
#[cfg(test)]
pub(crate) use worked_examples::rows;
pub use worked_examples::{worked_values, WorkedValue};
