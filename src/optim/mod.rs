//! Optimisers and learning-rate schedules with PyTorch semantics.
//!
//! - [`Sgd`] ([`SgdConfig`]): SGD exactly as PyTorch's (burn's own defaults to
//!   `dampening = 0.1` and keeps the weight decay in f32).
//! - [`Lars`] ([`LarsConfig`]): LARS (not in burn), excluding biases and normalisation parameters
//!   (1-D tensors) from the trust ratio and the weight decay, as solo-learn does.
//! - Learning-rate schedules, evaluated per step: linear warm-up then cosine decay
//!   ([`WarmupCosine`], from [`WarmupCosineConfig`]; the self-supervised runs'), and step decay at
//!   epoch milestones ([`StepDecay`], the supervised runs').
//! - AdamW is burn's own `burn::optim::AdamWConfig` (its defaults match PyTorch's, apart from
//!   the weight decay: set it explicitly).

mod lars;
mod schedule;
mod sgd;

pub use lars::{Lars, LarsConfig, LarsState};
pub use schedule::{StepDecay, WarmupCosine, WarmupCosineConfig};
pub use sgd::{Sgd, SgdConfig, SgdState};
