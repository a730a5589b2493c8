//! What the losses' unit tests share: the backends, matrices from host values, a tensor's values
//! on the host, the check of a gradient against central finite differences, and the unit vectors
//! of the worked examples.

use burn::backend::{Autodiff, NdArray};
use burn::prelude::*;

pub(crate) use super::worked_examples::curricular_views;

/// The backend of the losses' unit tests: `f64`, for values worked by hand.
pub(crate) type B = NdArray<f64>;

/// [`B`] with autodiff, for gradients.
pub(crate) type Ad = Autodiff<B>;

/// The row-major `values` as a `shape` matrix on the backend's default device.
pub(crate) fn matrix<Bk: Backend>(values: &[f64], shape: [usize; 2]) -> Tensor<Bk, 2> {
    Tensor::from_data(TensorData::new(values.to_vec(), shape), &Default::default())
}

/// `n` rows of `d` features, smooth in their index: `sin(0.613·k + shift) + 0.2·(k mod d)` for
/// the `k`-th value.
pub(crate) fn rows(n: usize, d: usize, shift: f64) -> Vec<f64> {
    (0..n * d)
        .map(|k| (k as f64 * 0.613 + shift).sin() + 0.2 * (k % d) as f64)
        .collect()
}

/// A tensor's values on the host, as `f64`.
pub(crate) fn host<Bk: Backend, const N: usize>(t: Tensor<Bk, N>) -> Vec<f64> {
    t.into_data().convert::<f64>().to_vec().unwrap()
}

/// Asserts that `analytic`, the gradient of `f` at `x`, matches `f`'s central finite
/// differences of step 1e-6 to 1e-6 relative, each difference's magnitude held at least
/// `floor`; a failure names `what` and the entry.
pub(crate) fn assert_matches_finite_differences(
    f: impl Fn(&[f64]) -> f64,
    x: &[f64],
    analytic: &[f64],
    floor: f64,
    what: &str,
) {
    let h = 1e-6;
    for k in 0..x.len() {
        let (mut up, mut down) = (x.to_vec(), x.to_vec());
        up[k] += h;
        down[k] -= h;
        let numeric = (f(&up) - f(&down)) / (2.0 * h);
        let scale = numeric.abs().max(floor);
        assert!(
            (analytic[k] - numeric).abs() / scale < 1e-6,
            "{what}: entry {k}: {} vs {numeric}",
            analytic[k]
        );
    }
}
