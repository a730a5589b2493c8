//! PyTorch's SGD step with momentum on one parameter as one `#[cube]` kernel, run as one
//! operation of burn's fusion stream: what [`sgd_momentum_step`](super::sgd_momentum_step)
//! runs on wgpu and CUDA (cubecl compiles the same source for both).
//!
//! Why this file exists: written in burn's tensor operations the step is six element-wise
//! operations a parameter (`g + wd·θ`, `μ·v`, `+ g`, `lr·step`, `θ − …`, and Nesterov's
//! `g + μ·v`), and burn's fusion merges them into one kernel, but each is still recorded,
//! matched, run and freed one by one by the host (docs/gpu.md, "The fifth cut"): 372 of a
//! ResNet-18 step's operations with its 62 parameters, besides the drops of their intermediate
//! values. Here it is one operation and one kernel a parameter, with the same arithmetic in the
//! same order (in f32; a bf16 parameter is read and written in bf16).
//!
//! [`sgd_momentum_step_all`](super::sgd_momentum_step_all) steps a whole module's parameters as
//! one operation and one launch for up to 64 of them (a `Sequence` of tensors, as many as the
//! device's bindings allow): what the root crate's `SgdOptimizer` calls: a ResNet-18 step's 62
//! operations and launches in one.
//!
//! Checked on lavapipe against the CPU's tensor operations (`tests/gpu_path`: the first step and
//! a later one, with and without weight decay and Nesterov, ranks 1 and 4), and by every
//! GPU-path test of a method's two SGD steps (the weights after each step).

use std::marker::PhantomData;

use burn::prelude::*;
use burn::tensor::ops::FloatTensor;
use burn_cubecl::{BoolElement, CubeRuntime, FloatElement, IntElement};
use burn_fusion::stream::{Operation, OperationStreams};
use burn_fusion::FusionRuntime;
use burn_ir::{CustomOpIr, HandleContainer, OperationIr, OperationOutput, TensorIr};

use super::cube_op::{output, tensor, tensors_per_launch, Inner, On, Runtime};
use super::{SgdList, SgdSettings};

/// The kernel and its launch on the inner backend's tensors (cubecl's prelude has its own
/// `Tensor` and `Float`, hence a module of its own).
mod device {
    use burn_cubecl::kernel::into_contiguous;
    use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
    use burn_cubecl::tensor::CubeTensor;
    use burn_cubecl::CubeRuntime;
    use cubecl::calculate_cube_count_elemwise;
    use cubecl::prelude::*;

    use super::super::cube_op::ListLaunch;

    use super::SgdSettings;

    /// Where entry `at` of a contiguous tensor of `t`'s shape lies in `t`, by `t`'s strides.
    #[cube]
    fn strided_offset<F: Float>(t: &Tensor<F>, at: usize) -> usize {
        let rank = t.rank();
        let mut rest = at;
        let mut offset = 0usize;
        for i in 0..rank {
            let d = rank - 1 - i;
            let extent = t.shape(d);
            offset += (rest % extent) * t.stride(d);
            rest /= extent;
        }
        offset
    }

    /// One unit an entry: `g ← g + wd·θ` (with `decay`), `v ← μ·v + g` (`v = g` on the `first`
    /// step), `s = g + μ·v` with `nesterov` else `v`, `θ ← θ − lr·s`; in f32. The parameter and
    /// the buffer are contiguous; the gradient is read through its strides unless
    /// `grad_contiguous` (a convolution's weight gradient comes in the layout of its GEMM).
    #[cube(launch)]
    #[allow(clippy::too_many_arguments)]
    fn sgd_step<F: Float>(
        param: &Tensor<F>,
        grad: &Tensor<F>,
        velocity: &Tensor<F>,
        param_out: &mut Tensor<F>,
        velocity_out: &mut Tensor<F>,
        lr: f32,
        momentum: f32,
        weight_decay: f32,
        #[comptime] first: bool,
        #[comptime] nesterov: bool,
        #[comptime] decay: bool,
        #[comptime] grad_contiguous: bool,
        #[define(F)] _dtype: StorageType,
    ) {
        let at = ABSOLUTE_POS;
        if at < param.len() {
            let theta = f32::cast_from(param[at]);
            let mut index = at;
            if !grad_contiguous {
                index = strided_offset(grad, at);
            }
            let mut g = f32::cast_from(grad[index]);
            if decay {
                g += theta * weight_decay;
            }
            let mut v = g;
            if !first {
                v = f32::cast_from(velocity[at]) * momentum + g;
            }
            let mut step = v;
            if nesterov {
                step = g + v * momentum;
            }
            param_out[at] = F::cast_from(theta - step * lr);
            velocity_out[at] = F::cast_from(v);
        }
    }

    /// The kernel above on a list of parameters at once, each cube on one parameter: the cubes
    /// `cube_ends[i − 1]..cube_ends[i]` (compile-time constants: the kernel is compiled once for
    /// a module's shapes) cover parameter `i`, whose length is `lens[i]`, so every unit of a cube
    /// takes the same branch of the unrolled search. A gradient is read through its strides
    /// unless `contiguous` says it is contiguous; on the `first` step `velocities` are the
    /// gradients again.
    #[cube(launch)]
    #[allow(clippy::too_many_arguments)]
    fn sgd_step_many<F: Float>(
        params: &Sequence<Tensor<F>>,
        grads: &Sequence<Tensor<F>>,
        velocities: &Sequence<Tensor<F>>,
        params_out: &mut Sequence<Tensor<F>>,
        velocities_out: &mut Sequence<Tensor<F>>,
        lr: f32,
        momentum: f32,
        weight_decay: f32,
        #[comptime] cube_ends: Vec<usize>,
        #[comptime] lens: Vec<usize>,
        #[comptime] contiguous: Vec<bool>,
        #[comptime] first: bool,
        #[comptime] nesterov: bool,
        #[comptime] decay: bool,
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
                    let theta = f32::cast_from(params.index(i)[local]);
                    let grad = grads.index(i);
                    let mut index = local;
                    if comptime!(!contiguous[i]) {
                        index = strided_offset(grad, local);
                    }
                    let mut g = f32::cast_from(grad[index]);
                    if decay {
                        g += theta * weight_decay;
                    }
                    let mut v = g;
                    if !first {
                        v = f32::cast_from(velocities.index(i)[local]) * momentum + g;
                    }
                    let mut step = v;
                    if nesterov {
                        step = g + v * momentum;
                    }
                    let param_out = params_out.index_mut(i);
                    param_out[local] = F::cast_from(theta - step * lr);
                    let velocity_out = velocities_out.index_mut(i);
                    velocity_out[local] = F::cast_from(v);
                }
            }
        }
    }

    /// The step on a list of `(θ, g, v)` on the inner backend's tensors (every `v` given, or
    /// none: the `first` step), up to `per_launch` a launch: returns each new parameter and
    /// momentum buffer, shaped as its parameter, without row padding.
    #[allow(clippy::type_complexity)]
    pub(super) fn sgd_many_cube<R: CubeRuntime>(
        list: Vec<(CubeTensor<R>, CubeTensor<R>, Option<CubeTensor<R>>)>,
        settings: SgdSettings,
        per_launch: usize,
    ) -> Vec<[CubeTensor<R>; 2]> {
        let first = list.first().is_some_and(|(_, _, v)| v.is_none());
        let mut stepped = Vec::with_capacity(list.len());
        let mut list = list.into_iter().peekable();
        while let Some((like, _, _)) = list.peek() {
            let (client, device, dtype) = (like.client.clone(), like.device.clone(), like.dtype);
            let chunk: Vec<_> = list
                .by_ref()
                .take(per_launch.max(1))
                .map(|(param, grad, velocity)| {
                    let velocity = velocity
                        .map(into_contiguous)
                        .unwrap_or_else(|| grad.clone());
                    (into_contiguous(param), grad, velocity)
                })
                .collect();
            let outputs: Vec<[CubeTensor<R>; 2]> = chunk
                .iter()
                .map(|(param, _, _)| {
                    [0; 2].map(|_| {
                        empty_device_contiguous_dtype::<R>(
                            client.clone(),
                            device.clone(),
                            param.meta.shape().clone(),
                            dtype,
                        )
                    })
                })
                .collect();
            let launch = ListLaunch::new(
                &client,
                chunk
                    .iter()
                    .map(|(p, _, _)| p.meta.num_elements())
                    .collect(),
            );
            // Read through its strides where it is not contiguous (a convolution's weight
            // gradient comes in its GEMM's layout), rather than copied.
            let contiguous: Vec<bool> = chunk.iter().map(|(_, g, _)| g.is_contiguous()).collect();
            sgd_step_many::launch::<R>(
                &client,
                launch.cube_count,
                launch.cube_dim,
                chunk
                    .iter()
                    .map(|(p, _, _)| p.clone().into_tensor_arg())
                    .collect(),
                chunk
                    .iter()
                    .map(|(_, g, _)| g.clone().into_tensor_arg())
                    .collect(),
                chunk
                    .iter()
                    .map(|(_, _, v)| v.clone().into_tensor_arg())
                    .collect(),
                outputs
                    .iter()
                    .map(|[p, _]| p.clone().into_tensor_arg())
                    .collect(),
                outputs
                    .iter()
                    .map(|[_, v]| v.clone().into_tensor_arg())
                    .collect(),
                settings.lr as f32,
                settings.momentum as f32,
                settings.weight_decay as f32,
                launch.cube_ends,
                launch.lens,
                contiguous,
                first,
                settings.nesterov,
                settings.weight_decay > 0.0,
                dtype.into(),
            );
            stepped.extend(outputs);
        }
        stepped
    }

    /// The step on the inner backend's tensors: returns the new parameter and momentum buffer,
    /// shaped as the parameter, without row padding (the kernel indexes them as contiguous).
    pub(super) fn sgd_cube<R: CubeRuntime>(
        param: CubeTensor<R>,
        grad: CubeTensor<R>,
        velocity: Option<CubeTensor<R>>,
        settings: SgdSettings,
    ) -> [CubeTensor<R>; 2] {
        let param = into_contiguous(param);
        // Read through its strides rather than copied: one kernel fewer per convolution.
        let grad_contiguous = grad.is_contiguous();
        let first = velocity.is_none();
        // The first step reads no buffer: the gradient stands in for it.
        let velocity = velocity
            .map(into_contiguous)
            .unwrap_or_else(|| grad.clone());
        let (client, device, dtype) = (param.client.clone(), param.device.clone(), param.dtype);
        let [param_out, velocity_out] = [0; 2].map(|_| {
            empty_device_contiguous_dtype::<R>(
                client.clone(),
                device.clone(),
                param.meta.shape().clone(),
                dtype,
            )
        });
        let units = param.meta.num_elements();
        let cube_dim = CubeDim::new(&client, units);
        sgd_step::launch::<R>(
            &client,
            calculate_cube_count_elemwise(&client, units, cube_dim),
            cube_dim,
            param.into_tensor_arg(),
            grad.into_tensor_arg(),
            velocity.into_tensor_arg(),
            param_out.clone().into_tensor_arg(),
            velocity_out.clone().into_tensor_arg(),
            settings.lr as f32,
            settings.momentum as f32,
            settings.weight_decay as f32,
            first,
            settings.nesterov,
            settings.weight_decay > 0.0,
            grad_contiguous,
            dtype.into(),
        );
        [param_out, velocity_out]
    }
}

/// The kernel as a custom operation of burn's fusion stream: inputs the parameter, its gradient
/// and (after the first step) its momentum buffer; outputs the new parameter and buffer.
#[derive(Clone, Debug)]
struct SgdOp<R, F, I, BT> {
    desc: CustomOpIr,
    settings: SgdSettings,
    _backend: PhantomData<(R, F, I, BT)>,
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>
    Operation<Runtime<R, F, I, BT>> for SgdOp<R, F, I, BT>
{
    fn execute(
        &self,
        handles: &mut HandleContainer<<Runtime<R, F, I, BT> as FusionRuntime>::FusionHandle>,
    ) {
        let mut input =
            |at: usize| handles.get_float_tensor::<Inner<R, F, I, BT>>(&self.desc.inputs[at]);
        let (param, grad) = (input(0), input(1));
        let velocity = (self.desc.inputs.len() == 3).then(|| input(2));
        let results = device::sgd_cube::<R>(param, grad, velocity, self.settings);
        for (ir, tensor) in self.desc.outputs.iter().zip(results) {
            handles.register_float_tensor::<Inner<R, F, I, BT>>(&ir.id, tensor);
        }
    }
}

/// The kernel on every parameter of a list as one custom operation of burn's fusion stream:
/// inputs each parameter's `θ`, `g` and (after the first step) `v` in turn, outputs each new `θ`
/// and `v` in turn.
#[derive(Clone, Debug)]
struct SgdAllOp<R, F, I, BT> {
    desc: CustomOpIr,
    settings: SgdSettings,
    _backend: PhantomData<(R, F, I, BT)>,
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>
    Operation<Runtime<R, F, I, BT>> for SgdAllOp<R, F, I, BT>
{
    fn execute(
        &self,
        handles: &mut HandleContainer<<Runtime<R, F, I, BT> as FusionRuntime>::FusionHandle>,
    ) {
        let params = self.desc.outputs.len() / 2;
        let per_param = self.desc.inputs.len() / params.max(1);
        let list: Vec<_> = self
            .desc
            .inputs
            .chunks_exact(per_param)
            .map(|ir| {
                let mut get = |at: usize| handles.get_float_tensor::<Inner<R, F, I, BT>>(&ir[at]);
                (get(0), get(1), (per_param == 3).then(|| get(2)))
            })
            .collect();
        let Some((like, _, _)) = list.first() else {
            return;
        };
        // Five bindings a parameter: θ, g, v and the new θ and v.
        let per_launch = tensors_per_launch(&like.client, 5);
        let stepped = device::sgd_many_cube::<R>(list, self.settings, per_launch);
        for (ir, tensor) in self.desc.outputs.iter().zip(stepped.into_iter().flatten()) {
            handles.register_float_tensor::<Inner<R, F, I, BT>>(&ir.id, tensor);
        }
    }
}

/// What [`sgd_momentum_step`](super::sgd_momentum_step) returns: the new parameter and
/// momentum buffer, or the inputs back.
pub(crate) type Stepped<B, const D: usize> =
    Result<(Tensor<B, D>, Tensor<B, D>), (Tensor<B, D>, Tensor<B, D>, Option<Tensor<B, D>>)>;

/// The backends with the kernel: `Fusion<CubeBackend<…>>`, the inner backend of
/// `Autodiff<Wgpu>` and `Autodiff<Cuda>` on which an optimiser steps.
pub(crate) trait SgdKernel: Backend {
    /// [`sgd_momentum_step_all`](super::sgd_momentum_step_all) when every parameter, gradient
    /// and buffer shares one element type and one device, each parameter's three one shape, and
    /// every buffer is given or none: `Ok` with each new `(θ, v)` in the list's order, else `Err`
    /// with the list.
    #[allow(clippy::type_complexity)]
    fn sgd_step_all(
        list: SgdList<Self>,
        settings: SgdSettings,
    ) -> Result<Vec<(FloatTensor<Self>, FloatTensor<Self>)>, SgdList<Self>>;

    /// [`sgd_momentum_step`](super::sgd_momentum_step) when the parameter, its gradient and its
    /// buffer share one element type: `Ok((θ, v))`, else `Err` with the inputs.
    fn sgd_step<const D: usize>(
        param: Tensor<Self, D>,
        grad: Tensor<Self, D>,
        velocity: Option<Tensor<Self, D>>,
        settings: SgdSettings,
    ) -> Stepped<Self, D>;
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement> SgdKernel
    for On<R, F, I, BT>
{
    fn sgd_step_all(
        list: SgdList<Self>,
        settings: SgdSettings,
    ) -> Result<Vec<(FloatTensor<Self>, FloatTensor<Self>)>, SgdList<Self>> {
        let Some((like, _, first_velocity)) = list.first() else {
            return Ok(Vec::new());
        };
        // One launch reads and writes one element type, on one device's server, and is the
        // first step of all its parameters or of none.
        let (dtype, first) = (like.dtype, first_velocity.is_none());
        let device = like.client.device().clone();
        let takes = list.iter().all(|(param, grad, velocity)| {
            velocity.is_none() == first
                && [Some(param), Some(grad), velocity.as_ref()]
                    .into_iter()
                    .flatten()
                    .all(|x| {
                        x.dtype == dtype && *x.client.device() == device && x.shape == param.shape
                    })
        });
        if !takes {
            return Err(list);
        }
        let client = like.client.clone();
        let outputs: Vec<TensorIr> = list
            .iter()
            .flat_map(|(param, _, _)| [0; 2].map(|_| output(param, param.shape.to_vec())))
            .collect();
        let streams = OperationStreams::with_inputs(
            list.iter()
                .flat_map(|(param, grad, velocity)| [Some(param), Some(grad), velocity.as_ref()])
                .flatten(),
        );
        let inputs: Vec<TensorIr> = list
            .into_iter()
            .flat_map(|(param, grad, velocity)| [Some(param), Some(grad), velocity])
            .flatten()
            .map(|t| t.into_ir())
            .collect();
        let desc = CustomOpIr::new("curriculum_ssl_sgd_step_all", &inputs, &outputs);
        let mut stepped = client
            .register(
                streams,
                OperationIr::Custom(desc.clone()),
                SgdAllOp::<R, F, I, BT> {
                    desc,
                    settings,
                    _backend: PhantomData,
                },
            )
            .into_iter();
        let mut pairs = Vec::with_capacity(stepped.len() / 2);
        while let (Some(param), Some(velocity)) = (stepped.next(), stepped.next()) {
            pairs.push((param, velocity));
        }
        Ok(pairs)
    }

    fn sgd_step<const D: usize>(
        param: Tensor<Self, D>,
        grad: Tensor<Self, D>,
        velocity: Option<Tensor<Self, D>>,
        settings: SgdSettings,
    ) -> Stepped<Self, D> {
        let dtype = param.dtype();
        if grad.dtype() != dtype || velocity.as_ref().is_some_and(|v| v.dtype() != dtype) {
            return Err((param, grad, velocity));
        }
        let primitive = |t: Tensor<Self, D>| t.into_primitive().tensor();
        let mut inputs = vec![primitive(param), primitive(grad)];
        inputs.extend(velocity.map(primitive));
        let like = &inputs[0];
        let client = like.client.clone();
        let outputs = [0; 2].map(|_| output(like, like.shape.to_vec()));
        let streams = OperationStreams::with_inputs(inputs.iter());
        let irs: Vec<TensorIr> = inputs.into_iter().map(|t| t.into_ir()).collect();
        let desc = CustomOpIr::new("curriculum_ssl_sgd_step", &irs, &outputs);
        let [param, velocity] = client
            .register(
                streams,
                OperationIr::Custom(desc.clone()),
                SgdOp::<R, F, I, BT> {
                    desc,
                    settings,
                    _backend: PhantomData,
                },
            )
            .outputs();
        Ok((tensor(param), tensor(velocity)))
    }
}
