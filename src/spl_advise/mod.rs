//! The selection core of SPL-ADVisE: self-paced learning with diversity over clusters of a learned
//! embedding, and the neighbourhood sampler that trains that embedding with the magnet loss.
//!
//! Thangarasa & Taylor, "Self-Paced Learning with Adaptive Deep Visual Embeddings", BMVC 2018,
//! <https://arxiv.org/abs/1807.09200>. Two networks train side by side:
//!
//! - an *embedding* network trained with the magnet loss
//!   ([`MagnetLoss`](crate::loss::MagnetLoss)). Its representations of the training set are
//!   clustered per class with k-means++ (K clusters per class); each batch is a *neighbourhood*:
//!   a seed cluster drawn with probability proportional to its mean loss, the clusters of other
//!   classes whose centroids lie nearest to it, and a few examples of each (paper §3.1);
//! - a *student* classifier whose examples are chosen by SPLD (Jiang et al., "Self-Paced Learning
//!   with Diversity", NeurIPS 2014): within each cluster of the embedding, examples are ranked by
//!   the student's loss and an example is kept when its loss is below a threshold that falls with
//!   its rank, so easy examples are preferred but spread over many clusters (paper §3.2).
//!
//! | item | what it does |
//! |---|---|
//! | [`Spld`] | the SPLD rule on any grouping; pace parameters `λ`, `γ`, `μ`; saveable state |
//! | [`kmeans`](fn@kmeans), [`cluster_per_class`] | seeded k-means++ and Lloyd on host data; [`ClusterIndex`] per class |
//! | [`MagnetSampler`] | magnet-loss neighbourhood batches; per-cluster loss bookkeeping |
//! | [`EmbeddingNet`] | the embedding network: a backbone with a linear embedding layer |
//! | [`SplAdvise`], [`SpldSampling`], [`RandomSampling`] | the student's selections as hooks of the training loop, for the [supervised step](crate::train::SupervisedTask) (below) |
//!
//! # One epoch of SPL-ADVisE with these pieces
//! ```
//! use curriculum_ssl::spl_advise::{
//!     cluster_per_class, KMeansConfig, MagnetSamplerConfig, SpldConfig,
//! };
//! use rand::{rngs::StdRng, SeedableRng};
//!
//! # fn main() -> Result<(), curriculum_ssl::spl_advise::SplAdviseError> {
//! // Embeddings of the training set (N × E, row-major, from the embedding network) and labels.
//! let embeddings: Vec<f32> = vec![0.0, 0.1, 0.2, 5.0, 5.1, 5.2, 9.0, 9.1];
//! let labels = [0, 0, 0, 0, 1, 1, 1, 1];
//! // Refresh the cluster index: here K = 2 clusters per class, seeded by (run seed, epoch).
//! let kmeans = KMeansConfig::new().with_clusters(2);
//! let index = cluster_per_class(&embeddings, 1, &labels, &kmeans, 7)?;
//! let mut sampler = MagnetSamplerConfig::new()
//!     .with_clusters_per_batch(2)
//!     .with_examples_per_cluster(2)
//!     .init(index.clone())?;
//! // Embedding network steps: draw a neighbourhood, train on it, report its per-example losses.
//! let mut rng = StdRng::seed_from_u64(7);
//! let batch = sampler.sample(&mut rng);
//! assert_eq!(batch.examples.len(), 4);
//! let magnet_losses = vec![0.5f32; 4]; // MagnetLoss::forward_per_example, read back
//! sampler.update_losses(&batch.examples, &magnet_losses)?;
//! // Student: select this epoch's examples from its losses, grouped by cluster.
//! let mut spld = SpldConfig::new().init()?;
//! let student_losses = [0.05f32, 0.9, 0.2, 2.0, 0.01, 0.3, 0.4, 0.02];
//! let chosen = spld.selected_indices(&student_losses, index.assignments())?;
//! assert!(chosen.contains(&0) && chosen.contains(&4) && !chosen.contains(&3));
//! spld.advance_epoch();
//! # Ok(())
//! # }
//! ```
//!
//! Everything here runs on the host (plain `f64` arithmetic on slices); nothing names a backend.
//! Randomness comes only from generators the caller seeds (`u64` seeds or a `&mut impl Rng`),
//! never from process-wide state, so the same seed gives the same clusters and batches on any
//! thread.
//!
//! The math, the defaults, the paper followed and the worked values are in
//! `docs/methods.md#spld`, `#k-means-clustering`,
//! `#magnet-sampling` and `#magnet-loss`.
//!
//! # The student's selections
//! The student's example selections, SPL-ADVisE's and its baselines', are hooks of the
//! training loop ([`Hook`](crate::train::Hook), named [`SELECTION`]) for every
//! [`SupervisedTask`](crate::train::SupervisedTask): each selects its epoch's
//! examples in `epoch_start` ([`RunView::select`](crate::train::RunView::select)), logs
//! `selected` at every step and its pace at every epoch ([`Pace`], set by [`PaceConfig`]), and
//! keeps its state in the checkpoints.
//!
//! - [`SplAdvise`]: the paper. An embedding network trains beside the student with the magnet
//!   loss (one neighbourhood batch after every student step); at the start of every epoch the
//!   training set is embedded, clustered per class with k-means++ (the cluster index refresh),
//!   and SPLD selects the epoch's examples with those clusters as its groups.
//! - [`SpldSampling`]: the baseline "SPLD": the same selection over fixed k-means clusters of the
//!   raw pixels, computed once.
//! - [`RandomSampling`]: every example.

pub(crate) mod checks;
mod embedding;
mod kmeans;
mod magnet_sampler;
mod selection;
mod spld;

pub use embedding::{EmbeddingNet, EmbeddingNetConfig};
pub use kmeans::{
    cluster_per_class, kmeans, ClusterIndex, ClusterIndexState, KMeans, KMeansConfig,
};
pub use magnet_sampler::{MagnetBatch, MagnetSampler, MagnetSamplerConfig, MagnetSamplerState};
pub use selection::{
    Pace, PaceConfig, PaceState, RandomSampling, SplAdvise, SplAdviseConfig, SpldSampling,
    SELECTION,
};
pub use spld::{Spld, SpldConfig, SpldState};

pub use crate::error::SplAdviseError;
