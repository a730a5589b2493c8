//! Parameter groups stepped at a learning rate of their own: PyTorch's `param_groups` with an
//! `lr` key, as lightly's CAPI benchmark gives its clustering head half the rate and
//! solo-learn's All4One its transformer a tenth.
//!
//! burn's optimisers take one learning rate per [`Optimizer::step`] and step only the
//! parameters whose gradients they are handed (the rest are returned as they are, their state
//! untouched), so a group is stepped by a call of its own with its gradients taken out of the
//! step's. Every optimiser of the crate and of burn works so: no optimiser of its own is needed,
//! and a group's state (momentum, Adam's moments) is the same per-parameter record as the rest's.

use burn::module::{list_param_ids, AutodiffModule, Module, ModuleVisitor, Param, ParamId};
use burn::optim::{GradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::Tensor;
use std::collections::HashSet;

/// Parameters stepped at `factor` × the run's learning rate (at every step, so the group
/// follows the run's warm-up and decay at its own scale).
#[derive(Debug, Clone, PartialEq)]
pub struct LrGroup {
    /// The group's learning rate over the run's.
    pub factor: f64,
    /// The parameters in the group.
    pub params: Vec<ParamId>,
}

impl LrGroup {
    /// Every parameter of `module` at `factor` × the run's learning rate.
    pub fn of<B: Backend, M: Module<B>>(module: &M, factor: f64) -> Self {
        Self {
            factor,
            params: list_param_ids(module),
        }
    }
}

/// One step of `module` by `optimizer` at `lr`, the parameters of each of `groups` at
/// `lr × factor`. A parameter in two groups steps with the first. With no groups this is
/// `optimizer.step(lr, module, grads)`.
pub fn step_in_groups<B, M, O>(
    optimizer: &mut O,
    lr: f64,
    module: M,
    mut grads: GradientsParams,
    groups: &[LrGroup],
) -> M
where
    B: AutodiffBackend,
    M: AutodiffModule<B>,
    O: Optimizer<M, B>,
{
    let mut module = module;
    for group in groups {
        let mut take = Take::<B> {
            ids: group.params.iter().copied().collect(),
            from: &mut grads,
            taken: GradientsParams::new(),
            backend: std::marker::PhantomData,
        };
        module.visit(&mut take);
        let taken = take.taken;
        if !taken.is_empty() {
            module = optimizer.step(lr * group.factor, module, taken);
        }
    }
    optimizer.step(lr, module, grads)
}

/// Moves the gradients of the parameters `ids` from `from` to `taken` (a visitor, since a
/// gradient is removed by its tensor's rank).
struct Take<'a, B> {
    ids: HashSet<ParamId>,
    from: &'a mut GradientsParams,
    taken: GradientsParams,
    backend: std::marker::PhantomData<B>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for Take<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if self.ids.contains(&param.id) {
            if let Some(grad) = self.from.remove::<B::InnerBackend, D>(param.id) {
                self.taken.register::<B::InnerBackend, D>(param.id, grad);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::optim::{LarsConfig, SgdConfig};
    use burn::backend::{Autodiff, NdArray};
    use burn::module::Module;
    use burn::nn::{Linear, LinearConfig};
    use burn::optim::AdamWConfig;
    use burn::tensor::TensorData;

    type B = Autodiff<NdArray<f64>>;

    #[derive(Module, Debug)]
    struct Two<B: Backend> {
        a: Linear<B>,
        b: Linear<B>,
    }

    fn two(device: &<B as burn::tensor::backend::BackendTypes>::Device) -> Two<B> {
        // Drawn under a seed and materialised: the runs below start from the same values, and
        // no draw leaves the seeded section (the other tests' seed audit).
        crate::base::seed::init_module::<B, _>(device, 7, |d| Two {
            a: LinearConfig::new(3, 2).init(d),
            b: LinearConfig::new(2, 2).init(d),
        })
    }

    fn loss(
        m: &Two<B>,
        device: &<B as burn::tensor::backend::BackendTypes>::Device,
    ) -> Tensor<B, 1> {
        let x = Tensor::<B, 2>::from_data(
            TensorData::new(vec![0.3, -1.2, 0.8, 1.5, 0.1, -0.4], [2, 3]),
            device,
        );
        m.b.forward(m.a.forward(x).tanh()).powi_scalar(2).sum()
    }

    fn values(m: &Two<B>) -> Vec<Vec<f64>> {
        let t = |p: &Param<Tensor<B, 2>>| p.val().into_data().to_vec::<f64>().unwrap();
        let v = |p: &Param<Tensor<B, 1>>| p.val().into_data().to_vec::<f64>().unwrap();
        vec![
            t(&m.a.weight),
            v(m.a.bias.as_ref().unwrap()),
            t(&m.b.weight),
            v(m.b.bias.as_ref().unwrap()),
        ]
    }

    /// Plain SGD moves `θ` by `−lr·g`: a group at factor `f` moves by `−f·lr·g`, computed here
    /// from the gradients themselves (an independent number), the rest by `−lr·g`.
    #[test]
    fn a_group_steps_at_its_factor_and_the_rest_at_the_run_rate() {
        let device = Default::default();
        let m = two(&device);
        let before = values(&m);
        let grads = GradientsParams::from_grads(loss(&m, &device).backward(), &m);
        let g = |id: ParamId, rank2: bool| -> Vec<f64> {
            if rank2 {
                grads.get::<NdArray<f64>, 2>(id).unwrap().into_data()
            } else {
                grads.get::<NdArray<f64>, 1>(id).unwrap().into_data()
            }
            .to_vec::<f64>()
            .unwrap()
        };
        let gs = [
            g(m.a.weight.id, true),
            g(m.a.bias.as_ref().unwrap().id, false),
            g(m.b.weight.id, true),
            g(m.b.bias.as_ref().unwrap().id, false),
        ];
        let (lr, factor) = (0.3, 0.25);
        let groups = [LrGroup::of(&m.b, factor)];
        let mut optim = SgdConfig::new()
            .with_momentum(0.0)
            .with_weight_decay(0.0)
            .init::<B, Two<B>>()
            .unwrap();
        let stepped = step_in_groups(&mut optim, lr, m, grads, &groups);
        let after = values(&stepped);
        for (i, rate) in [lr, lr, lr * factor, lr * factor].into_iter().enumerate() {
            for ((b, a), g) in before[i].iter().zip(&after[i]).zip(&gs[i]) {
                assert!(
                    (b - rate * g - a).abs() < 1e-15,
                    "tensor {i}: {b} − {rate}·{g} ≠ {a}"
                );
            }
        }
    }

    /// With no groups, or a group at factor 1, the step is the optimiser's own: AdamW and LARS
    /// (whose trust ratio and `clip_lr` read the learning rate) give the same parameters to the
    /// last bit over three steps — the groups' calls change which call steps a parameter, never
    /// what it is stepped by.
    #[test]
    fn a_group_at_factor_one_is_the_plain_step() {
        fn run<O: Optimizer<Two<B>, B>>(mut optim: O, groups: &[LrGroup], m: Two<B>) -> Two<B> {
            let device = Default::default();
            // Leaves of their own: the two runs start from the same values, not the same graph.
            let mut m = Two::<B>::from_inner(m.valid());
            for lr in [0.1, 0.05, 0.2] {
                let grads = GradientsParams::from_grads(loss(&m, &device).backward(), &m);
                m = step_in_groups(&mut optim, lr, m, grads, groups);
            }
            m
        }
        let device = Default::default();
        let m = two(&device);
        let group = [LrGroup::of(&m.a, 1.0)];
        let adamw = || {
            AdamWConfig::new()
                .with_weight_decay(0.05)
                .init::<B, Two<B>>()
        };
        assert_eq!(
            values(&run(adamw(), &[], m.clone())),
            values(&run(adamw(), &group, m.clone()))
        );
        let lars = || {
            LarsConfig::new()
                .with_clip_lr(true)
                .init::<B, Two<B>>()
                .unwrap()
        };
        assert_eq!(
            values(&run(lars(), &[], m.clone())),
            values(&run(lars(), &group, m))
        );
    }
}
