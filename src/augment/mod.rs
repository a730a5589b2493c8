//! Batched image augmentation that runs on the backend.
//!
//! Every operation works on a whole batch `[N, C, H, W]` of floats in `[0, 1]` with tensor ops,
//! generic over `B: Backend`, so with a GPU backend the augmentation runs on the GPU and the CPU
//! only draws a few random numbers per image. Random choices are made per sample on the host from
//! a seeded generator ([`rand::rngs::StdRng`]) and uploaded as small parameter tensors of shape
//! `[N, 1, 1, 1]` (or `[N, W]` for sampling grids); the same seed gives the same batch.
//!
//! Each file holds one family of operations, with a deterministic function (the functional form,
//! matching torchvision's `transforms.v2.functional` definitions) and a random transform that
//! draws its per-sample parameters:
//!
//! | file | functional | random transform |
//! |---|---|---|
//! | [`crop`] | [`crop::resized_crop`] | [`crop::RandomResizedCrop`] |
//! | [`flip`] | [`flip::hflip`], [`flip::hflip_where`] | [`flip::RandomHorizontalFlip`] |
//! | [`colour`] | brightness, contrast, saturation, hue, grayscale | [`colour::ColorJitter`], [`colour::RandomGrayscale`] |
//! | [`blur`] | [`blur::gaussian_blur`] | [`blur::RandomGaussianBlur`] |
//! | [`solarize`] | [`solarize::solarize`] | [`solarize::RandomSolarize`] |
//! | [`rotate`] | [`rotate::rot90`], [`rotate::rotate_k`] | [`rotate::RandomRotation90`] |
//! | [`mixup`] | [`mixup::mixup`] | [`mixup::Mixup`] |
//! | [`normalize`] | [`normalize::normalize`] | — |
//!
//! What the operations share is at this module's root: per-sample parameters drawn on the host
//! ([`bernoulli`], [`uniform`]) and uploaded as small tensors ([`per_sample`],
//! [`per_sample_mask`], [`index_tensor`]), and row selection within a batch ([`select_where`],
//! [`replace_rows`]).
//!
//! [`host`] runs a view's operations after the crop on the host instead, image by image on every
//! core, with the same draws and expressions: the fast path of backends that compute on the CPU.
//!
//! [`crate::pipeline`] chains them into the two-view pipelines of SimCLR, MoCo v2 and BYOL, with
//! the curricula that act on the views.

pub mod blur;
pub mod colour;
pub mod crop;
pub mod flip;
pub mod host;
pub mod mixup;
pub mod normalize;
pub mod rotate;
mod sampling;
pub mod solarize;

pub use sampling::{
    bernoulli, index_tensor, per_sample, per_sample_mask, replace_rows, select_where, uniform,
};
