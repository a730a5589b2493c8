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

/// The most tensors one launch on a list of tensors takes: its search for a cube's tensor is
/// unrolled over them (every unit compares its cube's position with each tensor's range).
const MAX_TENSORS_PER_LAUNCH: usize = 64;

/// How many tensors of a list one launch takes on `client`'s device when each needs
/// `bindings_each` bindings: as many as its bindings allow, a few left for cubecl's own (the
/// tensors' metadata, the scalars), at most [`MAX_TENSORS_PER_LAUNCH`]. A ResNet-18's 62
/// parameters are one launch on CUDA (1,024 bindings); on wgpu the limit is Vulkan's per-stage
/// count of storage buffers.
pub(super) fn tensors_per_launch<R: cubecl::Runtime>(
    client: &cubecl::client::ComputeClient<R>,
    bindings_each: usize,
) -> usize {
    let bindings = client.properties().hardware.max_bindings as usize;
    (bindings.saturating_sub(4) / bindings_each.max(1)).clamp(1, MAX_TENSORS_PER_LAUNCH)
}

/// The geometry of one launch on a list of tensors laid end to end, each cube on one tensor:
/// tensor `i` (of `lens[i]` entries) is covered by cubes `cube_ends[i − 1]..cube_ends[i]`.
pub(super) struct ListLaunch {
    /// Units a cube.
    pub cube_dim: cubecl::prelude::CubeDim,
    /// Cubes enough for every tensor's range (a few more where the count is spread over two
    /// axes: they fall in no range).
    pub cube_count: cubecl::prelude::CubeCount,
    /// Each tensor's last cube, plus one, counted from the list's start.
    pub cube_ends: Vec<usize>,
    /// Each tensor's length.
    pub lens: Vec<usize>,
}

impl ListLaunch {
    /// The launch of tensors of lengths `lens` on `client`'s device.
    pub(super) fn new<R: cubecl::Runtime>(
        client: &cubecl::client::ComputeClient<R>,
        lens: Vec<usize>,
    ) -> Self {
        let cube_dim =
            cubecl::prelude::CubeDim::new(client, lens.iter().copied().max().unwrap_or(0));
        let cube = cube_dim.num_elems() as usize;
        let cube_ends: Vec<usize> = lens
            .iter()
            .scan(0, |end, len| {
                *end += len.div_ceil(cube.max(1));
                Some(*end)
            })
            .collect();
        let cubes = cube_ends.last().copied().unwrap_or(0);
        let cube_count = cubecl::calculate_cube_count_elemwise(client, cubes * cube, cube_dim);
        Self {
            cube_dim,
            cube_count,
            cube_ends,
            lens,
        }
    }
}
