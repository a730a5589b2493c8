//! A two-view loss back-propagated as two graphs, one per thread (documented on `ViewPasses`).

use burn::module::{AutodiffModule, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;

/// A copy of `module` whose trainable parameters are new autodiff leaves: the same values and
/// [`ParamId`]s, but a graph of their own, so that a pass through the copy and a pass through
/// `module` can be back-propagated separately. Tensors that do not require a gradient
/// (BatchNorm's running statistics) are left as they are and stay shared.
///
/// Also the way to use parameters again after a backward pass consumed them while other
/// threads run backward passes (the trainer does it after every optimiser step): burn-autodiff
/// 0.21 drops a leaf's graph entry when a backward pass consumes it, and an operation on that
/// leaf afterwards can be swept by another thread's `backward()` before its step is registered,
/// losing the gradient (tracel-ai/burn#5573). Measured: of 300 such second passes through a
/// small ResNet beside three threads looping on `backward()`, 81 lost the stem's weight
/// gradient; none through fresh leaves. This workspace builds burn-autodiff patched against that
/// race (`vendor/burn-autodiff/PATCHED.md`); the copy keeps a project on upstream's safe.
pub fn fresh_leaves<B: AutodiffBackend, M: AutodiffModule<B>>(module: &M) -> M {
    module.clone().map(&mut FreshLeaves)
}

struct FreshLeaves;

impl<B: AutodiffBackend> ModuleMapper<B> for FreshLeaves {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        param.map(|tensor| {
            if tensor.is_require_grad() {
                tensor.detach().require_grad()
            } else {
                tensor
            }
        })
    }
}

/// One view's projection: the graph through the networks, and the detached leaf the loss is
/// computed on.
#[derive(Debug, Clone)]
pub(crate) struct Branch<B: Backend> {
    graph: Tensor<B, 2>,
    leaf: Tensor<B, 2>,
}

impl<B: AutodiffBackend> Branch<B> {
    /// Cuts `projection` (the output of a pass through the networks) from the loss's graph.
    ///
    /// # Shapes
    /// - `projection`: `[N, D]`
    pub fn new(projection: Tensor<B, 2>) -> Self {
        let leaf = projection.clone().detach().require_grad();
        Self {
            graph: projection,
            leaf,
        }
    }

    /// The tensor to compute the loss on: the projection's values, a leaf of the loss's graph.
    pub fn leaf(&self) -> Tensor<B, 2> {
        self.leaf.clone()
    }
}

/// How a two-view method passes its views through its networks
/// ([`SslMethod::set_view_passes`](super::SslMethod::set_view_passes)). The three give the same
/// numbers up to rounding: the gradients of one graph through both views.
///
/// **Threads**: back-propagating a two-view loss as two independent graphs, one per thread.
///
/// burn's autodiff runs a backward pass on the thread that asks for it, and on the CPU backend
/// most of a convolution's backward (the input gradient, the layout copies of the weight
/// gradient) runs on that one thread. When a method passes its two views through the same
/// online networks, the two passes meet only in the loss, so their backward passes are
/// independent. [`ViewPasses::Threads`] makes that explicit:
///
/// 1. the second view goes through a copy of the networks whose parameters are fresh autodiff
///    leaves ([`fresh_leaves`]: the same tensors and [`ParamId`]s, another graph);
/// 2. the loss is computed on detached copies of the two projections, so its backward pass
///    stops at them and yields `∂L/∂z₁` and `∂L/∂z₂`;
/// 3. each pass is back-propagated from its projection with that gradient (the scalar
///    `Σ z ⊙ ∂L/∂z`, whose gradient with respect to `z` is exactly `∂L/∂z`), the second on a
///    thread of its own;
/// 4. each parameter's gradient is the sum of its two contributions, the sum the single
///    backward pass forms too.
///
/// The gradients are therefore the numbers of one backward pass through both views
/// (`tests/methods.rs` checks this to the last bit in f64). The forward passes stay on the
/// calling thread, in order, so BatchNorm's running statistics (`RunningStat`, shared
/// by the copy) see the same updates in the same order.
///
/// burn has no API for this (a backward pass of a graph with several independent sources on
/// several threads), so it is written here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ViewPasses {
    /// One view after the other, one graph (the default).
    #[default]
    Separate,
    /// As `Separate`, but the second view through a copy of the networks with [`fresh_leaves`]
    /// so that its backward pass runs on a thread of its own (the CPU backend's choice: its
    /// convolutions' backward keeps one core busy). The gradients are the same numbers.
    Threads,
    /// Both views stacked into one batch of twice the size, one pass: the backbones whose
    /// batch norms take groups ([`Backbone::forward_features_grouped`]) normalise each view
    /// with its own moments, so this is the per-view computation with half the kernel launches
    /// and one gradient per parameter (the GPU backends' choice). Views of different shapes
    /// go one after the other.
    ///
    /// [`Backbone::forward_features_grouped`]: curriculum_ssl_models::Backbone::forward_features_grouped
    Joint,
}

/// What a view's pass returns besides the tensor its loss is back-propagated through, split
/// back into the two views' after a [`ViewPasses::Joint`] pass.
pub(crate) trait ViewRows: Sized {
    /// The first view's rows, then the second's.
    fn split_views(self) -> [Self; 2];
}

impl ViewRows for () {
    fn split_views(self) -> [Self; 2] {
        [(), ()]
    }
}

impl<B: Backend> ViewRows for Tensor<B, 2> {
    /// The first half of the rows, then the second.
    fn split_views(self) -> [Self; 2] {
        let half = self.dims()[0] / 2;
        [self.clone().narrow(0, 0, half), self.narrow(0, half, half)]
    }
}

/// A method's view passes: how its two views go through the online networks
/// ([`ViewPasses`]), and the last forward's split passes, kept until
/// [`ViewThreads::gradients`]. One field of this type is all a two-view method needs.
#[derive(Debug, Clone)]
pub(crate) struct ViewThreads<B: Backend, M> {
    mode: ViewPasses,
    /// A replica of a data-parallel run keeps its passes on its thread (its batch norms
    /// synchronise there): never [`ViewPasses::Threads`].
    replicated: bool,
    pending: Option<ViewBranches<B, M>>,
}

impl<B: Backend, M> Default for ViewThreads<B, M> {
    /// [`ViewPasses::Separate`], nothing pending.
    fn default() -> Self {
        Self {
            mode: ViewPasses::Separate,
            replicated: false,
            pending: None,
        }
    }
}

impl<B: AutodiffBackend, M: AutodiffModule<B>> ViewThreads<B, M> {
    /// Sets how the following forwards pass the views ([`ViewPasses::Threads`] becomes
    /// [`ViewPasses::Separate`] on a [replica](ViewThreads::replicated)).
    pub fn set(&mut self, mode: ViewPasses) {
        self.mode = match mode {
            ViewPasses::Threads if self.replicated => ViewPasses::Separate,
            mode => mode,
        };
    }

    /// The method became one replica of a data-parallel run
    /// ([`SslMethod::set_replica`](super::SslMethod::set_replica)): no threads from now on.
    pub fn replicated(&mut self) {
        self.replicated = true;
        self.set(self.mode);
    }

    /// Drops a split left by a forward whose gradients were never asked for (e.g. when a
    /// checkpoint is loaded).
    pub fn clear(&mut self) {
        self.pending = None;
    }

    /// The two views' outputs through `online`, ready for the loss: `pass` runs the networks on a
    /// batch of `groups` stacked views (1, or 2 for a joint pass: it hands `groups` to the
    /// networks' grouped forwards, e.g.
    /// [`Projected::forward_grouped`](super::encoder::Projected::forward_grouped)) and returns the
    /// tensor the loss is back-propagated through (`[groups · N, D]`) and whatever else the method
    /// needs of it (e.g. SimSiam's detached projections), view 1's then view 2's.
    ///
    /// [`ViewPasses::Threads`] (when `allowed`: a method passes `false` at a step whose loss
    /// also reaches the networks another way, e.g. PGD's third pass): the second view goes
    /// through a [`fresh_leaves`] copy, the returned tensors are the branches' leaves, and the
    /// branches are kept for [`ViewThreads::gradients`]. [`ViewPasses::Joint`] with views of
    /// one shape: one pass of both. Otherwise both passes go through `online` in one graph.
    /// The passes run on the calling thread, view 1 first, in every mode.
    ///
    /// # Shapes
    /// - `view1`, `view2`: `[N, C, H, W]` → two `[N, D]`
    pub fn passes<E: ViewRows>(
        &mut self,
        online: &M,
        [view1, view2]: [Tensor<B, 4>; 2],
        allowed: bool,
        pass: impl Fn(&M, Tensor<B, 4>, usize) -> (Tensor<B, 2>, E),
    ) -> ([Tensor<B, 2>; 2], [E; 2]) {
        self.pending = None;
        if self.joins(&view1, &view2) {
            let (out, extra) = pass(online, Tensor::cat(vec![view1, view2], 0), 2);
            return (out.split_views(), extra.split_views());
        }
        let (out1, extra1) = pass(online, view1, 1);
        if !(self.mode == ViewPasses::Threads && allowed) {
            let (out2, extra2) = pass(online, view2, 1);
            return ([out1, out2], [extra1, extra2]);
        }
        let copy = fresh_leaves(online);
        let (out2, extra2) = pass(&copy, view2, 1);
        let branches = ViewBranches {
            first: Branch::new(out1),
            second: Branch::new(out2),
            copy,
        };
        let leaves = [branches.first.leaf(), branches.second.leaf()];
        self.pending = Some(branches);
        (leaves, [extra1, extra2])
    }

    /// The two views' outputs through `online` stacked, `[2N, D]` (view 1's rows, then view
    /// 2's), when the views go through it as one batch ([`ViewPasses::Joint`], views of one
    /// shape): `Ok` with `pass`'s output on the batch of both (`groups` 2), nothing kept for
    /// [`ViewThreads::gradients`]; else `Err` with the views, for [`ViewThreads::passes`]. For
    /// a loss that takes the views stacked: no split, and no concatenation in the loss.
    pub fn stacked(
        &mut self,
        online: &M,
        [view1, view2]: [Tensor<B, 4>; 2],
        pass: impl Fn(&M, Tensor<B, 4>, usize) -> Tensor<B, 2>,
    ) -> Result<Tensor<B, 2>, [Tensor<B, 4>; 2]> {
        if !self.joins(&view1, &view2) {
            return Err([view1, view2]);
        }
        self.pending = None;
        Ok(pass(online, Tensor::cat(vec![view1, view2], 0), 2))
    }

    /// The gradients of `loss` with respect to `online`: through the last forward's split
    /// passes when it split them, else one backward pass. What the methods'
    /// [`SslMethod::gradients`](super::SslMethod::gradients) return.
    pub fn gradients(&mut self, loss: &Tensor<B, 1>, online: &M) -> GradientsParams {
        match self.pending.take() {
            Some(branches) => branches.gradients(loss, online),
            None => GradientsParams::from_grads(loss.backward(), online),
        }
    }
}

impl<B: Backend, M> ViewThreads<B, M> {
    /// `pass` (a network that takes `groups` stacked views, as in [`ViewThreads::passes`]) on
    /// both views, as one batch when the mode is [`ViewPasses::Joint`] and the views have one
    /// shape, else one after the other: what a method's untrained networks (a momentum
    /// target, a key encoder) do with the same views.
    ///
    /// # Shapes
    /// - `view1`, `view2`: `[N, C, H, W]` → two `[N, D]`
    pub fn both(
        &self,
        [view1, view2]: [Tensor<B, 4>; 2],
        pass: impl Fn(Tensor<B, 4>, usize) -> Tensor<B, 2>,
    ) -> [Tensor<B, 2>; 2] {
        if self.joins(&view1, &view2) {
            pass(Tensor::cat(vec![view1, view2], 0), 2).split_views()
        } else {
            [pass(view1, 1), pass(view2, 1)]
        }
    }

    /// Whether the two views go through the networks as one batch.
    fn joins(&self, view1: &Tensor<B, 4>, view2: &Tensor<B, 4>) -> bool {
        self.mode == ViewPasses::Joint && view1.dims() == view2.dims()
    }
}

/// The two views' branches and the network copy the second went through, kept from the
/// forward pass until the gradients are asked for.
#[derive(Debug, Clone)]
pub(crate) struct ViewBranches<B: Backend, M> {
    /// The first view's pass, through the online networks.
    pub first: Branch<B>,
    /// The second view's pass, through `copy`.
    pub second: Branch<B>,
    /// The networks with fresh leaves ([`fresh_leaves`]) that the second view went through.
    pub copy: M,
}

impl<B: AutodiffBackend, M: AutodiffModule<B>> ViewBranches<B, M> {
    /// The gradients of `loss`, a function of the two branches' leaves, with respect to
    /// `online` (the networks the first view went through): the loss's own backward pass, then
    /// the two views' passes, the second on a thread of its own.
    ///
    /// # Panics
    /// If `loss` does not depend on both leaves, or a backward pass panics.
    pub fn gradients(self, loss: &Tensor<B, 1>, online: &M) -> GradientsParams {
        let grads = loss.backward();
        let upstream = |branch: &Branch<B>| {
            Tensor::<B, 2>::from_inner(
                branch
                    .leaf
                    .grad(&grads)
                    .expect("the loss depends on both views' projections"),
            )
        };
        let (d1, d2) = (upstream(&self.first), upstream(&self.second));
        let Self {
            first,
            second,
            copy,
        } = self;
        let device = d2.device();
        let (mut total, mut other) = std::thread::scope(|scope| {
            let second = scope.spawn(move || {
                let grads =
                    GradientsParams::from_grads((second.graph * d2).sum().backward(), &copy);
                // The gradients are read on the calling thread (crate::device).
                crate::device::finish_for_another_thread::<B>(&device);
                grads
            });
            let first = GradientsParams::from_grads((first.graph * d1).sum().backward(), online);
            (
                first,
                second.join().expect("the second view's backward pass"),
            )
        });
        online.visit(&mut AddGradients {
            from: &mut other,
            into: &mut total,
        });
        total
    }
}

/// Moves every parameter's gradient from `from` into `into`, adding it to the one there.
struct AddGradients<'a> {
    from: &'a mut GradientsParams,
    into: &'a mut GradientsParams,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for AddGradients<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        add::<B, D>(self.from, self.into, param.id);
    }
}

fn add<B: AutodiffBackend, const D: usize>(
    from: &mut GradientsParams,
    into: &mut GradientsParams,
    id: ParamId,
) {
    if let Some(b) = from.remove::<B::InnerBackend, D>(id) {
        let sum = match into.remove::<B::InnerBackend, D>(id) {
            Some(a) => a + b,
            None => b,
        };
        into.register(id, sum);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, NdArray};
    use burn::nn::{Linear, LinearConfig};
    use std::cell::RefCell;

    type B = Autodiff<NdArray<f64>>;

    /// Which batches `passes` and `both` hand the network in each mode: one stacked batch of
    /// both views with `groups` 2 when joint, each view with 1 otherwise (and for views of two
    /// shapes even when joint); the outputs come back split into the views' rows.
    #[test]
    fn a_joint_pass_stacks_the_views_and_splits_the_rows() {
        let device = Default::default();
        let net: Linear<B> = LinearConfig::new(2, 3).init(&device);
        let view = |n: usize, v: f64| Tensor::<B, 4>::full([n, 1, 1, 2], v, &device);
        let calls = RefCell::new(Vec::new());
        let pass = |_: &Linear<B>, x: Tensor<B, 4>, groups: usize| {
            let [n, ..] = x.dims();
            calls.borrow_mut().push((n, groups));
            let rows = x.reshape([n, 2]);
            (rows.clone(), rows)
        };
        let first_column = |t: &Tensor<B, 2>| -> Vec<f64> {
            t.clone().narrow(1, 0, 1).into_data().to_vec().unwrap()
        };
        for (mode, shapes, expected) in [
            (ViewPasses::Joint, [4, 4], vec![(8, 2)]),
            (ViewPasses::Joint, [4, 2], vec![(4, 1), (2, 1)]),
            (ViewPasses::Separate, [4, 4], vec![(4, 1), (4, 1)]),
        ] {
            let mut threads = ViewThreads::<B, Linear<B>>::default();
            threads.set(mode);
            calls.borrow_mut().clear();
            let views = [view(shapes[0], 1.0), view(shapes[1], 2.0)];
            let (out, extra) = threads.passes(&net, views.clone(), true, pass);
            assert_eq!(*calls.borrow(), expected, "{mode:?}, {shapes:?}");
            for (i, (o, e)) in out.iter().zip(&extra).enumerate() {
                let value = (i + 1) as f64;
                assert_eq!(first_column(o), vec![value; shapes[i]], "{mode:?}");
                assert_eq!(first_column(e), vec![value; shapes[i]], "{mode:?}");
            }
            calls.borrow_mut().clear();
            let both = threads.both(views, |x, groups| pass(&net, x, groups).0);
            assert_eq!(*calls.borrow(), expected, "both, {mode:?}, {shapes:?}");
            assert_eq!(first_column(&both[1]), vec![2.0; shapes[1]]);
        }
    }
}
