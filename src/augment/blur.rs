//! Gaussian blur with a per-sample σ, as torchvision's `gaussian_blur` (reflect padding, odd
//! kernel, weights `exp(−x²/(2σ²))` normalised to sum 1 over `x = −(k−1)/2 … (k−1)/2`),
//! computed as two separable passes over the whole batch, each a batched matrix product.

use burn::tensor::{backend::Backend, Tensor, TensorData};
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};

use super::sampling::{bernoulli, probability, range, uniform};
use crate::base::error::ConfigError;

/// The normalised 1-D Gaussian kernel of odd size `k` and standard deviation `sigma`.
pub fn gaussian_kernel1d(k: usize, sigma: f64) -> Vec<f64> {
    let half = (k as f64 - 1.0) / 2.0;
    let w: Vec<f64> = (0..k)
        .map(|i| {
            let x = (i as f64 - half) / sigma;
            (-0.5 * x * x).exp()
        })
        .collect();
    let s: f64 = w.iter().sum();
    w.into_iter().map(|v| v / s).collect()
}

/// Indices of a reflect padding (`pad` on each side) of a dimension of size `n` (`pad < n`).
fn reflect_indices(n: usize, pad: usize) -> Vec<i64> {
    (0..n + 2 * pad)
        .map(|i| {
            let j = (i as i64 - pad as i64).abs();
            let last = n as i64 - 1;
            if j > last {
                2 * last - j
            } else {
                j
            }
        })
        .collect()
}

/// Blurs each sample `n` with the 1-D kernel `kernels[n]` (all of the same odd length `k`)
/// horizontally and vertically, with reflect padding.
///
/// # Panics
/// If the kernels differ in length, the length is even, or `k / 2` is not smaller than both image
/// sides (reflect padding needs it); [`RandomGaussianBlur::validate_for`] checks this up front.
pub fn gaussian_blur<B: Backend>(x: Tensor<B, 4>, kernels: &[Vec<f64>]) -> Tensor<B, 4> {
    let [n, c, h, w] = x.dims();
    assert_eq!(kernels.len(), n, "one kernel per sample");
    let k = kernels[0].len();
    assert!(
        k % 2 == 1 && kernels.iter().all(|kk| kk.len() == k),
        "odd kernels of one length"
    );
    let pad = k / 2;
    assert!(
        pad < h && pad < w,
        "blur kernel {k} too large for a {h}x{w} image"
    );
    if pad == 0 {
        return x;
    }
    let device = x.device();
    // Each pass is one batched matrix product with a banded matrix per sample (the taps, the
    // reflect padding folded in): one GEMM per pass instead of 2k element-wise passes over the
    // batch (k = 23 at 224 px). The sums run in another order than tap by tap: the same values
    // up to f32 rounding.
    let across_w = band_matrices::<B>(kernels, w, &device);
    // Square images (the usual case) take the same matrices down as across.
    let down = if h == w {
        across_w.clone()
    } else {
        band_matrices::<B>(kernels, h, &device)
    };
    let across = x
        .reshape([n, c * h, w])
        .matmul(across_w)
        .reshape([n, c, h, w]);
    across
        .swap_dims(2, 3)
        .reshape([n, c * w, h])
        .matmul(down)
        .reshape([n, c, w, h])
        .swap_dims(2, 3)
}

/// For each sample, the `len × len` matrix `M` with `(x · M)[i] = Σ_t kernel[t] ·
/// x[reflect(i + t − k/2)]`: `M[j][i]` sums the taps that land on `j` from output `i`.
fn band_matrices<B: Backend>(kernels: &[Vec<f64>], len: usize, device: &B::Device) -> Tensor<B, 3> {
    let k = kernels[0].len();
    let pad = k / 2;
    let reflect = reflect_indices(len, pad);
    let mut m = vec![0f32; kernels.len() * len * len];
    for (kernel, mat) in kernels.iter().zip(m.chunks_exact_mut(len * len)) {
        for i in 0..len {
            for (t, &weight) in kernel.iter().enumerate() {
                let j = reflect[i + t] as usize;
                mat[j * len + i] += weight as f32;
            }
        }
    }
    Tensor::from_data(TensorData::new(m, [kernels.len(), len, len]), device)
}

/// The blur of one image in host memory, for the CPU ([`crate::augment::host`]): each channel
/// of `img` (`[C, H, W]` floats) blurred across its rows, then down its columns, with `kernel`
/// (odd length, `k / 2` smaller than both sides) and reflect padding, as [`gaussian_blur`]. The
/// taps are summed one by one in f32 (the tensor form folds them into a matrix product): the
/// same values up to f32 rounding. `scratch` is reused between calls.
pub fn blur_host(img: &mut [f32], [c, h, w]: [usize; 3], kernel: &[f32], scratch: &mut Vec<f32>) {
    let k = kernel.len();
    let pad = k / 2;
    debug_assert!(k % 2 == 1 && pad < h && pad < w);
    let plane = h * w;
    scratch.clear();
    scratch.resize(plane + w + 2 * pad, 0.0);
    let (across, row) = scratch.split_at_mut(plane);
    let cols: Vec<usize> = reflect_indices(w, pad)
        .iter()
        .map(|&j| j as usize)
        .collect();
    let rows: Vec<usize> = reflect_indices(h, pad)
        .iter()
        .map(|&j| j as usize)
        .collect();
    for channel in img.chunks_exact_mut(plane).take(c) {
        // Across: each row padded by reflection, then the taps as whole-row products (the
        // inner loop vectorises).
        for (src, dst) in channel.chunks_exact(w).zip(across.chunks_exact_mut(w)) {
            for (p, &j) in row.iter_mut().zip(&cols) {
                *p = src[j];
            }
            dst.fill(0.0);
            for (t, &weight) in kernel.iter().enumerate() {
                for (d, &p) in dst.iter_mut().zip(&row[t..t + w]) {
                    *d += weight * p;
                }
            }
        }
        // Down: output row y sums the reflected rows y − k/2 … y + k/2.
        for (y, dst) in channel.chunks_exact_mut(w).enumerate() {
            dst.fill(0.0);
            for (t, &weight) in kernel.iter().enumerate() {
                let r = rows[y + t];
                for (d, &p) in dst.iter_mut().zip(&across[r * w..(r + 1) * w]) {
                    *d += weight * p;
                }
            }
        }
    }
}

/// Random Gaussian blur: with probability `p` per sample, blur with σ uniform in `sigma`
/// (torchvision's `RandomApply([GaussianBlur(kernel_size, sigma)], p)`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RandomGaussianBlur {
    /// Odd kernel size (torchvision presets use about 10 % of the image side).
    pub kernel_size: usize,
    /// Range of σ (SimCLR / MoCo v2 / BYOL: `(0.1, 2.0)`).
    pub sigma: (f64, f64),
    /// Probability per sample.
    pub p: f64,
}

impl RandomGaussianBlur {
    /// The odd kernel size closest to 10 % of `side` (at least 3), as SimCLR and lightly use.
    pub fn kernel_for(side: usize) -> usize {
        let k = ((side as f64) * 0.1).round() as usize;
        k.max(3) | 1
    }

    /// Checks the settings.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.kernel_size == 0 || self.kernel_size.is_multiple_of(2) {
            return Err(ConfigError::new(
                "blur.kernel_size",
                format!("must be an odd number >= 1, got {}", self.kernel_size),
            ));
        }
        range("blur.sigma", self.sigma, 0.0, true)?;
        probability("blur.p", self.p)
    }

    /// Checks the settings for images of `h × w` (reflect padding needs `kernel_size / 2 < side`).
    pub fn validate_for(&self, h: usize, w: usize) -> Result<(), ConfigError> {
        self.validate()?;
        if self.kernel_size / 2 >= h.min(w) {
            return Err(ConfigError::new(
                "blur.kernel_size",
                format!("{} is too large for {h}x{w} images", self.kernel_size),
            ));
        }
        Ok(())
    }

    /// Draws per-sample kernels (a unit impulse for samples that are not blurred).
    pub fn sample(&self, rng: &mut StdRng, n: usize) -> Vec<Vec<f64>> {
        let apply = bernoulli(rng, self.p, n);
        apply
            .into_iter()
            .map(|a| {
                let sigma = uniform(rng, self.sigma.0, self.sigma.1);
                if a {
                    gaussian_kernel1d(self.kernel_size, sigma)
                } else {
                    let mut d = vec![0.0; self.kernel_size];
                    d[self.kernel_size / 2] = 1.0;
                    d
                }
            })
            .collect()
    }

    /// Whether a drawn kernel leaves the image as it is (a sample that is not blurred, or a σ
    /// so small that the centre tap's weight is 1).
    pub fn is_identity(&self, kernel: &[f64]) -> bool {
        kernel[self.kernel_size / 2] == 1.0
    }

    /// Applies drawn kernels.
    pub fn apply<B: Backend>(&self, x: Tensor<B, 4>, kernels: &[Vec<f64>]) -> Tensor<B, 4> {
        let any = kernels.iter().any(|k| !self.is_identity(k));
        if any {
            gaussian_blur(x, kernels)
        } else {
            x
        }
    }
}
