//! Colour operations: brightness, contrast, saturation, hue, grayscale, and the random
//! [`ColorJitter`] / [`RandomGrayscale`] transforms.
//!
//! The functional forms follow torchvision's `transforms.v2.functional` definitions for float
//! images in `[0, 1]` (checked against torchvision's outputs in `tests/augment.rs`):
//! - grayscale `L = 0.2989 R + 0.587 G + 0.114 B`;
//! - `blend(a, b, f) = clamp(f·a + (1 − f)·b, 0, 1)`;
//! - brightness: `clamp(f·x, 0, 1)`; contrast: `blend(x, mean(L), f)` with the mean over the
//!   whole image; saturation: `blend(x, L, f)`; hue: shift H by `f` in HSV space (mod 1);
//! - saturation and hue leave one-channel images unchanged (as torchvision does).
//!
//! Factors are per sample, `[N, 1, 1, 1]` tensors.

use burn::tensor::{backend::Backend, Tensor};
use rand::rngs::StdRng;
use rand::Rng;
use serde::{Deserialize, Serialize};

use super::sampling::{
    bernoulli, index_tensor, per_sample, per_sample_mask, probability, select_where, uniform,
};
use crate::base::error::{non_negative, ConfigError};

/// Luma `[N, 1, H, W]` of an RGB batch (`0.2989 R + 0.587 G + 0.114 B`); a one-channel batch is
/// returned as it is.
pub fn rgb_to_grayscale<B: Backend>(x: Tensor<B, 4>) -> Tensor<B, 4> {
    if x.dims()[1] == 1 {
        return x;
    }
    let r = x.clone().narrow(1, 0, 1);
    let g = x.clone().narrow(1, 1, 1);
    let b = x.narrow(1, 2, 1);
    r.mul_scalar(0.2989)
        .add(g.mul_scalar(0.587))
        .add(b.mul_scalar(0.114))
}

/// `clamp(f·a + (1 − f)·b, 0, 1)` with a per-sample factor `f` (`[N, 1, 1, 1]`).
pub fn blend<B: Backend>(a: Tensor<B, 4>, b: Tensor<B, 4>, f: Tensor<B, 4>) -> Tensor<B, 4> {
    let one_minus = f.clone().neg().add_scalar(1.0);
    a.mul(f).add(b.mul(one_minus)).clamp(0.0, 1.0)
}

/// Brightness: `clamp(f·x, 0, 1)`.
pub fn adjust_brightness<B: Backend>(x: Tensor<B, 4>, factor: Tensor<B, 4>) -> Tensor<B, 4> {
    x.mul(factor).clamp(0.0, 1.0)
}

/// Contrast: blend with the mean luma of each image.
pub fn adjust_contrast<B: Backend>(x: Tensor<B, 4>, factor: Tensor<B, 4>) -> Tensor<B, 4> {
    let mean = rgb_to_grayscale(x.clone())
        .mean_dim(3)
        .mean_dim(2)
        .mean_dim(1);
    blend(x, mean, factor)
}

/// Saturation: blend with the luma image (identity on one-channel images).
pub fn adjust_saturation<B: Backend>(x: Tensor<B, 4>, factor: Tensor<B, 4>) -> Tensor<B, 4> {
    if x.dims()[1] == 1 {
        return x;
    }
    let gray = rgb_to_grayscale(x.clone());
    blend(x, gray, factor)
}

/// RGB → HSV (each in `[0, 1]`), as torchvision's `_rgb_to_hsv`.
pub fn rgb_to_hsv<B: Backend>(x: Tensor<B, 4>) -> Tensor<B, 4> {
    let r = x.clone().narrow(1, 0, 1);
    let g = x.clone().narrow(1, 1, 1);
    let b = x.clone().narrow(1, 2, 1);
    let maxc = x.clone().max_dim(1);
    let minc = x.min_dim(1);
    let eqc = maxc.clone().equal(minc.clone());
    let range = maxc.clone().sub(minc);
    let ones = maxc.ones_like();
    let s = range
        .clone()
        .div(maxc.clone().mask_where(eqc.clone(), ones.clone()));
    let divisor = range.mask_where(eqc, ones);
    let rc = maxc.clone().sub(r.clone()).div(divisor.clone());
    let gc = maxc.clone().sub(g.clone()).div(divisor.clone());
    let bc = maxc.clone().sub(b).div(divisor);
    let neq_r = maxc.clone().not_equal(r);
    let eq_g = maxc.clone().equal(g);
    let hg = rc
        .clone()
        .add_scalar(2.0)
        .sub(bc.clone())
        .mul(eq_g.clone().bool_and(neq_r.clone()).float());
    let hr = bc.sub(gc.clone()).mul(neq_r.clone().bool_not().float());
    let hb = gc
        .add_scalar(4.0)
        .sub(rc)
        .mul(neq_r.bool_and(eq_g.bool_not()).float());
    let h = hr.add(hg).add(hb).mul_scalar(1.0 / 6.0).add_scalar(1.0);
    // fmod(h, 1) for h in [5/6, 2].
    let h = h.clone().sub(h.floor());
    Tensor::cat(vec![h, s, maxc], 1)
}

/// HSV → RGB, as torchvision's `_hsv_to_rgb`.
pub fn hsv_to_rgb<B: Backend>(x: Tensor<B, 4>) -> Tensor<B, 4> {
    let h = x.clone().narrow(1, 0, 1);
    let s = x.clone().narrow(1, 1, 1);
    let v = x.narrow(1, 2, 1);
    let h6 = h.mul_scalar(6.0);
    let i = h6.clone().floor();
    let f = h6.sub(i.clone());
    let sxf = s.clone().mul(f);
    let one_minus_s = s.neg().add_scalar(1.0);
    let q = sxf
        .clone()
        .neg()
        .add_scalar(1.0)
        .mul(v.clone())
        .clamp(0.0, 1.0);
    let t = sxf.add(one_minus_s.clone()).mul(v.clone()).clamp(0.0, 1.0);
    let p = one_minus_s.mul(v.clone()).clamp(0.0, 1.0);
    // i mod 6 (i is an integer in [0, 6]).
    let i = i.clone().sub(i.div_scalar(6.0).floor().mul_scalar(6.0));
    let m: Vec<Tensor<B, 4>> = (0..6)
        .map(|k| i.clone().equal_elem(k as f32).float())
        .collect();
    let r = v.clone().mul(m[0].clone().add(m[5].clone()))
        + q.clone().mul(m[1].clone())
        + p.clone().mul(m[2].clone().add(m[3].clone()))
        + t.clone().mul(m[4].clone());
    let g = t.clone().mul(m[0].clone())
        + v.clone().mul(m[1].clone().add(m[2].clone()))
        + q.clone().mul(m[3].clone())
        + p.clone().mul(m[4].clone().add(m[5].clone()));
    let b = p.mul(m[0].clone().add(m[1].clone()))
        + t.mul(m[2].clone())
        + v.mul(m[3].clone().add(m[4].clone()))
        + q.mul(m[5].clone());
    Tensor::cat(vec![r, g, b], 1)
}

/// Hue: adds `factor` (in `[-0.5, 0.5]`) to the hue, modulo 1 (identity on one-channel images).
pub fn adjust_hue<B: Backend>(x: Tensor<B, 4>, factor: Tensor<B, 4>) -> Tensor<B, 4> {
    if x.dims()[1] == 1 {
        return x;
    }
    let hsv = rgb_to_hsv(x);
    let h = hsv.clone().narrow(1, 0, 1).add(factor);
    let h = h.clone().sub(h.floor());
    let sv = hsv.narrow(1, 1, 2);
    hsv_to_rgb(Tensor::cat(vec![h, sv], 1))
}

/// Grayscale with as many output channels as input channels (luma repeated).
pub fn grayscale_like<B: Backend>(x: Tensor<B, 4>) -> Tensor<B, 4> {
    let c = x.dims()[1];
    rgb_to_grayscale(x).repeat_dim(1, c)
}

/// The colour operations on one image in host memory, for the CPU ([`crate::augment::host`]):
/// `[C, H, W]` floats, one pass per operation, with the tensor forms' expressions — the same f32
/// operations in the same order, so the same values bit for bit but for the contrast's mean,
/// which is summed in f64 here (the tensor form sums in f32, in its own order).
pub mod host {
    /// Luma of one pixel: `0.2989 R + 0.587 G + 0.114 B` as [`super::rgb_to_grayscale`] computes it.
    #[inline]
    pub fn luma(r: f32, g: f32, b: f32) -> f32 {
        r * 0.2989 + g * 0.587 + b * 0.114
    }

    /// `clamp(f·a + (1 − f)·b, 0, 1)` ([`super::blend`]).
    #[inline]
    fn blend(a: f32, b: f32, f: f32, one_minus: f32) -> f32 {
        (a * f + b * one_minus).clamp(0.0, 1.0)
    }

    /// Brightness ([`super::adjust_brightness`]).
    pub fn brightness(img: &mut [f32], factor: f32) {
        for v in img.iter_mut() {
            *v = (*v * factor).clamp(0.0, 1.0);
        }
    }

    /// Contrast ([`super::adjust_contrast`]): blend with the image's mean luma.
    pub fn contrast(img: &mut [f32], channels: usize, factor: f32) {
        let plane = img.len() / channels;
        let sum: f64 = if channels == 1 {
            img.iter().map(|&v| v as f64).sum()
        } else {
            let (r, rest) = img.split_at(plane);
            let (g, b) = rest.split_at(plane);
            r.iter()
                .zip(g)
                .zip(&b[..plane])
                .map(|((&r, &g), &b)| luma(r, g, b) as f64)
                .sum()
        };
        let mean = (sum / plane as f64) as f32;
        let one_minus = 1.0 - factor;
        let m = mean * one_minus;
        for v in img.iter_mut() {
            *v = (*v * factor + m).clamp(0.0, 1.0);
        }
    }

    /// Calls `f` with each pixel's red, green and blue values of an RGB image (`[3, H, W]`,
    /// `channels` 3); a one-channel image is left alone.
    fn each_rgb(img: &mut [f32], channels: usize, f: impl Fn(&mut f32, &mut f32, &mut f32)) {
        if channels == 1 {
            return;
        }
        let plane = img.len() / channels;
        let (r, rest) = img.split_at_mut(plane);
        let (g, b) = rest.split_at_mut(plane);
        for ((r, g), b) in r.iter_mut().zip(g.iter_mut()).zip(b[..plane].iter_mut()) {
            f(r, g, b);
        }
    }

    /// Saturation ([`super::adjust_saturation`]): blend with the luma (identity on one
    /// channel).
    pub fn saturation(img: &mut [f32], channels: usize, factor: f32) {
        let one_minus = 1.0 - factor;
        each_rgb(img, channels, |r, g, b| {
            let l = luma(*r, *g, *b);
            *r = blend(*r, l, factor, one_minus);
            *g = blend(*g, l, factor, one_minus);
            *b = blend(*b, l, factor, one_minus);
        });
    }

    /// Hue ([`super::adjust_hue`]): RGB → HSV, shift, HSV → RGB as torchvision writes them
    /// (identity on one channel). The tensor form sums masked terms of which one is not zero;
    /// here that term is selected, the same value.
    pub fn hue(img: &mut [f32], channels: usize, factor: f32) {
        each_rgb(img, channels, |r, g, b| {
            (*r, *g, *b) = shift_hue(*r, *g, *b, factor);
        });
    }

    /// One pixel of [`hue`].
    #[inline]
    fn shift_hue(r: f32, g: f32, b: f32, factor: f32) -> (f32, f32, f32) {
        // RGB → HSV (`super::rgb_to_hsv`).
        let maxc = r.max(g).max(b);
        let minc = r.min(g).min(b);
        let eqc = maxc == minc;
        let range = maxc - minc;
        let s = range / if eqc { 1.0 } else { maxc };
        let divisor = if eqc { 1.0 } else { range };
        let rc = (maxc - r) / divisor;
        let gc = (maxc - g) / divisor;
        let bc = (maxc - b) / divisor;
        let h = if maxc == r {
            bc - gc
        } else if maxc == g {
            rc + 2.0 - bc
        } else {
            gc + 4.0 - rc
        };
        let h = h * (1.0f32 / 6.0) + 1.0;
        let h = h - h.floor();
        // The shift (`super::adjust_hue`).
        let h = h + factor;
        let h = h - h.floor();
        // HSV → RGB (`super::hsv_to_rgb`).
        let v = maxc;
        let h6 = h * 6.0;
        let i = h6.floor();
        let f = h6 - i;
        let sxf = s * f;
        let one_minus_s = 1.0 - s;
        let q = ((1.0 - sxf) * v).clamp(0.0, 1.0);
        let t = ((sxf + one_minus_s) * v).clamp(0.0, 1.0);
        let p = (one_minus_s * v).clamp(0.0, 1.0);
        let i = i - (i / 6.0).floor() * 6.0;
        match i as u8 {
            0 => (v, t, p),
            1 => (q, v, p),
            2 => (p, v, t),
            3 => (p, q, v),
            4 => (t, p, v),
            _ => (v, p, q),
        }
    }

    /// Luma in every channel ([`super::grayscale_like`]; identity on one channel).
    pub fn grayscale(img: &mut [f32], channels: usize) {
        each_rgb(img, channels, |r, g, b| {
            let l = luma(*r, *g, *b);
            (*r, *g, *b) = (l, l, l);
        });
    }

    /// The jitter of one image: the four operations in `order`, those with a zero magnitude
    /// (`enabled[op]` false) skipped ([`super::ColorJitter::apply`]).
    pub fn jitter(
        img: &mut [f32],
        channels: usize,
        order: [usize; 4],
        factors: [f32; 4],
        enabled: [bool; 4],
    ) {
        for op in order {
            if !enabled[op] {
                continue;
            }
            match op {
                0 => brightness(img, factors[0]),
                1 => contrast(img, channels, factors[1]),
                2 => saturation(img, channels, factors[2]),
                _ => hue(img, channels, factors[3]),
            }
        }
    }
}

/// Random colour jitter (torchvision's `RandomApply([ColorJitter(b, c, s, h)], p)`): with
/// probability `p` per sample, brightness, contrast, saturation and hue are changed in a random
/// order drawn per sample, each by a factor drawn per sample.
///
/// A magnitude `m` gives factors uniform in `[max(0, 1 − m), 1 + m]` (hue: shift in `[−m, m]`,
/// `m <= 0.5`); a magnitude of 0 switches that operation off.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ColorJitter {
    /// Brightness magnitude.
    pub brightness: f64,
    /// Contrast magnitude.
    pub contrast: f64,
    /// Saturation magnitude.
    pub saturation: f64,
    /// Hue magnitude (`<= 0.5`).
    pub hue: f64,
    /// Probability that a sample is jittered at all.
    pub p: f64,
}

/// Per-sample parameters drawn by [`ColorJitter::sample`].
#[derive(Debug, Clone, PartialEq)]
pub struct JitterParams {
    /// Whether each sample is jittered.
    pub apply: Vec<bool>,
    /// Per sample, the order of the four operations (0 brightness, 1 contrast, 2 saturation,
    /// 3 hue).
    pub order: Vec<[usize; 4]>,
    /// Per sample, the factors `[brightness, contrast, saturation, hue]`.
    pub factors: Vec<[f32; 4]>,
}

impl ColorJitter {
    /// SimCLR's colour distortion of strength `s`: `(0.8s, 0.8s, 0.8s, 0.2s)`, `p = 0.8`.
    pub fn simclr(s: f64) -> Self {
        Self {
            brightness: 0.8 * s,
            contrast: 0.8 * s,
            saturation: 0.8 * s,
            hue: 0.2 * s,
            p: 0.8,
        }
    }

    /// The magnitudes multiplied by `strength` (hue capped at 0.5): the curriculum's colour
    /// strength knob (MICO: ×1, ×1.5, ×2, ×3).
    pub fn scaled(&self, strength: f64) -> Self {
        Self {
            brightness: self.brightness * strength,
            contrast: self.contrast * strength,
            saturation: self.saturation * strength,
            hue: (self.hue * strength).min(0.5),
            p: self.p,
        }
    }

    /// Checks the magnitudes and the probability.
    pub fn validate(&self) -> Result<(), ConfigError> {
        non_negative("color_jitter.brightness", self.brightness)?;
        non_negative("color_jitter.contrast", self.contrast)?;
        non_negative("color_jitter.saturation", self.saturation)?;
        crate::base::error::in_range("color_jitter.hue", self.hue, 0.0, 0.5, false)?;
        probability("color_jitter.p", self.p)
    }

    /// Draws the parameters of `n` samples.
    pub fn sample(&self, rng: &mut StdRng, n: usize) -> JitterParams {
        let apply = bernoulli(rng, self.p, n);
        let mut order = Vec::with_capacity(n);
        let mut factors = Vec::with_capacity(n);
        for _ in 0..n {
            let mut o = [0usize, 1, 2, 3];
            for i in (1..4).rev() {
                let j = rng.random_range(0..=i);
                o.swap(i, j);
            }
            order.push(o);
            let f = |rng: &mut StdRng, m: f64| uniform(rng, (1.0 - m).max(0.0), 1.0 + m) as f32;
            let b = f(rng, self.brightness);
            let c = f(rng, self.contrast);
            let s = f(rng, self.saturation);
            let h = uniform(rng, -self.hue, self.hue) as f32;
            factors.push([b, c, s, h]);
        }
        JitterParams {
            apply,
            order,
            factors,
        }
    }

    /// Which of the four operations are on (a magnitude above 0).
    pub fn enabled(&self) -> [bool; 4] {
        [
            self.brightness > 0.0,
            self.contrast > 0.0,
            self.saturation > 0.0,
            self.hue > 0.0,
        ]
    }

    /// Applies drawn parameters: four stages; at stage `k` each sample gets the operation in its
    /// `order[k]`. Each operation runs once per stage on the rows that need it (gathered); a
    /// stage's results are put back exactly in one gather (each row takes one operation per
    /// stage, so all read the stage's input); samples that are not jittered pass through
    /// unchanged.
    pub fn apply<B: Backend>(&self, x: Tensor<B, 4>, params: &JitterParams) -> Tensor<B, 4> {
        let device = x.device();
        let n = x.dims()[0];
        let enabled = self.enabled();
        let mut x = x;
        for stage in 0..4 {
            // The stage's input first, then each operation's rows; `take[i]` is where row i of
            // the stage's output lies in them.
            let mut parts = vec![x.clone()];
            let mut take: Vec<usize> = (0..n).collect();
            let mut offset = n;
            for (op, &on) in enabled.iter().enumerate() {
                if !on {
                    continue;
                }
                let rows: Vec<usize> = (0..n)
                    .filter(|&i| params.apply[i] && params.order[i][stage] == op)
                    .collect();
                if rows.is_empty() {
                    continue;
                }
                let f: Vec<f32> = rows.iter().map(|&i| params.factors[i][op]).collect();
                let f = per_sample::<B>(&f, &device);
                let sub = if rows.len() == n {
                    x.clone()
                } else {
                    x.clone().select(0, index_tensor::<B>(&rows, &device))
                };
                let y = match op {
                    0 => adjust_brightness(sub, f),
                    1 => adjust_contrast(sub, f),
                    2 => adjust_saturation(sub, f),
                    _ => adjust_hue(sub, f),
                };
                for (k, &r) in rows.iter().enumerate() {
                    take[r] = offset + k;
                }
                offset += rows.len();
                parts.push(y);
            }
            x = match parts.len() {
                1 => x,
                // One operation on every row, in order: its result is the stage's output.
                2 if take.iter().enumerate().all(|(i, &t)| t == n + i) => {
                    parts.pop().expect("two parts")
                }
                _ => Tensor::cat(parts, 0).select(0, index_tensor::<B>(&take, &device)),
            };
        }
        x
    }
}

/// Random grayscale: with probability `p` per sample, the image is replaced by its luma (repeated
/// over the channels).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RandomGrayscale {
    /// Probability per sample.
    pub p: f64,
}

impl RandomGrayscale {
    /// Checks the probability.
    pub fn validate(&self) -> Result<(), ConfigError> {
        probability("grayscale.p", self.p)
    }

    /// Draws which of `n` samples are turned gray.
    pub fn sample(&self, rng: &mut StdRng, n: usize) -> Vec<bool> {
        bernoulli(rng, self.p, n)
    }

    /// Applies drawn flags.
    pub fn apply<B: Backend>(&self, x: Tensor<B, 4>, flags: &[bool]) -> Tensor<B, 4> {
        if !flags.iter().any(|&f| f) || x.dims()[1] == 1 {
            return x;
        }
        let mask = per_sample_mask::<B>(flags, &x.device());
        select_where(mask, grayscale_like(x.clone()), x)
    }
}
