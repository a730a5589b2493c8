//! DeepCluster v2 (documented on `DeepClusterV2`).

use burn::prelude::*;
use burn::record::Record;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Distribution, IndexingUpdateOp};
use curriculum_ssl_models::{Backbone, TrainableBackbone};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::branches::ViewThreads;
use super::encoder::Projected;
use super::ssl_method::{online_in, replica_in, MethodOutput, SslMethod, Views};
use crate::base::error::ConfigError;
use crate::base::seed::mix_seed;
use crate::base::Progress;
use crate::data_parallel::Replica;
use crate::head::MlpHeadConfig;
use crate::loss::{l2_normalize, spherical_kmeans, DeepClusterV2Loss, DeepClusterV2LossConfig};

/// The tag that seeds DeepCluster v2's k-means draws (with the run's seed, the epoch and the
/// head).
const KMEANS_TAG: u64 = 0x4443_7632_4b4d_4e53;

/// Configuration of [`DeepClusterV2`] (solo-learn's `deepclusterv2` defaults).
#[derive(Config, Debug)]
pub struct DeepClusterV2Config {
    /// Hidden width of the projector (solo-learn's 2048).
    #[config(default = 2048)]
    pub hidden_dim: usize,
    /// Width of the projections and the prototypes (128).
    #[config(default = 128)]
    pub output_dim: usize,
    /// Prototypes of each head: `K_h` k-means clusters per head (solo-learn's
    /// `[3000, 3000, 3000]`).
    #[config(default = "vec![3000, 3000, 3000]")]
    pub prototypes: Vec<usize>,
    /// Temperature `τ` of the softmax over the prototypes (0.1).
    #[config(default = 0.1)]
    pub temperature: f64,
    /// Rounds of each epoch's k-means (solo-learn's `kmeans_iters`, 10).
    #[config(default = 10)]
    pub kmeans_iterations: usize,
    /// Seed of the k-means draws: epoch `e`'s head `h` starts from rows drawn from
    /// `(seed, e, h)`.
    #[config(default = 0)]
    pub seed: u64,
}

impl DeepClusterV2Config {
    /// Builds DeepCluster v2 around a backbone made by `backbone`.
    ///
    /// # Errors
    /// No head, or a head of no prototypes (`prototypes`); a zero width (named by its field); a
    /// temperature that is not positive.
    pub fn init<B: Backend, M: Backbone<B>>(
        &self,
        backbone: impl Fn(&B::Device) -> M,
        device: &B::Device,
    ) -> Result<DeepClusterV2<B, M>, ConfigError> {
        let loss = DeepClusterV2LossConfig::new()
            .with_temperature(self.temperature)
            .init()?;
        if self.prototypes.is_empty() || self.prototypes.contains(&0) {
            return Err(ConfigError::new(
                "prototypes",
                format!(
                    "{:?}: every head needs at least one prototype, and there must be a head",
                    self.prototypes
                ),
            ));
        }
        let backbone = backbone(device);
        let projector =
            MlpHeadConfig::new(backbone.feature_dim(), self.hidden_dim, self.output_dim)
                .init(device)?;
        // solo-learn: each head a bias-free linear layer, its rows normalised, frozen; they only
        // matter once the first k-means has replaced them.
        let prototypes = self
            .prototypes
            .iter()
            .map(|&k| {
                l2_normalize(Tensor::random(
                    [k, self.output_dim],
                    Distribution::Normal(0.0, 1.0),
                    device,
                ))
            })
            .collect();
        Ok(DeepClusterV2 {
            online: Projected {
                backbone,
                projector,
            },
            loss,
            view_threads: ViewThreads::default(),
            memory: ClusterMemory {
                bank: Vec::new(),
                seen: Vec::new(),
                assignments: vec![Vec::new(); self.prototypes.len()],
                prototypes,
                clustered_for: 0,
            },
            kmeans_iterations: self.kmeans_iterations,
            seed: self.seed,
            indexes: None,
            staged: None,
            replica: None,
        })
    }
}

/// The checkpointed state of [`DeepClusterV2`]: the memory bank of the epoch's projections, the
/// last k-means's assignments and centroids (the prototypes), and the epoch it ran for.
#[derive(Record)]
pub struct DeepClusterV2State<B: Backend> {
    /// Each view's normalised projections by dataset index, `[M, D]` each (empty before the
    /// first step).
    pub bank: Vec<Tensor<B, 2>>,
    /// Which dataset indexes had a row written since the last k-means, `[M]`.
    pub seen: Vec<bool>,
    /// Each head's cluster of every dataset index, `−1` for none, `[H][M]`.
    pub assignments: Vec<Vec<i64>>,
    /// Each head's prototypes, `[K_h, D]`.
    pub prototypes: Vec<Tensor<B, 2>>,
    /// The epoch the last k-means ran for (0: none yet).
    pub clustered_for: usize,
}

/// DeepCluster v2. Build it with [`DeepClusterV2Config::init`].
///
/// DeepCluster v2 (Caron et al., "Unsupervised Learning of Visual Features by Contrasting
/// Cluster Assignments", NeurIPS 2020, <https://arxiv.org/abs/2006.09882>, its DeepCluster-v2
/// variant), as solo-learn trains it: a backbone and projector whose normalised projections of
/// both views are classified, by each of `H` heads of frozen prototypes, into the cluster a
/// k-means gave their image at the start of the epoch ([`DeepClusterV2Loss`]). Every step
/// writes the two views' normalised projections into a memory bank under the images' dataset
/// indexes; at the first step of every epoch after the first, head `h` runs a spherical k-means
/// ([`spherical_kmeans`]) of view `h mod 2`'s rows of the bank, its centroids become the head's
/// prototypes and its clusters the images' targets for that epoch. In the first epoch no image
/// has a target and the loss is 0 (solo-learn's is NaN with zero gradients: its networks do not
/// learn in the first epoch either). Each k-means clusters the rows written since the last one.
///
/// The method reads the batch's dataset indexes ([`SslMethod::uses_indexes`]). On several
/// replicas the bank takes every replica's rows and indexes (gathered), so every replica runs
/// the same k-means; each replica's loss is its share of the global batch's mean.
///
/// The math, the defaults, the paper followed and the worked values are in
/// `docs/methods.md#deepcluster-v2`.
#[derive(Debug, Clone)]
pub struct DeepClusterV2<B: Backend, M: Backbone<B>> {
    online: Projected<B, M>,
    loss: DeepClusterV2Loss,
    view_threads: ViewThreads<B, Projected<B, M>>,
    memory: ClusterMemory<B>,
    kmeans_iterations: usize,
    seed: u64,
    /// The dataset indexes of the next forward's images.
    indexes: Option<Vec<usize>>,
    /// The step's global indexes and normalised projections, kept by the optimiser step.
    staged: Option<(Vec<usize>, [Tensor<B, 2>; 2])>,
    replica: Option<Replica<B>>,
}

/// The bank, the assignments and the prototypes (see [`DeepClusterV2State`]).
#[derive(Debug, Clone)]
struct ClusterMemory<B: Backend> {
    bank: Vec<Tensor<B, 2>>,
    seen: Vec<bool>,
    assignments: Vec<Vec<i64>>,
    prototypes: Vec<Tensor<B, 2>>,
    clustered_for: usize,
}

impl<B: Backend> ClusterMemory<B> {
    /// Each head's target of the images `indexes` (`−1` for none), `[N]` each.
    fn targets(&self, indexes: &[usize], device: &B::Device) -> Vec<Tensor<B, 1, Int>> {
        self.assignments
            .iter()
            .map(|a| {
                let t: Vec<i64> = indexes
                    .iter()
                    .map(|&i| a.get(i).copied().unwrap_or(-1))
                    .collect();
                Tensor::from_data(TensorData::new(t, [indexes.len()]), device)
            })
            .collect()
    }

    /// Writes `rows[v]` (`[N, D]`) into view `v`'s bank under `indexes`, the bank grown to hold
    /// the largest; of an index that appears twice, the last row.
    fn store(&mut self, indexes: &[usize], rows: [Tensor<B, 2>; 2]) {
        let Some(&largest) = indexes.iter().max() else {
            return;
        };
        let device = rows[0].device();
        let dim = rows[0].dims()[1];
        let capacity = self.seen.len();
        if largest >= capacity {
            let grown = (largest + 1).max(2 * capacity);
            let extra = || Tensor::<B, 2>::zeros([grown - capacity, dim], &device);
            self.bank = match self.bank.len() {
                0 => vec![extra(), extra()],
                _ => self
                    .bank
                    .drain(..)
                    .map(|b| Tensor::cat(vec![b, extra()], 0))
                    .collect(),
            };
            self.seen.resize(grown, false);
            for a in &mut self.assignments {
                a.resize(grown, -1);
            }
        }
        // The last row of each index (a bank row written twice would add).
        let mut last = std::collections::HashMap::new();
        for (position, &index) in indexes.iter().enumerate() {
            last.insert(index, position);
        }
        let mut kept: Vec<(usize, usize)> = last.into_iter().collect();
        kept.sort_unstable();
        let int = |v: Vec<i64>| {
            let len = v.len();
            Tensor::<B, 1, Int>::from_data(TensorData::new(v, [len]), &device)
        };
        let at = int(kept.iter().map(|&(i, _)| i as i64).collect());
        let from = int(kept.iter().map(|&(_, p)| p as i64).collect());
        // `select_assign` adds on every backend: the old rows are cancelled (x + (−x) = 0
        // exactly), then the new ones added to zero (exact). The banks are taken out of `self`
        // so that no second handle keeps a backend from updating them in place.
        let banks = std::mem::take(&mut self.bank);
        self.bank = banks
            .into_iter()
            .zip(rows)
            .map(|(bank, rows)| {
                let old = bank.clone().select(0, at.clone());
                bank.select_assign(0, at.clone(), old.neg(), IndexingUpdateOp::Add)
                    .select_assign(
                        0,
                        at.clone(),
                        rows.select(0, from.clone()),
                        IndexingUpdateOp::Add,
                    )
            })
            .collect();
        for (index, _) in kept {
            self.seen[index] = true;
        }
    }

    /// The k-means of every head over the bank's rows written since the last one (the last
    /// epoch's), for epoch `epoch` (see [`DeepClusterV2`]): new prototypes and assignments, `−1`
    /// for the indexes no row was written for. Then no row counts as written: the next k-means
    /// clusters this epoch's rows only (solo-learn's bank is rewritten every epoch).
    fn cluster(&mut self, epoch: usize, iterations: usize, seed: u64) {
        self.clustered_for = epoch;
        let rows: Vec<usize> = (0..self.seen.len()).filter(|&i| self.seen[i]).collect();
        if rows.is_empty() {
            return;
        }
        self.seen.iter_mut().for_each(|s| *s = false);
        let m = rows.len();
        let device = self.bank[0].device();
        let rows_at = Tensor::<B, 1, Int>::from_data(
            TensorData::new(rows.iter().map(|&i| i as i64).collect::<Vec<_>>(), [m]),
            &device,
        );
        for (h, (prototypes, assignments)) in self
            .prototypes
            .iter_mut()
            .zip(&mut self.assignments)
            .enumerate()
        {
            let k = prototypes.dims()[0];
            let stream = mix_seed(mix_seed(KMEANS_TAG, seed), epoch as u64);
            let mut rng = StdRng::seed_from_u64(mix_seed(stream, h as u64));
            // solo-learn: `randperm(M)[:K]`; a bank of fewer rows than prototypes repeats some.
            let init: Vec<i64> = if m >= k {
                rand::seq::index::sample(&mut rng, m, k)
                    .into_iter()
                    .map(|i| i as i64)
                    .collect()
            } else {
                (0..k).map(|_| rng.random_range(0..m) as i64).collect()
            };
            let embeddings = self.bank[h % 2].clone().select(0, rows_at.clone());
            let (centroids, assigned) = spherical_kmeans(
                embeddings,
                Tensor::from_data(TensorData::new(init, [k]), &device),
                iterations,
            );
            let assigned: Vec<i64> = assigned.into_data().convert::<i64>().to_vec().unwrap();
            assignments.iter_mut().for_each(|a| *a = -1);
            for (&row, cluster) in rows.iter().zip(assigned) {
                assignments[row] = cluster;
            }
            *prototypes = centroids;
        }
    }
}

impl<B: Backend, M: Backbone<B>> DeepClusterV2<B, M> {
    /// Each head's prototypes, `[K_h, D]`.
    pub fn prototypes(&self) -> &[Tensor<B, 2>] {
        &self.memory.prototypes
    }

    /// Each head's cluster of every dataset index the bank holds, `−1` for none (`[H][M]`).
    pub fn assignments(&self) -> &[Vec<i64>] {
        &self.memory.assignments
    }

    /// View `v`'s bank of normalised projections by dataset index, `[M, D]` (`None` before the
    /// first step).
    pub fn bank(&self, view: usize) -> Option<Tensor<B, 2>> {
        self.memory.bank.get(view).cloned()
    }
}

impl<B: AutodiffBackend, M: TrainableBackbone<B>> SslMethod<B> for DeepClusterV2<B, M> {
    type Online = Projected<B, M>;
    type Backbone = M;
    type State = DeepClusterV2State<B>;

    online_in!(online, view_threads);

    fn state(&self) -> DeepClusterV2State<B> {
        let m = &self.memory;
        DeepClusterV2State {
            bank: m.bank.clone(),
            seen: m.seen.clone(),
            assignments: m.assignments.clone(),
            prototypes: m.prototypes.clone(),
            clustered_for: m.clustered_for,
        }
    }

    fn load_state(&mut self, state: DeepClusterV2State<B>) -> Result<(), ConfigError> {
        let heads: Vec<[usize; 2]> = self.memory.prototypes.iter().map(|p| p.dims()).collect();
        let theirs: Vec<[usize; 2]> = state.prototypes.iter().map(|p| p.dims()).collect();
        let rows = state.seen.len();
        if heads != theirs
            || state.assignments.len() != heads.len()
            || state.assignments.iter().any(|a| a.len() != rows)
            || !(state.bank.is_empty() || state.bank.len() == 2)
            || state.bank.iter().any(|b| b.dims() != [rows, heads[0][1]])
            || (state.bank.is_empty() && state.seen.contains(&true))
        {
            return Err(ConfigError::new(
                "prototypes",
                format!(
                    "the checkpoint's DeepCluster v2 state has heads {theirs:?} over a bank of \
                     {rows} rows, this method's heads are {heads:?}"
                ),
            ));
        }
        self.memory = ClusterMemory {
            bank: state.bank,
            seen: state.seen,
            assignments: state.assignments,
            prototypes: state.prototypes,
            clustered_for: state.clustered_for,
        };
        self.staged = None;
        Ok(())
    }

    /// # Panics
    /// Without the batch's indexes ([`SslMethod::set_indexes`] before every forward; the
    /// trainer hands them over).
    fn forward_views(&mut self, views: Views<B>, progress: Progress) -> MethodOutput<B> {
        let indexes = self.indexes.take().expect(
            "DeepCluster v2 reads the batch's dataset indexes: SslMethod::set_indexes before every \
             forward",
        );
        if progress.epoch > 0 && self.memory.clustered_for != progress.epoch {
            self.memory
                .cluster(progress.epoch, self.kmeans_iterations, self.seed);
        }
        let ([z1, z2], _) =
            self.view_threads
                .passes(&self.online, views.two(), true, |net, x, groups| {
                    (net.forward_grouped(x, groups), ())
                });
        let targets = self.memory.targets(&indexes, &z1.device());
        let terms =
            self.loss
                .head_terms(&[z1.clone(), z2.clone()], &self.memory.prototypes, &targets);
        let replica = self.replica.as_ref();
        let replicas = replica.map_or(1, Replica::replicas) as f64;
        // Each head's mean over the global batch's assigned rows, shared among the replicas.
        let loss = DeepClusterV2Loss::combine(terms, |count| {
            Replica::sum_on(replica, count).clamp_min(1.0) * (1.0 / replicas)
        });
        let rows = [z1.clone(), z2.clone()]
            .map(|z| Replica::gather_on(replica, l2_normalize(z.detach())).detach());
        let indexes = match replica {
            None => indexes,
            Some(r) => {
                let ours = indexes.iter().map(|&i| i as i64).collect::<Vec<_>>();
                let ours = Tensor::from_data(TensorData::new(ours, [indexes.len()]), &z1.device());
                let all: Vec<i64> = r
                    .gather_labels(ours)
                    .into_data()
                    .convert::<i64>()
                    .to_vec()
                    .unwrap();
                all.into_iter().map(|i| i as usize).collect()
            }
        };
        // Kept after the optimiser step (a redrawn attempt's never count).
        self.staged = Some((indexes, rows));
        MethodOutput::new(loss).with_embeddings([z1, z2])
    }

    replica_in!(
        /// The bank takes every replica's projections and indexes (gathered), so every replica
        /// runs the same k-means; each replica's loss is its rows' share of the global mean, and
        /// the replicas' average gradient is the one-device gradient (with synchronised batch
        /// norms).
        replica,
        view_threads
    );

    /// The step's projections go into the bank.
    fn after_step(&mut self, _: Progress) {
        if let Some((indexes, rows)) = self.staged.take() {
            self.memory.store(&indexes, rows);
        }
    }

    fn uses_indexes(&self) -> bool {
        true
    }

    fn set_indexes(&mut self, indexes: &[usize]) {
        self.indexes = Some(indexes.to_vec());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::testing::TinyBackbone as Tiny;
    use crate::method::testing::{host, images, progress, Ad};
    use crate::optim::SgdConfig;
    use burn::optim::Optimizer;

    fn deepcluster() -> DeepClusterV2<Ad, Tiny<Ad>> {
        crate::method::init_method::<Ad, _, ConfigError>(&Default::default(), 7, |d| {
            DeepClusterV2Config::new()
                .with_hidden_dim(8)
                .with_output_dim(4)
                .with_prototypes(vec![3, 2])
                .with_seed(5)
                .init(|d| Tiny::new(16, 6, d), d)
        })
        .unwrap()
    }

    /// One SGD step on images `shift`, `shift + 1` of dataset indexes `indexes`; the loss.
    fn step(
        m: &mut DeepClusterV2<Ad, Tiny<Ad>>,
        indexes: &[usize],
        at: Progress,
        shift: f64,
    ) -> f64 {
        let n = indexes.len();
        m.set_indexes(indexes);
        let out = m.forward(images(n, shift), images(n, shift + 1.0), at);
        let loss = host(out.loss.clone())[0];
        let grads = m.gradients(&out.loss);
        let mut optim = SgdConfig::new()
            .init::<Ad, Projected<Ad, Tiny<Ad>>>()
            .unwrap();
        m.set_online(optim.step(0.5, m.online().clone(), grads));
        m.after_step(at);
        loss
    }

    fn normalised(z: Tensor<Ad, 2>) -> Vec<f64> {
        host(l2_normalize(z))
    }

    /// In the first epoch no image has a cluster: the loss is 0, and the step's normalised
    /// projections of each view go into the bank under the images' indexes (the bank grown to
    /// the largest; an index given twice keeps its last row).
    #[test]
    fn the_first_epoch_fills_the_bank_by_index() {
        let mut m = deepcluster();
        let online = m.online().clone();
        let (z1, z2) = (
            online.forward(images(4, 0.0)),
            online.forward(images(4, 1.0)),
        );
        let loss = step(&mut m, &[6, 2, 9, 2], progress(0, 10, 0, 2), 0.0);
        assert_eq!(loss, 0.0);
        let state = m.state();
        assert_eq!(state.seen.len(), 10);
        let seen: Vec<usize> = (0..10).filter(|&i| state.seen[i]).collect();
        assert_eq!(seen, [2, 6, 9]);
        for (view, z) in [z1, z2].into_iter().enumerate() {
            let bank = host(m.bank(view).unwrap());
            let z = normalised(z);
            for (index, row) in [(6, 0), (9, 2), (2, 3)] {
                assert_eq!(
                    bank[index * 4..index * 4 + 4],
                    z[row * 4..row * 4 + 4],
                    "view {view}"
                );
            }
            assert!(
                bank[0..8].iter().all(|&v| v == 0.0),
                "unseen rows stay empty"
            );
        }
        assert!(state.assignments.iter().flatten().all(|&a| a == -1));
    }

    /// The first step of the second epoch clusters the bank: head `h`'s prototypes are the
    /// spherical k-means of view `h mod 2`'s rows from the rows drawn from `(seed, epoch, h)`,
    /// and the loss is [`DeepClusterV2Loss`] of the projections towards the images' clusters.
    #[test]
    fn the_second_epoch_learns_the_first_epochs_clusters() {
        let mut m = deepcluster();
        step(&mut m, &[0, 1, 2, 3], progress(0, 4, 0, 2), 0.0);
        step(&mut m, &[4, 5, 6, 7], progress(1, 4, 0, 2), 2.0);
        let banks = [m.bank(0).unwrap(), m.bank(1).unwrap()];
        let online = m.online().clone();
        let (v1, v2) = (images::<Ad>(4, 4.0), images::<Ad>(4, 5.0));
        let (z1, z2) = (online.forward(v1.clone()), online.forward(v2.clone()));
        m.set_indexes(&[7, 1, 4, 2]);
        let got = host(m.forward(v1, v2, progress(2, 4, 1, 2)).loss)[0];
        let mut expected_prototypes = Vec::new();
        let mut targets = Vec::new();
        for (h, k) in [3, 2].into_iter().enumerate() {
            let stream = mix_seed(mix_seed(KMEANS_TAG, 5), 1);
            let mut rng = StdRng::seed_from_u64(mix_seed(stream, h as u64));
            let init: Vec<i64> = rand::seq::index::sample(&mut rng, 8, k)
                .into_iter()
                .map(|i| i as i64)
                .collect();
            let (c, a) = spherical_kmeans(
                banks[h % 2].clone(),
                Tensor::from_data(TensorData::new(init, [k]), &Default::default()),
                10,
            );
            assert_eq!(host(m.prototypes()[h].clone()), host(c.clone()), "head {h}");
            let a: Vec<i64> = a.into_data().convert::<i64>().to_vec().unwrap();
            assert_eq!(m.assignments()[h], a, "head {h}");
            targets.push(Tensor::from_data(
                TensorData::new(vec![a[7], a[1], a[4], a[2]], [4]),
                &Default::default(),
            ));
            expected_prototypes.push(c);
        }
        assert!(
            !m.state().seen.contains(&true),
            "the next k-means clusters the rows written from now on"
        );
        let loss = DeepClusterV2LossConfig::new().init().unwrap();
        let expected = host(loss.forward(&[z1, z2], &expected_prototypes, &targets))[0];
        assert!(expected > 0.0);
        assert!((got - expected).abs() < 1e-12, "{got} vs {expected}");
    }

    /// The state holds the bank, the clusters and the epoch they are for: a method that loads
    /// it continues exactly as the one it was taken from, through the next epoch's k-means.
    #[test]
    fn a_restored_state_continues_exactly() {
        let mut m = deepcluster();
        step(&mut m, &[0, 1, 2, 3], progress(0, 6, 0, 3), 0.0);
        step(&mut m, &[4, 5, 6, 7], progress(1, 6, 0, 3), 1.0);
        step(&mut m, &[3, 2, 1, 0], progress(2, 6, 1, 3), 2.0);
        let mut resumed = deepcluster();
        resumed.set_online(m.online().clone());
        resumed.load_state(m.state()).unwrap();
        for (s, epoch) in [(3, 1), (4, 2), (5, 2)] {
            let indexes = [s % 8, (s + 3) % 8, (s + 5) % 8, (s + 6) % 8];
            let a = step(&mut m, &indexes, progress(s, 6, epoch, 3), s as f64);
            let b = step(&mut resumed, &indexes, progress(s, 6, epoch, 3), s as f64);
            assert_eq!(a, b, "step {s}");
            assert!(a > 0.0, "step {s}");
        }
        assert_eq!(m.assignments(), resumed.assignments());
        let other = crate::method::init_method::<Ad, _, ConfigError>(&Default::default(), 7, |d| {
            DeepClusterV2Config::new()
                .with_hidden_dim(8)
                .with_output_dim(4)
                .with_prototypes(vec![3])
                .init(|d| Tiny::new(16, 6, d), d)
        });
        assert_eq!(
            other.unwrap().load_state(m.state()).unwrap_err().field,
            "prototypes"
        );
    }

    /// A forward without the batch's indexes is a programming error, named.
    #[test]
    #[should_panic(expected = "set_indexes before every forward")]
    fn a_forward_without_indexes_panics() {
        let mut m = deepcluster();
        let _ = m.forward(images(2, 0.0), images(2, 1.0), progress(0, 1, 0, 1));
    }

    #[test]
    fn bad_settings_are_named() {
        for prototypes in [vec![], vec![3, 0]] {
            let e = DeepClusterV2Config::new()
                .with_prototypes(prototypes)
                .init::<Ad, _>(|d| Tiny::new(16, 6, d), &Default::default())
                .unwrap_err();
            assert_eq!(e.field, "prototypes");
        }
        let e = DeepClusterV2Config::new()
            .with_temperature(0.0)
            .init::<Ad, _>(|d| Tiny::new(16, 6, d), &Default::default())
            .unwrap_err();
        assert_eq!(e.field, "temperature");
    }
}
