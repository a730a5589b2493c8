//! The FIFO queue of negative keys (documented on `KeyQueue`).

use burn::prelude::*;
use burn::record::Record;
use burn::tensor::Distribution;

use crate::base::error::ConfigError;
use crate::data_parallel::Replica;
use crate::loss::l2_normalize;

/// Configuration of a [`KeyQueue`].
#[derive(Config, Debug)]
pub struct KeyQueueConfig {
    /// Number of keys held (MoCo: 65,536 on ImageNet, 4,096 on CIFAR).
    pub size: usize,
    /// Width of a key (the projection dimension).
    pub dim: usize,
}

impl KeyQueueConfig {
    /// Builds a queue of random unit keys (as MoCo initialises it) that receives
    /// `keys_per_step` keys after every step (`B`, or `2B` with a symmetric loss).
    ///
    /// # Errors
    /// If a size is zero, or `size` is not a multiple of `keys_per_step` (the FIFO then could not
    /// replace whole batches of keys).
    pub fn init<B: Backend>(
        &self,
        keys_per_step: usize,
        device: &B::Device,
    ) -> Result<KeyQueue<B>, ConfigError> {
        if self.size == 0 {
            return Err(ConfigError::new(
                "size",
                "the queue must hold at least one key",
            ));
        }
        if self.dim == 0 {
            return Err(ConfigError::new(
                "dim",
                "keys must have at least one element",
            ));
        }
        if let Err(fit) = self.fits(keys_per_step) {
            return Err(ConfigError::new("size", fit.to_string()));
        }
        crate::base::seed::check_count(
            (self.size as u64).saturating_mul(self.dim as u64),
            "the queue of keys",
        )?;
        let keys = Tensor::random(
            [self.size, self.dim],
            Distribution::Normal(0.0, 1.0),
            device,
        );
        Ok(KeyQueue {
            keys: l2_normalize(keys),
            pointer: 0,
            keys_per_step,
            staged: None,
        })
    }
}

/// Why a queue cannot take the keys one step enqueues ([`KeyQueueConfig::fits`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum QueueFit {
    /// Fewer keys than one step enqueues.
    #[error(
        "the queue of {size} keys holds fewer than the {keys_per_step} keys enqueued per step \
         (the batch size, doubled for a symmetric loss)"
    )]
    TooSmall {
        /// The queue's size.
        size: usize,
        /// The keys one step enqueues.
        keys_per_step: usize,
    },
    /// A size the steps' keys do not divide.
    #[error(
        "the queue size {size} is not a multiple of the {keys_per_step} keys enqueued per step \
         (the batch size, doubled for a symmetric loss)"
    )]
    NotAMultiple {
        /// The queue's size.
        size: usize,
        /// The keys one step enqueues.
        keys_per_step: usize,
    },
}

impl KeyQueueConfig {
    /// Whether the queue takes `keys_per_step` keys a step: at least that many, and a multiple
    /// of it (each step replaces a whole block of keys).
    ///
    /// # Errors
    /// The [`QueueFit`] that says why not.
    pub fn fits(&self, keys_per_step: usize) -> Result<(), QueueFit> {
        let (size, keys_per_step) = (self.size, keys_per_step);
        if keys_per_step == 0 || size < keys_per_step {
            return Err(QueueFit::TooSmall {
                size,
                keys_per_step,
            });
        }
        if !size.is_multiple_of(keys_per_step) {
            return Err(QueueFit::NotAMultiple {
                size,
                keys_per_step,
            });
        }
        Ok(())
    }
}

/// The checkpointed state of a support set of nearest neighbours (NNCLR's, NNSiam's): its keys
/// and the slot the next ones are written to. (The record NNCLR's state always was: the same
/// field names.)
#[derive(Record)]
pub struct SupportSetState<B: Backend> {
    /// The support set, `[size, dim]`.
    pub support: Tensor<B, 2>,
    /// The slot the next projections are written to.
    pub pointer: usize,
}

/// A ring buffer of `size` keys of width `dim`; the oldest `keys_per_step` keys are replaced by
/// each [`KeyQueue::enqueue`]. Keys carry no gradient.
///
/// A method's step [stages](KeyQueue::stage) its keys while the loss is computed and
/// [commits](KeyQueue::commit) them after the optimiser step, so that an attempt that is redrawn
/// (batch curation) or abandoned never enters the queue.
///
/// The FIFO queue of negative keys used by MoCo-style methods.
///
/// The math, the defaults, the paper followed and the worked values are in
/// `docs/methods.md#infonce-with-a-queue`.
#[derive(Debug, Clone)]
pub struct KeyQueue<B: Backend> {
    keys: Tensor<B, 2>,
    pointer: usize,
    keys_per_step: usize,
    /// The keys the step being computed enqueues once it is applied.
    staged: Option<Tensor<B, 2>>,
}

impl<B: Backend> KeyQueue<B> {
    /// All keys, `[size, dim]` (their order in the buffer, not their age).
    pub fn keys(&self) -> Tensor<B, 2> {
        self.keys.clone()
    }

    /// Number of keys held.
    pub fn len(&self) -> usize {
        self.keys.dims()[0]
    }

    /// Always false: a queue holds at least one key.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Keys written by each [`KeyQueue::enqueue`].
    pub fn keys_per_step(&self) -> usize {
        self.keys_per_step
    }

    /// The nearest key (cosine, top-1) of each row of `z`, without gradient: the support-set
    /// lookup of NNCLR, NNSiam and NNBYOL (the keys are unit vectors, so the largest dot product
    /// with the normalised row is the largest cosine).
    ///
    /// # Shapes
    /// - `z`: `[N, dim]` → `[N, dim]`
    pub fn nearest(&self, z: Tensor<B, 2>) -> Tensor<B, 2> {
        let [n, _] = z.dims();
        let similarity = l2_normalize(z.detach()).matmul(self.keys.clone().transpose());
        let index = similarity.argmax(1).reshape([n]);
        self.keys.clone().select(0, index).detach()
    }

    /// The `k` nearest keys (cosine, in descending order of similarity, as `torch.topk`) of
    /// each row of `z`, without gradient: All4One's support-set lookup (solo-learn's
    /// `find_nn`: `queue[topk(z · queueᵀ, k).indices]`). [`KeyQueue::nearest`] is its first
    /// neighbour.
    ///
    /// # Shapes
    /// - `z`: `[N, dim]` → `[N, k, dim]`
    ///
    /// # Panics
    /// If `k` is zero or larger than the queue.
    pub fn nearest_k(&self, z: Tensor<B, 2>, k: usize) -> Tensor<B, 3> {
        let [n, _] = z.dims();
        let [size, dim] = self.keys.dims();
        assert!(
            (1..=size).contains(&k),
            "KeyQueue::nearest_k: {k} neighbours asked of a queue of {size} keys"
        );
        let similarity = l2_normalize(z.detach()).matmul(self.keys.clone().transpose());
        let (_, index) = similarity.topk_with_indices(k, 1);
        self.keys
            .clone()
            .select(0, index.reshape([n * k]))
            .reshape([n, k, dim])
            .detach()
    }

    /// The nearest keys of two views' projections `[z1, z2]` (`[N, dim]` each, without
    /// gradient), and `z1`, normalised and gathered over the replicas, staged for the queue:
    /// NNSiam's and NNBYOL's support-set step (solo-learn's `find_nn` and
    /// `dequeue_and_enqueue(z1)`).
    pub(crate) fn neighbours_of_pair(
        &mut self,
        replica: Option<&Replica<B>>,
        [z1, z2]: [Tensor<B, 2>; 2],
    ) -> [Tensor<B, 2>; 2] {
        let neighbours = [self.nearest(z1.clone()), self.nearest(z2)];
        let mine = l2_normalize(z1.detach());
        self.stage(match replica {
            Some(r) => r.gather(mine).detach(),
            None => mine,
        });
        neighbours
    }

    /// Index of the slot the next batch of keys is written to.
    pub fn pointer(&self) -> usize {
        self.pointer
    }

    /// Checks that steps of `batch_size` images, which write `keys` keys each, are the steps
    /// the queue was built for: a method built for one batch size and trained with another
    /// panicked at its first [`KeyQueue::enqueue`], after the step's update.
    ///
    /// # Errors
    /// A [`ConfigError`] on `batch_size` naming both.
    pub fn check_steps(&self, batch_size: usize, keys: usize) -> Result<(), ConfigError> {
        if keys == self.keys_per_step {
            return Ok(());
        }
        Err(ConfigError::new(
            "batch_size",
            format!(
                "steps of {batch_size} images write {keys} keys, but the method's queue was built \
                 for {} a step (its `init` was given another batch size): give the method's \
                 `init` the loader's batch size (on replicas, the global batch)",
                self.keys_per_step
            ),
        ))
    }

    /// Writes `keys` (detached) over the oldest slots and advances the pointer. Call it after
    /// the loss of the step was computed.
    ///
    /// # Shapes
    /// - `keys`: `[keys_per_step, dim]`
    pub fn enqueue(&mut self, keys: Tensor<B, 2>) {
        let [size, dim] = self.keys.dims();
        assert!(
            keys.dims() == [self.keys_per_step, dim],
            "KeyQueue::enqueue: got keys of shape {:?}, expected [{}, {dim}]",
            keys.dims(),
            self.keys_per_step
        );
        let start = self.pointer;
        let end = start + self.keys_per_step;
        self.keys = self
            .keys
            .clone()
            .slice_assign([start..end, 0..dim], keys.detach());
        self.pointer = end % size;
    }

    /// Rebuilds a queue from checkpointed keys and pointer.
    ///
    /// # Errors
    /// If the pointer is not at a multiple of `keys_per_step` inside the queue.
    pub fn from_parts(
        keys: Tensor<B, 2>,
        pointer: usize,
        keys_per_step: usize,
    ) -> Result<Self, ConfigError> {
        let size = keys.dims()[0];
        if keys_per_step == 0
            || !size.is_multiple_of(keys_per_step)
            || !pointer.is_multiple_of(keys_per_step)
            || pointer >= size
        {
            return Err(ConfigError::new(
                "pointer",
                format!(
                    "pointer {pointer} does not fit a queue of {size} keys filled {keys_per_step} \
                     at a time"
                ),
            ));
        }
        Ok(Self {
            keys: keys.detach(),
            pointer,
            keys_per_step,
            staged: None,
        })
    }

    /// The keys of the step being computed, enqueued by [`KeyQueue::commit`] (replaces keys
    /// staged before).
    ///
    /// # Shapes
    /// - `keys`: `[keys_per_step, dim]`
    pub fn stage(&mut self, keys: Tensor<B, 2>) {
        self.staged = Some(keys);
    }

    /// After the optimiser step: enqueues the staged keys, if any.
    pub fn commit(&mut self) {
        if let Some(keys) = self.staged.take() {
            self.enqueue(keys);
        }
    }

    /// Takes back a checkpoint's keys and pointer (the same number of keys per step) and drops
    /// any staged keys.
    ///
    /// # Errors
    /// If `keys` has another shape than this queue's (the error names `field`, the setting that
    /// fixes it, and says whose `what` it is, e.g. "MoCo's queue"), or the pointer does not fit.
    pub fn restore(
        &mut self,
        keys: Tensor<B, 2>,
        pointer: usize,
        field: &'static str,
        what: &str,
    ) -> Result<(), ConfigError> {
        if keys.dims() != self.keys.dims() {
            return Err(ConfigError::new(
                field,
                format!(
                    "the checkpoint's {what} has shape {:?}, this one {:?}",
                    keys.dims(),
                    self.keys.dims()
                ),
            ));
        }
        *self = Self::from_parts(keys, pointer, self.keys_per_step)?;
        Ok(())
    }
}
