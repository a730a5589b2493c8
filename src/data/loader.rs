//! A loader that gathers and batches images on worker threads while the model trains.

use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::thread::JoinHandle;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use burn_dataset::Dataset;

use super::batch::HostBatch;
use super::error::DataError;
use super::image_array::ImageItem;
use crate::base::error::ConfigError;

/// Settings of a [`Loader`].
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LoaderConfig {
    /// Images per batch (> 0).
    pub batch_size: usize,
    /// Shuffle every epoch (seeded); `false` keeps dataset order.
    pub shuffle: bool,
    /// Drop the last, smaller batch.
    pub drop_last: bool,
    /// Worker threads; 0 gathers batches on the calling thread.
    pub workers: usize,
    /// Batches each worker may prepare ahead (> 0).
    pub prefetch: usize,
    /// Seed of the shuffling generator.
    pub seed: u64,
}

impl Default for LoaderConfig {
    fn default() -> Self {
        Self {
            batch_size: 256,
            shuffle: true,
            drop_last: true,
            workers: 2,
            prefetch: 2,
            seed: 0,
        }
    }
}

impl LoaderConfig {
    /// The most worker threads a loader starts: four per core (more only wait on each other).
    pub fn max_workers() -> usize {
        4 * std::thread::available_parallelism().map_or(1, |n| n.get())
    }

    /// Checks the settings.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.batch_size == 0 {
            return Err(ConfigError::new("batch_size", "must be > 0"));
        }
        if self.prefetch == 0 || self.prefetch > 64 {
            return Err(ConfigError::new(
                "prefetch",
                format!(
                    "must lie in 1..=64 batches per worker, got {}",
                    self.prefetch
                ),
            ));
        }
        Ok(())
    }
}

use crate::base::seed::mix_seed;

/// Checks that a loader with `config` can be replica `rank`'s of `replicas`: the global batch
/// splits equally, each replica gets at least two images, the last partial batch is dropped.
pub(crate) fn check_shard(
    config: &LoaderConfig,
    rank: usize,
    replicas: usize,
) -> Result<(), ConfigError> {
    let batch = config.batch_size;
    if replicas == 0 || rank >= replicas || !batch.is_multiple_of(replicas) {
        return Err(ConfigError::new(
            "batch_size",
            format!(
                "the global batch of {batch} images does not split equally over {replicas} \
                     replicas"
            ),
        ));
    }
    if replicas > 0 && batch / replicas < 2 {
        return Err(ConfigError::new(
            "batch_size",
            format!(
                "the global batch of {batch} images gives each of the {replicas} replicas \
                     {} image(s): each needs at least 2 (a batch norm's statistics on one \
                     replica, e.g. MoCo's shuffling batch norm, need two images); use a global \
                     batch of at least {}",
                batch / replicas,
                2 * replicas
            ),
        ));
    }
    if !config.drop_last {
        return Err(ConfigError::new(
            "drop_last",
            "a data-parallel run drops the last partial batch (it would not split equally)",
        ));
    }
    Ok(())
}

/// The order in which epoch `epoch` visits `len` items: a Fisher–Yates shuffle seeded with
/// `(seed, epoch)`, or `0..len` without shuffling.
pub(crate) fn epoch_order(len: usize, config: &LoaderConfig, epoch: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..len).collect();
    if config.shuffle {
        shuffle(&mut order, mix_seed(config.seed, epoch));
    }
    order
}

/// A Fisher–Yates shuffle of `items` with a generator seeded by `key`.
pub(crate) fn shuffle(items: &mut [usize], key: u64) {
    let mut rng = StdRng::seed_from_u64(key);
    for i in (1..items.len()).rev() {
        let j = rng.random_range(0..=i);
        items.swap(i, j);
    }
}

/// The order of a selection `pool` over an epoch of `batches` batches (see
/// [`Loader::pool_order`]).
pub(crate) fn pool_order(
    batches: usize,
    config: &LoaderConfig,
    epoch: u64,
    pool: &[usize],
) -> Vec<usize> {
    let wanted = batches * config.batch_size;
    let mut order = Vec::with_capacity(wanted + pool.len());
    let mut round = 0u64;
    while order.len() < wanted && !pool.is_empty() {
        let mut draw = pool.to_vec();
        if config.shuffle {
            shuffle(&mut draw, mix_seed(mix_seed(config.seed, epoch), round));
        }
        order.extend(draw);
        round += 1;
    }
    order.truncate(wanted);
    order
}

/// The rows of batch `b` (of `bs` images) in an epoch's order that this loader yields: the
/// whole batch, or replica `rank`'s `bs / replicas` of it.
pub(crate) fn batch_span(
    b: usize,
    bs: usize,
    len: usize,
    shard: Option<(usize, usize)>,
) -> (usize, usize) {
    match shard {
        None => (b * bs, ((b + 1) * bs).min(len)),
        Some((rank, replicas)) => {
            let per = bs / replicas;
            (b * bs + rank * per, b * bs + (rank + 1) * per)
        }
    }
}

/// Batches a dataset of [`ImageItem`]s on worker threads, while the model trains.
///
/// For epoch `e` the loader draws a permutation of the dataset from a generator seeded with
/// `(seed, e)`, cuts it into batches, and hands batch `b` to worker `b mod workers`. Each worker
/// sends its batches, in order, through its own bounded channel (`prefetch` batches deep), and the
/// iterator reads the channels round-robin, so batches come out in the same order whatever the
/// thread timing: the stream of batches depends only on the seed and the epoch (and, trivially,
/// on the batch size), not on the worker count. Workers build [`HostBatch`]es (bytes); the
/// training thread uploads them with [`HostBatch::to_device`], so the device is fed while the
/// workers prepare the next batches.
pub struct Loader<D> {
    dataset: Arc<D>,
    config: LoaderConfig,
    source: PathBuf,
    /// This replica's rank and the number of replicas, in a data-parallel run.
    shard: Option<(usize, usize)>,
}

impl<D: Dataset<ImageItem> + 'static> Loader<D> {
    /// A loader over `dataset`; `source` names the data in errors.
    pub fn new(
        dataset: D,
        source: impl Into<PathBuf>,
        config: LoaderConfig,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let mut config = config;
        let max = LoaderConfig::max_workers();
        if config.workers > max {
            log::warn!(
                "{} loader workers asked for; using {max} (four per core): more would only wait",
                config.workers
            );
            config.workers = max;
        }
        Ok(Self {
            dataset: Arc::new(dataset),
            config,
            source: source.into(),
            shard: None,
        })
    }

    /// Makes this loader replica `rank`'s of `replicas` in a data-parallel run: every epoch's
    /// order and batches stay those of the whole run (so the data order does not depend on the
    /// number of replicas), and each batch it yields is the replica's shard of the global batch
    /// (the `batch_size / replicas` images from `rank · batch_size / replicas` on).
    ///
    /// # Errors
    /// If the batch does not split equally, or the epoch keeps a last partial batch.
    pub fn set_shard(&mut self, rank: usize, replicas: usize) -> Result<(), ConfigError> {
        check_shard(&self.config, rank, replicas)?;
        self.shard = Some((rank, replicas));
        Ok(())
    }

    /// The settings.
    pub fn config(&self) -> &LoaderConfig {
        &self.config
    }

    /// The dataset.
    pub fn dataset(&self) -> &D {
        &self.dataset
    }

    /// Number of batches per epoch.
    pub fn num_batches(&self) -> usize {
        let n = self.dataset.len();
        let b = self.config.batch_size;
        if self.config.drop_last {
            n / b
        } else {
            n.div_ceil(b)
        }
    }

    /// The order in which epoch `epoch` visits the dataset (a seeded Fisher–Yates shuffle, or
    /// `0..len` without shuffling).
    pub fn order(&self, epoch: u64) -> Vec<usize> {
        epoch_order(self.dataset.len(), &self.config, epoch)
    }

    /// The order in which epoch `epoch` visits a selection `pool` of the dataset: the pool
    /// shuffled with `(seed, epoch, round)` (or in its order without shuffling), one round after
    /// another until the epoch's [`Loader::num_batches`] batches are full, so an epoch takes the
    /// same number of steps whatever is selected.
    pub fn pool_order(&self, epoch: u64, pool: &[usize]) -> Vec<usize> {
        pool_order(self.num_batches(), &self.config, epoch, pool)
    }

    /// The batches of epoch `epoch`, gathered ahead on the worker threads.
    pub fn epoch(&self, epoch: u64) -> EpochIter {
        self.epoch_in_order(self.order(epoch), 0)
    }

    /// The batches of epoch `epoch` drawn from the selection `pool` ([`Loader::pool_order`]).
    pub fn epoch_of_pool(&self, epoch: u64, pool: &[usize]) -> EpochIter {
        self.epoch_in_order(self.pool_order(epoch, pool), 0)
    }

    /// The batches of epoch `epoch` (of the whole dataset, or of a selection `pool`) from batch
    /// `first_batch` on: the rest of the epoch, for a resume in its middle.
    pub fn epoch_from(&self, epoch: u64, pool: Option<&[usize]>, first_batch: usize) -> EpochIter {
        let order = match pool {
            None => self.order(epoch),
            Some(pool) => self.pool_order(epoch, pool),
        };
        self.epoch_in_order(order, first_batch)
    }

    fn epoch_in_order(&self, order: Vec<usize>, first_batch: usize) -> EpochIter {
        let batches = self
            .num_batches()
            .min(order.len().div_ceil(self.config.batch_size));
        let bs = self.config.batch_size;
        let shard = self.shard;
        let dataset = Arc::clone(&self.dataset);
        let source = self.source.clone();
        let build: BuildFn<HostBatch> =
            Arc::new(move |b| gather(dataset.as_ref(), &source, &order, b, bs, shard));
        OrderedBatches::new(
            build,
            first_batch,
            batches,
            self.config.workers,
            self.config.prefetch,
            "<loader>",
        )
    }
}

fn gather<D: Dataset<ImageItem>>(
    dataset: &D,
    source: &std::path::Path,
    order: &[usize],
    b: usize,
    bs: usize,
    shard: Option<(usize, usize)>,
) -> Result<HostBatch, DataError> {
    let (start, end) = batch_span(b, bs, order.len(), shard);
    let idx: Vec<usize> = order[start..end].to_vec();
    let mut items = Vec::with_capacity(idx.len());
    for &i in &idx {
        items.push(dataset.get(i).ok_or_else(|| DataError::Request {
            path: source.to_path_buf(),
            reason: format!(
                "the dataset has no item {i} although its length is {}",
                dataset.len()
            ),
        })?);
    }
    HostBatch::from_items(source, &items, idx)
}

/// Builds batch `b` of an epoch (on a worker, or on the caller's thread without workers).
pub(crate) type BuildFn<T> = Arc<dyn Fn(usize) -> Result<T, DataError> + Send + Sync>;

/// The batches of one epoch of the in-memory loader, in order.
pub type EpochIter = OrderedBatches<HostBatch>;

/// Batches `first..batches` of an epoch built on `workers` threads — batch `b` on worker
/// `(b - first) mod workers`, each worker at most `prefetch` batches ahead in a channel of its
/// own — and read back round-robin, so they come out in order whatever the threads' timing
/// (without workers, each is built on the caller's thread when asked). An error ends the
/// epoch after it is yielded. Dropping it stops the workers. Both loaders run their epochs on
/// it.
pub struct OrderedBatches<T> {
    next: usize,
    first: usize,
    batches: usize,
    receivers: Vec<Receiver<Result<T, DataError>>>,
    handles: Vec<JoinHandle<()>>,
    inline: Option<BuildFn<T>>,
    failed: bool,
    what: &'static str,
}

impl<T: Send + 'static> OrderedBatches<T> {
    /// Starts the workers (`what` names the loader in the error of a worker that stopped).
    pub(crate) fn new(
        build: BuildFn<T>,
        first: usize,
        batches: usize,
        workers: usize,
        prefetch: usize,
        what: &'static str,
    ) -> Self {
        let mut receivers = Vec::with_capacity(workers);
        let mut handles = Vec::with_capacity(workers);
        for w in 0..workers {
            let (tx, rx) = sync_channel(prefetch);
            let build = Arc::clone(&build);
            handles.push(std::thread::spawn(move || {
                let mut b = first + w;
                while b < batches {
                    let r = build(b);
                    let failed = r.is_err();
                    if tx.send(r).is_err() || failed {
                        return;
                    }
                    b += workers;
                }
            }));
            receivers.push(rx);
        }
        Self {
            next: first,
            first,
            batches,
            receivers,
            handles,
            inline: (workers == 0).then_some(build),
            failed: false,
            what,
        }
    }
}

impl<T> Iterator for OrderedBatches<T> {
    type Item = Result<T, DataError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.next >= self.batches {
            return None;
        }
        let b = self.next;
        self.next += 1;
        let r = match &self.inline {
            Some(build) => build(b),
            None => {
                let w = (b - self.first) % self.receivers.len();
                self.receivers[w].recv().unwrap_or_else(|_| {
                    Err(DataError::Request {
                        path: PathBuf::from(self.what),
                        reason: format!("worker {w} stopped before batch {b}"),
                    })
                })
            }
        };
        self.failed = r.is_err();
        Some(r)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.batches - self.next.min(self.batches);
        (0, Some(left))
    }
}

impl<T> Drop for OrderedBatches<T> {
    fn drop(&mut self) {
        // Closing the channels makes blocked workers' `send` fail, so they return.
        self.receivers.clear();
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}
