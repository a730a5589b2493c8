//! The base vocabulary that every other module uses and that uses none of them: configuration
//! errors, training progress, schedules, image geometry, seeds.

pub mod error;
pub mod geometry;
pub mod progress;
pub mod schedule;
pub mod seed;

pub use error::ConfigError;
pub use geometry::{CropBox, ViewGeometry};
pub use progress::Progress;
pub use schedule::{Pace, ScheduleFn, Scheduler, SchedulerConfig};
