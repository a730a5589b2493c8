//! # curriculum-ssl
//!
//! Self-supervised contrastive learning with curricula, generic over burn's
//! [`Backend`](burn::tensor::backend::Backend): the same losses, methods and curricula run on
//! CUDA, wgpu, the CPU (burn's `Flex`) and, for exact tests, `NdArray<f64>`.
//!
//! - [`seed`]: seeded use of the backend's random generator that other threads cannot disturb;
//!   with the training [`Progress`](method::Progress), the schedules
//!   ([`SchedulerConfig`](curriculum::SchedulerConfig)), the crop geometry
//!   ([`CropBox`](augment::crop::CropBox), [`ViewGeometry`](pipeline::ViewGeometry)) and
//!   [`ConfigError`], the vocabulary under everything (a private `base` module; each item has
//!   one public path, where its users meet it).
//! - [`loss`]: one file per objective, from NT-Xent and SoftNCE to iBOT's patch loss and MSN's;
//!   its page is a table of them, each with its paper and its section of `docs/methods.md`.
//! - [`method`]: every method (SimCLR, the MoCos, BYOL, DINO, MAE, I-JEPA, ...; its page lists
//!   them all) behind one `SslMethod` trait, with the key queue and the momentum update.
//! - [`curriculum`]: schedulers (k-step, linear, cosine, constant, a user's function) and the
//!   knobs they drive (MICO's curriculum Mixup, strength and rotation curricula, self-paced
//!   AutoAugment; the masking curricula of MAE, SimMIM and I-JEPA).
//! - [`curation`]: Fréchet batch curation ("bad batches"): distance of two views, redraw policy.
//! - [`head`]: projection and prediction MLP heads.
//! - [`optim`]: SGD with PyTorch semantics, LARS, warm-up + cosine learning rate.
//! - [`eval`]: frozen features, the weighted kNN monitor and the linear probe.
//! - [`spl_advise`]: SPL-ADVisE's selection: SPLD over clusters, seeded per-class k-means++, and
//!   the magnet loss's neighbourhood sampler.
//! - [`train`]: the training loop: run directory, CSV metrics, atomic checkpoints, exact resume;
//!   [`train::Hook`], its one extension point; `train::LearnerMethod` (feature `burn-train`, on
//!   by default): any method as a model of burn-train's `Learner`.
//! - [`hooks`]: the crate's hooks: Fréchet batch curation, crop-and-rotate's object boxes, the
//!   self-paced AutoAugment's feedback, the kNN monitor.
//! - [`data`]: IDX, CIFAR, STL-10 and image-folder readers, the embedded Fashion-MNIST subset,
//!   a threaded, deterministic loader, and folders or WebDataset shards streamed from disk.
//! - [`augment`]: batched augmentation on the backend (crop, flip, colour jitter, grayscale, blur,
//!   solarisation, rotation, mixup, normalisation) with SimCLR / MoCo v2 / BYOL presets.
//! - [`data_parallel`]: one replica per device (and across machines) through burn-collective:
//!   averaged gradients, gathered negatives, synchronised batch norm.
//! - [`pipeline`]: two views of a batch: the augmentation presets and the curricula that act
//!   on the views.
//! - [`device`]: handing tensors from one thread to another on a GPU backend.
//!
//! Errors: [`Error`], the library's error, over every more specific one, and [`ConfigError`],
//! a configuration error that names the offending field.
//!
//! The library never names a concrete backend; the `recipe` binary, the tests and the benches
//! pick one.
#![warn(missing_docs)]
// Nothing in the library needs `unsafe`: the kernels that do live in the models crate.
#![forbid(unsafe_code)]

pub mod augment;
mod base;
pub mod curation;
pub mod curriculum;
pub mod data;
pub mod data_parallel;
pub mod device;
mod error;
pub mod eval;
pub mod head;
pub mod hooks;
pub mod loss;
pub mod method;
pub mod optim;
pub mod pipeline;
pub mod spl_advise;
pub mod train;

pub use base::error::ConfigError;
pub use base::seed;
pub use error::Error;

/// The README's Rust blocks, compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
