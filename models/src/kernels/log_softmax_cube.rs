//! The log-softmax along the last axis as one `#[cube]` kernel each way, under autodiff: what
//! [`log_softmax`](super::log_softmax()) runs on `Autodiff<Wgpu>` and `Autodiff<Cuda>` (cubecl
//! compiles the same source for both) where the CPU has the row kernels of
//! [`log_softmax`](mod@super::log_softmax).
//!
//! Why this file exists: the contrastive losses' softmax chain (InfoNCE's cross-entropy over
//! the similarity logits, DINO's, SwAV's and the others' soft targets) is, in burn's
//! operations, a row maximum, a subtraction, an exponential, a row sum, a logarithm and a
//! subtraction, and its gradient burn-autodiff's rule for each; burn's fusion merges some of
//! them, the reductions each run alone. Here a cube of 256 units takes a row:
//!
//! - forward (`log_softmax_rows`): the row's maximum `m` and `s = Σ e^(x − m)` (each reduced
//!   in shared memory), then `y = x − m − ln s`;
//! - backward (`log_softmax_backward_rows`), from the kept output: `S = Σ ∂y` over the row,
//!   then `∂x = ∂y − e^y·S`.
//!
//! Sums accumulate in f32 whatever the element type. The rows are the tensor's leading axes
//! flattened; a grid of at most 65,535 cubes a side holds them. burn's fusion runs each kernel
//! as one custom operation (`OperationIr::Custom`), as `batch_norm_cube.rs` does.
//!
//! Checked on lavapipe against the CPU (`tests/gpu_path`: values and gradients, rows shorter
//! and longer than a cube), and by the GPU-path tests of every loss built on it.

use std::marker::PhantomData;

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::Autodiff;
use burn::prelude::*;
use burn::tensor::ops::FloatTensor;
use burn::tensor::TensorPrimitive;
use burn_cubecl::{BoolElement, CubeRuntime, FloatElement, IntElement};
use burn_fusion::stream::{Operation, OperationStreams};
use burn_fusion::FusionRuntime;
use burn_ir::{CustomOpIr, HandleContainer, OperationIr, OperationOutput, TensorIr};

use super::cube_op::{tensor, Inner, On, Runtime};

use device::{backward_cube, forward_cube};

/// The kernels and their launches on the inner backend's tensors (cubecl's prelude has its own
/// `Tensor` and `Float`, hence a module of their own).
mod device {
    use burn_cubecl::kernel::into_contiguous;
    use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
    use burn_cubecl::tensor::CubeTensor;
    use burn_cubecl::CubeRuntime;
    use cubecl::prelude::*;

    /// Units per cube, one row per cube.
    const UNITS: u32 = 256;
    /// Cubes per side of the grid at most.
    const GRID_SIDE: usize = 65_535;

    /// The maximum over the cube's 256 units of each unit's `value` (a tree in shared memory);
    /// every unit gets it.
    #[cube]
    fn cube_max(shared: &mut SharedMemory<f32>, value: f32) -> f32 {
        let unit = UNIT_POS_X as usize;
        shared[unit] = value;
        sync_cube();
        let mut stride = 128usize;
        while stride > 0 {
            if unit < stride {
                let other = shared[unit + stride];
                if other > shared[unit] {
                    shared[unit] = other;
                }
            }
            sync_cube();
            stride /= 2;
        }
        let total = shared[0];
        sync_cube();
        total
    }

    /// The sum over the cube's 256 units of each unit's `value` (a tree in shared memory);
    /// every unit gets it.
    #[cube]
    fn cube_sum(shared: &mut SharedMemory<f32>, value: f32) -> f32 {
        let unit = UNIT_POS_X as usize;
        shared[unit] = value;
        sync_cube();
        let mut stride = 128usize;
        while stride > 0 {
            if unit < stride {
                shared[unit] += shared[unit + stride];
            }
            sync_cube();
            stride /= 2;
        }
        let total = shared[0];
        sync_cube();
        total
    }

    /// `y = x − m − ln Σ e^(x − m)` along each row of `x` (`[rows, n]`, row-major), `m` the
    /// row's maximum.
    #[cube(launch)]
    fn log_softmax_rows<F: Float>(
        x: &Tensor<F>,
        y: &mut Tensor<F>,
        #[define(F)] _dtype: StorageType,
    ) {
        let n = x.shape(1);
        let row = CUBE_POS_Y as usize * CUBE_COUNT_X as usize + CUBE_POS_X as usize;
        if row >= x.shape(0) {
            terminate!();
        }
        let base = row * n;
        let unit = UNIT_POS_X as usize;
        let mut shared = SharedMemory::<f32>::new(256usize);

        let mut largest = f32::cast_from(x[base]);
        let mut i = unit;
        while i < n {
            let v = f32::cast_from(x[base + i]);
            if v > largest {
                largest = v;
            }
            i += 256;
        }
        let largest = cube_max(&mut shared, largest);

        let mut sum = 0.0f32;
        let mut i = unit;
        while i < n {
            sum += (f32::cast_from(x[base + i]) - largest).exp();
            i += 256;
        }
        let shift = largest + cube_sum(&mut shared, sum).ln();

        let mut i = unit;
        while i < n {
            y[base + i] = F::cast_from(f32::cast_from(x[base + i]) - shift);
            i += 256;
        }
    }

    /// `∂x = ∂y − e^y·Σ ∂y` along each row (`[rows, n]`, row-major), `y` the forward's output.
    #[cube(launch)]
    fn log_softmax_backward_rows<F: Float>(
        dy: &Tensor<F>,
        y: &Tensor<F>,
        dx: &mut Tensor<F>,
        #[define(F)] _dtype: StorageType,
    ) {
        let n = y.shape(1);
        let row = CUBE_POS_Y as usize * CUBE_COUNT_X as usize + CUBE_POS_X as usize;
        if row >= y.shape(0) {
            terminate!();
        }
        let base = row * n;
        let unit = UNIT_POS_X as usize;
        let mut shared = SharedMemory::<f32>::new(256usize);

        let mut sum = 0.0f32;
        let mut i = unit;
        while i < n {
            sum += f32::cast_from(dy[base + i]);
            i += 256;
        }
        let total = cube_sum(&mut shared, sum);

        let mut i = unit;
        while i < n {
            let at = base + i;
            dx[at] = F::cast_from(f32::cast_from(dy[at]) - f32::cast_from(y[at]).exp() * total);
            i += 256;
        }
    }

    /// The grid for `rows` rows, one cube each.
    pub(super) fn grid(rows: usize) -> (u32, u32) {
        let x = rows.clamp(1, GRID_SIDE);
        (x as u32, rows.div_ceil(x).max(1) as u32)
    }

    /// The forward kernel on the inner backend's `[rows, n]` tensor. The outputs here are
    /// allocated row-major without padding (`empty_device_contiguous_dtype`), as the kernels index
    /// them: burn's `empty_device_dtype` lets CUDA pad each row to an alignment (a row of 1,000
    /// logits in f32, 4,000 bytes, would be read back with a pitch of 4,096).
    pub(super) fn forward_cube<R: CubeRuntime>(x: CubeTensor<R>) -> CubeTensor<R> {
        let x = into_contiguous(x);
        let shape = x.meta.shape().clone();
        let y =
            empty_device_contiguous_dtype::<R>(x.client.clone(), x.device.clone(), shape, x.dtype);
        let [rows, _] = x.meta.shape().dims();
        let (gx, gy) = grid(rows);
        let dtype = x.dtype;
        log_softmax_rows::launch::<R>(
            &x.client.clone(),
            CubeCount::Static(gx, gy, 1),
            CubeDim::new_1d(UNITS),
            x.into_tensor_arg(),
            y.clone().into_tensor_arg(),
            dtype.into(),
        );
        y
    }

    /// The backward kernel on the inner backend's `[rows, n]` tensors.
    pub(super) fn backward_cube<R: CubeRuntime>(
        dy: CubeTensor<R>,
        y: CubeTensor<R>,
    ) -> CubeTensor<R> {
        let (dy, y) = (into_contiguous(dy), into_contiguous(y));
        let shape = y.meta.shape().clone();
        let dx =
            empty_device_contiguous_dtype::<R>(y.client.clone(), y.device.clone(), shape, y.dtype);
        let [rows, _] = y.meta.shape().dims();
        let (gx, gy) = grid(rows);
        let dtype = y.dtype;
        log_softmax_backward_rows::launch::<R>(
            &y.client.clone(),
            CubeCount::Static(gx, gy, 1),
            CubeDim::new_1d(UNITS),
            dy.into_tensor_arg(),
            y.into_tensor_arg(),
            dx.clone().into_tensor_arg(),
            dtype.into(),
        );
        dx
    }
}

/// One of the two kernels as a custom operation of burn's fusion stream (`backward`: the
/// backward kernel, inputs `∂y`, `y`; else the forward, input `x`).
#[derive(Clone, Debug)]
struct KernelOp<R, F, I, BT> {
    desc: CustomOpIr,
    backward: bool,
    _backend: PhantomData<(R, F, I, BT)>,
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>
    Operation<Runtime<R, F, I, BT>> for KernelOp<R, F, I, BT>
{
    fn execute(
        &self,
        handles: &mut HandleContainer<<Runtime<R, F, I, BT> as FusionRuntime>::FusionHandle>,
    ) {
        let [output] = self.desc.outputs.as_slice() else {
            unreachable!("one output")
        };
        let mut input =
            |at: usize| handles.get_float_tensor::<Inner<R, F, I, BT>>(&self.desc.inputs[at]);
        let result = if self.backward {
            let dy = input(0);
            backward_cube::<R>(dy, input(1))
        } else {
            forward_cube::<R>(input(0))
        };
        handles.register_float_tensor::<Inner<R, F, I, BT>>(&output.id, result);
    }
}

/// The kernel `backward` (see [`KernelOp`]) on `[rows, n]` tensors of `On<…>`, registered in
/// the fusion stream.
fn run_kernel<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    inputs: Vec<FloatTensor<On<R, F, I, BT>>>,
    backward: bool,
) -> FloatTensor<On<R, F, I, BT>> {
    let like = &inputs[inputs.len() - 1];
    let client = like.client.clone();
    let out = TensorIr::uninit(client.create_empty_handle(), like.shape.clone(), like.dtype);
    let streams = OperationStreams::with_inputs(inputs.iter());
    let irs: Vec<TensorIr> = inputs.into_iter().map(|t| t.into_ir()).collect();
    let desc = CustomOpIr::new(
        if backward {
            "curriculum_ssl_log_softmax_backward"
        } else {
            "curriculum_ssl_log_softmax"
        },
        &irs,
        &[out],
    );
    client
        .register(
            streams,
            OperationIr::Custom(desc.clone()),
            KernelOp::<R, F, I, BT> {
                desc,
                backward,
                _backend: PhantomData,
            },
        )
        .output()
}

/// A `[..., n]` tensor as `[rows, n]`.
fn rows<B: Backend, const D: usize>(t: FloatTensor<B>, shape: [usize; D]) -> FloatTensor<B> {
    let n = shape[D - 1];
    let rows = shape[..D - 1].iter().product::<usize>();
    tensor::<B, D>(t)
        .reshape([rows, n])
        .into_primitive()
        .tensor()
}

/// A `[rows, n]` tensor as `shape`.
fn unrows<B: Backend, const D: usize>(t: FloatTensor<B>, shape: [usize; D]) -> FloatTensor<B> {
    tensor::<B, 2>(t).reshape(shape).into_primitive().tensor()
}

/// The backward step of [`log_softmax_last`], keeping the output `y` (`[rows, n]`).
#[derive(Debug)]
struct LogSoftmaxBackward<R, F, I, BT, const D: usize>(PhantomData<(R, F, I, BT)>);

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement, const D: usize>
    Backward<On<R, F, I, BT>, 1> for LogSoftmaxBackward<R, F, I, BT, D>
{
    type State = (FloatTensor<On<R, F, I, BT>>, [usize; D]);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node] = ops.parents;
        let grad = grads.consume::<On<R, F, I, BT>>(&ops.node);
        let (y, shape) = ops.state;
        if let Some(node) = node {
            let dx =
                run_kernel::<R, F, I, BT>(vec![rows::<On<R, F, I, BT>, D>(grad, shape), y], true);
            grads.register::<On<R, F, I, BT>>(node.id, unrows::<On<R, F, I, BT>, D>(dx, shape));
        }
    }
}

/// The log-softmax of `x` along its last axis on `Autodiff<Fusion<CubeBackend<…>>>`
/// (`Autodiff<Wgpu>`, `Autodiff<Cuda>`), by the kernels of this file, with its backward step.
///
/// # Shapes
/// - `x`, output: `[..., n]`, the same
fn log_softmax_last<R, F, I, BT, const D: usize>(
    x: Tensor<Autodiff<On<R, F, I, BT>, NoCheckpointing>, D>,
) -> Tensor<Autodiff<On<R, F, I, BT>, NoCheckpointing>, D>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    let shape: [usize; D] = x.dims();
    let x = x.into_primitive().tensor();
    let y = run_kernel::<R, F, I, BT>(
        vec![rows::<On<R, F, I, BT>, D>(x.primitive.clone(), shape)],
        false,
    );
    let output = unrows::<On<R, F, I, BT>, D>(y.clone(), shape);
    let output = match LogSoftmaxBackward::<R, F, I, BT, D>(PhantomData)
        .prepare::<NoCheckpointing>([x.node.clone()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => prep.finish((y, shape), output),
        OpsKind::UnTracked(prep) => prep.finish(output),
    };
    Tensor::from_primitive(TensorPrimitive::Float(output))
}

/// The inner backends whose autodiff takes the kernels of this file: `Fusion<CubeBackend<…>>`,
/// the inner backend of `Autodiff<Wgpu>` and `Autodiff<Cuda>`.
pub(crate) trait LogSoftmaxKernels: Backend {
    /// The log-softmax of `x` along its last axis, by the kernels of this file, with its
    /// backward step.
    ///
    /// # Shapes
    /// - `x`, output: `[..., n]`, the same
    fn log_softmax_last<const D: usize>(
        x: Tensor<Autodiff<Self, NoCheckpointing>, D>,
    ) -> Tensor<Autodiff<Self, NoCheckpointing>, D>;
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement> LogSoftmaxKernels
    for On<R, F, I, BT>
{
    fn log_softmax_last<const D: usize>(
        x: Tensor<Autodiff<Self, NoCheckpointing>, D>,
    ) -> Tensor<Autodiff<Self, NoCheckpointing>, D> {
        log_softmax_last::<R, F, I, BT, D>(x)
    }
}

#[cfg(test)]
mod tests {
    use super::device::grid;

    #[test]
    fn the_grid_holds_every_row_within_a_side_of_65535() {
        for rows in [1, 2, 255, 65_535, 65_536, 200_000, 4_000_000] {
            let (x, y) = grid(rows);
            assert!(x as usize <= 65_535 && y as usize <= 65_535);
            assert!(x as usize * y as usize >= rows && (x as usize) * (y as usize - 1) < rows);
        }
    }
}
