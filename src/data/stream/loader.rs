use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use burn::tensor::{backend::Backend, Tensor};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::decode::{crop_resize, ViewCrop};
use super::feed::Feed;
use super::source::{ImageSource, SequentialEpoch};
use crate::base::error::ConfigError;
use crate::base::geometry::CropBox;
use crate::base::seed::mix_seed;
use crate::data::batch::{images_on_device, HostBatch};
use crate::data::error::DataError;
use crate::data::loader::{
    batch_span, check_shard, epoch_order, pool_order, BuildFn, LoaderConfig, OrderedBatches,
};

/// The most unreadable files tried in a row for one position of an epoch.
pub const MAX_SUBSTITUTES: usize = 16;

/// The stream of the crop generators, apart from the shuffle's.
const CROP_STREAM: u64 = 0x5354_5245_414d_4352; // "STREAMCR"

/// Settings of a [`StreamLoader`].
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StreamConfig {
    /// Batching, shuffling, workers and prefetch depth, as for the in-memory loader.
    pub loader: LoaderConfig,
    /// Channels every image is converted to (1 or 3).
    pub channels: usize,
    /// The views cut out of every image, in order (e.g. two random resized crops).
    pub views: Vec<ViewCrop>,
}

impl StreamConfig {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.loader.validate()?;
        if self.channels != 1 && self.channels != 3 {
            return Err(ConfigError::new(
                "channels",
                format!("images are read as 1 or 3 channels, got {}", self.channels),
            ));
        }
        if self.views.is_empty() {
            return Err(ConfigError::new("views", "at least one view is cut"));
        }
        self.views.iter().try_for_each(ViewCrop::validate)
    }
}

/// The images of one view of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewPixels {
    /// `len × height × width × channels` bytes.
    pub pixels: Vec<u8>,
    /// Rows of every image.
    pub height: usize,
    /// Columns of every image.
    pub width: usize,
    /// The box each image was cut from, in its original's pixels.
    pub boxes: Vec<CropBox>,
}

/// A file skipped because it could not be read or decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The file.
    pub name: PathBuf,
    /// Why.
    pub reason: String,
}

/// A batch of a [`StreamLoader`]: its views, labels and where its images came from.
#[derive(Debug)]
pub struct StreamBatch {
    /// One entry per configured view.
    pub views: Vec<ViewPixels>,
    /// Number of images.
    pub len: usize,
    /// Channels of every view.
    pub channels: usize,
    /// One label per image when the source is labelled.
    pub labels: Option<Vec<i64>>,
    /// Dataset index of each image (a substitute's, where a file was skipped).
    pub indices: Vec<usize>,
    /// `(height, width)` of each image's original.
    pub original_sizes: Vec<[usize; 2]>,
    /// The files this batch skipped, in the order met.
    pub skipped: Vec<Skipped>,
    _alive: Alive,
}

impl StreamBatch {
    /// View `v` on `device`: `[N, C, h, w]` floats in `[0, 1]` (its bytes copied once).
    pub fn view_on_device<B: Backend>(&self, v: usize, device: &B::Device) -> Tensor<B, 4> {
        let view = &self.views[v];
        images_on_device::<B>(
            view.pixels.clone(),
            [self.len, view.height, view.width, self.channels],
            device,
        )
    }
}

/// Counts a batch among those alive while it exists.
#[derive(Debug)]
struct Alive(Arc<AtomicUsize>);

impl Alive {
    fn new(gauge: &Arc<AtomicUsize>) -> Self {
        gauge.fetch_add(1, Ordering::SeqCst);
        Self(Arc::clone(gauge))
    }
}

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Streams batches of views decoded from an [`ImageSource`].
///
/// Every epoch decodes its images anew on worker threads and cuts each view
/// out of the original image, so memory is bounded by the prefetch depth, not by the dataset.
///
/// The order of an epoch is the in-memory loader's ([`Loader::order`](crate::data::Loader)):
/// a permutation seeded with `(seed, epoch)`, cut into batches, batch `b` built by worker
/// `b mod workers` and read back in order. Every random choice for the image at position `p` of
/// the epoch (its crop boxes, the substitute for an unreadable file) comes from a generator
/// seeded with `(seed, epoch, p)`, so a batch's bytes depend on the seed, the epoch and its
/// position only: not on the worker count, the thread timing, or where the epoch started
/// ([`StreamLoader::epoch`]'s `first_batch`, for a resume in the middle of an epoch). A replica
/// of a data-parallel run takes its rows of each global batch, as the in-memory loader does.
///
/// # Memory
/// Each worker holds at most `prefetch` finished batches in its channel and builds one more, so
/// at most `workers × (prefetch + 1)` batches exist in the loader, plus those the caller holds
/// ([`StreamLoader::max_batches_in_loader`], counted by [`StreamLoader::batches_alive`]). A batch
/// is `batch_size × Σ view pixels` bytes; while it is built, its worker also holds one decoded
/// original (at most [`MAX_IMAGE_BYTES`](crate::data::image_folder::MAX_IMAGE_BYTES)).
///
/// # Bad files
/// A file that cannot be read or decoded (truncated, not an image, a header declaring more
/// pixels than its file can hold) is skipped: its position takes a substitute drawn at random
/// from the dataset with the position's generator, and the batch lists the file and the reason
/// in [`StreamBatch::skipped`]. After [`MAX_SUBSTITUTES`] unreadable files in a row at one
/// position the epoch stops with an error saying so (the data is mostly unreadable): never a
/// panic, never a silent stop.
pub struct StreamLoader<S> {
    source: Arc<S>,
    config: StreamConfig,
    shard: Option<(usize, usize)>,
    alive: Arc<AtomicUsize>,
    held_peak: Arc<AtomicUsize>,
}

impl<S: ImageSource> StreamLoader<S> {
    /// A loader over `source`.
    ///
    /// # Errors
    /// Invalid settings, or a source without items.
    pub fn new(source: S, config: StreamConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        if source.is_empty() {
            return Err(ConfigError::new("data", "the source has no image"));
        }
        let mut config = config;
        let max = LoaderConfig::max_workers();
        if config.loader.workers > max {
            log::warn!(
                "{} loader workers asked for; using {max} (four per core): more would only wait",
                config.loader.workers
            );
            config.loader.workers = max;
        }
        Ok(Self {
            source: Arc::new(source),
            config,
            shard: None,
            alive: Arc::new(AtomicUsize::new(0)),
            held_peak: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// Makes this loader replica `rank`'s of `replicas` (see
    /// [`Loader::set_shard`](crate::data::Loader::set_shard)).
    ///
    /// # Errors
    /// If the batch does not split equally, or the epoch keeps a last partial batch.
    pub fn set_shard(&mut self, rank: usize, replicas: usize) -> Result<(), ConfigError> {
        check_shard(&self.config.loader, rank, replicas)?;
        self.shard = Some((rank, replicas));
        Ok(())
    }

    /// The settings.
    pub fn config(&self) -> &StreamConfig {
        &self.config
    }

    /// The source.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// Number of batches per epoch.
    pub fn num_batches(&self) -> usize {
        let (n, b) = (self.source.len(), self.config.loader.batch_size);
        if self.config.loader.drop_last {
            n / b
        } else {
            n.div_ceil(b)
        }
    }

    /// The most batches that exist inside the loader at once: `workers × (prefetch + 1)` (one
    /// on the calling thread without workers).
    pub fn max_batches_in_loader(&self) -> usize {
        let l = &self.config.loader;
        if l.workers == 0 {
            1
        } else {
            l.workers * (l.prefetch + 1)
        }
    }

    /// The batches that exist now: being built, waiting in a channel, or held by the caller.
    pub fn batches_alive(&self) -> usize {
        self.alive.load(Ordering::SeqCst)
    }

    /// For a source read front to back (shards): the most encoded items its reader has held
    /// at once, read but not yet taken by a worker, over every epoch so far (see
    /// [`SequentialEpoch`]: at most the shuffle buffer plus the items of the batches being
    /// built and one read ahead). 0 for other sources.
    pub fn peak_items_held(&self) -> usize {
        self.held_peak.load(Ordering::SeqCst)
    }

    /// The items `range` (dataset order) cut by `crop` (e.g. the evaluation's centre crop),
    /// decoded on as many threads as the loader has workers (at least one), with their labels. Unlike an epoch's batches, this names
    /// items, so an unreadable file is an error, not skipped.
    ///
    /// # Errors
    /// An index beyond the source, or a file that cannot be read or decoded.
    pub fn images(
        &self,
        range: std::ops::Range<usize>,
        crop: ViewCrop,
    ) -> Result<HostBatch, DataError> {
        super::images::read_cut(
            &*self.source,
            range,
            crop,
            self.config.channels,
            self.config.loader.seed,
            self.config.loader.workers.max(1),
            false,
        )
    }

    /// The batches of epoch `epoch` from batch `first_batch` on (0 for a whole epoch; later to
    /// resume in its middle), of the whole dataset or of a selection `pool` (visited as
    /// [`Loader::pool_order`](crate::data::Loader::pool_order) does).
    ///
    /// A source read front to back (shards) orders the whole dataset's epochs itself and is
    /// read in one pass by a reader thread ([`ImageSource::sequential_epoch`]); a selection is
    /// read item by item where it lies.
    pub fn epoch(&self, epoch: u64, pool: Option<&[usize]>, first_batch: usize) -> StreamEpoch {
        let batches = self.num_batches();
        let bs = self.config.loader.batch_size;
        let sequential = match pool {
            None => self.source.sequential_epoch(&self.config.loader, epoch),
            Some(_) => None,
        };
        let (order, stream) = match (sequential, pool) {
            (Some(SequentialEpoch { stream, order }), _) => (order, Some(stream)),
            (None, None) => (
                epoch_order(self.source.len(), &self.config.loader, epoch),
                None,
            ),
            (None, Some(pool)) => (pool_order(batches, &self.config.loader, epoch, pool), None),
        };
        let batches = batches.min(order.len().div_ceil(bs));
        let feed = stream.map(|stream| {
            // The items this loader builds: its rows of the batches from `first_batch` on.
            let wanted: Vec<usize> = (first_batch..batches)
                .flat_map(|b| {
                    let (start, end) = batch_span(b, bs, order.len(), self.shard);
                    start..end
                })
                .map(|p| order[p])
                .collect();
            Feed::start(
                Arc::clone(&self.source),
                stream,
                &wanted,
                Arc::clone(&self.held_peak),
            )
        });
        let job = Arc::new(Job {
            source: Arc::clone(&self.source),
            order,
            feed,
            config: self.config.clone(),
            shard: self.shard,
            epoch,
            alive: Arc::clone(&self.alive),
        });
        let build: BuildFn<StreamBatch> = Arc::new(move |b| job.build(b));
        OrderedBatches::new(
            build,
            first_batch,
            batches,
            self.config.loader.workers,
            self.config.loader.prefetch,
            "<stream loader>",
        )
    }
}

/// What every worker of an epoch reads.
struct Job<S> {
    source: Arc<S>,
    order: Vec<usize>,
    /// The reader of a source read front to back: the first bytes of every position.
    feed: Option<Feed>,
    config: StreamConfig,
    shard: Option<(usize, usize)>,
    epoch: u64,
    alive: Arc<AtomicUsize>,
}

impl<S: ImageSource> Job<S> {
    fn build(&self, b: usize) -> Result<StreamBatch, DataError> {
        let alive = Alive::new(&self.alive);
        let bs = self.config.loader.batch_size;
        let (start, end) = batch_span(b, bs, self.order.len(), self.shard);
        let n = end - start;
        let c = self.config.channels;
        let mut views: Vec<ViewPixels> = self
            .config
            .views
            .iter()
            .map(|v| {
                let (h, w) = v.size();
                ViewPixels {
                    pixels: Vec::with_capacity(n * h * w * c),
                    height: h,
                    width: w,
                    boxes: Vec::with_capacity(n),
                }
            })
            .collect();
        let labelled = self.source.label(0).is_some();
        let mut labels = Vec::with_capacity(if labelled { n } else { 0 });
        let mut indices = Vec::with_capacity(n);
        let mut original_sizes = Vec::with_capacity(n);
        let mut skipped = Vec::new();
        for p in start..end {
            let key = mix_seed(
                mix_seed(mix_seed(self.config.loader.seed, CROP_STREAM), self.epoch),
                p as u64,
            );
            let mut rng = StdRng::seed_from_u64(key);
            let (index, image) = self.decode_at(p, &mut rng, &mut skipped)?;
            for (spec, view) in self.config.views.iter().zip(&mut views) {
                let bx = spec.draw(&mut rng, image.height, image.width);
                view.pixels
                    .extend_from_slice(&crop_resize(&image, bx, spec.size()));
                view.boxes.push(bx);
            }
            if labelled {
                labels.push(self.source.label(index).unwrap_or(0) as i64);
            }
            indices.push(index);
            original_sizes.push([image.height, image.width]);
        }
        Ok(StreamBatch {
            views,
            len: n,
            channels: c,
            labels: labelled.then_some(labels),
            indices,
            original_sizes,
            skipped,
            _alive: alive,
        })
    }

    /// Decodes the image at position `p`, or a substitute drawn with `rng` for each file that
    /// cannot be read.
    fn decode_at(
        &self,
        p: usize,
        rng: &mut StdRng,
        skipped: &mut Vec<Skipped>,
    ) -> Result<(usize, super::decode::DecodedImage), DataError> {
        let mut index = self.order[p];
        for attempt in 0..MAX_SUBSTITUTES {
            let name = self.source.name(index);
            // A substitute is read where it lies, also from shards.
            let bytes = match (&self.feed, attempt) {
                (Some(feed), 0) => feed.take(index)?,
                _ => self.source.read(index),
            };
            let result =
                bytes.and_then(|bytes| self.source.decode(index, &bytes, self.config.channels));
            match result {
                Ok(image) => return Ok((index, image)),
                Err(e) => {
                    let reason = e.to_string();
                    log::warn!("{reason}: skipped");
                    skipped.push(Skipped { name, reason });
                    index = rng.random_range(0..self.source.len());
                }
            }
        }
        Err(DataError::Request {
            path: self.source.name(self.order[p]),
            reason: format!(
                "{MAX_SUBSTITUTES} files in a row could not be read for position {p} of epoch {}: \
                 the data is mostly unreadable (the last: {})",
                self.epoch,
                skipped.last().map_or("", |s| s.reason.as_str())
            ),
        })
    }
}

/// The batches of one epoch of a [`StreamLoader`], in order. Dropping it stops the workers.
pub type StreamEpoch = OrderedBatches<StreamBatch>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::augment::crop::RandomResizedCrop;
    use crate::data::stream::decode_image;
    use crate::data::stream::ImageFiles;

    use crate::data::stream::testing::{jpeg_folder as folder, png_declaring, scratch};

    fn config(workers: usize, batch: usize) -> StreamConfig {
        StreamConfig {
            loader: LoaderConfig {
                batch_size: batch,
                shuffle: true,
                drop_last: true,
                workers,
                prefetch: 1,
                seed: 7,
            },
            channels: 3,
            views: vec![
                ViewCrop::Random(RandomResizedCrop::new(16)),
                ViewCrop::Random(RandomResizedCrop {
                    size: (8, 8),
                    scale: (0.05, 0.4),
                    ratio: (0.75, 4.0 / 3.0),
                }),
            ],
        }
    }

    /// What a batch holds, for comparing streams.
    type Fingerprint = (
        Vec<Vec<u8>>,
        Vec<Vec<CropBox>>,
        Vec<usize>,
        Option<Vec<i64>>,
    );

    fn fingerprint(b: &StreamBatch) -> Fingerprint {
        (
            b.views.iter().map(|v| v.pixels.clone()).collect(),
            b.views.iter().map(|v| v.boxes.clone()).collect(),
            b.indices.clone(),
            b.labels.clone(),
        )
    }

    fn epoch_of(loader: &StreamLoader<ImageFiles>, epoch: u64, first: usize) -> Vec<Fingerprint> {
        loader
            .epoch(epoch, None, first)
            .map(|b| fingerprint(&b.unwrap()))
            .collect()
    }

    #[test]
    fn the_stream_is_the_same_for_any_worker_count_and_each_view_is_its_box_of_the_file() {
        let root = folder("workers", 3, 7);
        let files = ImageFiles::classes(&root).unwrap();
        assert_eq!((files.len(), files.class_names().len()), (21, 3));
        let runs: Vec<Vec<Fingerprint>> = [0, 1, 3]
            .into_iter()
            .map(|w| {
                let loader = StreamLoader::new(files.clone(), config(w, 4)).unwrap();
                epoch_of(&loader, 2, 0)
            })
            .collect();
        assert_eq!(runs[0].len(), 5);
        assert_eq!(runs[0], runs[1]);
        assert_eq!(runs[0], runs[2]);
        // Another epoch is another order and other crops.
        let loader = StreamLoader::new(files.clone(), config(2, 4)).unwrap();
        assert_ne!(epoch_of(&loader, 3, 0), runs[0]);
        // Each view's bytes are its recorded box of the decoded file, resized; labels follow
        // the class folders.
        let (pixels, boxes, indices, labels) = &runs[0][1];
        for (row, &index) in indices.iter().enumerate() {
            let name = files.name(index);
            let image = decode_image(&name, &std::fs::read(&name).unwrap(), 3).unwrap();
            for (v, spec) in config(0, 4).views.iter().enumerate() {
                let (h, w) = spec.size();
                let want = crop_resize(&image, boxes[v][row], (h, w));
                let per = h * w * 3;
                assert_eq!(&pixels[v][row * per..(row + 1) * per], &want[..]);
            }
            assert_eq!(labels.as_ref().unwrap()[row], (index / 7) as i64);
        }
    }

    #[test]
    fn an_epoch_resumed_at_a_batch_is_the_rest_of_the_whole_epoch() {
        let root = folder("resume", 2, 10);
        let loader = StreamLoader::new(ImageFiles::classes(&root).unwrap(), config(2, 3)).unwrap();
        let whole = epoch_of(&loader, 1, 0);
        assert_eq!(whole.len(), 6);
        for first in [1, 4, 5] {
            assert_eq!(epoch_of(&loader, 1, first), whole[first..].to_vec());
        }
        assert!(epoch_of(&loader, 1, 6).is_empty());
    }

    #[test]
    fn replicas_take_their_rows_of_the_global_batch() {
        let root = folder("shard", 2, 8);
        let files = ImageFiles::classes(&root).unwrap();
        let global = epoch_of(
            &StreamLoader::new(files.clone(), config(1, 4)).unwrap(),
            0,
            0,
        );
        for rank in 0..2 {
            let mut loader = StreamLoader::new(files.clone(), config(2, 4)).unwrap();
            loader.set_shard(rank, 2).unwrap();
            let mine = epoch_of(&loader, 0, 0);
            assert_eq!(mine.len(), global.len());
            for (m, g) in mine.iter().zip(&global) {
                for v in 0..2 {
                    let per = m.0[v].len() / 2;
                    assert_eq!(
                        m.0[v],
                        g.0[v][rank * 2 * per..(rank * 2 + 2) * per].to_vec()
                    );
                    assert_eq!(m.1[v], g.1[v][rank * 2..rank * 2 + 2].to_vec());
                }
                assert_eq!(m.2, g.2[rank * 2..rank * 2 + 2].to_vec());
            }
        }
        let mut loader = StreamLoader::new(files, config(2, 4)).unwrap();
        assert!(loader.set_shard(0, 3).is_err());
    }

    #[test]
    fn bad_files_are_skipped_counted_and_replaced_and_the_batches_stay_full() {
        let root = folder("bad", 2, 6);
        let good = std::fs::read(root.join("class0/000.jpg")).unwrap();
        let bad = [
            ("class0/truncated.jpg", good[..good.len() / 2].to_vec()),
            ("class1/text.jpg", b"not an image at all".to_vec()),
            ("class1/wide.png", png_declaring(100_000)),
        ];
        for (name, bytes) in &bad {
            std::fs::write(root.join(name), bytes).unwrap();
        }
        std::fs::write(root.join("class1/notes.txt"), "a note").unwrap();
        let files = ImageFiles::classes(&root).unwrap();
        assert_eq!((files.len(), files.not_images()), (15, 1));
        let loader = StreamLoader::new(files, config(2, 5)).unwrap();
        let mut skipped = Vec::new();
        let mut images = 0;
        for batch in loader.epoch(0, None, 0) {
            let batch = batch.unwrap();
            assert_eq!(batch.len, 5);
            assert_eq!(batch.views[0].pixels.len(), 5 * 16 * 16 * 3);
            images += batch.len;
            skipped.extend(batch.skipped);
        }
        assert_eq!(images, 15);
        for (name, _) in &bad {
            assert!(
                skipped.iter().any(|s| s.name == root.join(name)),
                "{name} not among {skipped:?}"
            );
        }
        assert!(skipped
            .iter()
            .all(|s| bad.iter().any(|(n, _)| s.name == root.join(n))));
        let wide = skipped
            .iter()
            .find(|s| s.name.ends_with("wide.png"))
            .unwrap();
        assert!(wide.reason.contains("100000x100000"), "{}", wide.reason);
    }

    #[test]
    fn data_that_is_mostly_unreadable_stops_the_epoch_with_an_error() {
        let root = scratch("unreadable");
        for i in 0..4 {
            std::fs::write(root.join(format!("{i}.jpg")), b"garbage").unwrap();
        }
        let loader =
            StreamLoader::new(ImageFiles::unlabeled(&root).unwrap(), config(1, 2)).unwrap();
        let mut epoch = loader.epoch(0, None, 0);
        let e = epoch.next().unwrap().unwrap_err().to_string();
        assert!(e.contains("mostly unreadable"), "{e}");
        assert!(epoch.next().is_none());
    }

    /// Shards through a shuffle buffer: the same batches for any worker count, a resumed
    /// epoch is the rest of the whole one, replicas take their rows, and the reader holds at
    /// most the buffer plus the batches being built (and one read ahead), far from the whole
    /// dataset.
    #[test]
    fn shards_stream_alike_for_any_workers_resume_shard_and_hold_a_buffer() {
        use crate::data::stream::{pack, PackConfig, Shards};
        let root = folder("shard-loader", 3, 12);
        let files = ImageFiles::classes(&root).unwrap();
        let out = scratch("shard-loader-out");
        let packing = PackConfig {
            samples_per_shard: 5,
            seed: 1,
            threads: 1,
        };
        pack(&files, files.class_names(), &out, &packing).unwrap();
        let shards = Shards::open(&out).unwrap().with_shuffle_buffer(4);
        assert_eq!(shards.len(), 36);
        let epoch = |loader: &StreamLoader<Shards>, first: usize| -> Vec<Fingerprint> {
            loader
                .epoch(2, None, first)
                .map(|b| fingerprint(&b.unwrap()))
                .collect()
        };
        let runs: Vec<(Vec<Fingerprint>, usize)> = [0, 1, 3]
            .into_iter()
            .map(|w| {
                let loader = StreamLoader::new(shards.clone(), config(w, 4)).unwrap();
                let run = epoch(&loader, 0);
                (run, loader.peak_items_held())
            })
            .collect();
        assert_eq!(runs[0].0.len(), 9);
        assert_eq!(runs[0].0, runs[1].0);
        assert_eq!(runs[0].0, runs[2].0);
        // The epoch's order is the shards' own, not the loader's permutation.
        let order = shards.epoch_orders(&config(0, 4).loader, 2).order;
        let indices: Vec<usize> = runs[0].0.iter().flat_map(|f| f.2.clone()).collect();
        assert_eq!(indices, order[..36]);
        // Labels are the packed folder's.
        for (i, label) in runs[0].0[0].2.iter().zip(runs[0].0[0].3.as_ref().unwrap()) {
            assert_eq!(Some(*label as u16), shards.label(*i));
        }
        for (w, (_, peak)) in [0usize, 1, 3].iter().zip(&runs) {
            // Buffer 4, plus the rows of the batches built at once (workers × (prefetch + 1)
            // of 4, one on the calling thread without workers), plus one read ahead.
            let building = 4 * (w * 2).max(1);
            assert!(
                *peak <= 4 + building + 1 && *peak < 36,
                "{peak} items held with {w} workers"
            );
        }
        let loader = StreamLoader::new(shards.clone(), config(2, 4)).unwrap();
        for first in [1, 5, 8] {
            assert_eq!(epoch(&loader, first), runs[0].0[first..].to_vec());
        }
        for rank in 0..2 {
            let mut loader = StreamLoader::new(shards.clone(), config(2, 4)).unwrap();
            loader.set_shard(rank, 2).unwrap();
            let mine = epoch(&loader, 0);
            assert_eq!(mine.len(), 9);
            for (m, g) in mine.iter().zip(&runs[0].0) {
                assert_eq!(m.2, g.2[rank * 2..rank * 2 + 2].to_vec());
                let per = m.0[0].len() / 2;
                assert_eq!(
                    m.0[0],
                    g.0[0][rank * 2 * per..(rank * 2 + 2) * per].to_vec()
                );
            }
        }
        // A selection is read where it lies, in the loader's pool order.
        let pool = [3usize, 7, 11, 20];
        let selected: Vec<usize> = loader
            .epoch(0, Some(&pool), 0)
            .flat_map(|b| b.unwrap().indices)
            .collect();
        assert_eq!(selected.len(), 36);
        assert!(selected.iter().all(|i| pool.contains(i)));
    }

    /// The loader holds at most `workers × (prefetch + 1)` batches, however long the epoch and
    /// however slow the consumer; the consumer's own batch is the one more.
    #[test]
    fn the_batches_alive_are_bounded_by_the_prefetch_depth_not_the_dataset() {
        let root = folder("bound", 4, 10);
        let loader = StreamLoader::new(ImageFiles::classes(&root).unwrap(), config(2, 2)).unwrap();
        let bound = loader.max_batches_in_loader();
        assert_eq!(bound, 4);
        let mut seen = 0;
        for batch in loader.epoch(0, None, 0) {
            let _batch = batch.unwrap();
            std::thread::sleep(std::time::Duration::from_millis(5));
            let alive = loader.batches_alive();
            assert!(
                alive <= bound + 1,
                "{alive} batches alive, bound {bound} + 1"
            );
            seen += 1;
        }
        assert_eq!(seen, 20);
        assert_eq!(loader.batches_alive(), 0);
    }
}
