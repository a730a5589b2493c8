//! Any `SslMethod` trained by burn-train's `Learner` (documented on `LearnerMethod`).

use std::fmt;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use burn::data::dataloader::batcher::Batcher;
use burn::module::{AutodiffModule, Devices, Module, ModuleMapper, ModuleVisitor};
use burn::prelude::*;
use burn::tensor::backend::{AutodiffBackend, BackendTypes};
use burn_train::metric::{Adaptor, ItemLazy, LossInput};
use burn_train::{InferenceStep, TrainOutput, TrainStep};
use curriculum_ssl_models::Backbone;

use crate::augment::normalize::Normalize;
use crate::base::error::ConfigError;
use crate::base::Progress;
use crate::data::{ImageBatch, ImageBatcher, ImageItem};
use crate::method::{HasBackbone, SslMethod, Views};
use crate::pipeline::Augmenter;

/// The inference copy of a method's trainable networks.
type InnerOnline<B, M> = <<M as SslMethod<B>>::Online as AutodiffModule<B>>::InnerModule;

/// The inference copy of a method's backbone.
type InnerBackbone<B, M> = <<M as SslMethod<B>>::Backbone as AutodiffModule<B>>::InnerModule;

/// What the model and its inference copy share: the method with its own states, the augmenter
/// and the count of steps trained.
struct Shared<B: AutodiffBackend, M> {
    method: M,
    augmenter: Augmenter,
    steps_per_epoch: usize,
    epochs: usize,
    /// Steps trained so far.
    step: usize,
    /// The progress of the last step, whose [`SslMethod::after_step`] runs at the start of the
    /// next one, once the optimiser has updated the networks.
    pending: Option<Progress>,
    _backend: PhantomData<B>,
}

impl<B: AutodiffBackend, M> Shared<B, M> {
    /// The progress of the step about to train: the step count, and the epoch it falls in (the
    /// last epoch once the count passes the planned length).
    fn progress(&self) -> Progress {
        Progress {
            step: self.step,
            total_steps: self.steps_per_epoch * self.epochs,
            epoch: (self.step / self.steps_per_epoch).min(self.epochs - 1),
            total_epochs: self.epochs,
        }
    }
}

/// A handle on the shared part, cloned with the model (burn-train clones its model).
struct Handle<B: AutodiffBackend, M>(Arc<Mutex<Shared<B, M>>>);

impl<B: AutodiffBackend, M> Handle<B, M> {
    /// The shared part; a step that panicked on another thread leaves it usable (its state is
    /// that of the steps before).
    fn lock(&self) -> MutexGuard<'_, Shared<B, M>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<B: AutodiffBackend, M> Clone for Handle<B, M> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<B: AutodiffBackend, M> fmt::Debug for Handle<B, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Handle")
    }
}

/// A method as a burn-train model: [`TrainStep`] on batches of images in `[0, 1]` (an
/// [`ImageBatcher`] makes them from [`ImageItem`]s), its loss in a [`StepOutput`] that
/// burn-train's `LossMetric` reads. As a burn module it is the method's trainable networks
/// ([`SslMethod::online`]): their parameters, records and devices.
///
/// Any [`SslMethod`] trained by burn-train's `Learner` (feature `burn-train`, on by default):
/// a burn project keeps its own metrics, dashboard, checkpointing and strategies, and trains a
/// method of this crate as one more model.
///
/// ```text
/// LearnerMethod::new(method, augmenter, steps_per_epoch, epochs)   # a burn-train model
///   TrainStep::step(batch)        # images in [0, 1] from the loader (ImageBatcher)
///     method.after_step(last)     # EMA, queue: the previous step's, on the weights the
///                                 # Learner's optimiser has just updated
///     views = augmenter.two_views_at(batch, progress)    # curricula read the step and epoch
///     loss  = method.forward_views(views, progress)
///     grads = method.gradients(loss)                     # the Learner's optimiser applies them
///   InferenceStep::step(batch)    # the backbone's features of the normalised images
/// ```
///
/// The Learner owns the trainable networks ([`SslMethod::online`]): its optimiser updates them
/// and its checkpoints hold them. What else a method keeps (the key / target networks, the
/// queue, a loss's state such as the curricular `t`) stays in the method, shared by the model
/// and its inference copy, and is not in the Learner's checkpoints: a resumed Learner run starts
/// those afresh (the crate's own [`Trainer`](super::Trainer) resumes them exactly). Curricula
/// that need only the step and the epoch (the mixup and strength curricula of the augmenter, a
/// loss's schedule, a masking ratio's) work as in the crate's loop: the model counts the steps
/// it has trained. Those that need the loop's hooks (batch curation, the self-paced
/// AutoAugment, object boxes, the SPL selections) are refused with a [`ConfigError`].
///
/// burn-train's single-device loop calls the optimiser right after each step and before the
/// next, which is the order the method's [`SslMethod::after_step`] needs; the one after the last
/// step is not run (the Learner has no hook after its last update), so a momentum encoder ends
/// one update behind the online one. With gradient accumulation the optimiser runs every few
/// steps while the method's updates still run every step.
pub struct LearnerMethod<B: AutodiffBackend, M: SslMethod<B>> {
    online: M::Online,
    normalize: Option<Normalize>,
    shared: Handle<B, M>,
}

impl<B: AutodiffBackend, M: SslMethod<B> + Send> LearnerMethod<B, M> {
    /// `method` trained on the views `augmenter` draws, over `epochs` epochs of
    /// `steps_per_epoch` steps (the length of the Learner's run: what the curricula's
    /// schedules and the method's momentum schedule are planned over).
    ///
    /// # Errors
    /// If `steps_per_epoch` or `epochs` is 0, or the augmenter or the method needs a hook of
    /// the crate's own loop: an adaptive augmentation (the self-paced AutoAugment learns from
    /// the loop's losses), object boxes (MICO's crop-and-rotate), the batch's dataset indexes
    /// (DeepCluster v2), parameters at a learning rate of their own ([`SslMethod::lr_groups`]
    /// at a factor other than 1), or local crops the method does not take.
    pub fn new(
        method: M,
        augmenter: Augmenter,
        steps_per_epoch: usize,
        epochs: usize,
    ) -> Result<Self, ConfigError> {
        if steps_per_epoch == 0 {
            return Err(ConfigError::new("steps_per_epoch", "must be at least 1"));
        }
        if epochs == 0 {
            return Err(ConfigError::new("epochs", "must be at least 1"));
        }
        if augmenter.is_adaptive() {
            return Err(ConfigError::new(
                "augmenter",
                "an adaptive augmentation (the self-paced AutoAugment) learns from the losses \
                 through a hook of the crate's Trainer; burn-train's Learner has none",
            ));
        }
        if method.uses_object_boxes() {
            return Err(ConfigError::new(
                "method",
                "a method that uses object boxes gets them from a hook of the crate's Trainer; \
                 burn-train's Learner has none",
            ));
        }
        if method.uses_indexes() {
            return Err(ConfigError::new(
                "method",
                "the method reads the batch's dataset indexes (DeepCluster v2's memory bank), \
                 which burn-train's batches do not carry; train it with the crate's Trainer",
            ));
        }
        if method.lr_groups().iter().any(|group| group.factor != 1.0) {
            return Err(ConfigError::new(
                "method",
                "the method steps some parameters at their own learning rate (CAPI's clustering \
                 head, All4One's transformer), which burn-train's one optimiser step cannot: set \
                 their factor to 1, or train it with the crate's Trainer",
            ));
        }
        if augmenter.config().local_crops.is_some() && !method.takes_local_crops() {
            return Err(ConfigError::new(
                "augmenter",
                "the pipeline cuts local crops, which this method does not take",
            ));
        }
        let normalize = augmenter.config().view1.normalize.clone();
        Ok(Self {
            online: method.online().clone(),
            normalize,
            shared: Handle(Arc::new(Mutex::new(Shared {
                method,
                augmenter,
                steps_per_epoch,
                epochs,
                step: 0,
                pending: None,
                _backend: PhantomData,
            }))),
        })
    }

    /// The steps trained so far.
    pub fn steps(&self) -> usize {
        self.shared.lock().step
    }

    /// Hands the method back with the networks the Learner trained (the inference model that
    /// `launch` returns turns back into this with
    /// [`AutodiffModule::from_inner`]): to evaluate, export or go on training it with the
    /// crate's own loop. The last step's [`SslMethod::after_step`] runs first.
    ///
    /// # Errors
    /// If another copy of this model (a clone the Learner kept) is still alive: the method is
    /// shared with it. The model is handed back in the error.
    pub fn into_method(self) -> Result<M, Self> {
        let Self {
            online,
            normalize,
            shared,
        } = self;
        match Arc::try_unwrap(shared.0) {
            Ok(mutex) => {
                let mut shared = mutex.into_inner().unwrap_or_else(PoisonError::into_inner);
                shared.method.set_online(online);
                if let Some(last) = shared.pending.take() {
                    shared.method.after_step(last);
                }
                Ok(shared.method)
            }
            Err(arc) => Err(Self {
                online,
                normalize,
                shared: Handle(arc),
            }),
        }
    }
}

impl<B: AutodiffBackend, M: SslMethod<B>> Clone for LearnerMethod<B, M> {
    fn clone(&self) -> Self {
        Self {
            online: self.online.clone(),
            normalize: self.normalize.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<B: AutodiffBackend, M: SslMethod<B>> fmt::Debug for LearnerMethod<B, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LearnerMethod")
            .field("method", &std::any::type_name::<M>())
            .field("online", &self.online)
            .finish()
    }
}

/// What burn-train's summary prints of the model.
impl<B: AutodiffBackend, M: SslMethod<B>> fmt::Display for LearnerMethod<B, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({} trainable parameters)",
            std::any::type_name::<M>(),
            self.online.num_params()
        )
    }
}

/// The items of a `Module` impl whose module is the struct's `online` field, the rest of the
/// struct carried along: [`LearnerMethod`] on `B`, [`LearnerInference`] on `B::InnerBackend`.
macro_rules! module_of_online {
    ($backend:ty) => {
        fn collect_devices(&self, devices: Devices<$backend>) -> Devices<$backend> {
            self.online.collect_devices(devices)
        }

        fn fork(self, device: &<$backend as BackendTypes>::Device) -> Self {
            Self {
                online: self.online.fork(device),
                ..self
            }
        }

        fn to_device(self, device: &<$backend as BackendTypes>::Device) -> Self {
            Self {
                online: self.online.to_device(device),
                ..self
            }
        }

        fn visit<V: ModuleVisitor<$backend>>(&self, visitor: &mut V) {
            self.online.visit(visitor);
        }

        fn map<Mp: ModuleMapper<$backend>>(self, mapper: &mut Mp) -> Self {
            Self {
                online: self.online.map(mapper),
                ..self
            }
        }

        fn load_record(self, record: Self::Record) -> Self {
            Self {
                online: self.online.load_record(record),
                ..self
            }
        }

        fn into_record(self) -> Self::Record {
            self.online.into_record()
        }
    };
}

/// The module is the online networks: `fork` and `to_device` move the trainable networks, and
/// the method's own states stay on the device it was built on (build it on the training device).
impl<B: AutodiffBackend, M: SslMethod<B> + Send> Module<B> for LearnerMethod<B, M> {
    type Record = <M::Online as Module<B>>::Record;

    module_of_online!(B);
}

impl<B: AutodiffBackend, M: SslMethod<B> + Send> AutodiffModule<B> for LearnerMethod<B, M> {
    type InnerModule = LearnerInference<B, M>;

    fn valid(&self) -> Self::InnerModule {
        LearnerInference {
            online: self.online.valid(),
            normalize: self.normalize.clone(),
            shared: self.shared.clone(),
        }
    }

    fn from_inner(inner: Self::InnerModule) -> Self {
        Self {
            online: M::Online::from_inner(inner.online),
            normalize: inner.normalize,
            shared: inner.shared,
        }
    }
}

/// The loss of one step for burn-train's metrics (`LossMetric` reads it), and the method's
/// named statistics (the momentum, the curricular `t`, …), detached.
#[derive(Debug, Clone)]
pub struct StepOutput<B: Backend> {
    /// The step's loss, `[1]`.
    pub loss: Tensor<B, 1>,
    /// The method's statistics, each `[1]`.
    pub stats: Vec<(&'static str, Tensor<B, 1>)>,
}

impl<B: Backend> ItemLazy for StepOutput<B> {
    type ItemSync = Self;

    fn sync(self) -> Self {
        self
    }
}

impl<B: Backend> Adaptor<LossInput<B>> for StepOutput<B> {
    fn adapt(&self) -> LossInput<B> {
        LossInput::new(self.loss.clone())
    }
}

impl<B: AutodiffBackend, M: SslMethod<B> + Send> TrainStep for LearnerMethod<B, M> {
    type Input = ImageBatch<B>;
    type Output = StepOutput<B>;

    /// One step of the method on two views of `batch` (see [`LearnerMethod`]); a method that
    /// [reads the labels](SslMethod::uses_labels) is handed the batch's.
    ///
    /// # Shapes
    /// - `batch.images`: `[N, C, H, W]`, values in `[0, 1]`; `batch.labels`: `[N]`
    ///
    /// # Panics
    /// For a method that reads the labels, on a batch without them (unlabelled items).
    fn step(&self, batch: ImageBatch<B>) -> TrainOutput<StepOutput<B>> {
        let mut guard = self.shared.lock();
        let shared = &mut *guard;
        // The networks as the Learner's optimiser left them after the last step.
        shared.method.set_online(self.online.clone());
        if let Some(last) = shared.pending.take() {
            shared.method.after_step(last);
        }
        let progress = shared.progress();
        let views = shared
            .augmenter
            .two_views_at(batch.images.inner(), progress);
        if shared.method.uses_view_geometry() {
            shared.method.set_view_geometry(views.geometry);
        }
        let views = Views {
            global: [views.view1, views.view2].map(Tensor::<B, 4>::from_inner),
            local: views
                .locals
                .into_iter()
                .map(Tensor::<B, 4>::from_inner)
                .collect(),
        };
        if shared.method.uses_labels() {
            let labels = batch.labels.expect(
                "the method reads the images' labels (SupCon) and the batch has none: train it \
                 on a labelled data set",
            );
            shared.method.set_labels(labels);
        }
        let out = shared.method.forward_views(views, progress);
        let grads = shared.method.gradients(&out.loss);
        shared.pending = Some(progress);
        shared.step += 1;
        TrainOutput {
            grads,
            item: StepOutput {
                loss: out.loss.detach(),
                stats: out.stats,
            },
        }
    }
}

/// The inference copy of a [`LearnerMethod`] (what burn-train validates with and what `launch`
/// returns): the trainable networks on the inner backend, sharing the method's own states with
/// the model it came from. Its [`InferenceStep`] gives the backbone's features.
pub struct LearnerInference<B: AutodiffBackend, M: SslMethod<B>> {
    online: InnerOnline<B, M>,
    normalize: Option<Normalize>,
    shared: Handle<B, M>,
}

impl<B: AutodiffBackend, M: SslMethod<B>> LearnerInference<B, M> {
    /// The trainable networks (backbone and heads) on the inner backend.
    pub fn online(&self) -> &InnerOnline<B, M> {
        &self.online
    }
}

impl<B: AutodiffBackend, M: SslMethod<B>> Clone for LearnerInference<B, M> {
    fn clone(&self) -> Self {
        Self {
            online: self.online.clone(),
            normalize: self.normalize.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<B: AutodiffBackend, M: SslMethod<B>> fmt::Debug for LearnerInference<B, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LearnerInference")
            .field("method", &std::any::type_name::<M>())
            .field("online", &self.online)
            .finish()
    }
}

impl<B: AutodiffBackend, M: SslMethod<B> + Send> Module<B::InnerBackend>
    for LearnerInference<B, M>
{
    type Record = <InnerOnline<B, M> as Module<B::InnerBackend>>::Record;

    module_of_online!(B::InnerBackend);
}

/// The backbone's features of a validation batch, and its labels when it has them: what a
/// kNN or linear-probe metric of the user's reads.
#[derive(Debug, Clone)]
pub struct FeaturesOutput<B: Backend> {
    /// Features, `[N, D]`.
    pub features: Tensor<B, 2>,
    /// Class indices, `[N]`.
    pub labels: Option<Tensor<B, 1, Int>>,
}

impl<B: Backend> ItemLazy for FeaturesOutput<B> {
    type ItemSync = Self;

    fn sync(self) -> Self {
        self
    }
}

impl<B, M> InferenceStep for LearnerInference<B, M>
where
    B: AutodiffBackend,
    M: SslMethod<B> + Send,
    InnerOnline<B, M>: HasBackbone<InnerBackbone<B, M>>,
{
    type Input = ImageBatch<B::InnerBackend>;
    type Output = FeaturesOutput<B::InnerBackend>;

    /// The backbone's features of `batch`, normalised as the training views are.
    ///
    /// # Shapes
    /// - `batch.images`: `[N, C, H, W]`, values in `[0, 1]`
    /// - output `features`: `[N, D]`
    fn step(&self, batch: ImageBatch<B::InnerBackend>) -> FeaturesOutput<B::InnerBackend> {
        let images = match &self.normalize {
            Some(normalize) => normalize.apply(batch.images),
            None => batch.images,
        };
        FeaturesOutput {
            features: self.online.backbone().forward_features(images),
            labels: batch.labels,
        }
    }
}

/// burn's data loaders batch [`ImageItem`]s (an [`ImageArray`](crate::data::ImageArray) is a
/// burn dataset of them) into an [`ImageBatch`] on the loader's device.
///
/// # Panics
/// If the items differ in size: the crate's datasets give items of one size (checked when they
/// are built); a dataset of the user's that does not is a bug there, and burn's `Batcher` has
/// no error to return.
impl<B: Backend> Batcher<B, ImageItem, ImageBatch<B>> for ImageBatcher {
    fn batch(&self, items: Vec<ImageItem>, device: &B::Device) -> ImageBatch<B> {
        ImageBatcher::batch::<B>(self, &items, device)
            .unwrap_or_else(|e| panic!("a batch of images of different sizes: {e}"))
    }
}
