//! The GPU code path in every test run: burn's wgpu backend (burn-fusion, the cubecl kernels
//! that wgpu shares with CUDA, autotune, device placement, tensors made on other threads) on a
//! software Vulkan device (Mesa's lavapipe), checked against the CPU backend (Flex) on the same
//! inputs and weights.
//!
//! - [`losses`]: every loss's worked values and input gradients;
//! - [`methods`]: two optimiser steps of every method and curriculum loss (loss, statistics,
//!   gradients, weights, queues) on a tiny convolutional backbone;
//! - [`augment`]: every augmentation operation and preset, the self-paced AutoAugment's
//!   operations and the rotation curricula's image operations;
//! - [`evaluate`]: the kNN monitor, the linear probe, k-means on device features, the Fréchet
//!   distance (read back and Newton–Schulz);
//! - [`trainer`]: the training loop with the curriculum knobs that live in the augmenter and the
//!   loop (mixup, strength, self-paced AutoAugment, Fréchet curation, crop-and-rotate's boxes),
//!   and checkpoints that move between the backends;
//! - [`threads`]: tensors handed from one thread to another (what view threads and
//!   augmentation ahead do), and the workaround that makes the hand-over safe.
//!
//! Every GPU tensor lives on `WgpuDevice::Cpu`, not on the default device: a tensor that library
//! code makes on a default device meets the given device's tensors and panics
//! ([`harness::gpu`]).
//!
//! Run them alone with `cargo test --test gpu_path -- --nocapture` (each test prints its largest
//! relative difference).

mod augment;
mod build;
mod evaluate;
mod harness;
mod losses;
mod methods;
mod threads;
mod trainer;

use burn::module::Module;
use burn::prelude::*;
use curriculum_ssl_models::layers::{global_avg_pool, Activation, ConvBnAct, ConvBnActSpec};
use curriculum_ssl_models::Backbone;

/// Images of the method and trainer tests: one channel, 12 × 12 (every test uses this one size,
/// so that the kernels compiled for it serve them all).
pub const SIDE: usize = 12;
/// Images per batch.
pub const BATCH: usize = 8;

/// A tiny convolutional backbone: 3 × 3 convolution (1 → 4 channels, stride 2, no bias), the
/// project's batch norm, ReLU, global average pooling: `[N, 1, 12, 12]` → `[N, 4]`; its feature
/// map (`[N, 4, 6, 6]`) serves crop-and-rotate's boxes.
#[derive(Module, Debug)]
pub struct TinyConv<B: Backend> {
    unit: ConvBnAct<B>,
}

impl<B: Backend> TinyConv<B> {
    /// Builds it on `device`.
    pub fn new(device: &B::Device) -> Self {
        Self {
            unit: ConvBnAct::new(
                ConvBnActSpec {
                    in_channels: 1,
                    out_channels: 4,
                    kernel: 3,
                    stride: 2,
                    groups: 1,
                    act: Activation::Relu,
                    bn_eps: 1e-5,
                    bn_momentum: 0.1,
                },
                device,
            ),
        }
    }
}

impl<B: Backend> Backbone<B> for TinyConv<B> {
    fn forward_features(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        global_avg_pool(self.unit.forward(images))
    }

    /// One pass of the stacked views, the batch norm taking each apart (as the ResNets).
    fn forward_features_grouped(&self, images: Tensor<B, 4>, groups: usize) -> Tensor<B, 2> {
        global_avg_pool(self.unit.forward_grouped(images, groups))
    }

    fn feature_dim(&self) -> usize {
        4
    }

    fn forward_feature_map(&self, images: Tensor<B, 4>) -> Option<Tensor<B, 4>> {
        Some(self.unit.forward(images))
    }
}
