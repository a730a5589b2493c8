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
//! - The distance (defined below): [`frechet_distance_host`] and
//!   [`frechet_distance_readback`] on the host in `f64` (symmetric eigendecomposition), and
//!   [`NewtonSchulz::frechet_distance`] on the device (Newton–Schulz square roots).
//! - The policy: [`FrechetCuration`] (built by [`FrechetCurationConfig`]) makes the curation
//!   decisions ([`Decision`]: apply, redraw, accept after too many redraws), counts them
//!   ([`CurationCounters`]) and keeps its saveable state ([`CurationState`]).
//!
//! The math, the defaults, the paper followed and the worked values are in
//! `docs/methods.md#batch-curation`.
//!
//! # The Fréchet distance
//!
//! Each batch of `N` embeddings of dimension `D` is summarised by a Gaussian: its mean `μ` and its
//! covariance `Σ` with the unbiased `N − 1` normaliser. The distance between the two Gaussians is
//!
//! ```text
//! d² = ‖μ1 − μ2‖² + Tr Σ1 + Tr Σ2 − 2·Tr((Σ1 Σ2)^{1/2})
//! ```
//!
//! (eq. 7 of the paper, which calls it the Fréchet ResNet Distance, FRD). The value is the
//! squared distance, as in FID; it is not square-rooted.
//!
//! ## The trace of the root, computed stably
//!
//! `Σ1 Σ2` is not symmetric, so its square root is not formed directly. Its eigenvalues are
//! those of the symmetric positive semi-definite matrix `M = √Σ1 Σ2 √Σ1`, so
//! `Tr((Σ1 Σ2)^{1/2}) = Σᵢ √λᵢ(M)`, with eigenvalues that rounding pushed slightly below zero
//! clamped to zero. Writing `Aₖ = (Xₖ − 1μₖᵀ)/√(N − 1)` (so `Σₖ = AₖᵀAₖ`), the same non-zero
//! eigenvalues are those of the `N × N` matrix `G = C Cᵀ` with `C = A2 A1ᵀ`
//! (`√Σ1 Σ2 √Σ1 = (A2√Σ1)ᵀ(A2√Σ1)` and `(A2√Σ1)(A2√Σ1)ᵀ = A2 Σ1 A2ᵀ = G`). Both
//! implementations use whichever is smaller: `M` (`D × D`, two eigendecompositions or square
//! roots) when `N > D`, `G` (`N × N`, one) when `N ≤ D`. For a batch of 256 projections of
//! dimension 2,048 that is one `256 × 256` problem instead of two of `2,048 × 2,048`.
//!
//! ## Worked values
//!
//! - Means `0` and `(1, 1)`, covariances `I` and `4I` in two dimensions: the means contribute 2,
//!   the traces `2 + 8`, and `(Σ1 Σ2)^{1/2} = 2I` has trace 4, so `d² = 2 + 10 − 8 = 4`.
//! - Equal means, `Σ1 = [[2, 1], [1, 2]]` and `Σ2 = diag(1, 3)`: `Σ1 Σ2 = [[2, 3], [1, 6]]` has
//!   trace 8 and determinant 9, so the sum of the square roots of its eigenvalues is
//!   `√(8 + 2·√9) = √14` and `d² = 4 + 4 − 2√14 ≈ 0.516685226`.
//! - One dimension, `N(1, 4)` against `N(3, 1)`: `(1 − 3)² + 4 + 1 − 2·√4 = 5`, which is
//!   `(μ1 − μ2)² + (σ1 − σ2)²`.
//! - A batch against itself: 0.
//!
//! ## Two implementations
//!
//! - [`frechet_distance_host`] (and [`frechet_distance_readback`] for tensors): the means and
//!   covariances in `f64` on the host, the eigenvalues by a symmetric eigendecomposition
//!   (`nalgebra`). This is the reference: accurate to rounding in `f64`.
//! - [`NewtonSchulz::frechet_distance`]: everything on the backend's device, in its float type,
//!   with the matrix square roots by coupled Newton–Schulz iterations (matrix products only, which
//!   every backend has; burn has no eigendecomposition). It reads back a few scalars per
//!   iteration to decide when to stop.
//!
//! ## Accuracy
//!
//! Rounding leaves each eigenvalue off by about `ε·λmax` (`ε` the float type's machine epsilon).
//! For a positive eigenvalue that barely matters, but a zero one — which `M` or `G` has whenever
//! it is singular, and `G` always is, since centring leaves at most `N − 1` independent rows —
//! becomes up to `√(ε·λmax)` after the square root. So the trace of the root carries an absolute
//! error of up to about `√(ε·λmax)` per zero eigenvalue: in `f64`, about `1.5·10⁻⁸·√λmax`, far
//! below any difference a threshold on the distance can resolve; in `f32` (the device path on most
//! backends) about `3·10⁻⁴·√λmax`. The result is not clamped: on two batches with the same
//! Gaussian it may come out slightly below zero, by that rounding.

mod frechet;
mod policy;

pub use frechet::{
    frechet_distance_host, frechet_distance_readback, FrechetError, NewtonSchulz,
    NewtonSchulzConfig,
};
pub use policy::{
    CurationCounters, CurationError, CurationState, Decision, EpochDistances, FrechetCuration,
    FrechetCurationConfig, ThresholdRule, MAX_RETRIES,
};
