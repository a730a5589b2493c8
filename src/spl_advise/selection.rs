//! The student's example selections of SPL-ADVisE, SPLD and random sampling as hooks of the
//! training loop (documented on the parent module's page, `spl_advise`, and on `PaceConfig`).

use std::path::Path;
use std::time::Instant;

use burn::config::Config;
use burn::module::AutodiffModule;
use burn::optim::{GradientsParams, Optimizer};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::TrainableBackbone;
use serde::{Deserialize, Serialize};

use super::embedding::EmbeddingNet;
use super::kmeans::{cluster_per_class, ClusterIndex, ClusterIndexState, KMeansConfig};
use super::magnet_sampler::{MagnetSampler, MagnetSamplerConfig, MagnetSamplerState};
use super::spld::{Spld, SpldConfig, SpldState};
use crate::base::error::{in_range, ConfigError};
use crate::base::seed::mix_seed;
use crate::base::Progress;
use crate::data::ImageArray;
use crate::loss::{MagnetLoss, MagnetLossConfig};
use crate::train::{
    files, read_record, to_bytes, Cell, ClassifierAugmentConfig, Column, EpochReport, Hook,
    RunView, SupervisedTask, TrainError,
};

/// SPLD's pace: its parameters and how they are set from the losses.
///
/// The paper sets `λ` and `γ` "according to the ranked samples, and then absolute values are
/// calculated accordingly" (§3.2). [`PaceConfig::calibrate_quantile`] does that: at the first
/// selection `λ` becomes that quantile of the student's losses (the median by default: half the
/// examples qualify on easiness alone) and `γ = calibrate_gamma_ratio · λ` (1 by default: the
/// easiest example of a cluster is kept below `2λ`, the fourth below `1.27λ`, the hundredth
/// below `1.05λ`, so diversity adds the easiest few of every cluster); after each epoch both
/// grow by `μ`. Without calibration, [`SpldConfig`]'s absolute values are used as they are.
/// At initialisation the losses rank nothing (every example is near `ln(classes)`), so the first
/// [`PaceConfig::warmup_epochs`] epochs (1 by default) train on every example, and the
/// calibration happens at the first selection after them.
#[derive(Config, Debug)]
pub struct PaceConfig {
    /// `λ`, `γ` (their ratio, when calibrated) and the growth `μ`.
    pub spld: SpldConfig,
    /// Set `λ` at the first selection to this quantile of the losses (in `(0, 1]`); `None`: the
    /// absolute values of `spld`.
    #[config(default = "Some(0.5)")]
    pub calibrate_quantile: Option<f64>,
    /// With calibration, `γ = calibrate_gamma_ratio · λ` (`>= 0`).
    #[config(default = 1.0)]
    pub calibrate_gamma_ratio: f64,
    /// Epochs at the start that train on every example, before the first selection.
    #[config(default = 1)]
    pub warmup_epochs: usize,
}

/// The saved state of a [`Pace`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PaceState {
    /// The current `λ` and `γ`.
    pub spld: SpldState,
    /// Whether the calibration has been done.
    pub calibrated: bool,
}

/// SPLD with its calibration ([`PaceConfig`]).
#[derive(Debug, Clone)]
pub struct Pace {
    spld: Spld,
    quantile: Option<f64>,
    gamma_ratio: f64,
    warmup_epochs: usize,
    calibrated: bool,
    /// `λ`, `γ` of the latest selection.
    used: (f64, f64),
}

impl PaceConfig {
    /// Validates the pace and builds it.
    ///
    /// # Errors
    /// If a pace parameter or the quantile is impossible.
    pub fn init(&self) -> Result<Pace, ConfigError> {
        if let Some(q) = self.calibrate_quantile {
            in_range("calibrate_quantile", q, 0.0, 1.0, true)?;
        }
        crate::base::error::non_negative("calibrate_gamma_ratio", self.calibrate_gamma_ratio)?;
        let spld = self.spld.init()?;
        Ok(Pace {
            used: (spld.lambda(), spld.gamma()),
            spld,
            quantile: self.calibrate_quantile,
            gamma_ratio: self.calibrate_gamma_ratio,
            warmup_epochs: self.warmup_epochs,
            calibrated: false,
        })
    }
}

impl Pace {
    /// The examples (ascending) of epoch `epoch` for `losses` grouped by `groups`: every one
    /// during the warm-up, then SPLD's selection, calibrating first if this is the first.
    ///
    /// # Errors
    /// If the lengths differ or a loss is not finite.
    pub fn select(
        &mut self,
        epoch: usize,
        losses: &[f32],
        groups: &[usize],
    ) -> Result<Vec<usize>, TrainError> {
        if epoch < self.warmup_epochs {
            if groups.len() != losses.len() {
                return Err(crate::Error::from(super::SplAdviseError::Length {
                    what: "groups",
                    expected: losses.len(),
                    got: groups.len(),
                })
                .into());
            }
            self.used = (f64::NAN, f64::NAN);
            return Ok((0..losses.len()).collect());
        }
        if let (Some(q), false) = (self.quantile, self.calibrated) {
            if losses.is_empty() {
                return Err(crate::base::error::ConfigError::new(
                    "losses",
                    "no losses to calibrate the pace's threshold on (the quantile of an empty \
                     set)",
                )
                .into());
            }
            let mut sorted: Vec<f64> = losses.iter().map(|&l| f64::from(l)).collect();
            sorted.sort_by(f64::total_cmp);
            let at = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
            let lambda = sorted[at];
            self.spld
                .load_state(SpldState {
                    lambda,
                    gamma: self.gamma_ratio * lambda,
                })
                .map_err(crate::Error::from)?;
            self.calibrated = true;
        }
        self.used = (self.spld.lambda(), self.spld.gamma());
        Ok(self
            .spld
            .selected_indices(losses, groups)
            .map_err(crate::Error::from)?)
    }

    /// Whether epoch `epoch` is a warm-up epoch (every example, no losses needed).
    pub fn in_warmup(&self, epoch: usize) -> bool {
        epoch < self.warmup_epochs
    }

    /// The examples of epoch `epoch` of a selection hook, grouped by `groups` (one an example):
    /// every one during the warm-up, where `losses` is not called; else [`Pace::select`] on the
    /// losses it reads.
    fn select_epoch(
        &mut self,
        epoch: usize,
        groups: &[usize],
        losses: impl FnOnce() -> Result<Vec<f32>, TrainError>,
    ) -> Result<Vec<usize>, TrainError> {
        if self.in_warmup(epoch) {
            Ok(self.select_all(groups.len()))
        } else {
            self.select(epoch, &losses()?, groups)
        }
    }

    /// Every one of `n` examples: a warm-up epoch's selection, which needs no losses.
    pub fn select_all(&mut self, n: usize) -> Vec<usize> {
        self.used = (f64::NAN, f64::NAN);
        (0..n).collect()
    }

    /// The end-of-epoch growth `λ ← μλ`, `γ ← μγ` (once the selection has started: a warm-up
    /// epoch leaves the pace as it is).
    pub fn advance_epoch(&mut self) {
        if !self.used.0.is_nan() {
            self.spld.advance_epoch();
        }
    }

    /// `λ` and `γ` of the latest selection (NaN during the warm-up).
    pub fn used(&self) -> (f64, f64) {
        self.used
    }

    /// For a checkpoint.
    pub fn state(&self) -> PaceState {
        PaceState {
            spld: self.spld.state(),
            calibrated: self.calibrated,
        }
    }

    /// Restores a checkpoint's state.
    ///
    /// # Errors
    /// If `λ` or `γ` is impossible.
    pub fn load_state(&mut self, state: PaceState) -> Result<(), ConfigError> {
        self.spld.load_state(state.spld)?;
        self.calibrated = state.calibrated;
        Ok(())
    }

    fn stats(&self, groups: usize) -> Vec<(String, f64)> {
        vec![
            ("spld_lambda".into(), self.used.0),
            ("spld_gamma".into(), self.used.1),
            ("groups".into(), groups as f64),
        ]
    }
}

fn labels_of(data: &ImageArray) -> Result<Vec<usize>, crate::Error> {
    (0..data.len())
        .map(|i| {
            data.label(i).ok_or_else(|| {
                crate::data::DataError::Empty {
                    path: data.source().to_path_buf(),
                    what: "SPLD groups examples by class: the training images need labels".into(),
                }
                .into()
            })
        })
        .collect()
}

/// SPLD on fixed clusters of the raw pixels (K per class, computed once): the baseline "SPLD" of
/// SPL-ADVisE's Table 1.
#[derive(Debug, Clone)]
pub struct SpldSampling {
    pace: Pace,
    index: ClusterIndex,
    describe: serde_json::Value,
    selected: usize,
}

/// The saved state of [`SpldSampling`] (in `curricula.json`, under [`SELECTION`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct SpldSamplingState {
    pace: PaceState,
    index: ClusterIndexState,
}

impl SpldSampling {
    /// Clusters the pixels of each class of `data` (values `0..=255`) into `kmeans.clusters`
    /// groups with k-means++ seeded by `seed`.
    ///
    /// # Errors
    /// If the pace or k-means settings are impossible or the data are unlabeled.
    pub fn on_pixels(
        data: &ImageArray,
        pace: &PaceConfig,
        kmeans: &KMeansConfig,
        seed: u64,
    ) -> Result<Self, crate::Error> {
        let labels = labels_of(data)?;
        let (h, w, c) = data.image_shape();
        let index = cluster_per_class(data.all_pixels(), h * w * c, &labels, kmeans, seed)?;
        Ok(Self {
            pace: pace.init()?,
            index,
            describe: serde_json::json!({
                "method": "spld",
                "groups": "k-means of the raw pixels, per class",
                "pace": pace,
                "kmeans": kmeans,
                "seed": seed,
            }),
            selected: 0,
        })
    }

    /// The fixed clusters.
    pub fn index(&self) -> &ClusterIndex {
        &self.index
    }
}

impl<B: AutodiffBackend, K: SupervisedTask<B>> Hook<B, K> for SpldSampling {
    fn name(&self) -> &'static str {
        SELECTION
    }

    fn describe(&self) -> serde_json::Value {
        self.describe.clone()
    }

    /// Its selection reads the examples' losses at the epoch's start, which a resume in the
    /// middle of the epoch no longer has.
    fn resumes_mid_epoch(&self) -> bool {
        false
    }

    fn epoch_start(&mut self, run: &mut RunView<'_, B, K>, epoch: usize) -> Result<(), TrainError> {
        let groups = self.index.assignments();
        let pool = self
            .pace
            .select_epoch(epoch, groups, || run.task.example_losses())?;
        self.selected = pool.len();
        run.select(pool)
    }

    fn after_step(
        &mut self,
        _: &mut RunView<'_, B, K>,
        _: Progress,
        _: f64,
    ) -> Result<Vec<(String, f64)>, TrainError> {
        Ok(vec![("selected".into(), self.selected as f64)])
    }

    fn epoch_end(
        &mut self,
        run: &mut RunView<'_, B, K>,
        _: usize,
        _: bool,
    ) -> Result<EpochReport, TrainError> {
        self.pace.advance_epoch();
        let mut columns = selected_columns(self.selected, run.task.num_examples());
        columns.extend(as_columns(self.pace.stats(self.index.num_clusters())));
        Ok(EpochReport {
            columns,
            ..Default::default()
        })
    }

    fn state(&self) -> Option<serde_json::Value> {
        let state = SpldSamplingState {
            pace: self.pace.state(),
            index: self.index.state(),
        };
        Some(serde_json::to_value(state).expect("JSON value"))
    }

    fn load_state(
        &mut self,
        _: &mut RunView<'_, B, K>,
        state: Option<serde_json::Value>,
    ) -> Result<(), String> {
        let state: SpldSamplingState =
            from_state(state.ok_or("the checkpoint holds no selection state")?)?;
        let index = index_from_state(state.index, self.index.num_examples())?;
        self.pace
            .load_state(state.pace)
            .map_err(|e| e.to_string())?;
        self.index = index;
        Ok(())
    }
}

/// Settings of [`SplAdvise`] (the paper's defaults: K = 8 clusters per class, M = D = 8, α = 1,
/// Adam at 1e-4 for the embedding network).
#[derive(Config, Debug)]
pub struct SplAdviseConfig {
    /// SPLD's pace.
    pub pace: PaceConfig,
    /// The cluster index: K per class.
    #[config(default = "KMeansConfig::new()")]
    pub kmeans: KMeansConfig,
    /// The magnet batches: M clusters of D examples.
    #[config(default = "MagnetSamplerConfig::new()")]
    pub sampler: MagnetSamplerConfig,
    /// The magnet loss's margin α.
    #[config(default = "MagnetLossConfig::new()")]
    pub magnet: MagnetLossConfig,
    /// Learning rate of the embedding network's optimiser.
    #[config(default = 1e-4)]
    pub lr: f64,
    /// Magnet steps of the embedding network after each student step.
    #[config(default = 1)]
    pub steps_per_student_step: usize,
    /// Images per forward pass when embedding the training set.
    #[config(default = 500)]
    pub embed_batch_size: usize,
    /// Seed of the clusterings (refresh `e` uses `(seed, e)`) and the magnet batches (step `s`
    /// draws from `(seed, s)`).
    #[config(default = 0)]
    pub seed: u64,
}

/// The saved state of [`SplAdvise`] (in `curricula.json`, under [`SELECTION`]; the network and
/// its optimiser are files of their own).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct SplAdviseState {
    pace: PaceState,
    index: Option<ClusterIndexState>,
    sampler: Option<MagnetSamplerState>,
    magnet_steps: usize,
}

/// SPL-ADVisE (Thangarasa & Taylor 2018): SPLD over the clusters of an embedding network
/// trained with the magnet loss beside the student.
pub struct SplAdvise<B: AutodiffBackend, M, O> {
    config: SplAdviseConfig,
    net: EmbeddingNet<B, M>,
    optimizer: Option<O>,
    loss: MagnetLoss,
    pace: Pace,
    sampler: Option<MagnetSampler>,
    data: ImageArray,
    labels: Vec<usize>,
    images: ClassifierAugmentConfig,
    device: B::Device,
    magnet_steps: usize,
    /// Sum and count of the magnet losses of the current epoch.
    epoch_loss: (f64, usize),
    refresh_seconds: f64,
    /// Examples of the current epoch's selection.
    selected: usize,
}

impl<B, M, O> SplAdvise<B, M, O>
where
    B: AutodiffBackend,
    M: TrainableBackbone<B>,
    O: Optimizer<EmbeddingNet<B, M>, B>,
{
    /// SPL-ADVisE with the embedding network `net` trained by `optimizer` on `data` (the
    /// student's training set), whose images it sees as `images` prepares them without
    /// augmentation (the normalisation).
    ///
    /// # Errors
    /// If a setting is impossible or the data are unlabeled.
    pub fn new(
        config: SplAdviseConfig,
        net: EmbeddingNet<B, M>,
        optimizer: O,
        data: ImageArray,
        images: ClassifierAugmentConfig,
        device: &B::Device,
    ) -> Result<Self, crate::Error> {
        config.kmeans.validate()?;
        config.sampler.validate()?;
        crate::base::error::positive("lr", config.lr)?;
        if config.embed_batch_size == 0 {
            return Err(ConfigError::new("embed_batch_size", "must be at least 1").into());
        }
        let labels = labels_of(&data)?;
        Ok(Self {
            loss: config.magnet.init()?,
            pace: config.pace.init()?,
            config,
            net,
            optimizer: Some(optimizer),
            sampler: None,
            data,
            labels,
            images,
            device: device.clone(),
            magnet_steps: 0,
            epoch_loss: (0.0, 0),
            refresh_seconds: 0.0,
            selected: 0,
        })
    }

    /// The embedding network.
    pub fn net(&self) -> &EmbeddingNet<B, M> {
        &self.net
    }

    /// The current cluster index (after the first selection).
    pub fn index(&self) -> Option<&ClusterIndex> {
        self.sampler.as_ref().map(MagnetSampler::index)
    }

    /// The cluster index refresh: embeds the training set and clusters each class.
    fn refresh(&mut self, epoch: usize) -> Result<(), TrainError> {
        let started = Instant::now();
        let embeddings = self.net.valid().embed_all(
            &self.data,
            &self.images,
            self.config.embed_batch_size,
            &self.device,
        );
        let index = cluster_per_class(
            &embeddings,
            self.net.dim(),
            &self.labels,
            &self.config.kmeans,
            mix_seed(self.config.seed, epoch as u64),
        )
        .map_err(crate::Error::from)?;
        match self.sampler.as_mut() {
            Some(sampler) => sampler.refresh(index).map_err(crate::Error::from)?,
            None => {
                self.sampler = Some(
                    self.config
                        .sampler
                        .init(index)
                        .map_err(crate::Error::from)?,
                )
            }
        }
        self.refresh_seconds = started.elapsed().as_secs_f64();
        Ok(())
    }

    /// One magnet step of the embedding network on a neighbourhood batch; returns its loss.
    fn magnet_step(&mut self) -> Result<f64, TrainError> {
        let sampler = self.sampler.as_mut().expect("select runs before any step");
        let mut rng = step_rng(mix_seed(self.config.seed, 0x6d61_676e), self.magnet_steps);
        let batch = sampler.sample(&mut rng);
        let x = self
            .images
            .images::<B>(&self.data, &batch.examples, None, &self.device);
        let per_example = self.loss.forward_per_example(
            self.net.forward(x),
            &batch.clusters,
            &batch.cluster_classes,
        );
        let losses: Vec<f64> = per_example
            .clone()
            .into_data()
            .convert::<f64>()
            .into_vec::<f64>()
            .expect("f64 data");
        let loss = per_example.mean();
        let value = losses.iter().sum::<f64>() / losses.len() as f64;
        if !value.is_finite() {
            return Err(TrainError::Selection {
                reason: format!(
                    "the embedding network's magnet loss became {value} at its step {}",
                    self.magnet_steps
                ),
            });
        }
        let grads = GradientsParams::from_grads(loss.backward(), &self.net);
        let optimizer = self.optimizer.as_mut().expect("put back after every step");
        self.net = optimizer.step(self.config.lr, self.net.clone(), grads);
        sampler
            .update_losses(&batch.examples, &losses)
            .map_err(crate::Error::from)?;
        self.magnet_steps += 1;
        Ok(value)
    }
}

impl<B, M, O, K> Hook<B, K> for SplAdvise<B, M, O>
where
    B: AutodiffBackend,
    M: TrainableBackbone<B>,
    O: Optimizer<EmbeddingNet<B, M>, B> + 'static,
    K: SupervisedTask<B>,
{
    fn name(&self) -> &'static str {
        SELECTION
    }

    fn describe(&self) -> serde_json::Value {
        serde_json::json!({
            "method": "spl_advise",
            "config": self.config,
            "embedding_dim": self.net.dim(),
            "embedding_images": self.images,
        })
    }

    fn check(&mut self, run: &mut RunView<'_, B, K>) -> Result<(), TrainError> {
        if run.task.num_examples() != self.labels.len() {
            return Err(TrainError::Hook {
                hook: SELECTION,
                step: 0,
                reason: format!(
                    "SPL-ADVisE embeds {} images, the run trains on {}: give it the run's \
                     training set",
                    self.labels.len(),
                    run.task.num_examples()
                ),
            });
        }
        Ok(())
    }

    /// Its selection reads the examples' losses at the epoch's start, which a resume in the
    /// middle of the epoch no longer has.
    fn resumes_mid_epoch(&self) -> bool {
        false
    }

    fn epoch_start(&mut self, run: &mut RunView<'_, B, K>, epoch: usize) -> Result<(), TrainError> {
        self.refresh(epoch)?;
        self.epoch_loss = (0.0, 0);
        let index = self.sampler.as_ref().expect("refreshed").index();
        let pool = self
            .pace
            .select_epoch(epoch, index.assignments(), || run.task.example_losses())?;
        self.selected = pool.len();
        run.select(pool)
    }

    fn after_step(
        &mut self,
        _: &mut RunView<'_, B, K>,
        _: Progress,
        _: f64,
    ) -> Result<Vec<(String, f64)>, TrainError> {
        let mut columns = vec![("selected".to_string(), self.selected as f64)];
        let steps = self.config.steps_per_student_step;
        if steps == 0 {
            return Ok(columns);
        }
        let mut sum = 0.0;
        for _ in 0..steps {
            sum += self.magnet_step()?;
        }
        self.epoch_loss.0 += sum;
        self.epoch_loss.1 += steps;
        columns.push(("magnet_loss".into(), sum / steps as f64));
        Ok(columns)
    }

    fn epoch_end(
        &mut self,
        run: &mut RunView<'_, B, K>,
        _: usize,
        _: bool,
    ) -> Result<EpochReport, TrainError> {
        self.pace.advance_epoch();
        let groups = self.index().map_or(0, ClusterIndex::num_clusters);
        let mut stats = self.pace.stats(groups);
        let (sum, count) = self.epoch_loss;
        stats.push((
            "magnet_loss".into(),
            if count > 0 { sum / count as f64 } else { 0.0 },
        ));
        let mut columns = selected_columns(self.selected, run.task.num_examples());
        columns.extend(as_columns(stats));
        columns.push((
            "refresh_seconds".into(),
            Cell::Rounded(self.refresh_seconds, 3),
        ));
        Ok(EpochReport {
            columns,
            ..Default::default()
        })
    }

    fn state(&self) -> Option<serde_json::Value> {
        let state = SplAdviseState {
            pace: self.pace.state(),
            index: self.index().map(ClusterIndex::state),
            sampler: self.sampler.as_ref().map(MagnetSampler::state),
            magnet_steps: self.magnet_steps,
        };
        Some(serde_json::to_value(state).expect("JSON value"))
    }

    fn files(&self) -> Result<Vec<(&'static str, Vec<u8>)>, TrainError> {
        let optimizer = self.optimizer.as_ref().expect("put back after every step");
        Ok(vec![
            (
                files::EMBEDDING,
                to_bytes::<B, _>(self.net.clone().into_record(), "embedding network")?,
            ),
            (
                files::EMBEDDING_OPTIMIZER,
                to_bytes::<B, _>(optimizer.to_record(), "embedding optimiser")?,
            ),
        ])
    }

    fn load_files(&mut self, _: &mut RunView<'_, B, K>, dir: &Path) -> Result<(), TrainError> {
        let bad = |reason: String| TrainError::Checkpoint {
            path: dir.to_path_buf(),
            reason,
        };
        for name in [files::EMBEDDING, files::EMBEDDING_OPTIMIZER] {
            if !dir.join(name).is_file() {
                return Err(bad(format!(
                    "{name} is missing: the checkpoint is not of an SPL-ADVisE run"
                )));
            }
        }
        let record = read_record::<B, <EmbeddingNet<B, M> as burn::module::Module<B>>::Record>(
            &dir.join(files::EMBEDDING),
            &self.device,
        )?;
        let expected = crate::train::shapes(&self.net);
        let net = self.net.clone().load_record(record);
        if crate::train::shapes(&net) != expected {
            return Err(bad(
                "its embedding network has other shapes than this run's".into(),
            ));
        }
        let record =
            read_record::<B, O::Record>(&dir.join(files::EMBEDDING_OPTIMIZER), &self.device)?;
        let optimizer = self.optimizer.take().expect("put back after every step");
        self.optimizer = Some(optimizer.load_record(record));
        self.net = net;
        Ok(())
    }

    fn load_state(
        &mut self,
        _: &mut RunView<'_, B, K>,
        state: Option<serde_json::Value>,
    ) -> Result<(), String> {
        let state: SplAdviseState =
            from_state(state.ok_or("the checkpoint holds no selection state")?)?;
        self.pace
            .load_state(state.pace)
            .map_err(|e| e.to_string())?;
        self.sampler = match (state.index, state.sampler) {
            (Some(index), Some(sampler_state)) => {
                let index = index_from_state(index, self.labels.len())?;
                let mut sampler = self.config.sampler.init(index).map_err(|e| e.to_string())?;
                sampler
                    .load_state(sampler_state)
                    .map_err(|e| e.to_string())?;
                Some(sampler)
            }
            (None, None) => None,
            _ => return Err("holds clusters without a sampler or the reverse".into()),
        };
        self.magnet_steps = state.magnet_steps;
        Ok(())
    }
}

/// Random sampling: every example, every epoch (the baseline of SPL-ADVisE's Table 1), as a
/// selection hook so that its runs log the same columns as the self-paced ones.
#[derive(Debug, Clone, Default)]
pub struct RandomSampling {
    selected: usize,
}

impl RandomSampling {
    /// Random sampling over the run's training set.
    pub fn new() -> Self {
        Self::default()
    }
}

impl<B: AutodiffBackend, K: SupervisedTask<B>> Hook<B, K> for RandomSampling {
    fn name(&self) -> &'static str {
        SELECTION
    }

    fn describe(&self) -> serde_json::Value {
        serde_json::json!({ "method": "random" })
    }

    /// Its count of selected examples is set at the epoch's start and kept in no state.
    fn resumes_mid_epoch(&self) -> bool {
        false
    }

    fn epoch_start(&mut self, run: &mut RunView<'_, B, K>, _: usize) -> Result<(), TrainError> {
        self.selected = run.task.num_examples();
        Ok(())
    }

    fn after_step(
        &mut self,
        _: &mut RunView<'_, B, K>,
        _: Progress,
        _: f64,
    ) -> Result<Vec<(String, f64)>, TrainError> {
        Ok(vec![("selected".into(), self.selected as f64)])
    }

    fn epoch_end(
        &mut self,
        run: &mut RunView<'_, B, K>,
        _: usize,
        _: bool,
    ) -> Result<EpochReport, TrainError> {
        Ok(EpochReport {
            columns: selected_columns(self.selected, run.task.num_examples()),
            ..Default::default()
        })
    }
}

/// The name of every selection hook: its key in `curricula.json` and the record's hooks (one
/// selection per run).
pub const SELECTION: &str = "selection";

fn selected_columns(selected: usize, examples: usize) -> Vec<Column> {
    vec![
        ("selected".into(), Cell::Value(selected as f64)),
        (
            "selected_fraction".into(),
            Cell::Value(selected as f64 / examples as f64),
        ),
    ]
}

fn as_columns(stats: Vec<(String, f64)>) -> Vec<Column> {
    stats
        .into_iter()
        .map(|(name, v)| (name.into(), Cell::Value(v)))
        .collect()
}

/// The cluster index a checkpoint kept, which must cover the run's `examples` examples.
fn index_from_state(state: ClusterIndexState, examples: usize) -> Result<ClusterIndex, String> {
    let index = ClusterIndex::from_state(state).map_err(|e| e.to_string())?;
    if index.num_examples() != examples {
        return Err(format!(
            "its clusters cover {} examples, this run's data {examples}",
            index.num_examples()
        ));
    }
    Ok(index)
}

/// Reads a JSON value as a selection's state, naming what did not fit.
fn from_state<T: serde::de::DeserializeOwned>(state: serde_json::Value) -> Result<T, String> {
    serde_json::from_value(state).map_err(|e| format!("not the state of this selection: {e}"))
}

/// The generator of step `step` under `seed` (a selector's draws at a step).
fn step_rng(seed: u64, step: usize) -> rand::rngs::StdRng {
    use rand::SeedableRng;
    rand::rngs::StdRng::seed_from_u64(mix_seed(seed, step as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A selection to calibrate on no losses is refused (the quantile's index panicked).
    #[test]
    fn calibrating_on_no_losses_is_refused() {
        let mut pace = PaceConfig::new(SpldConfig::new())
            .with_calibrate_quantile(Some(0.1))
            .init()
            .unwrap();
        // Epoch 1: the first after the warm-up, where the pace calibrates.
        let err = pace.select(1, &[], &[]).err().unwrap();
        assert!(err.to_string().contains("no losses to calibrate"), "{err}");
    }

    /// The warm-up keeps everything and leaves the pace alone; the first selection sets `λ` to
    /// the quantile of the losses and `γ` to its multiple, then selects exactly as SPLD does with
    /// those values; the end of an epoch multiplies both by `μ`.
    #[test]
    fn pace_warms_up_calibrates_then_follows_spld() {
        let config = PaceConfig::new(SpldConfig::new().with_mu(1.5))
            .with_calibrate_quantile(Some(0.1))
            .with_calibrate_gamma_ratio(5.0);
        let mut pace = config.init().unwrap();
        // The eight losses and groups of SPLD's worked example, and two more in a third group;
        // the 10 % quantile of the ten is the smallest, 0.05.
        let losses = [0.05f32, 0.9, 0.2, 0.3, 0.5, 0.25, 0.7, 0.1, 3.0, 4.0];
        let groups = [0, 0, 0, 0, 0, 1, 1, 1, 2, 2];
        assert_eq!(
            pace.select(0, &losses, &groups).unwrap(),
            (0..10).collect::<Vec<_>>()
        );
        pace.advance_epoch();
        assert_eq!(
            pace.state().spld.lambda,
            0.1,
            "the warm-up leaves the pace alone"
        );
        assert!(!pace.state().calibrated);
        let chosen = pace.select(1, &losses, &groups).unwrap();
        let (lambda, gamma) = pace.used();
        assert_eq!(lambda, f64::from(0.05f32));
        assert_eq!(gamma, 5.0 * lambda);
        let spld = SpldConfig::new()
            .with_lambda(lambda)
            .with_gamma(gamma)
            .init()
            .unwrap();
        assert_eq!(chosen, spld.selected_indices(&losses, &groups).unwrap());
        // λ = 0.05, γ = 0.25: rank 1 below 0.3 in each group: 0.05, 0.1 and not 3.0.
        assert_eq!(chosen, vec![0, 7]);
        pace.advance_epoch();
        let state = pace.state();
        assert!((state.spld.lambda - 1.5 * lambda).abs() < 1e-15);
        assert!((state.spld.gamma - 1.5 * gamma).abs() < 1e-15);
        assert!(state.calibrated);
        // A restored pace selects as the original.
        let mut restored = config.init().unwrap();
        restored.load_state(state).unwrap();
        assert_eq!(
            restored.select(2, &losses, &groups).unwrap(),
            pace.select(2, &losses, &groups).unwrap()
        );
        assert!(matches!(
            PaceConfig::new(SpldConfig::new()).with_calibrate_quantile(Some(0.0)).init(),
            Err(e) if e.field == "calibrate_quantile"
        ));
    }

    /// The baseline's groups are k-means clusters of each class's raw pixels: two classes of
    /// two well-separated looks each give four clusters that never mix classes or looks.
    #[test]
    fn spld_baseline_clusters_the_pixels_of_each_class() {
        let looks = [
            [10u8, 10, 10, 10],
            [250, 250, 240, 240],
            [0, 200, 0, 200],
            [200, 0, 200, 0],
        ];
        let mut pixels = Vec::new();
        let mut labels = Vec::new();
        for i in 0..40 {
            let look = i % 4;
            pixels.extend(looks[look].iter().map(|&p| p.saturating_add((i % 3) as u8)));
            labels.push((look / 2) as u16);
        }
        let data = ImageArray::new("mem", 2, 2, 1, pixels, Some(labels), 2).unwrap();
        let pace = PaceConfig::new(SpldConfig::new());
        let s = SpldSampling::on_pixels(&data, &pace, &KMeansConfig::new().with_clusters(2), 3)
            .unwrap();
        let a = s.index().assignments();
        assert_eq!(s.index().num_clusters(), 4);
        for i in 0..40 {
            for j in 0..40 {
                assert_eq!(a[i] == a[j], i % 4 == j % 4, "{i} {j}");
            }
        }
    }
}
