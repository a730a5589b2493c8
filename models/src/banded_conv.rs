//! A convolution over few input channels computed as two matrix products with banded matrices.
//!
//! A network's first convolution sees one or three input channels. On burn's CPU backend
//! (`Flex`) such a layer is slow for a reason that has nothing to do with its arithmetic: the
//! forward pass takes a scalar per-plane kernel (its small-channel path, for `C ≤ 4` and
//! `C_out ≤ 16`), and the weight gradient, burn's generic rule, becomes a convolution whose
//! "kernel" is the output gradient, run through an im2col gather of `N·H_out·W_out·C·K²`
//! entries by a strided element-by-element copy. For the small ResNet's stem (1 → 8 channels,
//! 7×7, stride 2, 28×28 images, batch 128) that is 3.3 ms forward and 7.8 ms forward + backward
//! for under 10 M multiply-adds (measured on the 2-core build machine; see
//! `benches/README.md`).
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
    let select = Tensor::<B, 2>::from_data(TensorData::new(select, [k_w * w_out, w]), &device);
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
    let weights = Tensor::cat(
        vec![
            conv.weight.val().reshape([c_out * c * k_h * k_w]),
            Tensor::zeros([1], &device),
        ],
        0,
    );
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

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, NdArray};
    use burn::nn::conv::Conv2dConfig;

    type Ad = Autodiff<NdArray<f64>>;

    fn values<const D: usize>(t: Tensor<NdArray<f64>, D>) -> Vec<f64> {
        t.into_data().to_vec().unwrap()
    }

    fn assert_close(label: &str, a: &[f64], b: &[f64]) {
        assert_eq!(a.len(), b.len(), "{label}: lengths");
        let scale = b.iter().fold(1.0f64, |m, v| m.max(v.abs()));
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                (x - y).abs() <= 1e-12 * scale,
                "{label}[{i}]: banded {x} against burn's conv2d {y}"
            );
        }
    }

    /// The banded product against burn's own convolution in f64: the output and the gradients
    /// of the weight, the bias and the input, for a loss that weights every output differently.
    fn check(
        [n, c, h, w]: [usize; 4],
        c_out: usize,
        kernel: [usize; 2],
        stride: [usize; 2],
        padding: PaddingConfig2d,
        bias: bool,
    ) {
        let device = Default::default();
        let conv = Conv2dConfig::new([c, c_out], kernel)
            .with_stride(stride)
            .with_padding(padding)
            .with_bias(bias)
            .init::<Ad>(&device);
        let data: Vec<f64> = (0..n * c * h * w)
            .map(|i| ((i as f64) * 0.731).sin())
            .collect();
        let x =
            Tensor::<Ad, 4>::from_data(TensorData::new(data, [n, c, h, w]), &device).require_grad();
        let run = |banded: bool| {
            let y = if banded {
                banded_conv2d(x.clone(), &conv)
            } else {
                conv.forward(x.clone())
            };
            let dims = y.dims();
            let weights: Vec<f64> = (0..dims.iter().product::<usize>())
                .map(|i| ((i as f64) * 0.377).cos())
                .collect();
            let weights = Tensor::<Ad, 4>::from_data(TensorData::new(weights, dims), &device);
            let grads = (y.clone() * weights).sum().backward();
            let mut out = vec![values(y.inner()), values(x.grad(&grads).unwrap())];
            out.push(values(conv.weight.val().grad(&grads).unwrap()));
            if let Some(b) = &conv.bias {
                out.push(values(b.val().grad(&grads).unwrap()));
            }
            (dims, out)
        };
        let (dims, banded) = run(true);
        let (expected_dims, expected) = run(false);
        assert_eq!(dims, expected_dims, "output shape");
        for (label, (a, b)) in [
            "output",
            "input gradient",
            "weight gradient",
            "bias gradient",
        ]
        .iter()
        .zip(banded.iter().zip(&expected))
        {
            assert_close(label, a, b);
        }
    }

    #[test]
    fn equals_burns_conv2d_on_the_small_resnet_stem() {
        // 1 → 8 channels, 7×7, stride 2, padding 3, on 28×28 (the CPU default backbone).
        check(
            [3, 1, 28, 28],
            8,
            [7, 7],
            [2, 2],
            PaddingConfig2d::Explicit(3, 3, 3, 3),
            false,
        );
    }

    #[test]
    fn equals_burns_conv2d_for_other_shapes_strides_and_paddings() {
        // RGB, the CIFAR stem's 3×3 stride 1.
        check(
            [2, 3, 8, 8],
            4,
            [3, 3],
            [1, 1],
            PaddingConfig2d::Explicit(1, 1, 1, 1),
            true,
        );
        // A non-square image and kernel, unequal strides and paddings, rows and columns the
        // stride does not divide.
        check(
            [2, 2, 9, 11],
            3,
            [3, 5],
            [3, 2],
            PaddingConfig2d::Explicit(1, 2, 1, 2),
            true,
        );
        // No padding; a kernel as high as the image.
        check(
            [2, 1, 5, 7],
            2,
            [5, 3],
            [1, 2],
            PaddingConfig2d::Valid,
            false,
        );
    }

    #[test]
    fn falls_back_to_the_layer_where_it_does_not_apply() {
        // Dilation is not covered, and neither is a band above the bound: both must still give
        // the layer's own output.
        let device = Default::default();
        let dilated = Conv2dConfig::new([1, 2], [3, 3])
            .with_dilation([2, 2])
            .init::<NdArray<f64>>(&device);
        let x = Tensor::<NdArray<f64>, 4>::ones([1, 1, 7, 7], &device);
        assert_eq!(
            values(banded_conv2d(x.clone(), &dilated)),
            values(dilated.forward(x))
        );
        let large = Conv2dConfig::new([3, 64], [7, 7])
            .with_stride([2, 2])
            .with_padding(PaddingConfig2d::Explicit(3, 3, 3, 3))
            .init::<NdArray<f64>>(&device);
        let x = Tensor::<NdArray<f64>, 4>::ones([1, 3, 96, 96], &device);
        assert!(64 * 48 * 3 * 96 * 7 > MAX_BAND_ENTRIES);
        assert_eq!(
            values(banded_conv2d(x.clone(), &large)),
            values(large.forward(x))
        );
    }
}
