//! Random resized crop (torchvision's `RandomResizedCrop`): a box of random area and aspect
//! ratio per sample, resized to the output size with bilinear interpolation.
//!
//! The resize of every sample happens in one `grid_sample_2d` call over the batch: the sampling
//! grid is built on the device from per-sample box parameters. Source coordinates follow
//! `interpolate(mode="bilinear", align_corners=False)` applied to the cropped box —
//! `x = left + (u + ½)·w/W_out − ½`, clamped to the box — so a box that covers the output size
//! one to one reproduces the crop exactly. (Like torchvision with `antialias=False`; when the
//! box is larger than the output, torchvision's default antialiasing filter differs.)

use burn::tensor::ops::{GridSampleOptions, GridSamplePaddingMode, InterpolateMode};
use burn::tensor::{backend::Backend, Int, Tensor, TensorData};
use rand::rngs::StdRng;
use rand::Rng;
use serde::{Deserialize, Serialize};

use super::sampling::{range, uniform};
use crate::base::error::ConfigError;

pub use crate::base::geometry::CropBox;

fn column<B: Backend>(values: Vec<f32>, device: &B::Device) -> Tensor<B, 2> {
    let n = values.len();
    Tensor::from_data(TensorData::new(values, [n, 1]), device)
}

/// Normalised source coordinates `[N, out]` along one axis of size `size`, for boxes starting at
/// `start` with length `len` (per sample).
fn axis_grid<B: Backend>(
    start: Vec<f32>,
    len: Vec<f32>,
    size: usize,
    out: usize,
    device: &B::Device,
) -> Tensor<B, 2> {
    let n = start.len();
    let lo = column::<B>(start.clone(), device).expand([n, out]);
    let hi = column::<B>(
        start.iter().zip(&len).map(|(s, l)| s + l - 1.0).collect(),
        device,
    )
    .expand([n, out]);
    let scale = column::<B>(len.iter().map(|l| l / out as f32).collect(), device).expand([n, out]);
    let u = Tensor::<B, 1, Int>::arange(0..out as i64, device)
        .float()
        .add_scalar(0.5)
        .reshape([1, out])
        .expand([n, out]);
    let src = u.mul(scale).add(lo.clone()).sub_scalar(0.5);
    let src = src.max_pair(lo).min_pair(hi);
    // align_corners = false: x_norm = (2x + 1) / size − 1.
    src.mul_scalar(2.0)
        .add_scalar(1.0)
        .div_scalar(size as f32)
        .sub_scalar(1.0)
}

/// Crops `boxes[n]` out of sample `n` and resizes it to `out_h × out_w` (bilinear), for the whole
/// batch at once.
pub fn resized_crop<B: Backend>(
    x: Tensor<B, 4>,
    boxes: &[CropBox],
    out_h: usize,
    out_w: usize,
) -> Tensor<B, 4> {
    let [n, _c, h, w] = x.dims();
    assert_eq!(boxes.len(), n, "one crop box per sample");
    let device = x.device();
    let gx = axis_grid::<B>(
        boxes.iter().map(|b| b.left as f32).collect(),
        boxes.iter().map(|b| b.width as f32).collect(),
        w,
        out_w,
        &device,
    );
    let gy = axis_grid::<B>(
        boxes.iter().map(|b| b.top as f32).collect(),
        boxes.iter().map(|b| b.height as f32).collect(),
        h,
        out_h,
        &device,
    );
    let gx = gx.reshape([n, 1, out_w, 1]).expand([n, out_h, out_w, 1]);
    let gy = gy.reshape([n, out_h, 1, 1]).expand([n, out_h, out_w, 1]);
    let grid = Tensor::cat(vec![gx, gy], 3);
    let options = GridSampleOptions::new(InterpolateMode::Bilinear)
        .with_padding_mode(GridSamplePaddingMode::Border)
        .with_align_corners(false);
    x.grid_sample_2d(grid, options)
}

/// Random resized crop: per sample, a box of area `scale × image area` and aspect ratio
/// (width / height) log-uniform in `ratio`, drawn as torchvision does (10 tries, then a central
/// crop), resized to `size`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RandomResizedCrop {
    /// Output `(height, width)`.
    pub size: (usize, usize),
    /// Range of the box area as a fraction of the image area (`0 < min <= max <= 1`).
    pub scale: (f64, f64),
    /// Range of the box aspect ratio width / height (`0 < min <= max`).
    pub ratio: (f64, f64),
}

impl RandomResizedCrop {
    /// Output `size`, torchvision's defaults `scale = (0.08, 1)`, `ratio = (3/4, 4/3)`.
    pub fn new(size: usize) -> Self {
        Self {
            size: (size, size),
            scale: (0.08, 1.0),
            ratio: (3.0 / 4.0, 4.0 / 3.0),
        }
    }

    /// Checks the ranges.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.size.0 == 0 || self.size.1 == 0 {
            return Err(ConfigError::new(
                "crop.size",
                format!("must be positive, got {:?}", self.size),
            ));
        }
        range("crop.scale", self.scale, 0.0, true)?;
        if self.scale.1 > 1.0 {
            return Err(ConfigError::new(
                "crop.scale",
                format!("max must be <= 1, got {}", self.scale.1),
            ));
        }
        range("crop.ratio", self.ratio, 0.0, true)
    }

    /// Draws one box in an `h × w` image (torchvision's `RandomResizedCrop.get_params`).
    pub fn sample_box(&self, rng: &mut StdRng, h: usize, w: usize) -> CropBox {
        let area = (h * w) as f64;
        let (lr0, lr1) = (self.ratio.0.ln(), self.ratio.1.ln());
        for _ in 0..10 {
            let target = area * uniform(rng, self.scale.0, self.scale.1);
            let aspect = uniform(rng, lr0, lr1).exp();
            let cw = (target * aspect).sqrt().round_ties_even() as usize;
            let ch = (target / aspect).sqrt().round_ties_even() as usize;
            if cw > 0 && cw <= w && ch > 0 && ch <= h {
                let top = rng.random_range(0..=h - ch);
                let left = rng.random_range(0..=w - cw);
                return CropBox {
                    top,
                    left,
                    height: ch,
                    width: cw,
                };
            }
        }
        let in_ratio = w as f64 / h as f64;
        let (ch, cw) = if in_ratio < self.ratio.0 {
            (((w as f64) / self.ratio.0).round_ties_even() as usize, w)
        } else if in_ratio > self.ratio.1 {
            (h, ((h as f64) * self.ratio.1).round_ties_even() as usize)
        } else {
            (h, w)
        };
        let (ch, cw) = (ch.clamp(1, h), cw.clamp(1, w));
        CropBox {
            top: (h - ch) / 2,
            left: (w - cw) / 2,
            height: ch,
            width: cw,
        }
    }

    /// Draws `n` boxes in `h × w` images.
    pub fn sample(&self, rng: &mut StdRng, n: usize, h: usize, w: usize) -> Vec<CropBox> {
        (0..n).map(|_| self.sample_box(rng, h, w)).collect()
    }

    /// Applies drawn boxes.
    pub fn apply<B: Backend>(&self, x: Tensor<B, 4>, boxes: &[CropBox]) -> Tensor<B, 4> {
        resized_crop(x, boxes, self.size.0, self.size.1)
    }
}
