//! What the files of `#[cube]` kernels share to run them as custom operations of burn's fusion
//! stream: the types of `Fusion<CubeBackend<…>>` (the inner backend of `Autodiff<Wgpu>` and
//! `Autodiff<Cuda>`), the conversions of its tensors, and the cube ranges of a launch on a list of
//! tensors. Written once here rather than in each of
//! `batch_norm_cube.rs`, `log_softmax_cube.rs`, `sgd_cube.rs` and `moving_average_cube.rs`.

use burn::prelude::*;
use burn::tensor::ops::FloatTensor;
use burn::tensor::TensorPrimitive;
use burn_cubecl::CubeBackend;
use burn_fusion::{Fusion, FusionBackend, FusionRuntime, FusionTensor};
use burn_ir::TensorIr;

/// The inner backend of `Fusion<CubeBackend<…>>`, whose tensors a custom operation's kernels take.
pub(super) type Inner<R, F, I, BT> = CubeBackend<R, F, I, BT>;
/// The fusion runtime of `Inner<R, F, I, BT>`.
pub(super) type Runtime<R, F, I, BT> = <Inner<R, F, I, BT> as FusionBackend>::FusionRuntime;
/// The backend the operations are registered on: `Fusion<CubeBackend<…>>`.
pub(super) type On<R, F, I, BT> = Fusion<Inner<R, F, I, BT>>;

/// A new output of `shape` in the dtype of `like`, for a custom operation.
pub(super) fn output<RT: FusionRuntime>(like: &FusionTensor<RT>, shape: Vec<usize>) -> TensorIr {
    TensorIr::uninit(like.client.create_empty_handle(), shape.into(), like.dtype)
}

/// A float tensor of a primitive.
pub(super) fn tensor<B: Backend, const D: usize>(t: FloatTensor<B>) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(t))
}

/// The cumulative cube counts of tensors of lengths `lens` laid end to end, `cube` units a cube
/// and each cube on one tensor: tensor `i` is covered by cubes `ends[i − 1]..ends[i]` (the
/// launches of `moving_average_cube.rs` and `sgd_cube.rs` on a list of tensors).
pub(super) fn cube_ends(lens: &[usize], cube: usize) -> Vec<usize> {
    lens.iter()
        .scan(0, |end, len| {
            *end += len.div_ceil(cube.max(1));
            Some(*end)
        })
        .collect()
}
