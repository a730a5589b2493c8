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
//! [`moving_average_all`](super::moving_average_all) updates a whole momentum copy as one
//! operation and one kernel launch for up to 64 parameters (a `Sequence` of tensors, as many as
//! the device's bindings allow): a ResNet-18's 62 parameters were 62 operations and 62 launches
//! the host recorded, matched, ran and encoded one by one.
//!
//! Checked on lavapipe against the CPU's tensor operations (`tests/gpu_path`), and by the
//! GPU-path tests of MoCo's and BYOL's steps (the key encoder and the target after each step).

use std::marker::PhantomData;

use burn::prelude::*;
use burn::tensor::ops::FloatTensor;
use burn_cubecl::{BoolElement, CubeRuntime, FloatElement, IntElement};
use burn_fusion::stream::{Operation, OperationStreams};
use burn_fusion::FusionRuntime;
use burn_ir::{CustomOpIr, HandleContainer, OperationIr, OperationOutput, TensorIr};

use super::cube_op::{output, tensor, tensors_per_launch, Inner, On, Runtime};

/// The kernel and its launch on the inner backend's tensors (cubecl's prelude has its own
/// `Tensor` and `Float`, hence a module of their own).
mod device {
    use burn_cubecl::kernel::into_contiguous;
    use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
    use burn_cubecl::tensor::CubeTensor;
    use burn_cubecl::CubeRuntime;
    use cubecl::calculate_cube_count_elemwise;
    use cubecl::prelude::*;

    use super::super::cube_op::ListLaunch;

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

    /// The kernel above on a list of tensors at once, each cube on one tensor: the cubes
    /// `cube_ends[i − 1]..cube_ends[i]` (compile-time constants: the kernel is compiled once for
    /// a module's shapes) cover tensor `i`, whose length is `lens[i]`, so every unit of a cube
    /// takes the same branch of the unrolled search.
    #[cube(launch)]
    #[allow(clippy::too_many_arguments)]
    fn moving_average_many_kernel<F: Float>(
        targets: &Sequence<Tensor<F>>,
        onlines: &Sequence<Tensor<F>>,
        outputs: &mut Sequence<Tensor<F>>,
        keep: f32,
        take: f32,
        #[comptime] cube_ends: Vec<usize>,
        #[comptime] lens: Vec<usize>,
        #[define(F)] _dtype: StorageType,
    ) {
        let cube = CUBE_POS;
        let count = comptime!(cube_ends.len());
        #[unroll]
        for i in 0..count {
            let start = comptime!(if i == 0 { 0 } else { cube_ends[i - 1] });
            let end = comptime!(cube_ends[i]);
            let len = comptime!(lens[i]);
            if cube >= start && cube < end {
                let local = (cube - start) * CUBE_DIM as usize + UNIT_POS as usize;
                if local < len {
                    let output = outputs.index_mut(i);
                    output[local] = F::cast_from(
                        f32::cast_from(targets.index(i)[local]) * keep
                            + f32::cast_from(onlines.index(i)[local]) * take,
                    );
                }
            }
        }
    }

    /// The averages of `pairs` on the inner backend's tensors, each written to a new contiguous
    /// tensor shaped as its target: one launch for up to `per_launch` pairs.
    pub(super) fn moving_average_many_cube<R: CubeRuntime>(
        pairs: Vec<(CubeTensor<R>, CubeTensor<R>)>,
        momentum: f64,
        per_launch: usize,
    ) -> Vec<CubeTensor<R>> {
        let mut averages = Vec::with_capacity(pairs.len());
        let mut pairs = pairs.into_iter().peekable();
        while let Some((first, _)) = pairs.peek() {
            let (client, device, dtype) = (first.client.clone(), first.device.clone(), first.dtype);
            let chunk: Vec<_> = pairs
                .by_ref()
                .take(per_launch.max(1))
                .map(|(t, o)| (into_contiguous(t), into_contiguous(o)))
                .collect();
            let outputs: Vec<CubeTensor<R>> = chunk
                .iter()
                .map(|(t, _)| {
                    empty_device_contiguous_dtype::<R>(
                        client.clone(),
                        device.clone(),
                        t.meta.shape().clone(),
                        dtype,
                    )
                })
                .collect();
            let launch = ListLaunch::new(
                &client,
                chunk.iter().map(|(t, _)| t.meta.num_elements()).collect(),
            );
            moving_average_many_kernel::launch::<R>(
                &client,
                launch.cube_count,
                launch.cube_dim,
                chunk
                    .iter()
                    .map(|(t, _)| t.clone().into_tensor_arg())
                    .collect(),
                chunk
                    .iter()
                    .map(|(_, o)| o.clone().into_tensor_arg())
                    .collect(),
                outputs
                    .iter()
                    .map(|o| o.clone().into_tensor_arg())
                    .collect(),
                momentum as f32,
                (1.0 - momentum) as f32,
                launch.cube_ends,
                launch.lens,
                dtype.into(),
            );
            averages.extend(outputs);
        }
        averages
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

/// The kernel on every pair of a list as one custom operation of burn's fusion stream: inputs
/// the pairs' target and online values in turn, outputs the averages in the pairs' order.
#[derive(Clone, Debug)]
struct MovingAverageAllOp<R, F, I, BT> {
    desc: CustomOpIr,
    momentum: f64,
    _backend: PhantomData<(R, F, I, BT)>,
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>
    Operation<Runtime<R, F, I, BT>> for MovingAverageAllOp<R, F, I, BT>
{
    fn execute(
        &self,
        handles: &mut HandleContainer<<Runtime<R, F, I, BT> as FusionRuntime>::FusionHandle>,
    ) {
        let pairs = self
            .desc
            .inputs
            .chunks_exact(2)
            .map(|pair| {
                (
                    handles.get_float_tensor::<Inner<R, F, I, BT>>(&pair[0]),
                    handles.get_float_tensor::<Inner<R, F, I, BT>>(&pair[1]),
                )
            })
            .collect::<Vec<_>>();
        let Some((first, _)) = pairs.first() else {
            return;
        };
        // Three bindings a pair: the target, the online value, the average.
        let per_launch = tensors_per_launch(&first.client, 3);
        let averages = device::moving_average_many_cube::<R>(pairs, self.momentum, per_launch);
        for (output, average) in self.desc.outputs.iter().zip(averages) {
            handles.register_float_tensor::<Inner<R, F, I, BT>>(&output.id, average);
        }
    }
}

/// `(target, online)` pairs of parameters, as burn's primitives (of any rank).
pub(crate) type Pairs<B> = Vec<(FloatTensor<B>, FloatTensor<B>)>;

/// The backends with the kernel: `Fusion<CubeBackend<…>>`, the inner backend of
/// `Autodiff<Wgpu>` and `Autodiff<Cuda>`.
pub(crate) trait MovingAverageKernel: Backend {
    /// [`moving_average_all`](super::moving_average_all) when every tensor of the list shares
    /// one element type and one device and each pair one shape: `Ok` with the averages in the
    /// pairs' order, else `Err` with the pairs.
    fn moving_average_all(
        pairs: Pairs<Self>,
        momentum: f64,
    ) -> Result<Vec<FloatTensor<Self>>, Pairs<Self>>;

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
    fn moving_average_all(
        pairs: Pairs<Self>,
        momentum: f64,
    ) -> Result<Vec<FloatTensor<Self>>, Pairs<Self>> {
        let Some((like, _)) = pairs.first() else {
            return Ok(Vec::new());
        };
        // One launch reads and writes one element type, on one device's server.
        let (dtype, device) = (like.dtype, like.client.device().clone());
        let takes = pairs.iter().all(|(t, o)| {
            [t, o]
                .iter()
                .all(|x| x.dtype == dtype && *x.client.device() == device)
                && t.shape == o.shape
        });
        if !takes {
            return Err(pairs);
        }
        let client = like.client.clone();
        let outputs: Vec<TensorIr> = pairs
            .iter()
            .map(|(t, _)| output(t, t.shape.to_vec()))
            .collect();
        let streams = OperationStreams::with_inputs(pairs.iter().flat_map(|(t, o)| [t, o]));
        let inputs: Vec<TensorIr> = pairs
            .into_iter()
            .flat_map(|(t, o)| [t.into_ir(), o.into_ir()])
            .collect();
        let desc = CustomOpIr::new("curriculum_ssl_moving_average_all", &inputs, &outputs);
        let averages = client.register(
            streams,
            OperationIr::Custom(desc.clone()),
            MovingAverageAllOp::<R, F, I, BT> {
                desc,
                momentum,
                _backend: PhantomData,
            },
        );
        Ok(averages)
    }

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
