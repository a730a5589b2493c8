//! Data-parallel training: one replica of the networks per device (a thread each, and across
//! machines), each on its shard of every batch, kept identical by averaging their gradients,
//! on burn's own collective layer (`burn-collective`).
//!
//! # How a step runs on `W` replicas
//! A global batch of `W·B` images is split in rank order: replica `r` gets images
//! `r·B .. (r+1)·B`. Each replica
//! 1. runs its networks on its shard; every batch norm averages its batch moments over the
//!    replicas ([`curriculum_ssl_models::replica_stats`], installed for the replica's thread):
//!    synchronised batch norm;
//! 2. gathers what the loss compares across images ([`Replica::gather`]): SimCLR's projections,
//!    MoCo's keys for the queue. The gather is an all-reduce of each replica's rows scattered into
//!    a zero `[W·B, D]` tensor, and its backward is an all-reduce of the gradient: each replica
//!    receives the sum over replicas of the gradient of its own rows (lightly's `GatherLayer`
//!    after its issue #1528);
//! 3. back-propagates, then averages its gradients with the others' ([`Replica::average`], one
//!    all-reduce of all parameters' gradients laid end to end);
//! 4. steps its own optimiser. Every replica holds the same parameters and the same optimiser
//!    state, as PyTorch's `DistributedDataParallel` does: no parameter is ever sent, only
//!    gradients, and no replica waits for an owner to broadcast.
//!
//! The loss of a method that compares images across the batch (SimCLR) is computed by every
//! replica on the gathered rows, the same value everywhere; the backward of the gather then gives
//! replica `r`'s rows `W` times their gradient, and the average over replicas is the gradient of
//! the one-device loss. The loss of a method whose loss is a mean over images (BYOL, SimSiam,
//! MoCo with a queue every replica fills alike) is the mean over the replica's shard, and the
//! average of the replicas' gradients is again the one-device gradient. Either way, a step on
//! `W` replicas of `B` images gives the parameters of a step on one device with `W·B` images, up
//! to the order of floating-point sums (tests/data_parallel.rs).
//!
//! # The collective layer
//! `burn-collective` keeps one server per backend type per process; a peer registers, then every
//! peer calls the same operations in the same order. The differentiable all-reduce is an autodiff
//! operation of [`CollectiveBackend`], implemented for burn's `Autodiff` over any backend. Two
//! data-parallel runs of one backend type in one process take turns ([`run`]).
//!
//! # The pieces
//! - [`DataParallelConfig`] and [`MultiNode`]: how a run spreads over devices and machines
//!   ([`DEFAULT_TIMEOUT_S`] for the wait on other machines).
//! - [`run`]: starts the replicas of a run, one thread per local device, registered with
//!   `burn-collective` (and, across machines, with its global orchestrator, [`Orchestrator`]),
//!   each running the caller's function; the first replica that fails ends the run for all,
//!   named in the error ([`DataParallelError`]).
//! - [`Replica`]: one replica as its step sees it (its rank, the collective operations it takes
//!   part in, the gradients' average), and the differentiable all-reduce of
//!   [`CollectiveBackend`].

mod config;
mod replica;
mod replicas;

pub use burn_collective::PeerId;
pub use config::{DataParallelConfig, MultiNode, DEFAULT_TIMEOUT_S};
pub use replica::{CollectiveBackend, Failure, Replica};
pub use replicas::{run, DataParallelError, Orchestrator};
