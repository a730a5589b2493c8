//! # curriculum-ssl
//!
//! Self-supervised contrastive learning with curricula, generic over burn's
//! [`Backend`](burn::tensor::backend::Backend): the same losses, methods and curricula run on
//! CUDA, wgpu, the CPU (burn's `Flex`) and, for exact tests, `NdArray<f64>`.
//!
//! - [`loss`]: NT-Xent, InfoNCE with a queue, SoftNCE, negative cosine, HCL, curricular
//!   weighting, Huber-regularised NT-Xent, soft-target cross-entropy, magnet loss.
//! - [`method`]: state shared by the SSL methods: the key queue, the EMA update.
//! - [`head`]: projection and prediction MLP heads.
//! - [`optim`]: SGD with PyTorch semantics, LARS, warm-up + cosine learning rate.
//! - [`eval`]: weighted kNN monitor and accuracy.
//! - [`error`]: configuration errors that name the offending field.
//!
//! The library never names a concrete backend; the `recipe` binary, the tests and the benches
//! pick one.
#![warn(missing_docs)]

pub mod error;
pub mod eval;
pub mod head;
pub mod loss;
pub mod method;
pub mod optim;

pub use error::{ConfigError, Error};
