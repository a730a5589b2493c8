//! The classifier a supervised run trains ([`LinearClassifier`]: a backbone and a linear layer),
//! its per-example cross-entropy, and its augmentation on the host
//! ([`ClassifierAugmentConfig`]).

use burn::config::Config;
use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;
use curriculum_ssl_models::Backbone;
use rand::{rngs::StdRng, Rng, SeedableRng};

use crate::augment::normalize::Normalize;
use crate::base::error::{non_negative, ConfigError};
use crate::base::seed::mix_seed;
use crate::data::ImageArray;

/// A classifier: a backbone and a linear layer from its features to the class logits.
#[derive(Module, Debug)]
pub struct LinearClassifier<B: Backend, M> {
    /// Feature extractor.
    pub backbone: M,
    /// Features to logits.
    pub head: Linear<B>,
}

impl<B: Backend, M: Backbone<B>> LinearClassifier<B, M> {
    /// `backbone` followed by a linear layer to `classes` logits (PyTorch's initialisation).
    pub fn new(backbone: M, classes: usize, device: &B::Device) -> Self {
        let head = LinearConfig::new(backbone.feature_dim(), classes).init(device);
        Self { backbone, head }
    }

    /// Class logits.
    ///
    /// # Shapes
    /// - `images`: `[N, C, H, W]` → `[N, classes]`
    pub fn forward(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        self.head.forward(self.backbone.forward_features(images))
    }
}

/// Per-example cross-entropy `−log softmax(logits)[label]`.
///
/// # Shapes
/// - `logits`: `[N, classes]`, `labels`: `[N]` → `[N]`
pub(crate) fn cross_entropy_per_example<B: Backend>(
    logits: Tensor<B, 2>,
    labels: Tensor<B, 1, Int>,
) -> Tensor<B, 1> {
    let [n, _] = logits.dims();
    burn::tensor::activation::log_softmax(logits, 1)
        .gather(1, labels.reshape([n, 1]))
        .reshape([n])
        .neg()
}

/// The classifier's augmentation, on the host, image by image: random rotation, translation
/// and flips, then `x / 255` and the normalisation. SPL-ADVisE's Fashion-MNIST setting uses all
/// of them (random crop and random translation are one operation at a fixed output size).
///
/// Hand-written: ~60 lines of inverse mapping on our own pixel layout, with every draw keyed by
/// our seeds; an image crate's warp would add a large dependency for this alone.
#[derive(Config, Debug, PartialEq)]
pub struct ClassifierAugmentConfig {
    /// Probability of a horizontal flip.
    #[config(default = 0.0)]
    pub hflip: f64,
    /// Probability of a vertical flip.
    #[config(default = 0.0)]
    pub vflip: f64,
    /// Largest shift in pixels along each axis (uniform integer; uncovered pixels are 0).
    #[config(default = 0)]
    pub translate: usize,
    /// Largest rotation in degrees (uniform in `[−r, r]`, bilinear, about the centre).
    #[config(default = 0.0)]
    pub rotate_degrees: f64,
    /// Normalisation after `x / 255`.
    #[config(default = "None")]
    pub normalize: Option<Normalize>,
    /// Seed of the draws: the batch of step `s` draws from `(seed, s)`.
    #[config(default = 0)]
    pub seed: u64,
}

impl ClassifierAugmentConfig {
    /// Checks the probabilities, the angle and the normalisation's channels.
    ///
    /// # Errors
    /// Naming the field that is out of range.
    pub fn validate(&self, channels: usize) -> Result<(), ConfigError> {
        for (field, p) in [("hflip", self.hflip), ("vflip", self.vflip)] {
            crate::base::error::in_range(field, p, 0.0, 1.0, false)?;
        }
        non_negative("rotate_degrees", self.rotate_degrees)?;
        if self.rotate_degrees > 180.0 {
            return Err(ConfigError::new(
                "rotate_degrees",
                format!("must be at most 180, got {}", self.rotate_degrees),
            ));
        }
        if let Some(n) = &self.normalize {
            if n.mean.len() != channels || n.std.len() != channels {
                return Err(ConfigError::new(
                    "normalize",
                    format!(
                        "has {} means and {} deviations for images of {channels} channels",
                        n.mean.len(),
                        n.std.len()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Images `indices` of `data` as a `[N, C, H, W]` tensor: augmented with the draws of
    /// `key` when `augment`, else as they are; then scaled and normalised.
    pub fn images<B: Backend>(
        &self,
        data: &ImageArray,
        indices: &[usize],
        key: Option<u64>,
        device: &B::Device,
    ) -> Tensor<B, 4> {
        let (h, w, c) = data.image_shape();
        let mut out = vec![0f32; indices.len() * c * h * w];
        let mut rng = key.map(|k| StdRng::seed_from_u64(mix_seed(self.seed, k)));
        for (slot, &i) in indices.iter().enumerate() {
            let pixels = data.pixels(i).expect("indices come from the data");
            let image = &mut out[slot * c * h * w..(slot + 1) * c * h * w];
            match rng.as_mut() {
                None => copy_planar(pixels, image, h, w, c),
                Some(rng) => self.augment_one(pixels, image, [h, w, c], rng),
            }
            for ch in 0..c {
                let (mean, std) = match &self.normalize {
                    Some(n) => (n.mean[ch] as f32, n.std[ch] as f32),
                    None => (0.0, 1.0),
                };
                for v in &mut image[ch * h * w..(ch + 1) * h * w] {
                    *v = (*v / 255.0 - mean) / std;
                }
            }
        }
        Tensor::from_data(TensorData::new(out, [indices.len(), c, h, w]), device)
    }

    /// One image: HWC bytes in, CHW values in `[0, 255]` out. The draws, in order: angle,
    /// shift y, shift x, horizontal flip, vertical flip (each drawn only when its operation is
    /// on).
    fn augment_one(&self, pixels: &[u8], out: &mut [f32], [h, w, c]: [usize; 3], rng: &mut StdRng) {
        let angle = if self.rotate_degrees > 0.0 {
            rng.random_range(-self.rotate_degrees..=self.rotate_degrees)
                .to_radians()
        } else {
            0.0
        };
        let t = self.translate as i64;
        let (dy, dx) = if t > 0 {
            (rng.random_range(-t..=t), rng.random_range(-t..=t))
        } else {
            (0, 0)
        };
        let hflip = self.hflip > 0.0 && rng.random::<f64>() < self.hflip;
        let vflip = self.vflip > 0.0 && rng.random::<f64>() < self.vflip;
        let (cy, cx) = ((h as f64 - 1.0) / 2.0, (w as f64 - 1.0) / 2.0);
        let (sin, cos) = angle.sin_cos();
        let at = |y: i64, x: i64, ch: usize| -> f64 {
            if y < 0 || x < 0 || y >= h as i64 || x >= w as i64 {
                0.0
            } else {
                f64::from(pixels[(y as usize * w + x as usize) * c + ch])
            }
        };
        for y in 0..h {
            for x in 0..w {
                // Output pixel (y, x) comes from: undo the flips, the shift, then the rotation.
                let fy = if vflip { h - 1 - y } else { y } as f64 - dy as f64;
                let fx = if hflip { w - 1 - x } else { x } as f64 - dx as f64;
                let (ry, rx) = (fy - cy, fx - cx);
                let sy = cos * ry - sin * rx + cy;
                let sx = sin * ry + cos * rx + cx;
                let (y0, x0) = (sy.floor(), sx.floor());
                let (wy, wx) = (sy - y0, sx - x0);
                let (y0, x0) = (y0 as i64, x0 as i64);
                for ch in 0..c {
                    let v = at(y0, x0, ch) * (1.0 - wy) * (1.0 - wx)
                        + at(y0, x0 + 1, ch) * (1.0 - wy) * wx
                        + at(y0 + 1, x0, ch) * wy * (1.0 - wx)
                        + at(y0 + 1, x0 + 1, ch) * wy * wx;
                    out[ch * h * w + y * w + x] = v as f32;
                }
            }
        }
    }
}

fn copy_planar(pixels: &[u8], out: &mut [f32], h: usize, w: usize, c: usize) {
    for p in 0..h * w {
        for ch in 0..c {
            out[ch * h * w + p] = f32::from(pixels[p * c + ch]);
        }
    }
}
