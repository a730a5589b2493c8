//! One replica of a data-parallel run: `Replica` (its rank, the collective operations it
//! takes part in, the gradients' average) and the differentiable all-reduce of
//! `CollectiveBackend`; documented on those items and on the parent module's page.

use std::sync::{Arc, Mutex};

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{unary, Backward, Ops, OpsKind};
use burn::backend::Autodiff;
use burn::module::{AutodiffModule, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::TensorPrimitive;
use burn_collective::{CollectiveError, PeerId, ReduceOperation};

use super::config::DataParallelConfig;
use curriculum_ssl_models::replica_stats::ReplicaMean;

/// Backends whose float tensors can be summed over replicas inside the autodiff graph: the
/// forward pass sums every replica's tensor, the backward pass sums every replica's gradient of
/// the result. Implemented for burn's `Autodiff` over any backend, through `burn-collective` on
/// the inner backend.
pub trait CollectiveBackend: AutodiffBackend {
    /// `Σ_replicas tensor`, differentiable.
    ///
    /// # Errors
    /// When the collective layer fails (a replica gone, a peer lost, a mismatched call).
    fn all_reduce_sum(
        tensor: FloatTensor<Self>,
        peer: PeerId,
        failure: &Failure,
    ) -> Result<FloatTensor<Self>, CollectiveError>;
}

/// The backward step of [`CollectiveBackend::all_reduce_sum`].
#[derive(Debug)]
struct AllReduceSum;

impl<I: Backend> Backward<I, 1> for AllReduceSum {
    type State = (PeerId, Failure);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let (peer, failure) = ops.state;
        unary::<I, _>(ops.parents, ops.node, grads, |grad| {
            match burn_collective::all_reduce::<I>(peer, grad.clone(), ReduceOperation::Sum) {
                Ok(sum) => sum,
                Err(error) => {
                    // The backward pass cannot return an error: the replica notes it, and its
                    // step ends with it before the optimiser runs (`Replica::average`).
                    failure.set_error("the backward all-reduce failed", &error);
                    grad
                }
            }
        });
    }
}

impl<I: Backend, C: CheckpointStrategy> CollectiveBackend for Autodiff<I, C> {
    fn all_reduce_sum(
        tensor: FloatTensor<Self>,
        peer: PeerId,
        failure: &Failure,
    ) -> Result<FloatTensor<Self>, CollectiveError> {
        let sum =
            burn_collective::all_reduce::<I>(peer, tensor.primitive.clone(), ReduceOperation::Sum)?;
        Ok(
            match AllReduceSum
                .prepare::<C>([tensor.node.clone()])
                .compute_bound()
                .stateful()
            {
                OpsKind::Tracked(prep) => prep.finish((peer, failure.clone()), sum),
                OpsKind::UnTracked(prep) => prep.finish(sum),
            },
        )
    }
}

/// The first failure of a replica's collective operations, kept until its step reads it: the
/// forward and backward passes cannot return errors, so they note them here and go on with
/// their local values; [`Replica::average`] then ends the step with the error before any
/// parameter changes.
#[derive(Debug, Clone, Default)]
pub struct Failure {
    slot: Arc<Mutex<Option<String>>>,
    /// The run's layout, to word the collective layer's errors ([`DataParallelConfig::describe`]).
    layout: Option<Arc<DataParallelConfig>>,
}

impl Failure {
    /// Notes `reason` unless a failure is already noted.
    pub fn set(&self, reason: String) {
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        slot.get_or_insert(reason);
    }

    /// Notes the collective layer's `error` after `what`, in words.
    pub fn set_error(&self, what: &str, error: &CollectiveError) {
        let text = match &self.layout {
            Some(layout) => layout.describe(error),
            None => format!("{error:?}"),
        };
        self.set(format!("{what}: {text}"));
    }

    /// Whether a failure is noted.
    pub fn is_set(&self) -> bool {
        self.slot
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// The failure noted, if any, leaving it in place.
    pub fn get(&self) -> Option<String> {
        self.slot.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// `Σ_replicas tensor` through [`CollectiveBackend::all_reduce_sum`], with the backend's
/// bound erased so that a [`Replica`] can be held by code generic over any autodiff backend.
type SumFn<B> = fn(FloatTensor<B>, PeerId, &Failure) -> Result<FloatTensor<B>, CollectiveError>;

/// One replica of a data-parallel run, as its step sees it: its rank among all replicas, the
/// number of replicas, and the collective operations between them. Cheap to clone; every clone
/// speaks for the same peer.
pub struct Replica<B: Backend> {
    rank: usize,
    replicas: usize,
    peer: PeerId,
    sum: SumFn<B>,
    failure: Failure,
}

impl<B: Backend> Clone for Replica<B> {
    fn clone(&self) -> Self {
        Self {
            rank: self.rank,
            replicas: self.replicas,
            peer: self.peer,
            sum: self.sum,
            failure: self.failure.clone(),
        }
    }
}

impl<B: Backend> std::fmt::Debug for Replica<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replica")
            .field("rank", &self.rank)
            .field("replicas", &self.replicas)
            .field("peer", &self.peer)
            .finish()
    }
}

impl<B: CollectiveBackend> Replica<B> {
    /// The replica of rank `rank` among `replicas`, speaking as `peer` (registered with
    /// `burn-collective` by [`replicas::run`], which builds every replica of a run, `layout`).
    pub(crate) fn new(
        rank: usize,
        replicas: usize,
        peer: PeerId,
        layout: Arc<DataParallelConfig>,
    ) -> Self {
        Self {
            rank,
            replicas,
            peer,
            sum: B::all_reduce_sum,
            failure: Failure {
                slot: Arc::default(),
                layout: Some(layout),
            },
        }
    }
}

impl<B: Backend> Replica<B> {
    /// This replica's rank, `0 .. replicas()`: its shard of every batch, its rows in a gather.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of replicas `W` (over every machine).
    pub fn replicas(&self) -> usize {
        self.replicas
    }

    /// Whether this replica writes the run's files (rank 0).
    pub fn is_lead(&self) -> bool {
        self.rank == 0
    }

    /// The first failure of this replica's collective operations, if any.
    pub fn failure(&self) -> Option<String> {
        self.failure.get()
    }

    /// `Σ_replicas tensor`, differentiable (see [`CollectiveBackend`]). On a failure the local
    /// tensor comes back and the failure is noted for [`Replica::average`].
    pub fn sum<const D: usize>(&self, tensor: Tensor<B, D>) -> Tensor<B, D> {
        let dims = tensor.dims();
        if dims.iter().all(|&d| d < self.replicas) {
            // burn-collective's ring across machines cuts the largest dimension into one part
            // per machine: a smaller tensor is laid flat and padded with zeros to one value per
            // replica (a batch norm's few channels, a loss and its statistics, a barrier).
            let len = dims.iter().product::<usize>();
            let device = tensor.device();
            let flat = tensor.reshape([len]);
            let padded = if len < self.replicas {
                Tensor::cat(vec![flat, Tensor::zeros([self.replicas - len], &device)], 0)
            } else {
                flat
            };
            return self.sum_unpadded(padded).slice(0..len).reshape(dims);
        }
        self.sum_unpadded(tensor)
    }

    fn sum_unpadded<const D: usize>(&self, tensor: Tensor<B, D>) -> Tensor<B, D> {
        // After a failure the other replicas are gone or going: the step ends at its next
        // check, and no more collective operations are asked of a layer that has stopped.
        if self.failure.is_set() {
            return tensor;
        }
        let primitive = tensor.clone().into_primitive().tensor();
        match (self.sum)(primitive, self.peer, &self.failure) {
            Ok(sum) => Tensor::from_primitive(TensorPrimitive::Float(sum)),
            Err(error) => {
                self.failure.set_error(
                    &format!("replica {}: an all-reduce failed", self.rank),
                    &error,
                );
                tensor
            }
        }
    }

    /// Every replica's rows, in rank order: `[W·N, D]` from each replica's `[N, D]`. The
    /// gradient of a replica's rows is the sum over replicas of the gradient their copy of the
    /// gathered tensor receives.
    ///
    /// # Shapes
    /// - `rows`: `[N, D]` (the same `N` on every replica) → `[W·N, D]`
    pub fn gather(&self, rows: Tensor<B, 2>) -> Tensor<B, 2> {
        let [n, d] = rows.dims();
        let start = self.rank * n;
        let scattered = Tensor::zeros([self.replicas * n, d], &rows.device())
            .slice_assign([start..start + n, 0..d], rows);
        self.sum(scattered)
    }

    /// `rows` gathered from every replica ([`Replica::gather`]) when `replica` is one, `rows`
    /// itself on one device: what a loss over the global batch compares.
    ///
    /// # Shapes
    /// - `rows`: `[N, D]` → `[W·N, D]`
    pub fn gather_on(replica: Option<&Self>, rows: Tensor<B, 2>) -> Tensor<B, 2> {
        match replica {
            Some(r) => r.gather(rows),
            None => rows,
        }
    }

    /// `tensor` summed over every replica ([`Replica::sum`]) when `replica` is one, `tensor`
    /// itself on one device: a sum over the global batch of each replica's sum over its rows.
    pub fn sum_on<const D: usize>(replica: Option<&Self>, tensor: Tensor<B, D>) -> Tensor<B, D> {
        match replica {
            Some(r) => r.sum(tensor),
            None => tensor,
        }
    }

    /// The mean of `rows` over every row of the global batch: their sum over the replicas
    /// ([`Replica::sum_on`]) times `1 / (W·N)` (e.g. MSN's mean assignment, the authors'
    /// `AllReduce`).
    ///
    /// # Shapes
    /// - `rows`: `[N, D]` (the same `N` on every replica) → `[1, D]`
    pub fn mean_rows_on(replica: Option<&Self>, rows: Tensor<B, 2>) -> Tensor<B, 2> {
        let count = rows.dims()[0] * replica.map_or(1, Self::replicas);
        Self::sum_on(replica, rows.sum_dim(0)).mul_scalar(1.0 / count as f64)
    }

    /// `f` of the global batch's `rows`, and of its result this replica's rows: on a replica `f`
    /// of the gathered rows ([`Replica::gather`], [`Replica::own_rows`]), on one device `f(rows)`
    /// (e.g. MSN's targets balanced over the global batch).
    ///
    /// # Shapes
    /// - `rows`: `[N, D]`, `f`: `[W·N, D]` → `[W·N, E]`; → `[N, E]`
    pub fn through_gathered_on(
        replica: Option<&Self>,
        rows: Tensor<B, 2>,
        f: impl FnOnce(Tensor<B, 2>) -> Tensor<B, 2>,
    ) -> Tensor<B, 2> {
        match replica {
            Some(r) => r.own_rows(f(r.gather(rows))),
            None => f(rows),
        }
    }

    /// Each of `views` gathered as [`Replica::gather_on`] gathers one (a multi-view loss over
    /// the global batch).
    ///
    /// # Shapes
    /// - `views`: tensors `[N, D]` → as many `[W·N, D]`
    pub fn gather_each_on(replica: Option<&Self>, views: Vec<Tensor<B, 2>>) -> Vec<Tensor<B, 2>> {
        views
            .into_iter()
            .map(|rows| Self::gather_on(replica, rows))
            .collect()
    }

    /// Every replica's labels, in rank order: `[W·N]` from each replica's `[N]` (class indices
    /// in `0 .. 2²⁴`), without gradient. Each label travels as three base-256 digits, integers
    /// below 256 summed with zeros, so the gather is exact in any float type down to bf16 (as
    /// [`Replica::gather_bytes`]'s lengths).
    ///
    /// # Shapes
    /// - `labels`: `[N]` (the same `N` on every replica) → `[W·N]`
    pub fn gather_labels(&self, labels: Tensor<B, 1, Int>) -> Tensor<B, 1, Int> {
        let [n] = labels.dims();
        let digits = Tensor::stack::<2>(
            vec![
                labels.clone().div_scalar(1 << 16),
                labels.clone().div_scalar(1 << 8).remainder_scalar(1 << 8),
                labels.remainder_scalar(1 << 8),
            ],
            1,
        );
        let gathered = self.gather(digits.float()).detach().round().int();
        let rows = self.replicas * n;
        let digit = |d: usize| gathered.clone().slice([0..rows, d..d + 1]).reshape([rows]);
        digit(0).mul_scalar(1 << 16) + digit(1).mul_scalar(1 << 8) + digit(2)
    }

    /// Every replica's `bytes`, in rank order (e.g. their run records, compared before a run
    /// starts). Two all-reduces: the lengths, then the bytes, each replica's row padded to the
    /// longest. Every value summed is an integer below 256 (a length as three base-256 digits)
    /// beside zeros, so the sums are exact in any float type down to bf16. On a failure of the
    /// collective layer the rows are this replica's alone; see [`Replica::failure`].
    pub fn gather_bytes(&self, bytes: &[u8], device: &B::Device) -> Vec<Vec<u8>> {
        let read = |t: Tensor<B, 2>| -> Vec<u8> {
            t.into_data()
                .convert::<f64>()
                .to_vec::<f64>()
                .unwrap_or_default()
                .iter()
                .map(|v| v.round().clamp(0.0, 255.0) as u8)
                .collect()
        };
        let len = bytes.len().min((1 << 24) - 1);
        let digits = [len >> 16, (len >> 8) & 255, len & 255].map(|d| d as f32);
        let lens = read(self.gather(Tensor::<B, 1>::from_floats(digits, device).reshape([1, 3])));
        let lens: Vec<usize> = lens
            .chunks(3)
            .map(|d| (usize::from(d[0]) << 16) | (usize::from(d[1]) << 8) | usize::from(d[2]))
            .collect();
        if lens.len() != self.replicas {
            return vec![bytes.to_vec(); self.replicas];
        }
        let longest = lens.iter().copied().max().unwrap_or(0).max(1);
        let row: Vec<f32> = bytes[..len]
            .iter()
            .map(|&b| f32::from(b))
            .chain(std::iter::repeat(0.0))
            .take(longest)
            .collect();
        let rows = read(
            self.gather(Tensor::<B, 1>::from_floats(row.as_slice(), device).reshape([1, longest])),
        );
        if rows.len() != self.replicas * longest {
            return vec![bytes.to_vec(); self.replicas];
        }
        lens.iter()
            .enumerate()
            .map(|(r, &n)| rows[r * longest..r * longest + n.min(longest)].to_vec())
            .collect()
    }

    /// This replica's rows of a gathered tensor.
    ///
    /// # Shapes
    /// - `gathered`: `[W·N, D]` → `[N, D]`
    pub fn own_rows(&self, gathered: Tensor<B, 2>) -> Tensor<B, 2> {
        let [rows, d] = gathered.dims();
        let n = rows / self.replicas;
        gathered.slice([self.rank * n..(self.rank + 1) * n, 0..d])
    }
}

impl<B: AutodiffBackend> Replica<B> {
    /// The mean over replicas of `value` (for logging: each replica's loss and statistics).
    pub fn mean_of(&self, values: Tensor<B::InnerBackend, 1>) -> Tensor<B::InnerBackend, 1> {
        self.sum(Tensor::<B, 1>::from_inner(values))
            .inner()
            .div_scalar(self.replicas as f64)
    }

    /// The replicas' gradients of `module`, averaged: laid end to end in the module's parameter
    /// order, all-reduced once, divided by `W` and put back. Every replica must call it at the
    /// same point with a module of the same structure.
    ///
    /// # Errors
    /// The first failure of this replica's collective operations in the step (its forward, its
    /// backward, or this all-reduce): the step must end before the optimiser runs.
    pub fn average<M: AutodiffModule<B>>(
        &self,
        mut grads: GradientsParams,
        module: &M,
    ) -> Result<GradientsParams, String> {
        let mut taken = TakeGradients::<B> {
            grads: &mut grads,
            taken: Vec::new(),
        };
        module.visit(&mut taken);
        let taken = std::mem::take(&mut taken.taken);
        if !taken.is_empty() {
            let flat = Tensor::cat(taken.iter().map(|g| g.flat.clone()).collect(), 0);
            let mean = self
                .sum(Tensor::<B, 1>::from_inner(flat))
                .inner()
                .div_scalar(self.replicas as f64);
            let mut offset = 0;
            for gradient in taken {
                let len = gradient.shape.iter().product::<usize>();
                let values = mean.clone().slice(offset..offset + len);
                (gradient.put_back)(&mut grads, gradient.id, values, &gradient.shape);
                offset += len;
            }
        }
        match self.failure() {
            Some(reason) => Err(reason),
            None => Ok(grads),
        }
    }

    /// The sync-BN hook of this replica, to install on its thread
    /// ([`curriculum_ssl_models::replica_stats::install`]).
    pub(crate) fn batch_stats(&self) -> Arc<dyn ReplicaMean<B>> {
        Arc::new(self.clone())
    }
}

impl<B: Backend> ReplicaMean<B> for Replica<B> {
    fn mean(&self, values: Tensor<B, 1>) -> Tensor<B, 1> {
        self.sum(values).div_scalar(self.replicas as f64)
    }

    fn replicas(&self) -> usize {
        self.replicas
    }
}

/// One parameter's gradient taken out of a [`GradientsParams`], flattened.
struct TakenGradient<B: AutodiffBackend> {
    id: ParamId,
    shape: Vec<usize>,
    flat: Tensor<B::InnerBackend, 1>,
    put_back: fn(&mut GradientsParams, ParamId, Tensor<B::InnerBackend, 1>, &[usize]),
}

/// Takes every float parameter's gradient out of `grads`, in the module's visiting order.
struct TakeGradients<'a, B: AutodiffBackend> {
    grads: &'a mut GradientsParams,
    taken: Vec<TakenGradient<B>>,
}

fn put_back<B: AutodiffBackend, const D: usize>(
    grads: &mut GradientsParams,
    id: ParamId,
    values: Tensor<B::InnerBackend, 1>,
    shape: &[usize],
) {
    let shape: [usize; D] = shape.try_into().expect("the shape it was taken with");
    grads.register::<B::InnerBackend, D>(id, values.reshape(shape));
}

impl<B: AutodiffBackend> ModuleVisitor<B> for TakeGradients<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if let Some(grad) = self.grads.remove::<B::InnerBackend, D>(param.id) {
            let shape = grad.dims().to_vec();
            let len = shape.iter().product::<usize>();
            self.taken.push(TakenGradient {
                id: param.id,
                shape,
                flat: grad.reshape([len]),
                put_back: put_back::<B, D>,
            });
        }
    }
}
