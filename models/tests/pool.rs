//! `kernels::pool_op::global_avg_pool_op` (the global average pooling operation of the GPU
//! backends) against the composed form and against the means by hand, in f64.

use burn::backend::{ndarray::NdArray, Autodiff};
use burn::prelude::*;
use burn::tensor::{DType, TensorData};
use curriculum_ssl_models::kernels::pool_op::global_avg_pool_op;

type B = Autodiff<NdArray<f64>>;

/// The pooled values equal each channel's mean by hand and the composed form's (two means
/// and a reshape, `layers::global_avg_pool` off the GPU) to 1e-14, and the map's gradient under
/// a loss weighting every output differently is `w_nc / (H·W)` at each of the channel's
/// positions, as the composed form's: a 2 × 3 map of 4 × 5 positions.
#[test]
fn global_avg_pool_op_equals_the_composed_form_and_the_means() {
    let (n, c, h, w) = (2, 3, 4, 5);
    let device = Default::default();
    let xs: Vec<f64> = (0..n * c * h * w)
        .map(|i| ((i * 29 % 31) as f64 - 15.0) / 7.0)
        .collect();
    let weights: Vec<f64> = (0..n * c).map(|i| i as f64 - 2.5).collect();
    let run = |op: bool| {
        let x = Tensor::<B, 4>::from_data(
            TensorData::new(xs.clone(), [n, c, h, w]),
            (&device, DType::F64),
        )
        .require_grad();
        let pooled = if op {
            global_avg_pool_op(x.clone())
        } else {
            x.clone().mean_dim(3).mean_dim(2).reshape([n, c])
        };
        let weight = Tensor::<B, 2>::from_data(
            TensorData::new(weights.clone(), [n, c]),
            (&device, DType::F64),
        );
        let grads = (pooled.clone() * weight).sum().backward();
        let values: Vec<f64> = pooled.into_data().to_vec().unwrap();
        let dx: Vec<f64> = x.grad(&grads).unwrap().into_data().to_vec().unwrap();
        (values, dx)
    };
    let ((values, dx), (values_c, dx_c)) = (run(true), run(false));
    for (k, (a, b)) in values.iter().zip(&values_c).enumerate() {
        let by_hand = xs[k * h * w..(k + 1) * h * w].iter().sum::<f64>() / (h * w) as f64;
        assert!(
            (a - by_hand).abs() < 1e-14,
            "mean {k}: {a} against {by_hand}"
        );
        assert!(
            (a - b).abs() < 1e-14,
            "mean {k}: {a} against the composed {b}"
        );
    }
    for (i, (a, b)) in dx.iter().zip(&dx_c).enumerate() {
        let expected = weights[i / (h * w)] / (h * w) as f64;
        assert!(
            (a - expected).abs() < 1e-15,
            "∂x[{i}]: {a} against {expected}"
        );
        assert!(
            (a - b).abs() < 1e-15,
            "∂x[{i}]: {a} against the composed {b}"
        );
    }
}
