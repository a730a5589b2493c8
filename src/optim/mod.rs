//! Optimisers and learning-rate schedules with PyTorch semantics.
//!
//! - [`Sgd`] ([`SgdConfig`]): SGD exactly as PyTorch's (burn's own defaults to
//!   `dampening = 0.1` and keeps the weight decay in f32), as the optimiser [`SgdOptimizer`]:
//!   burn's adaptor of it step for step and record for record, but a step's parameters stepped as
//!   one list (one operation and kernel on wgpu and CUDA, as PyTorch's multi-tensor `foreach`).
//! - [`Lars`] ([`LarsConfig`]): LARS (not in burn), excluding biases and normalisation parameters
//!   (1-D tensors) from the trust ratio and the weight decay, as solo-learn does.
//! - Learning-rate schedules, evaluated per step: linear warm-up then cosine decay
//!   ([`WarmupCosine`], from [`WarmupCosineConfig`]; the self-supervised runs'), and step decay at
//!   epoch milestones ([`StepDecay`], the supervised runs').
//! - Parameter groups at a learning rate of their own ([`LrGroup`], stepped by
//!   [`step_in_groups`]): PyTorch's `param_groups` with an `lr`, for any optimiser.
//! - AdamW is burn's own `burn::optim::AdamWConfig` (its defaults match PyTorch's, apart from
//!   the weight decay: set it explicitly).

mod groups;
mod lars;
mod schedule;
mod sgd;
mod stand_in;

pub use groups::{step_in_groups, LrGroup};
pub use lars::{Lars, LarsConfig, LarsState};
pub use schedule::{StepDecay, WarmupCosine, WarmupCosineConfig};
pub use sgd::{Sgd, SgdConfig, SgdOptimizer, SgdRecords, SgdState};
pub use stand_in::StandIns;
