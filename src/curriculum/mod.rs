//! Curricula: schedulers and the knobs they drive.
//!
//! A curriculum is not a base class: each knob is a scheduled value owned by the component it
//! changes and read with the current [`Progress`](crate::base::Progress) — the augmenter owns
//! the mixup share and the colour strength, a loss its hardness, a method its momentum. The
//! training loop passes the progress to each and logs the values they report as columns of
//! `steps.csv`.
//!
//! - Schedules ([`SchedulerConfig`], [`Scheduler`], [`Pace`]): k-step, linear, cosine (reverse
//!   cosine), constant, per step or per epoch, and a user's own function ([`ScheduleFn`]).
//! - [`MixupCurriculum`] ([`MixupCurriculumConfig`], [`MixupSchedule`]): MICO's curriculum Mixup
//!   on the positive pair.
//! - [`StrengthCurriculumConfig`]: MICO's augmentation-strength curriculum (colour jitter and
//!   grayscale).
//! - [`SelfPacedAutoAugment`] ([`SelfPacedAutoAugmentConfig`], its policy
//!   [`AutoAugmentPolicy`] and state [`AutoAugmentState`]): MICO's normalised AutoAugment with a
//!   self-paced magnitude — an adaptive curriculum that learns from the losses and is saved in
//!   checkpoints.
//! - [`rotation`]: MICO's rotation curricula — the growing set of RotNet angles, rotate-and-mix,
//!   crop-and-rotate and its heat-map boxes.

mod auto_augment;
pub mod mask_schedule;
mod mixup;
pub mod rotation;
mod strength;

pub use crate::base::schedule::{Pace, ScheduleFn, Scheduler, SchedulerConfig};
pub use auto_augment::{
    posterize, AugmentOp, AutoAugmentPolicy, AutoAugmentState, PolicyChoice, PolicyOp,
    SelfPacedAutoAugment, SelfPacedAutoAugmentConfig, SubPolicy,
};
pub use mixup::{MixupCurriculum, MixupCurriculumConfig, MixupDraw, MixupSchedule};
pub use strength::StrengthCurriculumConfig;
