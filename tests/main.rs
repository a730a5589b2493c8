//! The integration tests of curriculum-ssl, in one binary: each file of this folder is a module,
//! named for what it tests (one link of the burn stack instead of one per file; the tests of
//! all modules share the process, so every draw from a backend's generator goes through the
//! library's seed lock, `common::seeded`). Two binaries stay apart: `fuzz_parsers`, whose global
//! allocator measures the largest allocation of the whole process, and `gpu_path`, which runs on
//! a (software) Vulkan device and holds the seed lock around kernel compilation.
//!
//! `cargo test --test integration MODULE::` runs one module (e.g. `reliability::`).

mod common;

mod architecture;
mod augment;
mod bad_input;
mod curriculum;
mod data_formats;
mod data_parallel;
mod ema_and_optimisers;
mod equivalences;
mod fuzz_checkpoint;
mod gradients;
mod learner;
mod methods;
mod reliability;
mod training;
mod worked_values;
