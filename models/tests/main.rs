//! The integration tests of curriculum-ssl-models, in one binary: each file of this folder is a
//! module, named for what it tests (one link of the burn stack instead of one per file).
//!
//! `cargo test -p curriculum-ssl-models --test integration MODULE::` runs one module.

mod common;

mod banded_stem;
mod batch_norm;
mod contrastive;
mod cosine;
mod import_errors;
mod import_keys;
mod kernels;
mod param_counts;
mod parity;
mod pool;
mod residual_options;
mod shapes;
mod vit_exact;
mod weight_files;
