//! Fréchet batch curation: redraw the augmentations of a batch whose two views disagree.
//!
//! Contrastive learning trains on two random augmentations of every image. Now and then the
//! augmentations destroy what the two views share (a crop of the background, a near-black
//! jitter), and such a batch teaches the network false positives. "The Bad Batches: Enhancing
//! Self-Supervised Learning in Image Classification Through Representative Batch Curation"
//! (Göksu and Pugeault, IJCNN 2024, <https://arxiv.org/abs/2403.19579>, §II-C) scores each batch
//! by the Fréchet distance between the Gaussians fitted to the projections of its two views — the
//! Fréchet ResNet Distance, FRD — and refuses to learn from a batch whose FRD is above a
//! threshold: its augmentations are drawn again instead of updating the weights.
//!
//! The threshold is learnt from the run itself: the first five epochs train without curation
//! (the features of a randomly initialised network make the distance meaningless), the mean FRD
//! of the batches of the fifth is the threshold, and curation applies from then on. A labelled
//! variant that is not the paper's, [`ThresholdRule::RecentQuantile`], sets each batch's
//! threshold to a quantile of the recent batches' distances, so that it keeps firing as training
//! brings the views together.
//!
//! - [`frechet`]: the distance, on the host in `f64` (symmetric eigendecomposition) and on the
//!   device (Newton–Schulz square roots).
//! - [`policy`]: the curation decisions (apply, redraw, accept after too many redraws), their
//!   counters and their saveable state.
//!
//! The math, the defaults, the paper followed and the worked values are in
//! `docs/methods.md#batch-curation`.

pub mod frechet;
pub mod policy;

pub use frechet::{
    frechet_distance_host, frechet_distance_readback, FrechetError, NewtonSchulz,
    NewtonSchulzConfig,
};
pub use policy::{
    CurationCounters, CurationError, CurationState, Decision, EpochDistances, FrechetCuration,
    FrechetCurationConfig, ThresholdRule,
};
