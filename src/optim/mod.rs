//! Optimisers and learning-rate schedules with PyTorch semantics.
//!
//! - [`sgd`]: SGD exactly as PyTorch's (burn's own defaults to `dampening = 0.1` and keeps the weight
//!   decay in f32).
//! - [`lars`]: LARS (not in burn), excluding biases and normalisation parameters (1-D tensors)
//!   from the trust ratio and the weight decay, as solo-learn does.
//! - [`schedule`]: linear warm-up then cosine decay, evaluated per step.
//! - AdamW is burn's own `burn::optim::AdamWConfig` (its defaults match PyTorch's, apart from
//!   the weight decay: set it explicitly).

pub mod lars;
pub mod schedule;
pub mod sgd;

pub use lars::{Lars, LarsConfig, LarsState};
pub use schedule::{StepDecay, WarmupCosine, WarmupCosineConfig};
pub use sgd::{Sgd, SgdConfig, SgdState};
