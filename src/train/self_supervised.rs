//! The self-supervised step (documented on `SelfSupervised`).

use std::path::Path;

use burn::module::Module;
use burn::optim::Optimizer;
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use serde::{Deserialize, Serialize};

use super::ahead::{Batches, FeedBatch, FeedIter, ReadyBatch};
use super::checkpoint::{
    check_shapes, files, non_finite_tensors, read_record, shapes, to_bytes, CheckpointKind,
    CheckpointMeta,
};
use super::config::TrainConfig;
use super::error::TrainError;
use super::task::{EpochBatches, LrPlan, ProgressOf, Task};
use crate::base::error::ConfigError;
use crate::base::Progress;
use crate::data::stream::{ImageSource, StreamLoader, ViewCrop};
use crate::data::{Dataset, HostBatch, ImageArray, ImageItem, Loader, LoaderConfig};
use crate::data_parallel::Replica;
use crate::method::fresh_leaves;
use crate::method::{MethodOutput, SslMethod, Views};
use crate::optim::{step_in_groups, StandIns};
use crate::pipeline::{Augmenter, PipelineConfig, TwoViews, LOSS_FEEDBACK};

/// The self-supervised step's settings in the run record: the loader and the augmentation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SelfSupervisedSettings {
    /// The loader's settings.
    pub loader: LoaderConfig,
    /// The augmentation.
    pub augmentation: PipelineConfig,
}

/// Settings of the self-supervised step that may differ on resume.
pub(crate) const SELF_SUPERVISED_RESUMABLE: [&str; 2] = ["loader.workers", "loader.prefetch"];

/// A batch of the self-supervised step: the loader's batch, its images on the device, and the
/// views of the first attempt when they were drawn ahead.
pub struct SslBatch<B: AutodiffBackend>(ReadyBatch<B::InnerBackend>);

/// The self-supervised step: any [`SslMethod`] on two augmented views of every batch of a
/// [`Loader`], with any optimiser.
///
/// ```text
/// epoch:   the loader's batches, order keyed by (seed, epoch); uploaded and augmented one step
///          ahead on a thread of its own when asked (`augment_ahead`)
/// attempt: view1, view2 = augmenter.redrawn_views(batch, progress, attempt)   # keyed by (step, attempt)
/// labels:  method.set_labels(the batch's labels), for a method that reads them (SupCon)
/// indexes: method.set_indexes(the batch's dataset indexes), for a method that reads them
///          (DeepCluster v2)
/// geometry: method.set_view_geometry(the views' crops and flips), for a method that reads them
///          (VICRegL)
/// forward: out = method.forward_views(Views { global: [view1, view2], local crops }, progress)
/// apply:   online = fresh_leaves(optimiser.step(lr, online, grad(out.loss))), the method's
///          lr_groups at their own rate (CAPI, All4One); loss and statistics in one read
/// after:   method.after_step (EMA, queue); the self-paced AutoAugment learns from the loss
///          through its hook (crate::hooks::SelfPacedAutoAugmentHook)
/// ```
pub struct SelfSupervised<B: AutodiffBackend, S, O, D> {
    method: S,
    optimizer: Option<O>,
    /// The stand-ins for the online networks' parameters while the optimiser steps them
    /// ([`SslMethod::take_online_with`]), kept from step to step.
    stand_ins: StandIns<B>,
    augmenter: Augmenter,
    feed: Feed<D>,
    device: Option<B::Device>,
    augment_ahead: bool,
    /// The scheduled knobs of the attempt being applied.
    knobs: Vec<(&'static str, f64)>,
    /// This step's replica in a data-parallel run.
    replica: Option<Replica<B>>,
    /// Whether the embeddings the hooks judge are gathered from every replica (a hook reads them).
    gather_embeddings: bool,
    /// The labels of the attempt's batch, on the device, for a method that
    /// [uses them](SslMethod::uses_labels); handed to it before the forward.
    labels: Option<Tensor<B, 1, Int>>,
    /// The dataset indexes of the attempt's batch, for a method that
    /// [uses them](SslMethod::uses_indexes); handed to it before the forward.
    indexes: Option<Vec<usize>>,
}

impl<B, S, O, D> SelfSupervised<B, S, O, D>
where
    B: AutodiffBackend,
    S: SslMethod<B> + 'static,
    O: Optimizer<S::Online, B> + 'static,
    D: Dataset<ImageItem> + 'static,
{
    /// `method` trained with `optimizer` on the batches of `loader`, augmented by `augmenter`
    /// (on the device the trainer's build gives it).
    pub fn new(method: S, optimizer: O, augmenter: Augmenter, loader: Loader<D>) -> Self {
        Self::with_feed(method, optimizer, augmenter, Feed::Memory(loader))
    }

    fn with_feed(method: S, optimizer: O, augmenter: Augmenter, feed: Feed<D>) -> Self {
        Self {
            method,
            optimizer: Some(optimizer),
            stand_ins: StandIns::default(),
            augmenter,
            feed,
            device: None,
            augment_ahead: false,
            knobs: Vec::new(),
            replica: None,
            gather_embeddings: false,
            labels: None,
            indexes: None,
        }
    }

    /// Upload and augment each batch on a thread of its own while the step before runs
    /// (see [`TrainerBuilder::augment_ahead`](super::TrainerBuilder::augment_ahead)).
    pub fn set_augment_ahead(&mut self, ahead: bool) {
        self.augment_ahead = ahead;
    }

    /// The in-memory loader (`None` when the step streams its data).
    pub fn loader(&self) -> Option<&Loader<D>> {
        match &self.feed {
            Feed::Memory(loader) => Some(loader),
            Feed::Stream(_) => None,
        }
    }

    fn device(&self) -> &B::Device {
        self.device
            .as_ref()
            .expect("the trainer's build gives the step its device")
    }
}

impl<B, S, O> SelfSupervised<B, S, O, ImageArray>
where
    B: AutodiffBackend,
    S: SslMethod<B> + 'static,
    O: Optimizer<S::Online, B> + 'static,
{
    /// `method` trained with `optimizer` on the batches of a streaming loader: its views cut at
    /// decode time ([`StreamLoader`]), the rest of the augmentation by `augmenter` on the
    /// device. (`ImageArray` names no data here: the step's type stays that of an in-memory
    /// step, so a recipe holds either.)
    ///
    /// # Errors
    /// If the loader does not cut one view per view of `augmenter` (view 1, view 2, then the
    /// local crops), each the augmenter's own random resized crop (size, scale and ratio).
    pub fn streaming(
        method: S,
        optimizer: O,
        augmenter: Augmenter,
        loader: StreamLoader<Box<dyn ImageSource>>,
    ) -> Result<Self, ConfigError> {
        let config = augmenter.config();
        let mut wanted = vec![&config.view1, &config.view2];
        if let Some(l) = &config.local_crops {
            wanted.extend(std::iter::repeat_n(&l.view, l.count));
        }
        let cut = &loader.config().views;
        if cut.len() != wanted.len() {
            return Err(ConfigError::new(
                "views",
                format!(
                    "the streaming loader cuts {} views per image and the augmentation makes {}",
                    cut.len(),
                    wanted.len()
                ),
            ));
        }
        // The run records the augmentation's crops: the loader must cut exactly those (a view
        // without a crop takes whatever the loader cuts).
        for (i, (c, v)) in cut.iter().zip(&wanted).enumerate() {
            if let Some(crop) = &v.crop {
                if *c != ViewCrop::Random(*crop) {
                    return Err(ConfigError::new(
                        "views",
                        format!(
                            "view {} is cut at {:?} by the streaming loader ({c:?}) and cropped \
                             to {:?} by the augmentation ({crop:?}): build the loader's views \
                             from the augmentation's crops",
                            i + 1,
                            c.size(),
                            crop.size
                        ),
                    ));
                }
            }
        }
        Ok(Self::with_feed(
            method,
            optimizer,
            augmenter,
            Feed::Stream(loader),
        ))
    }
}

/// Where the step's batches come from.
enum Feed<D> {
    /// Whole images held in memory, cropped on the device.
    Memory(Loader<D>),
    /// Image files decoded every epoch, views cut at decode time.
    Stream(StreamLoader<Box<dyn ImageSource>>),
}

impl<D: Dataset<ImageItem> + 'static> Feed<D> {
    fn config(&self) -> &LoaderConfig {
        match self {
            Self::Memory(l) => l.config(),
            Self::Stream(l) => &l.config().loader,
        }
    }

    fn len(&self) -> usize {
        match self {
            Self::Memory(l) => l.dataset().len(),
            Self::Stream(l) => l.source().len(),
        }
    }

    fn num_batches(&self) -> usize {
        match self {
            Self::Memory(l) => l.num_batches(),
            Self::Stream(l) => l.num_batches(),
        }
    }

    /// The channels of the images the batches hold (the first image's, in memory; none for an
    /// empty set).
    fn channels(&self) -> Option<usize> {
        match self {
            Self::Memory(l) => l.dataset().get(0).map(|item| item.channels),
            Self::Stream(l) => Some(l.config().channels),
        }
    }

    fn set_shard(&mut self, rank: usize, replicas: usize) -> Result<(), ConfigError> {
        match self {
            Self::Memory(l) => l.set_shard(rank, replicas),
            Self::Stream(l) => l.set_shard(rank, replicas),
        }
    }

    /// Whether the images are labelled, as the first one says (a data set's images all have a
    /// label or none has).
    fn is_labelled(&self) -> bool {
        match self {
            Self::Memory(l) => l.dataset().get(0).is_some_and(|item| item.label.is_some()),
            Self::Stream(l) => !l.source().is_empty() && l.source().label(0).is_some(),
        }
    }

    fn epoch(&self, epoch: u64, pool: Option<&[usize]>, first_batch: usize) -> FeedIter {
        match self {
            Self::Memory(l) => Box::new(
                l.epoch_from(epoch, pool, first_batch)
                    .map(|b| b.map(FeedBatch::Whole)),
            ),
            Self::Stream(l) => Box::new(
                l.epoch(epoch, pool, first_batch)
                    .map(|b| b.map(FeedBatch::Cut)),
            ),
        }
    }
}

/// The refusal of data without labels for a method that reads them.
fn unlabelled() -> ConfigError {
    ConfigError::new(
        "data",
        "the method's loss reads the images' labels (SupCon's positives are the images of the \
         anchor's class) and these images have none: train it on a labelled data set",
    )
}

/// What a hook of self-supervised training may use of the step: the method, the augmentation
/// and the training images. Hooks are written for every type with this trait, so one hook
/// serves every method, optimiser and dataset.
pub trait SelfSupervisedTask<B: AutodiffBackend>:
    Task<B, Inputs = TwoViews<B::InnerBackend>, Output = MethodOutput<B>>
{
    /// The method.
    type Method: SslMethod<B>;

    /// The method.
    fn method(&self) -> &Self::Method;

    /// The method, to hand it what it needs (e.g. object boxes).
    fn method_mut(&mut self) -> &mut Self::Method;

    /// The augmentation (its view-1 normalisation is what an unaugmented image gets).
    fn augmenter(&self) -> &Augmenter;

    /// The augmentation, to feed its adaptive curricula ([`Augmenter::observe`]).
    fn augmenter_mut(&mut self) -> &mut Augmenter;

    /// Images in the training set.
    fn num_training_images(&self) -> usize;

    /// The training images `start..end` (dataset order) as the network sees `view1`
    /// unaugmented: scaled to `[0, 1]` and normalised as `view1` is; on the inner backend.
    ///
    /// # Errors
    /// If the dataset cannot give an image of the range.
    fn training_images(
        &self,
        start: usize,
        end: usize,
    ) -> Result<Tensor<B::InnerBackend, 4>, TrainError>;
}

impl<B, S, O, D> SelfSupervisedTask<B> for SelfSupervised<B, S, O, D>
where
    B: AutodiffBackend,
    S: SslMethod<B> + 'static,
    O: Optimizer<S::Online, B> + 'static,
    D: Dataset<ImageItem> + 'static,
{
    type Method = S;

    fn method(&self) -> &S {
        &self.method
    }

    fn method_mut(&mut self) -> &mut S {
        &mut self.method
    }

    fn augmenter(&self) -> &Augmenter {
        &self.augmenter
    }

    fn augmenter_mut(&mut self) -> &mut Augmenter {
        &mut self.augmenter
    }

    fn num_training_images(&self) -> usize {
        self.feed.len()
    }

    fn training_images(
        &self,
        start: usize,
        end: usize,
    ) -> Result<Tensor<B::InnerBackend, 4>, TrainError> {
        let batch = match &self.feed {
            Feed::Memory(loader) => {
                let dataset = loader.dataset();
                let source = Path::new("training images");
                let indices: Vec<usize> = (start..end).collect();
                let items = indices
                    .iter()
                    .map(|&i| {
                        dataset
                            .get(i)
                            .ok_or_else(|| crate::data::DataError::Request {
                                path: source.to_path_buf(),
                                reason: format!(
                                    "the dataset has no item {i} although its length is {}",
                                    dataset.len()
                                ),
                            })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                HostBatch::from_items(source, &items, indices)?
            }
            Feed::Stream(stream) => {
                // View 1's size, cut as an evaluation transform cuts it (ImageNet's 224 / 256).
                let size = stream.config().views[0].size();
                stream.images(start..end, ViewCrop::evaluation(size))?
            }
        };
        let mut images = batch.to_device::<B::InnerBackend>(self.device()).images;
        if let Some(normalize) = &self.augmenter.config().view1.normalize {
            images = normalize.apply(images);
        }
        Ok(images)
    }
}

impl<B, S, O, D> Task<B> for SelfSupervised<B, S, O, D>
where
    B: AutodiffBackend,
    S: SslMethod<B> + 'static,
    O: Optimizer<S::Online, B> + 'static,
    D: Dataset<ImageItem> + 'static,
{
    type Settings = SelfSupervisedSettings;
    type Batch = SslBatch<B>;
    type Inputs = TwoViews<B::InnerBackend>;
    type Output = MethodOutput<B>;

    const KIND: CheckpointKind = CheckpointKind::SelfSupervised;

    fn settings(&self) -> SelfSupervisedSettings {
        SelfSupervisedSettings {
            loader: self.feed.config().clone(),
            augmentation: self.augmenter.config().clone(),
        }
    }

    fn resumable_changes(&self) -> &'static [&'static str] {
        &SELF_SUPERVISED_RESUMABLE
    }

    fn prepare(&mut self, device: &B::Device) -> Result<(), TrainError> {
        self.device = Some(device.clone());
        let batch_size = self.feed.config().batch_size;
        if batch_size < 2 {
            return Err(ConfigError::new(
                "batch_size",
                format!(
                    "must be at least 2, got {batch_size} (batch norm needs two values per \
                     channel, and a contrastive loss needs negatives)"
                ),
            )
            .into());
        }
        if let Some(local) = &self.augmenter.config().local_crops {
            if !self.method.takes_local_crops() {
                return Err(ConfigError::new(
                    "local_crops",
                    format!(
                        "the method's loss takes two views; its {} local crops per image would be \
                         drawn and never seen (multi-crop is for SwAV and DINO)",
                        local.count
                    ),
                )
                .into());
            }
        }
        if self.feed.num_batches() == 0 {
            return Err(ConfigError::new(
                "batch_size",
                format!(
                    "{} images give no full batch of {batch_size} (drop_last)",
                    self.feed.len(),
                ),
            )
            .into());
        }
        if self.method.uses_labels() && !self.feed.is_labelled() {
            return Err(unlabelled().into());
        }
        if let Some(channels) = self
            .feed
            .channels()
            .filter(|&c| c != self.augmenter.channels())
        {
            return Err(ConfigError::new(
                "channels",
                format!(
                    "the images have {channels} channel(s), but the augmentation pipeline was \
                     built for {} (`PipelineConfig::init`'s channels; the backbone's \
                     in_channels must match them too)",
                    self.augmenter.channels()
                ),
            )
            .into());
        }
        self.method.check_batch_size(batch_size)?;
        // A loader that keeps an epoch's short last batch (`drop_last = false`) takes a step of
        // that many images too.
        let last = self.feed.len() % batch_size;
        if !self.feed.config().drop_last && last > 0 {
            if last == 1 {
                return Err(ConfigError::new(
                    "drop_last",
                    format!(
                        "the {} images leave a last batch of one image each epoch (batch norm \
                         needs two per channel, a contrastive loss negatives): keep drop_last \
                         or choose a batch size that leaves at least two",
                        self.feed.len()
                    ),
                )
                .into());
            }
            self.method.check_batch_size(last).map_err(|e| {
                ConfigError::new(
                    "drop_last",
                    format!(
                        "each epoch ends with a short batch of {last} images (drop_last = false), \
                         which the method cannot take: {}",
                        e.reason
                    ),
                )
            })?;
        }
        Ok(())
    }

    fn needs(&self) -> Vec<(&'static str, &'static str)> {
        let mut needs = Vec::new();
        if self.method.uses_object_boxes() {
            needs.push((
                crate::method::OBJECT_BOXES,
                "the method rotates inside object boxes (crop-and-rotate) and no hook provides \
                 them (add curriculum_ssl::hooks::ObjectBoxesHook)",
            ));
        }
        if self.augmenter.is_adaptive() {
            needs.push((
                LOSS_FEEDBACK,
                "the augmentation's self-paced AutoAugment learns from the losses and no hook \
                 feeds them back (add curriculum_ssl::hooks::SelfPacedAutoAugmentHook)",
            ));
        }
        needs
    }

    fn batches_per_epoch(&self) -> usize {
        self.feed.num_batches()
    }

    fn batch_size(&self) -> usize {
        self.feed.config().batch_size
    }

    fn num_examples(&self) -> usize {
        self.feed.len()
    }

    fn seeds(&self) -> (u64, u64) {
        (self.feed.config().seed, self.augmenter.config().seed)
    }

    fn lr_plan(&self, config: &TrainConfig, epochs: usize) -> Result<Box<dyn LrPlan>, ConfigError> {
        Ok(Box::new(config.schedule(epochs, self.batches_per_epoch())?))
    }

    fn epoch(
        &mut self,
        epoch: usize,
        pool: Option<&[usize]>,
        first_batch: usize,
        progress_of: ProgressOf,
    ) -> Result<EpochBatches<SslBatch<B>>, TrainError> {
        let batches = self.feed.epoch(epoch as u64, pool, first_batch);
        let ahead = (self.augment_ahead && !self.augmenter.is_adaptive())
            .then(|| (self.augmenter.clone(), progress_of));
        let host = self.augmenter.host_ops();
        let batches = Batches::<B::InnerBackend>::new(batches, self.device(), ahead, host);
        // A method that reads the labels never meets a batch without them.
        let needs_labels = self.method.uses_labels();
        Ok(Box::new(batches.map(move |ready| {
            let ready = ready.map_err(TrainError::from)?;
            if needs_labels && ready.batch.labels().is_none() {
                return Err(unlabelled().into());
            }
            Ok(SslBatch(ready))
        })))
    }

    fn indices(batch: &SslBatch<B>) -> &[usize] {
        batch.0.batch.indices()
    }

    fn attempt(
        &mut self,
        batch: &mut SslBatch<B>,
        progress: Progress,
        attempt: usize,
    ) -> TwoViews<B::InnerBackend> {
        // The first draw may have been made ahead, on the augmentation thread.
        let mut views = match batch.0.views.take() {
            Some(views) => views,
            None => self
                .augmenter
                .redrawn_views_from(&batch.0.images, progress, attempt),
        };
        if matches!(self.feed, Feed::Stream(_)) && attempt == 0 {
            // The streaming loader's unreadable files, a column of the step's row.
            views
                .knobs
                .push(("skipped_files", batch.0.batch.skipped() as f64));
        }
        // The batch's labels for a method that reads them (`epoch` let no batch without them
        // through), on the batch's device.
        self.labels = match batch.0.batch.labels() {
            Some(labels) if self.method.uses_labels() => Some(Tensor::from_data(
                TensorData::new(labels.to_vec(), [labels.len()]),
                self.device(),
            )),
            _ => None,
        };
        self.indexes = self
            .method
            .uses_indexes()
            .then(|| batch.0.batch.indices().to_vec());
        views
    }

    fn forward(&mut self, views: TwoViews<B::InnerBackend>, progress: Progress) -> MethodOutput<B> {
        self.knobs = views.knobs;
        // Where the views came from, for a method that reads it (VICRegL's locations).
        let geometry = self.method.uses_view_geometry().then_some(views.geometry);
        let locals = views.locals.into_iter().map(Tensor::from_inner).collect();
        let views = Views {
            global: [views.view1, views.view2].map(Tensor::from_inner),
            local: locals,
        };
        if let Some(labels) = self.labels.take() {
            self.method.set_labels(labels);
        }
        if let Some(geometry) = geometry {
            self.method.set_view_geometry(geometry);
        }
        if let Some(indexes) = self.indexes.take() {
            self.method.set_indexes(&indexes);
        }
        let mut out = self.method.forward_views(views, progress);
        // Data-parallel: a hook that reads the embeddings measures the global batch (Fréchet
        // curation's distance, a user's rule), the same on every replica, so that all decide
        // alike.
        if let Some(replica) = self.replica.as_ref().filter(|_| self.gather_embeddings) {
            out.embeddings = out.embeddings.map(|[z1, z2]| {
                [
                    replica.gather(z1.detach()).detach(),
                    replica.gather(z2.detach()).detach(),
                ]
            });
        }
        out
    }

    fn apply(
        &mut self,
        out: MethodOutput<B>,
        lr: f64,
    ) -> Result<(f64, Vec<(String, f64)>), TrainError> {
        let mut grads = self.method.gradients(&out.loss);
        if let Some(replica) = &self.replica {
            grads = replica
                .average(grads, self.method.online())
                .map_err(|reason| TrainError::Replica {
                    rank: replica.rank(),
                    reason,
                })?;
        }
        let optimizer = self.optimizer.as_mut().expect("put back after every step");
        let groups = self.method.lr_groups();
        let online = self.method.take_online_with(&mut self.stand_ins);
        let online = step_in_groups(optimizer, lr, online, grads, &groups);
        // Every parameter a new leaf (ids and values kept), including those the optimiser left
        // alone because they had no gradient (a frozen layer): burn-autodiff 0.21 drops a leaf's
        // graph entry when a backward pass consumes it, and the next step's operations on that
        // leaf can be swept by a backward pass on another thread (view threads, replicas)
        // before they are registered, losing the gradient (tracel-ai/burn#5573; the workspace's
        // patched burn-autodiff removes the cause, a project on upstream's still needs this).
        self.method.set_online(fresh_leaves(&online));
        // The loss and the statistics in one transfer: the only synchronisation of the step.
        let mut values = vec![out.loss.inner()];
        values.extend(out.stats.iter().map(|(_, v)| v.clone().inner()));
        let mut values = Tensor::cat(values, 0);
        if let Some(replica) = &self.replica {
            // Every replica reports the replicas' mean: the one-device loss of the global batch.
            values = replica.mean_of(values);
        }
        let host: Vec<f64> = values
            .into_data()
            .convert::<f64>()
            .to_vec()
            .expect("a float tensor converts to f64");
        let knobs = std::mem::take(&mut self.knobs);
        let stats = out
            .stats
            .iter()
            .zip(&host[1..])
            .map(|((name, _), v)| (name.to_string(), *v))
            .chain(knobs.iter().map(|(name, v)| (name.to_string(), *v)))
            .collect();
        Ok((host[0], stats))
    }

    fn set_replica(
        &mut self,
        replica: Replica<B>,
        gather_for_hooks: bool,
    ) -> Result<(), TrainError> {
        self.method.set_replica(replica.clone())?;
        self.gather_embeddings = gather_for_hooks;
        self.feed.set_shard(replica.rank(), replica.replicas())?;
        self.augmenter
            .set_shard(replica.rank(), replica.replicas())?;
        self.replica = Some(replica);
        Ok(())
    }

    fn after_step(&mut self, progress: Progress, _: f64) {
        self.method.after_step(progress);
    }

    fn files(&self) -> Result<Vec<(&'static str, Vec<u8>)>, TrainError> {
        let optimizer = self.optimizer.as_ref().expect("put back after every step");
        Ok(vec![
            (
                files::ONLINE,
                to_bytes::<B, _>(
                    self.method.online().clone().into_record(),
                    "online networks",
                )?,
            ),
            (
                files::BACKBONE,
                to_bytes::<B, _>(self.method.backbone().clone().into_record(), "backbone")?,
            ),
            (
                files::METHOD,
                to_bytes::<B, _>(self.method.state(), "method state")?,
            ),
            (
                files::OPTIMIZER,
                to_bytes::<B, _>(optimizer.to_record(), "optimiser state")?,
            ),
        ])
    }

    fn shapes(&self) -> (Vec<Vec<usize>>, Vec<Vec<usize>>) {
        (shapes(self.method.online()), shapes(self.method.backbone()))
    }

    fn non_finite(&self) -> Vec<String> {
        non_finite_tensors(self.method.online())
    }

    fn load(&mut self, dir: &Path, meta: &CheckpointMeta) -> Result<(), TrainError> {
        let mismatch = |reason: String| TrainError::Checkpoint {
            path: dir.to_path_buf(),
            reason,
        };
        let online_file = dir.join(files::ONLINE);
        let expected = shapes(self.method.online());
        check_shapes(&online_file, &meta.online_shapes, &expected)?;
        let record =
            read_record::<B, <S::Online as Module<B>>::Record>(&online_file, self.device())?;
        let online = self.method.online().clone().load_record(record);
        check_shapes(&online_file, &shapes(&online), &expected)?;
        self.method.set_online(online);
        let state = read_record::<B, S::State>(&dir.join(files::METHOD), self.device())?;
        self.method
            .load_state(state)
            .map_err(|e| mismatch(e.to_string()))?;
        let record = read_record::<B, O::Record>(&dir.join(files::OPTIMIZER), self.device())?;
        let optimizer = self
            .optimizer
            .take()
            .expect("the optimiser is always put back");
        self.optimizer = Some(optimizer.load_record(record));
        Ok(())
    }

    fn state(&self) -> Option<serde_json::Value> {
        Some(serde_json::to_value(self.augmenter.state()).expect("JSON value"))
    }

    fn load_state(&mut self, state: Option<serde_json::Value>) -> Result<(), String> {
        let state = state.ok_or_else(|| "no augmenter state".to_string())?;
        let state =
            serde_json::from_value(state).map_err(|e| format!("not an augmenter state: {e}"))?;
        self.augmenter.load_state(state).map_err(|e| e.to_string())
    }
}

impl<B: AutodiffBackend, K: SelfSupervisedTask<B>> super::hook::RunView<'_, B, K> {
    /// The method.
    pub fn method(&self) -> &K::Method {
        self.task.method()
    }

    /// The method, to hand it what it needs (e.g. object boxes).
    pub fn method_mut(&mut self) -> &mut K::Method {
        self.task.method_mut()
    }

    /// The augmentation.
    pub fn augmenter(&self) -> &Augmenter {
        self.task.augmenter()
    }

    /// The augmentation, to feed its adaptive curricula.
    pub fn augmenter_mut(&mut self) -> &mut Augmenter {
        self.task.augmenter_mut()
    }

    /// Images in the training set.
    pub fn num_training_images(&self) -> usize {
        self.task.num_training_images()
    }

    /// The training images `start..end` as the network sees `view1` unaugmented
    /// ([`SelfSupervisedTask::training_images`]).
    ///
    /// # Errors
    /// If the dataset cannot give an image of the range.
    pub fn training_images(
        &self,
        start: usize,
        end: usize,
    ) -> Result<Tensor<B::InnerBackend, 4>, TrainError> {
        self.task.training_images(start, end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::stream::testing::{jpeg_folder, scratch};
    use crate::data::stream::{ImageFiles, StreamConfig};
    use crate::method::{init_method, SimClr, SimClrConfig};
    use crate::optim::SgdConfig;
    use crate::pipeline::PipelineConfig;
    use crate::train::{TrainConfig, Trainer};
    use burn::backend::{Autodiff, Flex};
    use curriculum_ssl_models::{LeNet, LeNetConfig};

    type Ad = Autodiff<Flex>;

    fn method(
        device: &<Ad as burn::tensor::backend::BackendTypes>::Device,
    ) -> SimClr<Ad, LeNet<Ad>> {
        init_method::<Ad, _, _>(device, 11, |d| {
            SimClrConfig::new()
                .with_hidden_dim(16)
                .with_output_dim(8)
                .init(|d| LeNetConfig::lenet5().with_embedding_dim(16).init(d), d)
        })
        .unwrap()
    }

    fn stream(
        root: &Path,
        pipeline: &PipelineConfig,
        workers: usize,
    ) -> StreamLoader<Box<dyn ImageSource>> {
        let source: Box<dyn ImageSource> = Box::new(ImageFiles::classes(root).unwrap());
        let views = [&pipeline.view1, &pipeline.view2]
            .map(|v| ViewCrop::Random(v.crop.expect("SimCLR's views crop")))
            .to_vec();
        StreamLoader::new(
            source,
            StreamConfig {
                loader: LoaderConfig {
                    batch_size: 8,
                    workers,
                    seed: 4,
                    ..LoaderConfig::default()
                },
                channels: 1,
                views,
            },
        )
        .unwrap()
    }

    /// Two steps of SimCLR on a streamed folder of JPEGs: the same losses (to the bit) whatever
    /// the loader's worker count, as the in-memory loader promises, finite, with the skipped
    /// files' column in each step's row.
    #[test]
    fn a_streamed_run_trains_and_its_losses_do_not_depend_on_the_worker_count() {
        let root = jpeg_folder("ssl-train", 2, 8);
        let device = Default::default();
        let pipeline = PipelineConfig::simclr(28, 1);
        let losses: Vec<Vec<f64>> = [0, 2]
            .into_iter()
            .map(|workers| {
                let step = SelfSupervised::streaming(
                    method(&device),
                    SgdConfig::new().init::<Ad, _>().unwrap(),
                    pipeline.clone().init(1).unwrap(),
                    stream(&root, &pipeline, workers),
                )
                .unwrap();
                let dir = scratch(&format!("ssl-train-run-{workers}"));
                let mut trainer = Trainer::with_task(step)
                    .config(
                        TrainConfig::new()
                            .with_epochs(1)
                            .with_lr(0.05)
                            .with_progress_bar(false),
                    )
                    .run_dir(&dir)
                    .build(&device)
                    .unwrap();
                let summary = trainer.fit().unwrap();
                assert_eq!(summary.steps.len(), 2);
                for s in &summary.steps {
                    assert!(s.loss.is_finite(), "{}", s.loss);
                    assert!(s
                        .stats
                        .iter()
                        .any(|(k, v)| k == "skipped_files" && *v == 0.0));
                }
                summary.steps.iter().map(|s| s.loss).collect()
            })
            .collect();
        assert_eq!(losses[0], losses[1]);
    }

    #[test]
    fn a_stream_that_cuts_other_views_than_the_augmentation_crops_is_refused() {
        let root = jpeg_folder("ssl-refuse", 1, 4);
        let device = Default::default();
        let pipeline = PipelineConfig::simclr(28, 1);
        let other = PipelineConfig::simclr(24, 1);
        let err = SelfSupervised::streaming(
            method(&device),
            SgdConfig::new().init::<Ad, _>().unwrap(),
            pipeline.clone().init(1).unwrap(),
            stream(&root, &other, 0),
        )
        .err()
        .expect("refused");
        assert!(
            err.to_string().contains("view 1 is cut at (24, 24)"),
            "{err}"
        );

        // The same size with another area range is refused too: the crops' statistics differ.
        let mut narrow = pipeline.clone();
        for view in [&mut narrow.view1, &mut narrow.view2] {
            view.crop.as_mut().expect("SimCLR's views crop").scale = (0.5, 1.0);
        }
        let err = SelfSupervised::streaming(
            method(&device),
            SgdConfig::new().init::<Ad, _>().unwrap(),
            pipeline.init(1).unwrap(),
            stream(&root, &narrow, 0),
        )
        .err()
        .expect("refused");
        assert!(err.to_string().contains("scale: (0.5, 1.0)"), "{err}");
    }
}
