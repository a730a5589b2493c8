//! What every self-supervised method is to the training loop (documented on the `method` page).

use burn::module::{AutodiffModule, ParamId};
use burn::optim::GradientsParams;
use burn::prelude::*;
use burn::record::Record;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::TrainableBackbone;

use super::branches::ViewPasses;
use crate::base::Progress;

use crate::base::error::ConfigError;
use crate::base::geometry::{CropBox, ViewGeometry};
use crate::data_parallel::Replica;
use crate::optim::{LrGroup, StandIns};

/// Replaces every trainable parameter by its [stand-in](StandIns) (one `[1; D]` tensor for all
/// those of a rank and device): what [`SslMethod::take_online`] leaves behind.
struct TakeTrainable<'a, B: Backend>(&'a mut StandIns<B>);

impl<B: Backend> burn::module::ModuleMapper<B> for TakeTrainable<'_, B> {
    fn map_float<const D: usize>(
        &mut self,
        param: burn::module::Param<Tensor<B, D>>,
    ) -> burn::module::Param<Tensor<B, D>> {
        if !param.is_require_grad() {
            return param;
        }
        let (id, value, mapper) = param.consume();
        let device = value.device();
        drop(value);
        burn::module::Param::from_mapped_value(id, self.0.get(&device), mapper)
    }
}

/// The capability a method that [uses object boxes](SslMethod::uses_object_boxes) needs from a
/// training hook (`crate::hooks::ObjectBoxesHook` provides it).
pub const OBJECT_BOXES: &str = "object boxes";

/// Builds a method with `build` under [`crate::base::seed::with_seed`] and draws every lazily
/// initialised parameter (online networks, key / target networks, queue) before the seed lock is
/// released: the method's initial state depends on `seed` alone, whatever other threads draw.
///
/// The online network's size is checked before it is drawn
/// ([`crate::base::seed::check_size`], under a caller's
/// [`crate::base::seed::with_size_limit`]).
///
/// # Errors
/// Whatever `build` returns, or the size check's [`ConfigError`].
pub fn init_method<B, S, E>(
    device: &B::Device,
    seed: u64,
    build: impl FnOnce(&B::Device) -> Result<S, E>,
) -> Result<S, E>
where
    B: AutodiffBackend,
    S: SslMethod<B>,
    E: From<ConfigError>,
{
    crate::base::seed::with_seed::<B, _>(device, seed, || {
        let method = build(device)?;
        crate::base::seed::check_size(method.online(), "the online network")?;
        crate::base::seed::materialise(method.online());
        let _ = method.state();
        Ok(method)
    })
}

/// A loss `[1]` and named statistics for logging (each `[1]`, detached): what an objective of a
/// method's shape ([`PairObjective`](super::PairObjective),
/// [`SlicedObjective`](super::SlicedObjective)) gives for a step.
pub type LossAndStats<B> = (Tensor<B, 1>, Vec<(&'static str, Tensor<B, 1>)>);

/// The loss of one step and named statistics for logging (detached).
#[derive(Debug, Clone)]
pub struct MethodOutput<B: Backend> {
    /// Scalar loss to back-propagate, `[1]`.
    pub loss: Tensor<B, 1>,
    /// Named statistics, each `[1]` and detached (e.g. the curricular `t`, the momentum).
    pub stats: Vec<(&'static str, Tensor<B, 1>)>,
    /// The two views' projections, `[N, D]` each and detached: what a selection piece such as
    /// Fréchet batch curation measures before the step is applied (`None` for a method without
    /// two views, e.g. rotation prediction). In a data-parallel run the training step hands the
    /// hooks every replica's rows, gathered (`[W·N, D]`, the same on every replica), when a hook
    /// reads them (`Hook::reads_embeddings`).
    pub embeddings: Option<[Tensor<B, 2>; 2]>,
}

impl<B: Backend> MethodOutput<B> {
    /// A step's `loss`, without statistics or embeddings.
    pub fn new(loss: Tensor<B, 1>) -> Self {
        Self {
            loss,
            stats: Vec::new(),
            embeddings: None,
        }
    }

    /// With the statistic `name`, `[1]` (detached here).
    pub fn with_stat(mut self, name: &'static str, value: Tensor<B, 1>) -> Self {
        self.stats.push((name, value.detach()));
        self
    }

    /// With the statistic `name` of value `value`, made on the loss's device.
    pub fn with_value(self, name: &'static str, value: f64) -> Self {
        let value = stat(value, &self.loss.device());
        self.with_stat(name, value)
    }

    /// With the two views' (detached) projections ([`MethodOutput::embeddings`]).
    pub fn with_embeddings(mut self, embeddings: [Tensor<B, 2>; 2]) -> Self {
        self.embeddings = Some(embeddings.map(|e| e.detach()));
        self
    }

    /// With a momentum copy's momentum at the step (`momentum` in steps.csv; e.g.
    /// `MomentumEncoder::momentum_at`).
    pub fn with_momentum(self, momentum: f64) -> Self {
        self.with_value("momentum", momentum)
    }
}

/// A statistic of value `value` on `device`, `[1]`.
pub fn stat<B: Backend>(value: f64, device: &B::Device) -> Tensor<B, 1> {
    Tensor::from_data(TensorData::new(vec![value], [1]), device)
}

/// The gradients of `loss` with respect to `online` without those of the 2-D parameters
/// `frozen` (a layer frozen for the first epochs, as DINO's, iBOT's and SwAV's last layer: no
/// optimiser moves or decays it).
pub fn gradients_without<B: AutodiffBackend, M: AutodiffModule<B>>(
    loss: &Tensor<B, 1>,
    online: &M,
    frozen: impl IntoIterator<Item = ParamId>,
) -> GradientsParams {
    let mut grads = GradientsParams::from_grads(loss.backward(), online);
    for id in frozen {
        grads.remove::<B::InnerBackend, 2>(id);
    }
    grads
}

/// The [`SslMethod`] items of a method whose networks are in its field `$online` (or a field's
/// field, `networks.online`): [`SslMethod::online`] reads it, [`SslMethod::set_online`] puts the
/// optimised networks back. With a second field, the method's
/// [`ViewThreads`](super::branches::ViewThreads) (the views' passes back-propagated on threads of
/// their own): [`SslMethod::gradients`] through them and [`SslMethod::set_view_passes`] switching
/// them. Written inside the `impl SslMethod for …` block.
macro_rules! online_in {
    ($($online:ident).+) => {
        fn online(&self) -> &Self::Online {
            &self.$($online).+
        }

        fn set_online(&mut self, online: Self::Online) {
            self.$($online).+ = online;
        }
    };
    ($($online:ident).+, $($view_threads:ident).+) => {
        $crate::method::ssl_method::online_in!($($online).+);

        fn gradients(&mut self, loss: &Tensor<B, 1>) -> burn::optim::GradientsParams {
            self.$($view_threads).+.gradients(loss, &self.$($online).+)
        }

        fn set_view_passes(&mut self, passes: $crate::method::branches::ViewPasses) {
            self.$($view_threads).+.set(passes);
        }
    };
}
pub(crate) use online_in;

/// Where a method keeps its [`Replica`] in a data-parallel run (see [`replica_in`]): a plain
/// `Option<Replica<B>>`, or the [`StepMasks`](super::masking::StepMasks) that draw the global
/// batch's masks and keep this replica's rows.
pub(crate) trait KeepsReplica<B: Backend> {
    /// Keeps `replica` for the steps to come.
    fn keep(&mut self, replica: Replica<B>);
}

impl<B: Backend> KeepsReplica<B> for Option<Replica<B>> {
    fn keep(&mut self, replica: Replica<B>) {
        *self = Some(replica);
    }
}

/// [`SslMethod::set_replica`] of a method that only keeps its replica, in its field `$replica`
/// (an `Option<Replica<B>>` or the method's `StepMasks`: [`KeepsReplica`]), and, with
/// `$replica, $view_threads`, keeps the views' passes of its `ViewThreads` on its thread
/// (`ViewThreads::replicated`); the doc comment written before the fields says what the method
/// does with the replica. Written inside the `impl SslMethod for …` block.
macro_rules! replica_in {
    ($(#[$doc:meta])* $($replica:ident).+ $(, $($view_threads:ident).+)?) => {
        $(#[$doc])*
        fn set_replica(
            &mut self,
            replica: $crate::data_parallel::Replica<B>,
        ) -> Result<(), $crate::base::error::ConfigError> {
            $(self.$($view_threads).+.replicated();)?
            $crate::method::ssl_method::KeepsReplica::keep(&mut self.$($replica).+, replica);
            Ok(())
        }
    };
}
pub(crate) use replica_in;

/// The checkpointed state of a method whose only state is its momentum copy (BYOL's target, MSN's
/// target network): the copy's record (weights and batch-norm statistics) `N::Record`, in the
/// field `target` (the checkpoint's format).
#[derive(Record)]
pub struct TargetState<B: Backend, N: Module<B>> {
    /// The momentum copy's record.
    pub target: <N as Module<B>>::Record,
}

/// [`SslMethod::state`] and [`SslMethod::load_state`] of a method whose only state is the
/// momentum copy in its field `$encoder` (a [`MomentumEncoder`](super::momentum::MomentumEncoder),
/// or a field's field, `networks.copy`): with `target in $encoder: $Network` (`$Network` the
/// copy's network type), checkpointed as a [`TargetState`]; with a record of the method's own,
/// `$State { $field: $encoder }`, as its field `$field` (the record's field names are the
/// checkpoint's format); with `record of $encoder`, as the copy's own record
/// `<M as Module<B>>::Record` (a copy of the backbone alone: I-JEPA's target, CAPI's teacher).
/// Written inside the `impl SslMethod for …` block.
macro_rules! momentum_state {
    (target in $($encoder:ident).+: $Network:ty) => {
        type State = $crate::method::ssl_method::TargetState<B, $Network>;

        fn state(&self) -> Self::State {
            $crate::method::ssl_method::TargetState {
                target: self.$($encoder).+.record(),
            }
        }

        fn load_state(
            &mut self,
            state: Self::State,
        ) -> Result<(), $crate::base::error::ConfigError> {
            self.$($encoder).+.load_record(state.target);
            Ok(())
        }
    };
    ($State:ident { $field:ident: $encoder:ident }) => {
        type State = $State<B, M>;

        fn state(&self) -> $State<B, M> {
            $State {
                $field: self.$encoder.record(),
            }
        }

        fn load_state(
            &mut self,
            state: $State<B, M>,
        ) -> Result<(), $crate::base::error::ConfigError> {
            self.$encoder.load_record(state.$field);
            Ok(())
        }
    };
    (record of $encoder:ident) => {
        type State = <M as burn::module::Module<B>>::Record;

        fn state(&self) -> Self::State {
            self.$encoder.record()
        }

        fn load_state(
            &mut self,
            state: Self::State,
        ) -> Result<(), $crate::base::error::ConfigError> {
            self.$encoder.load_record(state);
            Ok(())
        }
    };
}
pub(crate) use momentum_state;

/// The [`SslMethod`] items of a method with nothing to checkpoint besides its online networks
/// (its masks or draws come from the seed and the step): `type State = ()`, and its
/// [`SslMethod::state`] / [`SslMethod::load_state`]. Written inside the `impl SslMethod for …`
/// block.
macro_rules! stateless {
    () => {
        type State = ();

        fn state(&self) {}

        fn load_state(&mut self, _: ()) -> Result<(), $crate::base::error::ConfigError> {
            Ok(())
        }
    };
}
pub(crate) use stateless;

/// The views of a batch that one step of a method sees.
#[derive(Debug, Clone)]
pub struct Views<B: Backend> {
    /// The two global views, `[N, C, H, W]` each.
    pub global: [Tensor<B, 4>; 2],
    /// Multi-crop's local crops, `[N, C, h, w]` each, smaller than the global views (or as
    /// large: MMCR's further views); empty unless the method
    /// [takes them](SslMethod::takes_local_crops).
    pub local: Vec<Tensor<B, 4>>,
}

impl<B: Backend> Views<B> {
    /// Two global views, no local crops.
    pub fn pair(view1: Tensor<B, 4>, view2: Tensor<B, 4>) -> Self {
        Self {
            global: [view1, view2],
            local: Vec::new(),
        }
    }

    /// The two global views, for a method that takes no local crops (the trainer hands it none).
    pub fn two(self) -> [Tensor<B, 4>; 2] {
        debug_assert!(self.local.is_empty(), "local crops for a two-view method");
        self.global
    }

    /// Every view through `network`, the two global views as one batch and the local crops as
    /// another (lightly's multi-crop examples), its output split back into one tensor per view:
    /// `(global, local)`, in the views' order.
    ///
    /// # Shapes
    /// - `network`: `[V·N, C, H, W]` → `[V·N, D]`; each output: `[N, D]`
    pub fn through<F>(self, network: F) -> (Vec<Tensor<B, 2>>, Vec<Tensor<B, 2>>)
    where
        F: Fn(Tensor<B, 4>) -> Tensor<B, 2>,
    {
        let (globals, n, local) = self.batched();
        let global = split_views(network(globals), n, 2);
        let local = locals_through(local, n, &network);
        (global, local)
    }

    /// The two global views as one batch (view-major), the images `N` of a view, and the local
    /// crops (a multi-crop method's one pass per resolution).
    ///
    /// # Shapes
    /// → `[2N, C, H, W]`, `N`, the local crops as they are
    pub fn batched(self) -> (Tensor<B, 4>, usize, Vec<Tensor<B, 4>>) {
        let Views {
            global: [view1, view2],
            local,
        } = self;
        let n = view1.dims()[0];
        (Tensor::cat(vec![view1, view2], 0), n, local)
    }
}

/// The rows of `x` split into `parts` views of `n` rows each (view-major), in order.
///
/// # Shapes
/// - `x`: `[parts·n, D]` → `parts` × `[n, D]`
pub(crate) fn split_views<B: Backend>(
    x: Tensor<B, 2>,
    n: usize,
    parts: usize,
) -> Vec<Tensor<B, 2>> {
    (0..parts)
        .map(|v| x.clone().slice(v * n..(v + 1) * n))
        .collect()
}

/// The local crops `locals` (of `n` images each) through `network` as one batch, its output
/// split back into one tensor per crop; none without local crops.
///
/// # Shapes
/// - `network`: `[V·n, C, h, w]` → `[V·n, D]`; each output: `[n, D]`
pub(crate) fn locals_through<B: Backend>(
    locals: Vec<Tensor<B, 4>>,
    n: usize,
    network: impl FnOnce(Tensor<B, 4>) -> Tensor<B, 2>,
) -> Vec<Tensor<B, 2>> {
    match locals.len() {
        0 => Vec::new(),
        parts => split_views(network(Tensor::cat(locals, 0)), n, parts),
    }
}

/// A method's trainable network, which holds the backbone that evaluation and export read
/// ([`SslMethod::backbone`]).
pub trait HasBackbone<M> {
    /// The backbone.
    fn backbone(&self) -> &M;
}

/// A self-supervised method: turns two views of a batch into a loss and keeps its own states.
pub trait SslMethod<B: AutodiffBackend>: 'static {
    /// The trainable networks (backbone and heads) as one module.
    type Online: AutodiffModule<B> + Clone + HasBackbone<Self::Backbone>;

    /// The backbone inside the online networks: what evaluation and export use. Its inference
    /// copy ([`AutodiffModule::valid`]) is a backbone of the inner backend.
    type Backbone: TrainableBackbone<B>;

    /// Everything besides the online networks that a checkpoint must hold to resume exactly:
    /// key / target networks, the queue and its pointer, loss states (e.g. the curricular `t`).
    type State: Record<B>;

    /// The trainable networks.
    fn online(&self) -> &Self::Online;

    /// The online backbone. Default: the one [`SslMethod::online`] holds.
    fn backbone(&self) -> &Self::Backbone {
        self.online().backbone()
    }

    /// The state to checkpoint (see [`SslMethod::State`]).
    fn state(&self) -> Self::State;

    /// Restores a checkpointed state.
    ///
    /// # Errors
    /// If the state does not fit this method (e.g. a queue of another size).
    fn load_state(&mut self, state: Self::State) -> Result<(), ConfigError>;

    /// Puts back the networks after an optimiser step.
    fn set_online(&mut self, online: Self::Online);

    /// The trainable networks handed over for an optimiser step, to be put back with
    /// [`SslMethod::set_online`]. Meanwhile the method holds a copy whose trainable parameters
    /// are one-entry stand-ins (its other tensors, such as running statistics, are the same):
    /// nothing may read it before `set_online` (a forward pass or a checkpoint would see the
    /// stand-ins). Why: the optimiser's step then holds each parameter's only handle, and on a
    /// fusion backend (wgpu, CUDA) an operation given a tensor's last handle releases it
    /// itself, where a value still held elsewhere costs an operation of the fusion stream of
    /// its own to release later (one a parameter and step, 62 for a ResNet-18).
    ///
    /// Makes its stand-ins anew at each call (an operation of the fusion stream each on wgpu
    /// and CUDA, and one more to release it): a training loop calls
    /// [`SslMethod::take_online_with`] with stand-ins it keeps.
    fn take_online(&mut self) -> Self::Online {
        self.take_online_with(&mut StandIns::default())
    }

    /// [`SslMethod::take_online`] with the stand-ins taken from `stand_ins` (made there when
    /// first needed): a loop that keeps them from step to step makes them once.
    fn take_online_with(&mut self, stand_ins: &mut StandIns<B>) -> Self::Online {
        let online = self.online().clone();
        self.set_online(online.clone().map(&mut TakeTrainable(stand_ins)));
        online
    }

    /// The loss of one step on the views of a batch. What the trainer calls; a method that
    /// does not [take local crops](SslMethod::takes_local_crops) is never handed any
    /// ([`Views::two`]).
    ///
    /// # Shapes
    /// - `views.global[v]`: `[N, C, H, W]`; `views.local[v]`: `[N, C, h, w]`
    fn forward_views(&mut self, views: Views<B>, progress: Progress) -> MethodOutput<B>;

    /// The loss of one step on two views of the same images, without local crops:
    /// [`SslMethod::forward_views`] on [`Views::pair`].
    ///
    /// # Shapes
    /// - `view1`, `view2`: `[N, C, H, W]`
    fn forward(
        &mut self,
        view1: Tensor<B, 4>,
        view2: Tensor<B, 4>,
        progress: Progress,
    ) -> MethodOutput<B> {
        self.forward_views(Views::pair(view1, view2), progress)
    }

    /// Checks that the method can take steps of `batch_size` images (the global batch, over
    /// every replica). A method built for one batch size (a queue that each step's keys fill:
    /// MoCo, ReSSL, NNCLR, NNSiam, NNBYOL, All4One) refuses another; the trainer calls it before
    /// the first step, with the loader's batch and, when the loader keeps a short last batch,
    /// with that too. Default: any batch.
    ///
    /// # Errors
    /// A [`ConfigError`] on `batch_size` saying what the method was built for.
    fn check_batch_size(&self, batch_size: usize) -> Result<(), ConfigError> {
        let _ = batch_size;
        Ok(())
    }

    /// Whether the loss takes the local crops of multi-crop (SwAV, DINO): the trainer hands
    /// them to [`SslMethod::forward_views`], and refuses a pipeline with local crops for a
    /// method that does not take them. Default: `false`.
    fn takes_local_crops(&self) -> bool {
        false
    }

    /// The gradients of `loss`, the [`MethodOutput::loss`] of the last [`SslMethod::forward`],
    /// with respect to [`SslMethod::online`]. Default: one backward pass,
    /// `GradientsParams::from_grads(loss.backward(), self.online())`; with
    /// [`SslMethod::set_view_passes`] at [`ViewPasses::Threads`], a method may back-propagate
    /// its views' passes on threads of their own (see [`ViewPasses`]), so a loop
    /// must ask for the gradients here rather than call `loss.backward()` itself.
    fn gradients(&mut self, loss: &Tensor<B, 1>) -> GradientsParams {
        GradientsParams::from_grads(loss.backward(), self.online())
    }

    /// Parameters of [`SslMethod::online`] stepped at a multiple of the run's learning rate
    /// (PyTorch's parameter groups with an `lr` of their own; the trainer steps them with
    /// [`step_in_groups`](crate::optim::step_in_groups)). Used by CAPI (the clustering head at
    /// half the rate, lightly's benchmark) and All4One (the transformer at a tenth, solo-learn).
    /// Default: none, every parameter at the run's rate.
    fn lr_groups(&self) -> Vec<LrGroup> {
        Vec::new()
    }

    /// How the method passes its two views through its networks ([`ViewPasses`]): one after
    /// the other (the default), their backward passes on two threads
    /// ([`ViewPasses::Threads`]: the same gradients, sooner where one backward pass
    /// keeps one core busy, as the CPU backend's convolutions), or as one batch whose batch
    /// norms take each view apart (half the kernel launches on a GPU). A method whose views do
    /// not pass through the online networks separately (or not twice) ignores it. Used by
    /// SimCLR (not threads at steps where PGD adds a third pass), symmetric MoCo (Light-MoCo),
    /// MoCo v3, BYOL, SimSiam, Barlow Twins and VICReg; MoCo v1/v2 (one query pass) and
    /// rotation prediction ignore it.
    fn set_view_passes(&mut self, passes: ViewPasses) {
        let _ = passes;
    }

    /// Makes this method one replica of a data-parallel run ([`crate::data_parallel`]): from
    /// then on its [`SslMethod::forward`] receives this replica's shard of every batch, a loss
    /// that compares images across the batch gathers them from every replica
    /// ([`Replica::gather`]), a queue enqueues every replica's keys, and its passes stay on the
    /// replica's thread (view threads off: the batch norms synchronise on it). Default: refused,
    /// for a method that has not said how its loss spreads over replicas.
    ///
    /// # Errors
    /// If the method (or the way it is configured) cannot be trained data-parallel.
    fn set_replica(&mut self, replica: Replica<B>) -> Result<(), ConfigError> {
        let _ = replica;
        Err(ConfigError::new(
            "devices",
            "this method does not say how its loss spreads over replicas; train it on one device",
        ))
    }

    /// Updates the non-trained states (EMA networks, queue) after the optimiser step. Default:
    /// nothing (a method without such states).
    fn after_step(&mut self, progress: Progress) {
        let _ = progress;
    }

    /// Whether the method needs a box around each image's object (MICO's crop-and-rotate).
    /// When it does, a training hook that provides [`OBJECT_BOXES`] (the crate's computes one
    /// box per training image from heat maps of the backbone's last feature map,
    /// [`Backbone::forward_feature_map`](curriculum_ssl_models::Backbone::forward_feature_map),
    /// four times per run) hands the batch's boxes to
    /// [`SslMethod::set_object_boxes`] before every forward; the trainer refuses to start
    /// without one. Default: `false`.
    fn uses_object_boxes(&self) -> bool {
        false
    }

    /// The object boxes of the next forward's images, in the coordinates of the views: `2N`
    /// boxes for a batch of `N` images, `view1`'s then `view2`'s (each image's box mapped
    /// through that view's crop and flip). Called by the hook that provides them. Default:
    /// ignored.
    fn set_object_boxes(&mut self, boxes: Vec<CropBox>) {
        let _ = boxes;
    }

    /// Whether the loss reads the labels of the batch's images (SupCon). When it does, the
    /// trainer hands each batch's labels to [`SslMethod::set_labels`] before every forward, and
    /// refuses data without labels before training. Default: `false`.
    fn uses_labels(&self) -> bool {
        false
    }

    /// The labels of the next forward's images, `[N]` (class indices; on a replica, those of
    /// its shard), on the device of the views. Called by the trainer before every forward of a
    /// method that [uses them](SslMethod::uses_labels). Default: ignored.
    fn set_labels(&mut self, labels: Tensor<B, 1, Int>) {
        let _ = labels;
    }

    /// Whether the method reads the dataset indexes of the batch's images (DeepCluster v2 keeps
    /// each image's projections and k-means cluster under its index). When it does, the
    /// trainer hands each batch's indexes to [`SslMethod::set_indexes`] before every forward;
    /// burn-train's `Learner` ([`crate::train::LearnerMethod`]), whose batches carry none,
    /// refuses it. Default: `false`.
    fn uses_indexes(&self) -> bool {
        false
    }

    /// The dataset indexes of the next forward's images, in batch order (on a replica, those
    /// of its shard). Called by the trainer before every forward of a method that
    /// [uses them](SslMethod::uses_indexes). Default: ignored.
    fn set_indexes(&mut self, indexes: &[usize]) {
        let _ = indexes;
    }

    /// Whether the loss reads where each view's pixels came from in the input image (VICRegL
    /// matches positions of the two views' feature maps by their locations). When it does, the
    /// trainer hands each attempt's geometry to [`SslMethod::set_view_geometry`] before every
    /// forward. Default: `false`.
    fn uses_view_geometry(&self) -> bool {
        false
    }

    /// Where each image of the next forward's two global views came from: `geometry[v][n]` for
    /// view `v + 1` and image `n` (on a replica, its shard's images), the crop box in input
    /// pixels and the flip the augmentation drew (the augmenter's `TwoViews::geometry`). Called
    /// by the trainer before every forward of a method that
    /// [uses it](SslMethod::uses_view_geometry). Default: ignored.
    fn set_view_geometry(&mut self, geometry: [Vec<ViewGeometry>; 2]) {
        let _ = geometry;
    }
}
