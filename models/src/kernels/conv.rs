//! The 2-D convolution on slices, and which algorithm computes it: [Winograd](super::winograd)'s
//! F(4×4, 3×3) where it [covers](super::winograd::covers) the layer (3×3 at stride 1 with enough
//! channels and positions), else [`im2col`]. Both take the same slices and give
//! the same values up to the order of the sums (the unit tests of `winograd.rs` hold it to
//! im2col's and to the definition).

use super::gemm::Real;
use super::geometry::ConvGeometry;
use super::{im2col, winograd};

/// The convolution's output `[batch, out_channels, out_h, out_w]`, row-major.
///
/// # Shapes
/// - `x`: `[batch, in_channels, in_h, in_w]`
/// - `weight`: `[out_channels, in_channels, kernel_h, kernel_w]`
pub fn forward<T: Real>(x: &[T], weight: &[T], g: &ConvGeometry) -> Vec<T> {
    if winograd::covers(g) {
        return winograd::forward(x, weight, g, im2col::CHUNK_ENTRIES);
    }
    im2col::forward(x, weight, g, im2col::CHUNK_ENTRIES)
}

/// The gradients of the convolution with respect to its input and to its weight, given the
/// output gradient; each is computed only when asked for (`wanted`: `(∂x, ∂w)`).
///
/// # Shapes
/// - `x`: `[batch, in_channels, in_h, in_w]`, `weight`: `[out_channels, in_channels, k_h, k_w]`
/// - `grad`: `[batch, out_channels, out_h, out_w]`
/// - returns `(∂x, ∂w)` shaped as `x` and `weight`
pub fn backward<T: Real>(
    x: &[T],
    weight: &[T],
    grad: &[T],
    g: &ConvGeometry,
    wanted: (bool, bool),
) -> (Option<Vec<T>>, Option<Vec<T>>) {
    if winograd::covers(g) {
        return winograd::backward(x, weight, grad, g, wanted, im2col::CHUNK_ENTRIES);
    }
    im2col::backward(x, weight, grad, g, wanted, im2col::CHUNK_ENTRIES)
}
