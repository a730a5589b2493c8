//! The exponential moving average of one parameter, `t ← m·t + (1 − m)·o`, as one `#[cube]`
//! kernel run as one operation of burn's fusion stream: what
//! [`moving_average`](super::moving_average) runs on wgpu and CUDA (cubecl compiles the same
//! source for both) for the momentum copies (MoCo's key encoder, BYOL's target, DINO's teacher).
//!
//! Why this file exists: in burn's tensor operations the update is three element-wise
//! operations a parameter (two scalar products and a sum), which burn's fusion merges into one
//! kernel but records, matches, runs and frees one by one on the host, besides the drops of the
//! intermediate values (docs/gpu.md, "The fifth cut"). Here it is one operation and one kernel a
//! parameter, with the same arithmetic in the same order (in f32; a bf16 parameter is read and
//! written in bf16).
//!
//! Checked on lavapipe against the CPU's tensor operations (`tests/gpu_path`), and by the
//! GPU-path tests of MoCo's and BYOL's steps (the key encoder and the target after each step).

use std::marker::PhantomData;

use burn::prelude::*;
use burn::tensor::ops::FloatTensor;
use burn_cubecl::{BoolElement, CubeRuntime, FloatElement, IntElement};
use burn_fusion::stream::{Operation, OperationStreams};
use burn_fusion::FusionRuntime;
use burn_ir::{CustomOpIr, HandleContainer, OperationIr, OperationOutput};

use super::cube_op::{output, tensor, Inner, On, Runtime};

/// The kernel and its launch on the inner backend's tensors (cubecl's prelude has its own
/// `Tensor` and `Float`, hence a module of their own).
mod device {
    use burn_cubecl::kernel::into_contiguous;
    use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
    use burn_cubecl::tensor::CubeTensor;
    use burn_cubecl::CubeRuntime;
    use cubecl::calculate_cube_count_elemwise;
    use cubecl::prelude::*;

    /// One unit an entry: `t·keep + o·take` in f32 (`keep = m`, `take = 1 − m`).
    #[cube(launch)]
    fn moving_average_kernel<F: Float>(
        target: &Tensor<F>,
        online: &Tensor<F>,
        output: &mut Tensor<F>,
        keep: f32,
        take: f32,
        #[define(F)] _dtype: StorageType,
    ) {
        let at = ABSOLUTE_POS;
        if at < output.len() {
            output[at] =
                F::cast_from(f32::cast_from(target[at]) * keep + f32::cast_from(online[at]) * take);
        }
    }

    /// The average on the inner backend's tensors, written to a new contiguous tensor shaped as
    /// `target` (the kernel indexes it without row padding).
    pub(super) fn moving_average_cube<R: CubeRuntime>(
        target: CubeTensor<R>,
        online: CubeTensor<R>,
        momentum: f64,
    ) -> CubeTensor<R> {
        let [target, online] = [target, online].map(into_contiguous);
        let (client, dtype) = (target.client.clone(), target.dtype);
        let output = empty_device_contiguous_dtype::<R>(
            client.clone(),
            target.device.clone(),
            target.meta.shape().clone(),
            dtype,
        );
        let units = target.meta.num_elements();
        let cube_dim = CubeDim::new(&client, units);
        moving_average_kernel::launch::<R>(
            &client,
            calculate_cube_count_elemwise(&client, units, cube_dim),
            cube_dim,
            target.into_tensor_arg(),
            online.into_tensor_arg(),
            output.clone().into_tensor_arg(),
            momentum as f32,
            (1.0 - momentum) as f32,
            dtype.into(),
        );
        output
    }
}

/// The kernel as a custom operation of burn's fusion stream: inputs the target's and the online
/// network's values, output the average.
#[derive(Clone, Debug)]
struct MovingAverageOp<R, F, I, BT> {
    desc: CustomOpIr,
    momentum: f64,
    _backend: PhantomData<(R, F, I, BT)>,
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>
    Operation<Runtime<R, F, I, BT>> for MovingAverageOp<R, F, I, BT>
{
    fn execute(
        &self,
        handles: &mut HandleContainer<<Runtime<R, F, I, BT> as FusionRuntime>::FusionHandle>,
    ) {
        let ([target, online], [output]) = self.desc.as_fixed::<2, 1>();
        let average = device::moving_average_cube::<R>(
            handles.get_float_tensor::<Inner<R, F, I, BT>>(target),
            handles.get_float_tensor::<Inner<R, F, I, BT>>(online),
            self.momentum,
        );
        handles.register_float_tensor::<Inner<R, F, I, BT>>(&output.id, average);
    }
}

/// The backends with the kernel: `Fusion<CubeBackend<…>>`, the inner backend of
/// `Autodiff<Wgpu>` and `Autodiff<Cuda>`.
pub(crate) trait MovingAverageKernel: Backend {
    /// [`moving_average`](super::moving_average) when both tensors share one element type:
    /// `Ok` with the average, else `Err` with the inputs.
    #[allow(clippy::type_complexity)]
    fn moving_average<const D: usize>(
        target: Tensor<Self, D>,
        online: Tensor<Self, D>,
        momentum: f64,
    ) -> Result<Tensor<Self, D>, (Tensor<Self, D>, Tensor<Self, D>)>;
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement> MovingAverageKernel
    for On<R, F, I, BT>
{
    fn moving_average<const D: usize>(
        target: Tensor<Self, D>,
        online: Tensor<Self, D>,
        momentum: f64,
    ) -> Result<Tensor<Self, D>, (Tensor<Self, D>, Tensor<Self, D>)> {
        if online.dtype() != target.dtype() {
            return Err((target, online));
        }
        let (target, online): (FloatTensor<Self>, FloatTensor<Self>) = (
            target.into_primitive().tensor(),
            online.into_primitive().tensor(),
        );
        let client = target.client.clone();
        let average = output(&target, target.shape.to_vec());
        let streams = OperationStreams::with_inputs([&target, &online]);
        let desc = CustomOpIr::new(
            "curriculum_ssl_moving_average",
            &[target.into_ir(), online.into_ir()],
            &[average],
        );
        let average = client
            .register(
                streams,
                OperationIr::Custom(desc.clone()),
                MovingAverageOp::<R, F, I, BT> {
                    desc,
                    momentum,
                    _backend: PhantomData,
                },
            )
            .output();
        Ok(tensor(average))
    }
}
