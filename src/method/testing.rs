//! What the methods' unit tests share: a tiny backbone and a tiny ViT, a batch of deterministic
//! images, a tensor's values on the host and a point of training.

use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;
use curriculum_ssl_models::Backbone;

use crate::base::geometry::{CropBox, ViewGeometry};
use crate::base::Progress;

/// The methods' unit tests' backend: burn's NdArray in f64 under autodiff.
pub(crate) type Ad = burn::backend::Autodiff<burn::backend::NdArray<f64>>;

/// [`Ad`]'s device.
pub(crate) type Dev = <Ad as burn::tensor::backend::BackendTypes>::Device;

/// The method `build` makes on [`Ad`]'s default device under `seed`
/// ([`init_method`](super::init_method)), unwrapped.
pub(crate) fn built<S: super::SslMethod<Ad>>(
    seed: u64,
    build: impl FnOnce(&Dev) -> Result<S, crate::base::error::ConfigError>,
) -> S {
    super::init_method::<Ad, _, crate::base::error::ConfigError>(&Default::default(), seed, build)
        .unwrap()
}

/// A small backbone for the methods' unit tests: flatten, linear, ReLU.
#[derive(Module, Debug)]
pub(crate) struct TinyBackbone<B: Backend> {
    pub(crate) fc: Linear<B>,
}

impl<B: Backend> TinyBackbone<B> {
    /// `inputs` pixels (`C·H·W`) to `features` features.
    pub(crate) fn new(inputs: usize, features: usize, device: &B::Device) -> Self {
        Self {
            fc: LinearConfig::new(inputs, features).init(device),
        }
    }
}

impl<B: Backend> Backbone<B> for TinyBackbone<B> {
    fn forward_features(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        let [n, c, h, w] = images.dims();
        burn::tensor::activation::relu(self.fc.forward(images.reshape([n, c * h * w])))
    }

    fn feature_dim(&self) -> usize {
        self.fc.weight.lazy_shape().dims::<2>()[1]
    }
}

/// A backbone with a feature map for the dense methods' unit tests (VICRegL, DetCon): one
/// linear map of each pixel's channels, ReLU; its features are the map's mean.
#[derive(Module, Debug)]
pub(crate) struct TinyMap<B: Backend> {
    /// The per-pixel linear map (DetCon's tests read its weights).
    pub(crate) fc: Linear<B>,
}

impl<B: Backend> TinyMap<B> {
    /// `channels` input channels to `width` channels at every pixel.
    pub(crate) fn new(channels: usize, width: usize, device: &B::Device) -> Self {
        Self {
            fc: LinearConfig::new(channels, width).init(device),
        }
    }
}

impl<B: Backend> Backbone<B> for TinyMap<B> {
    fn forward_features(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        let map = self.forward_feature_map(images).unwrap();
        let [n, c, h, w] = map.dims();
        map.reshape([n, c, h * w]).mean_dim(2).reshape([n, c])
    }

    fn feature_dim(&self) -> usize {
        self.fc.weight.lazy_shape().dims::<2>()[1]
    }

    fn forward_feature_map(&self, images: Tensor<B, 4>) -> Option<Tensor<B, 4>> {
        let [n, c, h, w] = images.dims();
        let pixels = images.reshape([n, c, h * w]).swap_dims(1, 2);
        let out = burn::tensor::activation::relu(self.fc.forward(pixels.reshape([n * h * w, c])));
        let k = out.dims()[1];
        Some(
            out.reshape([n, h * w, k])
                .swap_dims(1, 2)
                .reshape([n, k, h, w]),
        )
    }
}

/// The views' geometry of a batch of `n` images for the dense methods' unit tests (VICRegL,
/// DetCon): the `i`-th a crop `10 + i` pixels high and `12 − i mod 2` wide at row `i mod 3`,
/// column `(i + shift) mod 4`, flipped when `flipped` differs from `i` being odd, resized to
/// 4 × 4.
pub(crate) fn geometry(n: usize, flipped: bool, shift: usize) -> Vec<ViewGeometry> {
    (0..n)
        .map(|i| ViewGeometry {
            crop: CropBox {
                top: i % 3,
                left: (i + shift) % 4,
                height: 10 + i,
                width: 12 - i % 2,
            },
            flipped: flipped ^ (i % 2 == 1),
            output: [4, 4],
        })
        .collect()
}

/// `n` one-channel 4 × 4 images, `sin(0.41·i + shift)` for the `i`-th value of the batch.
pub(crate) fn images<B: Backend>(n: usize, shift: f64) -> Tensor<B, 4> {
    let values: Vec<f64> = (0..n * 16)
        .map(|i| (0.41 * i as f64 + shift).sin())
        .collect();
    Tensor::from_data(TensorData::new(values, [n, 1, 4, 4]), &Default::default())
}

/// `n` one-channel `side × side` images, `sin(0.37·i + phase)` for the `i`-th value of the batch
/// (the masked methods' unit tests).
pub(crate) fn square_images<B: Backend>(n: usize, side: usize, phase: f64) -> Tensor<B, 4> {
    let values: Vec<f64> = (0..n * side * side)
        .map(|i| (0.37 * i as f64 + phase).sin())
        .collect();
    Tensor::from_data(
        TensorData::new(values, [n, 1, side, side]),
        &Default::default(),
    )
}

/// A Vision Transformer of one-channel `side × side` images in 2 × 2 patches, tokens 8 wide,
/// one block of two heads (the masked methods' unit tests).
pub(crate) fn tiny_vit<B: Backend>(
    side: usize,
    device: &B::Device,
) -> curriculum_ssl_models::Vit<B> {
    vit_config(side, 2).init(device)
}

/// A ViT of `side × side` one-channel images in `patch × patch` patches, tokens 8 wide, one
/// block of two heads.
pub(crate) fn vit_config(side: usize, patch: usize) -> curriculum_ssl_models::VitConfig {
    curriculum_ssl_models::VitConfig::new(side)
        .with_patch_size(patch)
        .with_in_channels(1)
        .with_embed_dim(8)
        .with_depth(1)
        .with_num_heads(2)
}

/// A tensor's values as f64.
pub(crate) fn host<B: Backend, const D: usize>(x: Tensor<B, D>) -> Vec<f64> {
    x.into_data().convert::<f64>().to_vec().unwrap()
}

/// Asserts that a freshly initialised layer's bias is exactly zero and that its weight's sample
/// standard deviation is within 5 % of `std` (the weights have thousands of entries: the sample
/// standard deviation of `n` normal draws is off by about `1/√(2n)`, under 1.2 % from 4,096 on,
/// so 5 % is more than four of those; a uniform draw's is closer still).
pub(crate) fn assert_initialised<B: Backend>(layer: &burn::nn::Linear<B>, std: f64, what: &str) {
    let weights = host(layer.weight.val());
    assert!(weights.len() >= 4096, "{what}: too few weights to judge");
    let n = weights.len() as f64;
    let mean = weights.iter().sum::<f64>() / n;
    let sample = (weights.iter().map(|w| (w - mean).powi(2)).sum::<f64>() / n).sqrt();
    assert!(
        (sample / std - 1.0).abs() < 0.05,
        "{what}: weight std {sample}, expected {std}"
    );
    let bias = host(layer.bias.as_ref().expect("a bias").val());
    assert!(bias.iter().all(|&b| b == 0.0), "{what}: bias not zero");
}

/// Step `step` of `total_steps`, in epoch `epoch` of `total_epochs`.
pub(crate) fn progress(
    step: usize,
    total_steps: usize,
    epoch: usize,
    total_epochs: usize,
) -> Progress {
    Progress {
        step,
        total_steps,
        epoch,
        total_epochs,
    }
}

/// The rows of a `[n, width]` tensor's host values.
pub(crate) fn rows(values: &[f64], width: usize) -> Vec<&[f64]> {
    values.chunks(width).collect()
}

/// The cosine similarity of two vectors.
pub(crate) fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot = |x: &[f64], y: &[f64]| x.iter().zip(y).map(|(p, q)| p * q).sum::<f64>();
    dot(a, b) / (dot(a, a).sqrt() * dot(b, b).sqrt())
}

/// The mean over rows of `f(row of a, row of b)` for two `[n, width]` tensors.
pub(crate) fn mean_over_rows<B: Backend>(
    a: Tensor<B, 2>,
    b: Tensor<B, 2>,
    f: impl Fn(&[f64], &[f64]) -> f64,
) -> f64 {
    let width = a.dims()[1];
    let (a, b) = (host(a), host(b));
    let (a, b) = (rows(&a, width), rows(&b, width));
    a.iter().zip(&b).map(|(x, y)| f(x, y)).sum::<f64>() / a.len() as f64
}
