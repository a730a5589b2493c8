//! Curricula: schedulers and the knobs they drive.
//!
//! A curriculum is not a base class: each knob is a scheduled value owned by the component it
//! changes and read with the current [`Progress`](crate::base::Progress) — the augmenter owns
//! the mixup share and the colour strength, a loss its hardness, a method its momentum. The
//! training loop passes the progress to each and logs the values they report as columns of
//! `steps.csv`.
//!
//! - [`schedule`]: k-step, linear, cosine (reverse cosine), constant, per step or per epoch, and
//!   a user's own function.
//! - [`mixup`]: MICO's curriculum Mixup on the positive pair.
//! - [`strength`]: MICO's augmentation-strength curriculum (colour jitter and grayscale).
//! - [`auto_augment`]: MICO's normalised AutoAugment with a self-paced magnitude — an adaptive
//!   curriculum that learns from the losses and is saved in checkpoints.
//! - [`rotation`]: MICO's rotation curricula — the growing set of RotNet angles, rotate-and-mix,
//!   crop-and-rotate and its heat-map boxes.

pub mod auto_augment;
pub mod mask_schedule;
pub mod mixup;
pub mod rotation;
pub use crate::base::schedule;
pub mod strength;

pub use auto_augment::{SelfPacedAutoAugment, SelfPacedAutoAugmentConfig};
pub use mixup::{MixupCurriculum, MixupCurriculumConfig, MixupDraw, MixupSchedule};
pub use schedule::{Pace, ScheduleFn, Scheduler, SchedulerConfig};
pub use strength::StrengthCurriculumConfig;
