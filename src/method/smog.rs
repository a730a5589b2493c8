//! SMoG (documented on `Smog`).

use burn::prelude::*;
use burn::record::Record;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::Distribution;
use curriculum_ssl_models::{Backbone, TrainableBackbone};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::encoder::{online_with_copy, Predicted, Projected};
use super::momentum::MomentumEncoder;
use super::running::Running;
use super::ssl_method::{online_in, replica_in, MethodOutput, SslMethod, Views};
use crate::base::error::ConfigError;
use crate::base::seed::mix_seed;
use crate::base::Progress;
use crate::data_parallel::Replica;
use crate::head::MlpHeadConfig;
use crate::loss::{assigned_means, host_indices, l2_normalize, SmogLoss, SmogLossConfig};

/// The tag that seeds SMoG's k-means draws (with the run's seed and the step).
const KMEANS_TAG: u64 = 0x534d_6f47_4b4d_4e53;

/// Configuration of [`Smog`] (lightly 1.6's example's defaults).
#[derive(Config, Debug)]
pub struct SmogConfig {
    /// Hidden width of the projector (lightly's example's 2048).
    #[config(default = 2048)]
    pub hidden_dim: usize,
    /// Width of the projections, the predictions and the group features (128).
    #[config(default = 128)]
    pub output_dim: usize,
    /// Hidden width of the predictor (2048).
    #[config(default = 2048)]
    pub predictor_hidden_dim: usize,
    /// Number of groups `K` (lightly's example's 300).
    #[config(default = 300)]
    pub groups: usize,
    /// Temperature `τ` of the logits (0.1).
    #[config(default = 0.1)]
    pub temperature: f64,
    /// Momentum `β` of the group features (0.99).
    #[config(default = 0.99)]
    pub beta: f64,
    /// Momentum of the momentum encoder, constant (lightly's example's 0.99).
    #[config(default = 0.99)]
    pub momentum: f64,
    /// Steps between two resets of the groups (k-means of the memory bank) and of the momentum
    /// encoder (a copy of the online one): lightly's example's 300 (the paper's Table 7b).
    #[config(default = 300)]
    pub reset_interval: usize,
    /// Rows of the memory bank of online projections the k-means clusters (lightly's example:
    /// `300 · 256`, the projections of the steps between two resets at batch 256).
    #[config(default = 76800)]
    pub memory_bank_size: usize,
    /// Most Lloyd iterations of a reset's k-means (scikit-learn's `max_iter`, 300); it stops
    /// earlier when no row changes its cluster.
    #[config(default = 300)]
    pub kmeans_iterations: usize,
    /// Seed of the k-means draws: a reset's draws come from `(seed, step)`.
    #[config(default = 0)]
    pub seed: u64,
}

impl SmogConfig {
    /// Builds SMoG around a backbone made by `backbone` (called twice: online, and a fresh
    /// module into which the momentum copy is loaded).
    ///
    /// # Errors
    /// A zero width or count (named by its field); a temperature, `beta` or momentum out of
    /// range; a memory bank with fewer rows than `groups` (`memory_bank_size`); a zero
    /// `reset_interval`.
    pub fn init<B: Backend, M: Backbone<B>>(
        &self,
        backbone: impl Fn(&B::Device) -> M,
        device: &B::Device,
    ) -> Result<Smog<B, M>, ConfigError> {
        let loss = SmogLossConfig::new()
            .with_temperature(self.temperature)
            .with_beta(self.beta)
            .init()?;
        for (field, value) in [
            ("output_dim", self.output_dim),
            ("groups", self.groups),
            ("reset_interval", self.reset_interval),
        ] {
            if value == 0 {
                return Err(ConfigError::new(field, "must be at least 1"));
            }
        }
        if self.memory_bank_size < self.groups {
            return Err(ConfigError::new(
                "memory_bank_size",
                format!(
                    "the k-means of the memory bank's {} rows cannot find {} groups",
                    self.memory_bank_size, self.groups
                ),
            ));
        }
        crate::base::seed::check_count(
            (self.memory_bank_size as u64).saturating_mul(self.output_dim as u64),
            "SMoG's memory bank",
        )?;
        // lightly's `SMoGProjectionHead`: the output layer's batch norm without scale and shift.
        let projector = |width| {
            MlpHeadConfig::new(width, self.hidden_dim, self.output_dim)
                .with_output_batch_norm(true)
                .with_output_batch_norm_affine(false)
        };
        let predictor =
            MlpHeadConfig::new(self.output_dim, self.predictor_hidden_dim, self.output_dim);
        let (online, copy) = online_with_copy(
            backbone,
            projector,
            |backbone, projector| {
                Predicted::with_predictor(backbone, projector, &predictor, device)
            },
            |online, fresh| {
                MomentumEncoder::new(&online.encoder(), fresh, self.momentum, false, "momentum")
            },
            device,
        )?;
        // lightly's example: `torch.rand(n_groups, 128)`.
        let groups = Tensor::random(
            [self.groups, self.output_dim],
            Distribution::Uniform(0.0, 1.0),
            device,
        );
        Ok(Smog {
            online,
            copy,
            groups: Running::new(groups),
            bank: MemoryBank::new(self.memory_bank_size, self.output_dim, device),
            loss,
            reset_interval: self.reset_interval,
            kmeans_iterations: self.kmeans_iterations,
            seed: self.seed,
            replica: None,
        })
    }
}

/// The checkpointed state of [`Smog`]: the momentum encoder, the group features and the memory
/// bank with its pointer.
#[derive(Record)]
pub struct SmogState<B: Backend, M: Backbone<B>> {
    /// The momentum encoder's record (weights and batch-norm statistics).
    pub copy: <Projected<B, M> as Module<B>>::Record,
    /// The group features, `[K, D]`.
    pub groups: Tensor<B, 2>,
    /// The memory bank of online projections, `[S, D]`.
    pub bank: Tensor<B, 2>,
    /// The row the next projections are written to.
    pub pointer: usize,
}

/// SMoG. Build it with [`SmogConfig::init`].
///
/// SMoG (Pang et al., "Unsupervised Visual Representation Learning by Synchronous Momentum
/// Grouping", ECCV 2022, <https://arxiv.org/abs/2207.06167>), as lightly 1.6's example trains it:
/// an online backbone, projector and predictor, a momentum copy of the backbone and projector,
/// and `K` group features. Each step takes one view through the online network and the other
/// through the copy (the views swap at odd steps); the copy's projections are assigned to their
/// nearest groups (the targets), the groups move by the online projections assigned to them
/// (`β·g + (1 − β)·mean`: the synchronous momentum grouping), and the online predictions are
/// classified against the moved groups ([`SmogLoss`]). The online projections fill a memory
/// bank; every `reset_interval` steps the groups are reset to the normalised centres of a k-means
/// of the bank and the copy to the online weights (the paper's Table 7b); between resets the copy
/// moves by a constant momentum after every step.
///
/// On several replicas the groups move by the global batch's projections (gathered, with their
/// gradient) and the bank takes every replica's rows: every replica holds the same groups and
/// bank, and draws the same k-means; each replica's loss is the mean over its images.
///
/// The math, the defaults, the paper followed and the worked values are in
/// `docs/methods.md#smog`.
#[derive(Debug, Clone)]
pub struct Smog<B: Backend, M: Backbone<B>> {
    online: Predicted<B, M>,
    copy: MomentumEncoder<Projected<B, M>>,
    groups: Running<B, 2>,
    bank: MemoryBank<B>,
    loss: SmogLoss,
    reset_interval: usize,
    kmeans_iterations: usize,
    seed: u64,
    /// This method's replica in a data-parallel run.
    replica: Option<Replica<B>>,
}

impl<B: Backend, M: Backbone<B>> Smog<B, M> {
    /// The momentum copy of the online encoder.
    pub fn copy(&self) -> &MomentumEncoder<Projected<B, M>> {
        &self.copy
    }

    /// The group features, `[K, D]`.
    pub fn groups(&self) -> Tensor<B, 2> {
        self.groups.value()
    }

    /// The memory bank, `[S, D]`, and the row the next projections are written to.
    pub fn memory_bank(&self) -> (Tensor<B, 2>, usize) {
        (self.bank.rows.clone(), self.bank.pointer)
    }

    /// Whether the step after `progress` resets the groups and the copy.
    fn resets_after(&self, progress: Progress) -> bool {
        (progress.step + 1).is_multiple_of(self.reset_interval)
    }
}

impl<B: AutodiffBackend, M: TrainableBackbone<B>> SslMethod<B> for Smog<B, M> {
    type Online = Predicted<B, M>;
    type Backbone = M;
    type State = SmogState<B, M>;

    online_in!(online);

    fn state(&self) -> SmogState<B, M> {
        SmogState {
            copy: self.copy.record(),
            groups: self.groups.value(),
            bank: self.bank.rows.clone(),
            pointer: self.bank.pointer,
        }
    }

    fn load_state(&mut self, state: SmogState<B, M>) -> Result<(), ConfigError> {
        self.groups
            .restore(state.groups, "groups", "SMoG's group features")?;
        self.bank.restore(state.bank, state.pointer)?;
        self.copy.load_record(state.copy);
        Ok(())
    }

    fn forward_views(&mut self, views: Views<B>, progress: Progress) -> MethodOutput<B> {
        let [view1, view2] = views.two();
        // lightly's example swaps the views every second step.
        let swapped = progress.step % 2 == 1;
        let (online_view, copy_view) = if swapped {
            (view2, view1)
        } else {
            (view1, view2)
        };
        let (encoded, predicted) = self.online.forward(online_view);
        let momentum = self.copy.network().forward(copy_view.detach()).detach();
        let gathered = Replica::gather_on(self.replica.as_ref(), encoded.clone());
        let out = self.loss.forward(
            predicted,
            gathered.clone(),
            momentum.clone(),
            self.groups.value(),
        );
        // Kept after the optimiser step (a redrawn attempt's never count).
        self.groups.propose(out.groups);
        self.bank.stage(gathered.detach());
        let embeddings = if swapped {
            [momentum, encoded.detach()]
        } else {
            [encoded.detach(), momentum]
        };
        self.copy.output(out.loss, progress, embeddings)
    }

    replica_in!(
        /// The groups move by the global batch's projections (gathered: their gradient returns to
        /// the replica that computed them) and the memory bank takes every replica's rows, so every
        /// replica holds the same groups and bank; each replica's loss is the mean over its images,
        /// and the replicas' average gradient is the one-device gradient (with synchronised batch
        /// norms).
        replica
    );

    /// The step's groups and projections are kept; then, before every `reset_interval`-th step,
    /// the groups become the normalised k-means centres of the memory bank and the copy the
    /// online encoder (lightly's example: `reset_group_features`, `reset_momentum_weights`);
    /// before every other step the copy moves by its momentum.
    fn after_step(&mut self, progress: Progress) {
        self.groups.commit();
        self.bank.commit();
        if self.resets_after(progress) {
            let k = self.groups.value().dims()[0];
            let seed = mix_seed(mix_seed(KMEANS_TAG, self.seed), progress.step as u64);
            let centres = device_kmeans(
                self.bank.rows.clone(),
                k,
                self.kmeans_iterations,
                &mut StdRng::seed_from_u64(seed),
            );
            self.groups = Running::new(l2_normalize(centres));
            self.copy.reset_to(&self.online);
        } else {
            self.copy.update(&self.online, progress);
        }
    }
}

/// The memory bank of online projections (lightly's `MemoryBankModule`): random unit rows at
/// first, each step's rows written from the pointer on, those that do not fit before the end
/// dropped and the pointer back at the start (as lightly's `_dequeue_and_enqueue`). The step
/// stages its rows and the optimiser step commits them.
#[derive(Debug, Clone)]
struct MemoryBank<B: Backend> {
    rows: Tensor<B, 2>,
    pointer: usize,
    staged: Option<Tensor<B, 2>>,
}

impl<B: Backend> MemoryBank<B> {
    fn new(size: usize, dim: usize, device: &B::Device) -> Self {
        let rows = Tensor::random([size, dim], Distribution::Normal(0.0, 1.0), device);
        Self {
            rows: l2_normalize(rows),
            pointer: 0,
            staged: None,
        }
    }

    fn stage(&mut self, rows: Tensor<B, 2>) {
        self.staged = Some(rows.detach());
    }

    fn commit(&mut self) {
        let Some(batch) = self.staged.take() else {
            return;
        };
        let [size, dim] = self.rows.dims();
        let n = batch.dims()[0];
        let start = self.pointer;
        if start + n >= size {
            let fit = size - start;
            self.rows = self
                .rows
                .clone()
                .slice_assign([start..size, 0..dim], batch.slice(0..fit));
            self.pointer = 0;
        } else {
            self.rows = self
                .rows
                .clone()
                .slice_assign([start..start + n, 0..dim], batch);
            self.pointer = start + n;
        }
    }

    fn restore(&mut self, rows: Tensor<B, 2>, pointer: usize) -> Result<(), ConfigError> {
        if rows.dims() != self.rows.dims() || pointer >= rows.dims()[0] {
            return Err(ConfigError::new(
                "memory_bank_size",
                format!(
                    "the checkpoint's memory bank has shape {:?} (pointer {pointer}), this one {:?}",
                    rows.dims(),
                    self.rows.dims()
                ),
            ));
        }
        self.rows = rows;
        self.pointer = pointer;
        self.staged = None;
        Ok(())
    }
}

/// `k` cluster centres of the rows of `rows` (Euclidean k-means) computed on the rows' device:
/// the distances are matrix products on the backend, each iteration reads back only the
/// assignments (the crate's other k-means, SPL-ADVisE's [`crate::spl_advise::kmeans`], runs on the host
/// over `f64` slices, too slow for a bank of tens of thousands of rows). k-means++ seeding (the first
/// centre uniform, each next one drawn with probability proportional to the squared distance to
/// the nearest centre so far) from `rng`, then at most `iterations` Lloyd iterations, stopping
/// when no row changes its cluster; a cluster left empty keeps its centre. scikit-learn's
/// `KMeans` (lightly's example's) seeds greedily and tests convergence by the centres' shift:
/// the same algorithm, not the same draws.
///
/// # Shapes
/// - `rows`: `[N, D]`, `N >= k >= 1` → `[k, D]`
pub fn device_kmeans<B: Backend>(
    rows: Tensor<B, 2>,
    k: usize,
    iterations: usize,
    rng: &mut StdRng,
) -> Tensor<B, 2> {
    let [n, _] = rows.dims();
    let device = rows.device();
    let rows = rows.detach();
    let norms = rows.clone().powf_scalar(2.0).sum_dim(1); // [N, 1]
    let host = |t: Tensor<B, 2>| -> Vec<f64> { t.into_data().convert::<f64>().to_vec().unwrap() };
    let distances_to = |index: usize| -> Vec<f64> {
        let centre = rows.clone().slice(index..index + 1); // [1, D]
        let square = centre.clone().powf_scalar(2.0).sum();
        let d2 =
            norms.clone() - rows.clone().matmul(centre.transpose()) * 2.0 + square.reshape([1, 1]);
        host(d2).into_iter().map(|v| v.max(0.0)).collect()
    };
    let mut chosen = vec![rng.random_range(0..n)];
    let mut nearest = distances_to(chosen[0]);
    while chosen.len() < k {
        let total: f64 = nearest.iter().sum();
        let pick = if total > 0.0 && total.is_finite() {
            let mut draw = rng.random::<f64>() * total;
            let mut pick = n - 1;
            for (i, &w) in nearest.iter().enumerate() {
                if draw < w {
                    pick = i;
                    break;
                }
                draw -= w;
            }
            pick
        } else {
            rng.random_range(0..n)
        };
        chosen.push(pick);
        for (a, b) in nearest.iter_mut().zip(distances_to(pick)) {
            *a = a.min(b);
        }
    }
    let index = Tensor::<B, 1, Int>::from_data(
        TensorData::new(chosen.iter().map(|&i| i as i64).collect::<Vec<_>>(), [k]),
        &device,
    );
    let mut centres = rows.clone().select(0, index);
    let mut previous: Option<Vec<usize>> = None;
    for _ in 0..iterations {
        let centre_norms = centres.clone().powf_scalar(2.0).sum_dim(1).transpose(); // [1, k]
        let scores = rows.clone().matmul(centres.clone().transpose()) * (-2.0) + centre_norms;
        let assigned = host_indices(scores.argmin(1).reshape([n]));
        if previous.as_ref() == Some(&assigned) {
            break;
        }
        let (means, present) = assigned_means(rows.clone(), &assigned, k);
        centres = means * present.clone() + centres * (present.neg() + 1.0);
        previous = Some(assigned);
    }
    centres
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::testing::TinyBackbone as Tiny;
    use crate::method::testing::{built, host, images, progress, Ad};
    use crate::optim::SgdConfig;
    use burn::optim::Optimizer;

    fn smog(reset_interval: usize) -> Smog<Ad, Tiny<Ad>> {
        built(7, |d| {
            SmogConfig::new()
                .with_hidden_dim(8)
                .with_predictor_hidden_dim(8)
                .with_output_dim(4)
                .with_groups(3)
                .with_memory_bank_size(8)
                .with_reset_interval(reset_interval)
                .with_momentum(0.9)
                .init(|d| Tiny::new(16, 6, d), d)
        })
    }

    fn step(m: &mut Smog<Ad, Tiny<Ad>>, at: Progress, shift: f64) -> f64 {
        let out = m.forward(images(4, shift), images(4, shift + 1.0), at);
        let loss = host(out.loss.clone())[0];
        commit(m, out, at);
        loss
    }

    /// An SGD step (rate 0.5) on the loss of `out`, then the method's `after_step`.
    fn commit(m: &mut Smog<Ad, Tiny<Ad>>, out: MethodOutput<Ad>, at: Progress) {
        let grads = m.gradients(&out.loss);
        let mut optim = SgdConfig::new()
            .init::<Ad, Predicted<Ad, Tiny<Ad>>>()
            .unwrap();
        m.set_online(optim.step(0.5, m.online().clone(), grads));
        m.after_step(at);
    }

    /// The loss is the [`SmogLoss`] of the online predictions of the first view, the online
    /// projections of it and the copy's projections of the second; at an odd step the views
    /// swap.
    #[test]
    fn the_loss_is_smogs_on_the_views_swapped_at_odd_steps() {
        let mut m = smog(100);
        let (v1, v2) = (images::<Ad>(4, 0.0), images::<Ad>(4, 1.0));
        let loss = SmogLossConfig::new().init().unwrap();
        for s in [0, 1] {
            let (a, b) = if s == 0 { (&v1, &v2) } else { (&v2, &v1) };
            let (z, p) = m.online().forward(a.clone());
            let zm = m.copy().network().forward(b.clone());
            let expected = host(loss.forward(p, z, zm, m.groups()).loss)[0];
            let got = host(
                m.forward(v1.clone(), v2.clone(), progress(s, 10, 0, 1))
                    .loss,
            )[0];
            assert!(
                (got - expected).abs() < 1e-12,
                "step {s}: {got} vs {expected}"
            );
        }
    }

    /// The groups and the bank change only once the step is committed; the bank takes the
    /// step's online projections at its pointer; the copy moves by its constant momentum.
    #[test]
    fn a_step_commits_groups_and_bank_and_moves_the_copy() {
        let mut m = smog(100);
        let (groups, (bank, pointer)) = (host(m.groups()), m.memory_bank());
        assert_eq!(pointer, 0);
        let at = progress(0, 10, 0, 1);
        let (z, _) = m.online().forward(images(4, 0.0));
        let copy_before = host(m.copy().network().backbone.fc.weight.val());
        let out = m.forward(images(4, 0.0), images(4, 1.0), at);
        assert_eq!(host(m.groups()), groups, "proposed, not yet kept");
        commit(&mut m, out, at);
        assert_ne!(host(m.groups()), groups);
        let (bank_after, pointer) = m.memory_bank();
        assert_eq!(pointer, 4);
        assert_eq!(host(bank_after.clone().slice(0..4)), host(z));
        assert_eq!(host(bank_after.slice(4..8)), host(bank.slice(4..8)));
        let online = host(m.online().backbone.fc.weight.val());
        let after = host(m.copy().network().backbone.fc.weight.val());
        for ((a, c), o) in after.iter().zip(&copy_before).zip(&online) {
            assert!((a - (0.9 * c + 0.1 * o)).abs() < 1e-12);
        }
    }

    /// Before the `reset_interval`-th step the groups become the normalised k-means centres of
    /// the bank (drawn from the seed and the step: the same twice) and the copy the online
    /// encoder.
    #[test]
    fn a_reset_clusters_the_bank_and_copies_the_online_encoder() {
        let mut m = smog(2);
        let mut twin = m.clone();
        step(&mut m, progress(0, 10, 0, 1), 0.0);
        step(&mut twin, progress(0, 10, 0, 1), 0.0);
        step(&mut m, progress(1, 10, 0, 1), 2.0);
        step(&mut twin, progress(1, 10, 0, 1), 2.0);
        let groups = host(m.groups());
        assert_eq!(groups, host(twin.groups()), "the k-means draws repeat");
        for row in groups.chunks(4) {
            let norm = row.iter().map(|v| v * v).sum::<f64>().sqrt();
            assert!((norm - 1.0).abs() < 1e-12);
        }
        assert_eq!(
            host(m.copy().network().backbone.fc.weight.val()),
            host(m.online().backbone.fc.weight.val())
        );
        let (bank, pointer) = m.memory_bank();
        assert_eq!(pointer, 0, "two steps of four rows fill the bank of eight");
        let expected = host(device_kmeans(
            bank,
            3,
            300,
            &mut StdRng::seed_from_u64(mix_seed(mix_seed(KMEANS_TAG, 0), 1)),
        ));
        let normalised = host(l2_normalize(Tensor::<Ad, 2>::from_data(
            TensorData::new(expected, [3, 4]),
            &Default::default(),
        )));
        assert_eq!(groups, normalised);
    }

    /// k-means on well separated clusters finds their means.
    #[test]
    fn device_kmeans_finds_separated_clusters() {
        let points = [
            [0.0, 0.0],
            [0.2, 0.0],
            [0.0, 0.2],
            [10.0, 10.0],
            [10.2, 10.0],
            [10.0, 10.2],
        ];
        let rows = Tensor::<Ad, 2>::from_data(
            TensorData::new(points.concat(), [6, 2]),
            &Default::default(),
        );
        let mut centres: Vec<Vec<f64>> =
            host(device_kmeans(rows, 2, 10, &mut StdRng::seed_from_u64(3)))
                .chunks(2)
                .map(<[f64]>::to_vec)
                .collect();
        centres.sort_by(|a, b| a[0].total_cmp(&b[0]));
        let expected = [[0.2 / 3.0, 0.2 / 3.0], [10.0 + 0.2 / 3.0, 10.0 + 0.2 / 3.0]];
        for (c, e) in centres.iter().zip(&expected) {
            assert!(
                (c[0] - e[0]).abs() < 1e-12 && (c[1] - e[1]).abs() < 1e-12,
                "{c:?}"
            );
        }
    }

    /// The state holds the copy, the groups and the bank: a method that loads it continues
    /// exactly as the one it was taken from, through a reset.
    #[test]
    fn a_restored_state_continues_exactly() {
        let mut m = smog(3);
        step(&mut m, progress(0, 10, 0, 1), 0.0);
        let mut resumed = smog(3);
        resumed.set_online(m.online().clone());
        resumed.load_state(m.state()).unwrap();
        for s in 1..5 {
            let a = step(&mut m, progress(s, 10, 0, 1), s as f64);
            let b = step(&mut resumed, progress(s, 10, 0, 1), s as f64);
            assert_eq!(a, b, "step {s}");
        }
        assert_eq!(host(m.groups()), host(resumed.groups()));
    }

    #[test]
    fn bad_settings_are_named() {
        let e = SmogConfig::new()
            .with_groups(10)
            .with_memory_bank_size(5)
            .init::<Ad, _>(|d| Tiny::new(16, 6, d), &Default::default())
            .unwrap_err();
        assert_eq!(e.field, "memory_bank_size");
        let e = SmogConfig::new()
            .with_reset_interval(0)
            .init::<Ad, _>(|d| Tiny::new(16, 6, d), &Default::default())
            .unwrap_err();
        assert_eq!(e.field, "reset_interval");
        let e = SmogConfig::new()
            .with_beta(2.0)
            .init::<Ad, _>(|d| Tiny::new(16, 6, d), &Default::default())
            .unwrap_err();
        assert_eq!(e.field, "beta");
    }
}
