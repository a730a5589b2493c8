//! Neighbourhood sampling for the magnet loss (documented on `MagnetSampler`).

use burn::config::Config;
use rand::Rng;
use serde::{Deserialize, Serialize};

use super::checks::{finite_f64, same_length};
use super::kmeans::ClusterIndex;
use crate::base::error::ConfigError;
use crate::error::SplAdviseError;

/// Configuration of [`MagnetSampler`]: the shape of a batch.
#[derive(Config, Debug)]
pub struct MagnetSamplerConfig {
    /// Clusters per batch `M >= 2`: the seed and its `M − 1` nearest clusters of other classes.
    #[config(default = 8)]
    pub clusters_per_batch: usize,
    /// Examples drawn from each cluster `D >= 1`.
    #[config(default = 8)]
    pub examples_per_cluster: usize,
}

impl MagnetSamplerConfig {
    /// Checks `M >= 2` and `D >= 1`, naming the field otherwise.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.clusters_per_batch < 2 {
            return Err(ConfigError::new(
                "clusters_per_batch",
                format!(
                    "must be at least 2 (a seed and an impostor), got {}",
                    self.clusters_per_batch
                ),
            ));
        }
        if self.examples_per_cluster == 0 {
            return Err(ConfigError::new(
                "examples_per_cluster",
                "must be at least 1, got 0",
            ));
        }
        Ok(())
    }

    /// Validates the config and builds a sampler over `index`, with no loss known yet.
    ///
    /// # Errors
    /// If the config is invalid, or some cluster has fewer than `M − 1` clusters of other
    /// classes.
    pub fn init(&self, index: ClusterIndex) -> Result<MagnetSampler, SplAdviseError> {
        self.validate()?;
        let examples = index.num_examples();
        let mut sampler = MagnetSampler {
            clusters_per_batch: self.clusters_per_batch,
            examples_per_cluster: self.examples_per_cluster,
            impostors: Vec::new(),
            example_losses: vec![None; examples],
            cluster_losses: Vec::new(),
            index,
        };
        sampler.rebuild()?;
        Ok(sampler)
    }
}

/// One magnet-loss batch: `M` clusters of `D` examples, cluster by cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MagnetBatch {
    /// `M·D` example indices into the data set; examples `m·D .. (m+1)·D` are of batch-local
    /// cluster `m`.
    pub examples: Vec<usize>,
    /// `M·D` batch-local cluster ids in `0..M`, one per example (the `clusters` argument of
    /// [`MagnetLoss::forward`](crate::loss::MagnetLoss::forward)).
    pub clusters: Vec<usize>,
    /// `M` classes, one per batch-local cluster (the `cluster_classes` argument of
    /// [`MagnetLoss::forward`](crate::loss::MagnetLoss::forward)).
    pub cluster_classes: Vec<usize>,
    /// `M` cluster ids of the [`ClusterIndex`]: the seed first, then its impostors, nearest
    /// first.
    pub cluster_ids: Vec<usize>,
}

/// The saved state of a [`MagnetSampler`]: the latest loss of each example (`None` where none is
/// known). The clusters are rebuilt from the embedding, or saved with
/// [`ClusterIndex::state`](super::ClusterIndex::state).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MagnetSamplerState {
    /// Latest loss of each example.
    pub example_losses: Vec<Option<f64>>,
}

/// Magnet-loss neighbourhood sampler over a [`ClusterIndex`]. Build it with
/// [`MagnetSamplerConfig::init`].
///
/// Neighbourhood sampling for the magnet loss, as the embedding network of SPL-ADVisE trains
/// (Thangarasa & Taylor, "Self-Paced Learning with Adaptive Deep Visual Embeddings",
/// <https://arxiv.org/abs/1807.09200>, §3.1, after Rippel et al., "Metric Learning with Adaptive
/// Density Discrimination", ICLR 2016).
///
/// A batch is one local neighbourhood of the embedding, `M` clusters of `D` examples:
///
/// 1. a *seed* cluster, drawn with probability proportional to its mean loss, so that clusters
///    the embedding still gets wrong come up more often;
/// 2. the `M − 1` clusters of *other* classes whose centroids lie nearest to the seed's centroid
///    (squared Euclidean distance; ties go to the lower cluster id) — the impostors the loss
///    pushes away;
/// 3. `D` examples of each of these clusters, drawn uniformly without replacement, or with
///    replacement when the cluster has fewer than `D` examples (so the batch always holds
///    `M × D` examples, and a small cluster repeats some of them).
///
/// SPL-ADVisE uses `M = D = 8` with K = 8 clusters per class (the defaults). The clusters come
/// from a [`ClusterIndex`] (k-means++ per class over the embedding of the whole training set),
/// which the paper rebuilds once per epoch: [`MagnetSampler::refresh`].
///
/// # Loss bookkeeping
/// The sampler keeps the latest magnet loss of every example it has been told about
/// ([`MagnetSampler::update_losses`]); a cluster's loss is the mean over its examples that have
/// one. A cluster none of whose examples has a loss yet is weighted with the mean of the measured
/// clusters' losses, so it is neither favoured nor starved; before any loss is known (or when
/// every loss is 0) the seed is drawn uniformly. Example losses survive a refresh: the cluster
/// losses are recomputed over the new clusters.
///
/// [`MagnetBatch`] lays a batch out the way [`MagnetLoss`](crate::loss::MagnetLoss) reads it:
/// `clusters[n]` is the batch-local cluster (`0..M`) of example `n`, `cluster_classes[m]` the
/// class of batch-local cluster `m`.
///
/// The math, the defaults, the paper followed and the worked values are in
/// `docs/methods.md#magnet-sampling`.
#[derive(Debug, Clone)]
pub struct MagnetSampler {
    clusters_per_batch: usize,
    examples_per_cluster: usize,
    index: ClusterIndex,
    /// The `M − 1` nearest clusters of other classes of each cluster, nearest first.
    impostors: Vec<Vec<usize>>,
    example_losses: Vec<Option<f64>>,
    /// Mean loss of each cluster over its examples with a loss; `None` when none has one.
    cluster_losses: Vec<Option<f64>>,
}

impl MagnetSampler {
    /// Clusters per batch `M`.
    pub fn clusters_per_batch(&self) -> usize {
        self.clusters_per_batch
    }

    /// Examples per cluster `D`.
    pub fn examples_per_cluster(&self) -> usize {
        self.examples_per_cluster
    }

    /// The cluster index batches are drawn from.
    pub fn index(&self) -> &ClusterIndex {
        &self.index
    }

    /// Replaces the cluster index (the paper's once-per-epoch refresh) and recomputes the
    /// impostors and cluster losses; the example losses are kept.
    ///
    /// # Errors
    /// If `index` is over another number of examples, or some cluster has fewer than `M − 1`
    /// clusters of other classes (the sampler is then left unchanged).
    pub fn refresh(&mut self, index: ClusterIndex) -> Result<(), SplAdviseError> {
        same_length(
            "index examples",
            self.example_losses.len(),
            index.num_examples(),
        )?;
        let old = std::mem::replace(&mut self.index, index);
        if let Err(e) = self.rebuild() {
            self.index = old;
            self.rebuild()
                .expect("the previous index was accepted before");
            return Err(e);
        }
        Ok(())
    }

    /// Recomputes the impostor lists and every cluster loss from the current index.
    fn rebuild(&mut self) -> Result<(), SplAdviseError> {
        let needed = self.clusters_per_batch - 1;
        let classes = self.index.cluster_classes();
        let mut impostors = Vec::with_capacity(classes.len());
        for (seed, &class) in classes.iter().enumerate() {
            let centre = self.index.centroid(seed);
            let mut others: Vec<(f64, usize)> = (0..classes.len())
                .filter(|&c| classes[c] != class)
                .map(|c| {
                    let d = centre
                        .iter()
                        .zip(self.index.centroid(c))
                        .map(|(a, b)| (a - b) * (a - b))
                        .sum::<f64>();
                    (d, c)
                })
                .collect();
            if others.len() < needed {
                return Err(SplAdviseError::TooFewImpostors {
                    cluster: seed,
                    class,
                    available: others.len(),
                    clusters_per_batch: self.clusters_per_batch,
                });
            }
            others.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            impostors.push(others[..needed].iter().map(|&(_, c)| c).collect());
        }
        self.impostors = impostors;
        self.cluster_losses = (0..classes.len()).map(|c| self.mean_loss_of(c)).collect();
        Ok(())
    }

    /// Mean of the known losses of `cluster`'s examples.
    fn mean_loss_of(&self, cluster: usize) -> Option<f64> {
        let (sum, count) = self
            .index
            .members(cluster)
            .iter()
            .filter_map(|&i| self.example_losses[i])
            .fold((0.0, 0usize), |(s, n), l| (s + l, n + 1));
        (count > 0).then(|| sum / count as f64)
    }

    /// The `M − 1` nearest clusters of other classes of `cluster`, nearest first.
    ///
    /// # Panics
    /// If `cluster` is not a cluster of the index.
    pub fn impostors(&self, cluster: usize) -> &[usize] {
        &self.impostors[cluster]
    }

    /// The mean loss of `cluster` over its examples with a known loss (`None` if none has one).
    ///
    /// # Panics
    /// If `cluster` is not a cluster of the index.
    pub fn cluster_loss(&self, cluster: usize) -> Option<f64> {
        self.cluster_losses[cluster]
    }

    /// The probability of each cluster to be drawn as the seed (see the module documentation).
    pub fn seed_probabilities(&self) -> Vec<f64> {
        let known: Vec<f64> = self.cluster_losses.iter().flatten().copied().collect();
        let uniform = vec![1.0 / self.cluster_losses.len() as f64; self.cluster_losses.len()];
        if known.is_empty() {
            return uniform;
        }
        let fill = known.iter().sum::<f64>() / known.len() as f64;
        let weights: Vec<f64> = self
            .cluster_losses
            .iter()
            .map(|l| l.unwrap_or(fill))
            .collect();
        let total: f64 = weights.iter().sum();
        if total > 0.0 && total.is_finite() {
            weights.iter().map(|w| w / total).collect()
        } else {
            uniform
        }
    }

    /// Draws a seed cluster with the probabilities of [`MagnetSampler::seed_probabilities`].
    pub fn sample_seed_cluster<R: Rng + ?Sized>(&self, rng: &mut R) -> usize {
        let probabilities = self.seed_probabilities();
        let target = rng.random::<f64>();
        let mut cumulative = 0.0;
        let mut chosen = 0;
        for (c, &p) in probabilities.iter().enumerate() {
            if p > 0.0 {
                cumulative += p;
                chosen = c;
                if cumulative > target {
                    break;
                }
            }
        }
        chosen
    }

    /// Draws one neighbourhood batch of `M × D` examples (see the module documentation).
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> MagnetBatch {
        let seed = self.sample_seed_cluster(rng);
        let mut cluster_ids = Vec::with_capacity(self.clusters_per_batch);
        cluster_ids.push(seed);
        cluster_ids.extend_from_slice(&self.impostors[seed]);
        let d = self.examples_per_cluster;
        let mut examples = Vec::with_capacity(cluster_ids.len() * d);
        for &c in &cluster_ids {
            let members = self.index.members(c);
            if members.len() >= d {
                examples.extend(
                    rand::seq::index::sample(rng, members.len(), d)
                        .into_iter()
                        .map(|j| members[j]),
                );
            } else {
                examples.extend((0..d).map(|_| members[rng.random_range(0..members.len())]));
            }
        }
        MagnetBatch {
            clusters: (0..cluster_ids.len())
                .flat_map(|m| std::iter::repeat_n(m, d))
                .collect(),
            cluster_classes: cluster_ids
                .iter()
                .map(|&c| self.index.cluster_classes()[c])
                .collect(),
            examples,
            cluster_ids,
        }
    }

    /// Records the magnet losses of a batch: `losses[n]` is the loss of example `examples[n]`
    /// (e.g. [`MagnetLoss::forward_per_example`](crate::loss::MagnetLoss::forward_per_example)
    /// read back to the host, with [`MagnetBatch::examples`]). An example drawn twice keeps the
    /// later loss. The losses of the clusters touched are recomputed.
    ///
    /// # Errors
    /// If the lengths differ, an example index is out of range, or a loss is negative or not
    /// finite (nothing is recorded then).
    pub fn update_losses<T: Copy + Into<f64>>(
        &mut self,
        examples: &[usize],
        losses: &[T],
    ) -> Result<(), SplAdviseError> {
        same_length("losses", examples.len(), losses.len())?;
        let losses = finite_f64("losses", losses)?;
        if let Some(index) = losses.iter().position(|&l| l < 0.0) {
            return Err(SplAdviseError::NegativeLoss {
                index,
                value: losses[index],
            });
        }
        let len = self.example_losses.len();
        if let Some(&index) = examples.iter().find(|&&i| i >= len) {
            return Err(SplAdviseError::OutOfRange {
                what: "examples",
                index,
                len,
            });
        }
        let mut touched = Vec::with_capacity(examples.len());
        for (&i, &l) in examples.iter().zip(&losses) {
            self.example_losses[i] = Some(l);
            touched.push(self.index.assignments()[i]);
        }
        touched.sort_unstable();
        touched.dedup();
        for c in touched {
            self.cluster_losses[c] = self.mean_loss_of(c);
        }
        Ok(())
    }

    /// The latest loss of each example, for a checkpoint.
    pub fn state(&self) -> MagnetSamplerState {
        MagnetSamplerState {
            example_losses: self.example_losses.clone(),
        }
    }

    /// Restores the example losses of a checkpoint and recomputes the cluster losses.
    ///
    /// # Errors
    /// If the state is over another number of examples or holds a negative or non-finite loss
    /// (the sampler is then left unchanged).
    pub fn load_state(&mut self, state: MagnetSamplerState) -> Result<(), SplAdviseError> {
        same_length(
            "example_losses",
            self.example_losses.len(),
            state.example_losses.len(),
        )?;
        for (index, loss) in state.example_losses.iter().enumerate() {
            if let Some(value) = *loss {
                if !value.is_finite() {
                    return Err(SplAdviseError::NonFinite {
                        what: "example_losses",
                        index,
                        value,
                    });
                }
                if value < 0.0 {
                    return Err(SplAdviseError::NegativeLoss { index, value });
                }
            }
        }
        self.example_losses = state.example_losses;
        self.cluster_losses = (0..self.index.num_clusters())
            .map(|c| self.mean_loss_of(c))
            .collect();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    use super::*;
    use crate::spl_advise::{cluster_per_class, KMeansConfig};

    /// The 1-D examples of `layout` (`(class, centroid, size)` per cluster, sizes even): a
    /// cluster's examples sit at `centroid − 0.25` and `centroid + 0.25` in turn, so its mean is
    /// its centroid. Returns the data, labels and cluster of each example.
    fn line_data(layout: &[(usize, f64, usize)]) -> (Vec<f64>, Vec<usize>, Vec<usize>) {
        let mut data = Vec::new();
        let mut labels = Vec::new();
        let mut assignments = Vec::new();
        for (c, &(class, centre, size)) in layout.iter().enumerate() {
            assert_eq!(size % 2, 0);
            for j in 0..size {
                data.push(centre + if j % 2 == 0 { -0.25 } else { 0.25 });
                labels.push(class);
                assignments.push(c);
            }
        }
        (data, labels, assignments)
    }

    fn line_index(layout: &[(usize, f64, usize)]) -> ClusterIndex {
        let (data, labels, assignments) = line_data(layout);
        let index = ClusterIndex::new(&data, 1, &labels, assignments).unwrap();
        for (c, &(_, centre, _)) in layout.iter().enumerate() {
            assert!((index.centroid(c)[0] - centre).abs() < 1e-12);
        }
        index
    }

    /// Three classes A = 0, B = 1, C = 2 on a line.
    const LAYOUT: [(usize, f64, usize); 8] = [
        (0, 0.0, 10),  // 0: A
        (0, 10.0, 4),  // 1: A
        (0, 20.0, 12), // 2: A
        (1, 1.0, 2),   // 3: B
        (1, 30.0, 8),  // 4: B
        (2, 2.0, 6),   // 5: C
        (2, 12.0, 16), // 6: C
        (2, 50.0, 10), // 7: C
    ];

    fn sampler(m: usize, d: usize) -> MagnetSampler {
        MagnetSamplerConfig::new()
            .with_clusters_per_batch(m)
            .with_examples_per_cluster(d)
            .init(line_index(&LAYOUT))
            .unwrap()
    }

    #[test]
    fn magnet_sampler_impostors_are_the_nearest_clusters_of_other_classes() {
        let s = sampler(4, 2);
        // From A at 0: B@1 (1), C@2 (4), C@12 (144); A@10 is nearer than B@30 but of the same
        // class.
        assert_eq!(s.impostors(0), [3, 5, 6]);
        // From A at 10: C@12 (4), C@2 (64), B@1 (81).
        assert_eq!(s.impostors(1), [6, 5, 3]);
        // From B at 30: A@20 (100), C@12 (324), then A@10 and C@50 both at 400: lower id first.
        assert_eq!(s.impostors(4), [2, 6, 1]);
        // From C at 50: B@30 (400), A@20 (900), A@10 (1600).
        assert_eq!(s.impostors(7), [4, 2, 1]);
    }

    #[test]
    fn magnet_sampler_batch_has_the_layout_of_the_magnet_loss() {
        let s = sampler(4, 5);
        let mut rng = StdRng::seed_from_u64(0);
        for _ in 0..50 {
            let batch = s.sample(&mut rng);
            assert_eq!(batch.examples.len(), 20);
            assert_eq!(batch.clusters, [[0; 5], [1; 5], [2; 5], [3; 5]].concat());
            assert_eq!(batch.cluster_ids.len(), 4);
            let seed = batch.cluster_ids[0];
            assert_eq!(&batch.cluster_ids[1..], s.impostors(seed));
            for (m, &c) in batch.cluster_ids.iter().enumerate() {
                assert_eq!(batch.cluster_classes[m], LAYOUT[c].0);
                let drawn = &batch.examples[m * 5..(m + 1) * 5];
                assert!(drawn.iter().all(|i| s.index().members(c).contains(i)));
                let mut distinct = drawn.to_vec();
                distinct.sort_unstable();
                distinct.dedup();
                // Clusters of at least D = 5 examples are drawn without replacement; B@1 has 2.
                let size = LAYOUT[c].2;
                if size >= 5 {
                    assert_eq!(distinct.len(), 5, "cluster {c} repeated an example");
                } else {
                    assert!(distinct.len() <= size);
                }
            }
        }
    }

    #[test]
    fn magnet_sampler_defaults_give_m_by_d_batches() {
        // Three classes of four well-separated 2-D blobs each, k-means++ with K = 4 per class.
        let mut rng = StdRng::seed_from_u64(8);
        let mut data = Vec::new();
        let mut labels = Vec::new();
        for class in 0..3 {
            for blob in 0..4 {
                for _ in 0..(3 + 3 * blob) {
                    data.push(100.0 * class as f64 + 20.0 * blob as f64 + rng.random::<f64>());
                    data.push(rng.random::<f64>());
                    labels.push(class);
                }
            }
        }
        let index =
            cluster_per_class(&data, 2, &labels, &KMeansConfig::new().with_clusters(4), 1).unwrap();
        let s = MagnetSamplerConfig::new().init(index).unwrap();
        let batch = s.sample(&mut rng);
        assert_eq!(batch.examples.len(), 64);
        assert_eq!(batch.cluster_ids.len(), 8);
        let seed_class = batch.cluster_classes[0];
        assert!(batch.cluster_classes[1..].iter().all(|&c| c != seed_class));
        for (n, &i) in batch.examples.iter().enumerate() {
            assert_eq!(labels[i], batch.cluster_classes[batch.clusters[n]]);
        }
    }

    #[test]
    fn magnet_sampler_seed_frequency_follows_cluster_losses() {
        let mut s = sampler(2, 1);
        // Cluster mean losses 1, 2, 3, 4, 0, 5, 0, 1 (cluster 0: losses 0.5 and 1.5 average 1).
        let means: [f64; 8] = [1.0, 2.0, 3.0, 4.0, 0.0, 5.0, 0.0, 1.0];
        for (c, &mean) in means.iter().enumerate() {
            let members = s.index().members(c).to_vec();
            let losses: Vec<f64> = (0..members.len())
                .map(|j| {
                    let sign = if j % 2 == 0 { -1.0 } else { 1.0 };
                    mean + sign * 0.5 * mean.min(1.0)
                })
                .collect();
            s.update_losses(&members, &losses).unwrap();
        }
        for (c, &mean) in means.iter().enumerate() {
            assert!((s.cluster_loss(c).unwrap() - mean).abs() < 1e-12);
        }
        let total: f64 = means.iter().sum();
        let probabilities = s.seed_probabilities();
        for (p, m) in probabilities.iter().zip(means) {
            assert!((p - m / total).abs() < 1e-12);
        }
        let draws = 32_000;
        let mut counts = [0usize; 8];
        let mut rng = StdRng::seed_from_u64(42);
        for _ in 0..draws {
            counts[s.sample_seed_cluster(&mut rng)] += 1;
        }
        assert_eq!(
            (counts[4], counts[6]),
            (0, 0),
            "zero-loss clusters were drawn"
        );
        let chi_square: f64 = means
            .iter()
            .zip(counts)
            .filter(|(m, _)| **m > 0.0)
            .map(|(m, n)| {
                let expected = draws as f64 * m / total;
                (n as f64 - expected).powi(2) / expected
            })
            .sum();
        // 6 categories with weight, 5 degrees of freedom: P(χ² > 20.52) = 0.001.
        assert!(
            chi_square < 20.52,
            "chi-square {chi_square}, counts {counts:?}"
        );
    }

    #[test]
    fn magnet_sampler_fills_unmeasured_clusters_with_the_mean_cluster_loss() {
        let mut s = sampler(2, 1);
        assert!(s.seed_probabilities().iter().all(|&p| p == 0.125));
        // Cluster 0 (10 examples): losses 2 and 4 on two of them → mean 3. Cluster 5: 1.
        s.update_losses(&[0, 1], &[2.0f32, 4.0]).unwrap();
        let first_of_5 = s.index().members(5)[0];
        s.update_losses(&[first_of_5], &[1.0]).unwrap();
        assert_eq!(s.cluster_loss(0), Some(3.0));
        assert_eq!(s.cluster_loss(5), Some(1.0));
        assert_eq!(s.cluster_loss(1), None);
        // Six unmeasured clusters weigh (3 + 1) / 2 = 2 each: total 3 + 1 + 6·2 = 16.
        let p = s.seed_probabilities();
        assert!((p[0] - 3.0 / 16.0).abs() < 1e-15);
        assert!((p[5] - 1.0 / 16.0).abs() < 1e-15);
        assert!((p[1] - 2.0 / 16.0).abs() < 1e-15);
        // A newer loss of an example replaces its older one: cluster 0 → (6 + 4) / 2.
        s.update_losses(&[0], &[6.0]).unwrap();
        assert_eq!(s.cluster_loss(0), Some(5.0));
        // Every known cluster loss is 0: the draw is uniform again.
        let mut zero = sampler(2, 1);
        zero.update_losses(&[0], &[0.0]).unwrap();
        assert!(zero.seed_probabilities().iter().all(|&p| p == 0.125));
    }

    #[test]
    fn magnet_sampler_seed_is_forced_by_the_only_lossy_cluster() {
        let mut s = sampler(4, 3);
        let all: Vec<usize> = (0..s.index().num_examples()).collect();
        let losses: Vec<f64> = all
            .iter()
            .map(|&i| {
                if s.index().assignments()[i] == 0 {
                    0.7
                } else {
                    0.0
                }
            })
            .collect();
        s.update_losses(&all, &losses).unwrap();
        let mut rng = StdRng::seed_from_u64(3);
        for _ in 0..20 {
            assert_eq!(s.sample(&mut rng).cluster_ids, [0, 3, 5, 6]);
        }
    }

    #[test]
    fn magnet_sampler_is_deterministic_for_a_seed() {
        let s = sampler(3, 4);
        let draw = |seed| {
            let mut rng = StdRng::seed_from_u64(seed);
            (0..10).map(|_| s.sample(&mut rng)).collect::<Vec<_>>()
        };
        assert_eq!(draw(5), draw(5));
        assert_ne!(draw(5), draw(6));
    }

    #[test]
    fn magnet_sampler_state_refresh_and_errors() {
        // Examples 0..10 form cluster 0 (A@0), 10..14 cluster 1 (A@10), 14..26 cluster 2 (A@20).
        let mut s = sampler(4, 2);
        s.update_losses(&[0, 1, 12], &[1.0, 3.0, 5.0]).unwrap();
        let json = serde_json::to_string(&s.state()).unwrap();
        let state: MagnetSamplerState = serde_json::from_str(&json).unwrap();
        let mut restored = sampler(4, 2);
        restored.load_state(state).unwrap();
        assert_eq!(restored.seed_probabilities(), s.seed_probabilities());
        assert_eq!(restored.cluster_loss(0), Some(2.0));
        assert_eq!(restored.cluster_loss(1), Some(5.0));

        // A refresh to clusters that merge A@0 and A@10 keeps the example losses: the merged
        // cluster's loss is the mean of 1, 3 and 5; A@20, now cluster 1, has none.
        let (data, labels, mut merged) = line_data(&LAYOUT);
        for a in merged.iter_mut() {
            *a = a.saturating_sub(1);
        }
        let index = ClusterIndex::new(&data, 1, &labels, merged).unwrap();
        s.refresh(index).unwrap();
        assert_eq!(s.index().num_clusters(), 7);
        assert_eq!(s.cluster_loss(0), Some(3.0));
        assert_eq!(s.cluster_loss(1), None);
        // A refresh over another number of examples is refused.
        let small = ClusterIndex::new(&[0.0, 9.0], 1, &[0, 1], vec![0, 1]).unwrap();
        assert!(matches!(
            s.refresh(small).unwrap_err(),
            SplAdviseError::Length {
                what: "index examples",
                expected: 68,
                got: 2
            }
        ));

        // Errors leave the sampler as it was.
        let before = s.seed_probabilities();
        assert!(matches!(
            s.update_losses(&[0, 1], &[1.0, -0.5]).unwrap_err(),
            SplAdviseError::NegativeLoss { index: 1, .. }
        ));
        assert!(matches!(
            s.update_losses(&[0, 999], &[1.0, 0.5]).unwrap_err(),
            SplAdviseError::OutOfRange {
                what: "examples",
                index: 999,
                ..
            }
        ));
        assert!(matches!(
            s.update_losses(&[0], &[f32::NAN]).unwrap_err(),
            SplAdviseError::NonFinite {
                what: "losses",
                index: 0,
                ..
            }
        ));
        assert_eq!(s.seed_probabilities(), before);
        let two_classes =
            ClusterIndex::new(&[0.0, 1.0, 5.0], 1, &[0, 0, 1], vec![0, 1, 2]).unwrap();
        let err = MagnetSamplerConfig::new().init(two_classes).unwrap_err();
        assert_eq!(
            err,
            SplAdviseError::TooFewImpostors {
                cluster: 0,
                class: 0,
                available: 1,
                clusters_per_batch: 8
            }
        );
        let config = MagnetSamplerConfig::new().with_clusters_per_batch(1);
        assert_eq!(config.validate().unwrap_err().field, "clusters_per_batch");
    }

    #[test]
    fn magnet_sampler_batch_feeds_the_magnet_loss() {
        use burn::backend::NdArray;
        use burn::prelude::*;

        use crate::loss::MagnetLossConfig;

        type B = NdArray<f64>;
        let s = sampler(3, 4);
        let (data, _, _) = line_data(&LAYOUT);
        let mut rng = StdRng::seed_from_u64(17);
        let batch = s.sample(&mut rng);
        let n = batch.examples.len();
        let embedding: Vec<f64> = batch.examples.iter().map(|&i| data[i]).collect();

        // The magnet loss of the batch, computed here from its definition.
        let m = batch.cluster_ids.len();
        let mut means = vec![0.0; m];
        let mut counts = vec![0.0; m];
        for (x, &c) in embedding.iter().zip(&batch.clusters) {
            means[c] += x;
            counts[c] += 1.0;
        }
        for (mean, count) in means.iter_mut().zip(&counts) {
            *mean /= count;
        }
        let own: Vec<f64> = embedding
            .iter()
            .zip(&batch.clusters)
            .map(|(x, &c)| (x - means[c]).powi(2))
            .collect();
        let variance = own.iter().sum::<f64>() / (n as f64 - 1.0);
        let expected: Vec<f64> = (0..n)
            .map(|i| {
                let class = batch.cluster_classes[batch.clusters[i]];
                let denominator: f64 = (0..m)
                    .filter(|&j| batch.cluster_classes[j] != class)
                    .map(|j| (-(embedding[i] - means[j]).powi(2) / (2.0 * variance)).exp())
                    .sum();
                let numerator = -own[i] / (2.0 * variance) - 1.0;
                (denominator.ln() - numerator).max(0.0)
            })
            .collect();

        let device = Default::default();
        let embeddings = Tensor::<B, 2>::from_data(TensorData::new(embedding, [n, 1]), &device);
        let loss = MagnetLossConfig::new().init().unwrap().forward_per_example(
            embeddings,
            &batch.clusters,
            &batch.cluster_classes,
        );
        let got: Vec<f64> = loss.into_data().to_vec().unwrap();
        for (g, e) in got.iter().zip(&expected) {
            assert!((g - e).abs() < 1e-9, "{got:?} vs {expected:?}");
        }
    }
}
