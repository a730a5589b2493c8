//! The base vocabulary that every other module uses and that uses none of them: configuration
//! errors, training progress, schedules, image geometry, seeds.
//!
//! Private: each item is public at one path, where its users meet it — `ConfigError` and the
//! `seed` module at the crate root, `Progress` in `method`, the schedules in `curriculum`,
//! `CropBox` in `augment::crop`, `ViewGeometry` in `pipeline`.

pub mod error;
pub mod geometry;
pub mod progress;
pub mod schedule;
pub mod seed;

pub use progress::Progress;
