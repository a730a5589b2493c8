//! The sizes of a convolution the slice kernels compute ([`ConvGeometry`]), and which of burn's
//! `Conv2d` layers they cover ([`covered_geometry`]).

use burn::nn::conv::Conv2d;
use burn::nn::PaddingConfig2d;
use burn::prelude::*;

/// The sizes of a convolution with one group: input `[batch, in_channels, in_h, in_w]`, weight
/// `[out_channels, in_channels, kernel_h, kernel_w]`, symmetric zero padding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvGeometry {
    /// Images.
    pub batch: usize,
    /// Input channels.
    pub in_channels: usize,
    /// Output channels.
    pub out_channels: usize,
    /// Input height and width.
    pub in_size: [usize; 2],
    /// Kernel height and width.
    pub kernel: [usize; 2],
    /// Stride (height, width).
    pub stride: [usize; 2],
    /// Zero padding on each side (height, width).
    pub padding: [usize; 2],
    /// Dilation (height, width).
    pub dilation: [usize; 2],
}

impl ConvGeometry {
    /// Output height and width (PyTorch's formula); `None` when the kernel does not fit.
    pub fn out_size(&self) -> Option<[usize; 2]> {
        let side = |d: usize| {
            let span = self.dilation[d] * (self.kernel[d].checked_sub(1)?) + 1;
            let padded = self.in_size[d] + 2 * self.padding[d];
            if self.stride[d] == 0 || padded < span {
                return None;
            }
            Some((padded - span) / self.stride[d] + 1)
        };
        Some([side(0)?, side(1)?])
    }

    pub(crate) fn positions(&self) -> usize {
        let [oh, ow] = self
            .out_size()
            .expect("checked when the geometry was built");
        oh * ow
    }

    /// Rows of `colᵀ`: `in_channels · kernel_h · kernel_w`.
    pub(crate) fn col_rows(&self) -> usize {
        self.in_channels * self.kernel[0] * self.kernel[1]
    }

    /// Images per chunk: `colᵀ` and `G` near `budget` entries, at least one image.
    pub(crate) fn images_per_chunk(&self, budget: usize) -> usize {
        let per_image = self.col_rows().max(self.out_channels) * self.positions();
        (budget / per_image.max(1)).clamp(1, self.batch.max(1))
    }

    pub(crate) fn input_len(&self) -> usize {
        self.batch * self.in_channels * self.in_size[0] * self.in_size[1]
    }

    pub(crate) fn weight_len(&self) -> usize {
        self.out_channels * self.col_rows()
    }

    pub(crate) fn output_len(&self) -> usize {
        self.batch * self.out_channels * self.positions()
    }
}

/// The sizes of `conv` applied to an input of shape `x_shape` when the kernels cover the layer
/// (one group, no padding or symmetric explicit padding, channels that match, a kernel that
/// fits), else `None`.
pub fn covered_geometry<B: Backend>(conv: &Conv2d<B>, x_shape: [usize; 4]) -> Option<ConvGeometry> {
    let [_, in_channels, _, _] = x_shape;
    let [_, weight_in, _, _] = conv.weight.dims();
    if conv.groups != 1 || weight_in != in_channels {
        return None;
    }
    geometry(conv, x_shape)
}

/// The sizes of `conv` applied to an input of shape `x_shape` when it is a depthwise
/// convolution the kernels of `depthwise.rs` cover (one filter per channel: `groups =
/// in_channels = out_channels`, weight `[c, 1, k_h, k_w]`; padding and kernel as in
/// [`covered_geometry`]), with `in_channels = out_channels = c`, else `None`.
pub fn depthwise_geometry<B: Backend>(
    conv: &Conv2d<B>,
    x_shape: [usize; 4],
) -> Option<ConvGeometry> {
    let [_, channels, _, _] = x_shape;
    let [out_channels, weight_in, _, _] = conv.weight.dims();
    if channels < 2 || conv.groups != channels || out_channels != channels || weight_in != 1 {
        return None;
    }
    geometry(conv, x_shape)
}

/// The sizes of `conv` on `x_shape` whatever its groups: `None` for an empty batch, a padding
/// other than symmetric, or a kernel that leaves no output.
fn geometry<B: Backend>(conv: &Conv2d<B>, x_shape: [usize; 4]) -> Option<ConvGeometry> {
    let [batch, in_channels, h, w] = x_shape;
    let [out_channels, _, kernel_h, kernel_w] = conv.weight.dims();
    if batch == 0 {
        return None;
    }
    let g = ConvGeometry {
        batch,
        in_channels,
        out_channels,
        in_size: [h, w],
        kernel: [kernel_h, kernel_w],
        stride: conv.stride,
        padding: symmetric_padding(&conv.padding)?,
        dilation: conv.dilation,
    };
    g.out_size().filter(|[oh, ow]| oh * ow > 0).map(|_| g)
}

/// The padding on each side (height, width) of `Valid` or a symmetric explicit padding; `None`
/// for any other (`Same` pads an even kernel unevenly).
fn symmetric_padding(padding: &PaddingConfig2d) -> Option<[usize; 2]> {
    match *padding {
        PaddingConfig2d::Valid => Some([0, 0]),
        PaddingConfig2d::Explicit(top, left, bottom, right) if top == bottom && left == right => {
            Some([top, left])
        }
        _ => None,
    }
}
