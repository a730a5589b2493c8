//! Augmentation one batch ahead of the training step, on a thread of its own.
//!
//! The loader's workers gather the bytes of each batch; this stage uploads a batch and draws its
//! two views while the training thread runs the step of the batch before, as the worker
//! processes of a PyTorch `DataLoader` do. The views of step `s` are drawn from the generator
//! keyed by `(seed, s)` with the curriculum's value at step `s` — exactly what the training
//! thread would draw — so a run is bit-identical with and without this stage. The stage is only
//! used when the views do not depend on the step before: an augmenter that learns from the
//! losses (the self-paced AutoAugment) is run on the training thread.
//!
//! Hand-written rather than a crate: it is one bounded channel between two threads, in the
//! loader's style (`std::sync::mpsc`), and the ordering and keying rules are this crate's.

use std::sync::mpsc::{sync_channel, Receiver};
use std::thread::JoinHandle;

use burn::prelude::*;

use crate::augment::host::HostImages;
use crate::base::Progress;
use crate::data::stream::StreamBatch;
use crate::data::{DataError, HostBatch};
use crate::pipeline::TwoViews;
use crate::pipeline::{Augmenter, ViewSource};

/// A batch of either loader: whole images (the in-memory loader) or views cut at decode time
/// (the streaming loader).
pub(crate) enum FeedBatch {
    /// The in-memory loader's bytes of whole images.
    Whole(HostBatch),
    /// The streaming loader's views.
    Cut(StreamBatch),
}

impl FeedBatch {
    /// Dataset indices of the images, in batch order.
    pub fn indices(&self) -> &[usize] {
        match self {
            Self::Whole(b) => &b.indices,
            Self::Cut(b) => &b.indices,
        }
    }

    /// The images' labels, in batch order, when every image of the batch has one.
    pub fn labels(&self) -> Option<&[i64]> {
        match self {
            Self::Whole(b) => b.labels.as_deref(),
            Self::Cut(b) => b.labels.as_deref(),
        }
    }

    /// Files the batch skipped (the streaming loader's unreadable files).
    pub fn skipped(&self) -> usize {
        match self {
            Self::Whole(_) => 0,
            Self::Cut(b) => b.skipped.len(),
        }
    }

    /// The images on `device`, as the augmentation takes them; with `host` (an augmenter on the
    /// host path) the streaming loader's views stay on the host, to go to the device augmented.
    pub fn upload<B: Backend>(&self, device: &B::Device, host: bool) -> ViewSource<B> {
        match self {
            Self::Whole(b) => ViewSource::Whole(b.to_device::<B>(device).images),
            Self::Cut(b) if host => ViewSource::HostCut {
                views: b
                    .views
                    .iter()
                    .map(|v| {
                        let images = HostImages {
                            pixels: v.pixels.clone(),
                            shape: [b.len, v.height, v.width, b.channels],
                        };
                        (images, v.boxes.clone())
                    })
                    .collect(),
                device: device.clone(),
            },
            Self::Cut(b) => ViewSource::Cut(
                (0..b.views.len())
                    .map(|v| (b.view_on_device::<B>(v, device), b.views[v].boxes.clone()))
                    .collect(),
            ),
        }
    }
}

/// The batches of one epoch of either loader.
pub(crate) type FeedIter = Box<dyn Iterator<Item = Result<FeedBatch, DataError>> + Send>;

/// The step of each batch of the epoch: `progress(b)` for batch `b`.
pub(crate) type StepOf = Box<dyn Fn(usize) -> Progress + Send>;

/// A batch ready for its step: the bytes (indices, labels), the images on the device, and the
/// views of the step's first draw when they were prepared ahead.
pub(crate) struct ReadyBatch<B: Backend> {
    /// The loader's batch.
    pub batch: FeedBatch,
    /// The images on the device (whole, or the views cut at decode time).
    pub images: ViewSource<B>,
    /// The views of the step's first draw (attempt 0), if prepared ahead.
    pub views: Option<TwoViews<B>>,
}

/// The batches of one epoch, uploaded and augmented one step ahead (or, without the stage,
/// uploaded on the training thread with the views left to the step).
pub(crate) enum Batches<B: Backend> {
    /// On the training thread.
    Inline {
        /// The loader's batches.
        batches: FeedIter,
        /// The device to upload to.
        device: B::Device,
        /// Whether the augmenter runs on the host ([`FeedBatch::upload`]).
        host: bool,
    },
    /// On the augmentation thread.
    Ahead {
        /// The ready batches, in order.
        ready: Option<Receiver<Result<ReadyBatch<B>, DataError>>>,
        /// The augmentation thread.
        handle: Option<JoinHandle<()>>,
        /// Batches received so far.
        received: usize,
        /// Batches of the epoch.
        expected: usize,
    },
}

impl<B: Backend> Batches<B> {
    /// The batches of an epoch, augmented ahead by `augmenter` when `ahead` (step `first + b`
    /// for batch `b`, as `progress` gives it), inline otherwise. If the thread cannot be
    /// started, the epoch runs inline (with a warning). `host`: whether the augmenter runs on the
    /// host ([`Augmenter::host_ops`]).
    pub fn new(
        batches: FeedIter,
        device: &B::Device,
        ahead: Option<(Augmenter, StepOf)>,
        host: bool,
    ) -> Self {
        let Some((augmenter, progress)) = ahead else {
            return Self::Inline {
                batches,
                device: device.clone(),
                host,
            };
        };
        // One batch waits in the channel while the next is being prepared: two steps ahead at
        // most, as the loader's own prefetch.
        let (tx, rx) = sync_channel(1);
        let expected = batches.size_hint().1.unwrap_or(usize::MAX);
        // The iterator moves into the thread; if the thread cannot start, it comes back.
        let handoff = std::sync::Arc::new(std::sync::Mutex::new(Some(batches)));
        let theirs = std::sync::Arc::clone(&handoff);
        let thread_device = device.clone();
        let spawned = std::thread::Builder::new()
            .name("augment-ahead".into())
            .spawn(move || {
                let Some(batches) = theirs.lock().ok().and_then(|mut b| b.take()) else {
                    return;
                };
                for (b, batch) in batches.enumerate() {
                    let ready = batch.map(|batch| {
                        let images = batch.upload::<B>(&thread_device, host);
                        let views = augmenter.redrawn_views_from(&images, progress(b), 0);
                        // The training thread uses these tensors (crate::device).
                        crate::device::finish_for_another_thread::<B>(&thread_device);
                        ReadyBatch {
                            batch,
                            images,
                            views: Some(views),
                        }
                    });
                    let failed = ready.is_err();
                    // A closed channel: the training thread stopped (an error or a drop).
                    if tx.send(ready).is_err() || failed {
                        return;
                    }
                }
            });
        match spawned {
            Ok(handle) => Self::Ahead {
                ready: Some(rx),
                handle: Some(handle),
                received: 0,
                expected,
            },
            Err(e) => {
                log::warn!("augmentation thread not started ({e}); augmenting between steps");
                let batches = handoff
                    .lock()
                    .ok()
                    .and_then(|mut b| b.take())
                    .expect("the thread never started, so it never took the batches");
                Self::Inline {
                    batches,
                    device: device.clone(),
                    host,
                }
            }
        }
    }
}

impl<B: Backend> Iterator for Batches<B> {
    type Item = Result<ReadyBatch<B>, DataError>;

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Self::Inline {
                batches,
                device,
                host,
            } => Some(batches.next()?.map(|batch| ReadyBatch {
                images: batch.upload::<B>(device, *host),
                batch,
                views: None,
            })),
            Self::Ahead {
                ready,
                handle,
                received,
                expected,
            } => match ready.as_ref()?.recv() {
                Ok(item) => {
                    *received += 1;
                    Some(item)
                }
                // The thread ends after the last batch or the first error, closing the channel;
                // anything else is a panic in the augmentation, raised here as it would have
                // been on this thread.
                Err(_) => {
                    ready.take();
                    if let Some(Err(panic)) = handle.take().map(JoinHandle::join) {
                        std::panic::resume_unwind(panic);
                    }
                    (*received < *expected).then(|| {
                        Err(DataError::Request {
                            path: "<augmentation thread>".into(),
                            reason: format!("stopped after {received} of {expected} batches"),
                        })
                    })
                }
            },
        }
    }
}

impl<B: Backend> Drop for Batches<B> {
    fn drop(&mut self) {
        if let Self::Ahead { ready, handle, .. } = self {
            // Closing the channel makes the thread's next `send` fail, so it returns.
            ready.take();
            if let Some(handle) = handle.take() {
                let _ = handle.join();
            }
        }
    }
}
