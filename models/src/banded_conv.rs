//! A convolution over few input channels computed as two matrix products with banded matrices.
//!
//! A network's first convolution sees one or three input channels. On burn's CPU backend
//! (`Flex`) such a layer is slow for a reason that has nothing to do with its arithmetic: the
//! forward pass takes a scalar per-plane kernel (its small-channel path, for `C ≤ 4` and
//! `C_out ≤ 16`), and the weight gradient, burn's generic rule, becomes a convolution whose
//! "kernel" is the output gradient, run through an im2col gather of `N·H_out·W_out·C·K²`
//! entries by a strided element-by-element copy. For the small ResNet's stem (1 → 8 channels,
//! 7×7, stride 2, 28×28 images, batch 128) that was 3.3 ms forward and 7.8 ms forward + backward
//! for under 10 M multiply-adds, against 2.2 and 3.6 ms in the form below (a throwaway
//! per-layer timing on the 2-core build machine; the committed figure is the whole backbone's,
//! `cargo bench --bench backbones`, in `benches/README.md`).
//!
//! [`banded_conv2d`] computes the same convolution from matrix products and plain 2-D
//! transposes, the operations that backend runs fastest:
//!
//! 1. the columns: `Cm[(kw, j), (n, c, r)] = x[n, c, r, s_w·j + kw − p_w]` is the product of a
//!    0/1 selection matrix `[K_w·W_out, W]` with the transposed input `[W, N·C·H]`;
//! 2. a 2-D transpose makes it `D[(j, n), (c, r, kw)]`;
//! 3. the rows and the weights together: `A[(co, i), (c, r, kw)] = w[co, c, r + p_h − s_h·i, kw]`
//!    (zero outside the kernel) is a banded matrix gathered from the weights, and
//!    `Z = D · Aᵀ` is `[(j, n), (co, i)]`;
//! 4. a last 2-D transpose gives `y[n, co, i, j]`.
//!
//! Every step is an ordinary differentiable tensor op, so autodiff derives the backward pass:
//! the weight gradient is one product `Dᵀ · ∂Z` and a scatter-add of `A`'s gradient into the
//! `C_out·C·K²` weights. The product in step 3 does `H / K_h` times the useful multiply-adds
//! (the band's zeros), so this pays only for small images; [`banded_conv2d`] falls back to the
//! layer's own forward pass when `A` would exceed [`MAX_BAND_ENTRIES`], and for options it does
//! not cover (dilation, groups, asymmetric or `Same` padding).
//!
//! No crate offers this for burn tensors, hence this file. It is a choice for the CPU backend:
//! [`crate::ResNetConfig::banded_stem`] turns it on for a ResNet's stem (the `recipe` binary
//! does so on the CPU only).

use burn::nn::conv::Conv2d;
use burn::nn::PaddingConfig2d;
use burn::prelude::*;

/// The largest banded matrix `A` (`C_out·H_out × C·H·K_w` entries) [`banded_conv2d`] builds;
/// above it, the layer's own forward pass runs. The small ResNet's stem on 28×28 images needs
/// 21,952; ResNet's ImageNet stem on 224×224 RGB images would need 33.7 M.
pub const MAX_BAND_ENTRIES: usize = 1 << 20;

/// The options of `conv` that [`banded_conv2d`] covers: symmetric explicit (or no) padding,
/// no dilation, one group. Returns `(pad_h, pad_w)`.
fn covered_padding<B: Backend>(conv: &Conv2d<B>) -> Option<(usize, usize)> {
    if conv.dilation != [1, 1] || conv.groups != 1 {
        return None;
    }
    match conv.padding {
        PaddingConfig2d::Valid => Some((0, 0)),
        PaddingConfig2d::Explicit(top, left, bottom, right) if top == bottom && left == right => {
            Some((top, left))
        }
        _ => None,
    }
}

/// `conv.forward(x)`, computed as products with banded matrices (see the module's
/// documentation): the same values up to the order of the sums, and the same gradients for the
/// weight, the bias and (if it has one) `x`. Falls back to `conv.forward(x)` where the layer's
/// options are not covered or the banded matrix would exceed [`MAX_BAND_ENTRIES`].
///
/// # Shapes
/// - `x`: `[N, C, H, W]` → `[N, C_out, H_out, W_out]`
pub fn banded_conv2d<B: Backend>(x: Tensor<B, 4>, conv: &Conv2d<B>) -> Tensor<B, 4> {
    let Some((pad_h, pad_w)) = covered_padding(conv) else {
        return conv.forward(x);
    };
    let [n, c, h, w] = x.dims();
    let [c_out, c_in, k_h, k_w] = conv.weight.dims();
    let [s_h, s_w] = conv.stride;
    if c != c_in || h + 2 * pad_h < k_h || w + 2 * pad_w < k_w {
        // Let the layer report the mismatch in its own words.
        return conv.forward(x);
    }
    let h_out = (h + 2 * pad_h - k_h) / s_h + 1;
    let w_out = (w + 2 * pad_w - k_w) / s_w + 1;
    if c_out * h_out * c * h * k_w > MAX_BAND_ENTRIES {
        return conv.forward(x);
    }
    let device = x.device();

    // 1. Column selection: [K_w·W_out, W] · [W, N·C·H] = [(kw, j), (n, c, r)].
    let mut select = vec![0.0f32; k_w * w_out * w];
    for kw in 0..k_w {
        for j in 0..w_out {
            if let Some(col) = (s_w * j + kw).checked_sub(pad_w).filter(|&col| col < w) {
                select[(kw * w_out + j) * w + col] = 1.0;
            }
        }
    }
    // In the input's float type (a backend's default may differ from it, e.g. f64 tests).
    let select = Tensor::<B, 2>::from_data(
        TensorData::new(select, [k_w * w_out, w]).convert_dtype(x.dtype()),
        &device,
    );
    let columns = select.matmul(x.reshape([n * c * h, w]).transpose());
    // 2. [(j, n), (c, r, kw)].
    let patches = columns
        .reshape([k_w, w_out * n * c * h])
        .transpose()
        .reshape([w_out * n, c * h * k_w]);

    // 3. The banded weight matrix A[(co, i), (c, r, kw)], gathered from the weights and a
    //    trailing zero.
    let zero = (c_out * c * k_h * k_w) as i64;
    let mut index = vec![zero; c_out * h_out * c * h * k_w];
    for co in 0..c_out {
        for i in 0..h_out {
            for ci in 0..c {
                for r in 0..h {
                    let Some(kh) = (r + pad_h).checked_sub(s_h * i).filter(|&kh| kh < k_h) else {
                        continue;
                    };
                    let row = ((co * h_out + i) * c + ci) * h + r;
                    for kw in 0..k_w {
                        index[row * k_w + kw] = (((co * c + ci) * k_h + kh) * k_w + kw) as i64;
                    }
                }
            }
        }
    }
    let entries = index.len();
    let index = Tensor::<B, 1, Int>::from_data(TensorData::new(index, [entries]), &device);
    let flat = conv.weight.val().reshape([c_out * c * k_h * k_w]);
    let zero = flat.clone().narrow(0, 0, 1).zeros_like();
    let weights = Tensor::cat(vec![flat, zero], 0);
    let band = weights
        .select(0, index)
        .reshape([c_out * h_out, c * h * k_w]);
    let products = patches.matmul(band.transpose());

    // 4. [(j, n), (co, i)] → [n, co, i, j].
    let y = products
        .reshape([w_out, n * c_out * h_out])
        .transpose()
        .reshape([n, c_out, h_out, w_out]);
    match &conv.bias {
        Some(bias) => y + bias.val().reshape([1, c_out, 1, 1]),
        None => y,
    }
}
