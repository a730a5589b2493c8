//! What every training recipe shares: its command-line options ([`args`]), the data
//! ([`data`]), the backbone ([`backbone`]), and, here, the run itself (the recipe's defaults,
//! the trainer with its hooks, the kNN monitor, resume, summary).

mod args;
mod backbone;
pub mod config_file;
mod data;

pub use args::*;
pub use backbone::*;
pub use config_file::{Overrides, RECIPE_TOML};
pub use data::*;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use burn::module::AutodiffModule;
use burn::optim::Optimizer;
use clap::{Parser, ValueEnum};
use curriculum_ssl::augment::normalize::Normalize;
use curriculum_ssl::base::seed::parameter_count;
use curriculum_ssl::curation::FrechetCurationConfig;
use curriculum_ssl::curriculum::{
    MixupCurriculumConfig, SchedulerConfig, StrengthCurriculumConfig,
};
use curriculum_ssl::data::embedded::load_or_embedded;
use curriculum_ssl::data::idx::Split;
use curriculum_ssl::data::{ImageArray, Loader, LoaderConfig};
use curriculum_ssl::data_parallel::{
    replicas, DataParallelConfig, DataParallelError, MultiNode, Replica,
};
use curriculum_ssl::eval::{KnnMonitor, KnnResult, RawPixels};
use curriculum_ssl::hooks::{
    FrechetCurationHook, KnnHook, ObjectBoxesHook, SelfPacedAutoAugmentHook,
};
use curriculum_ssl::loss::{
    CurricularLossConfig, DclLossConfig, HclLossConfig, HuberNtXentLossConfig, NtXentLossConfig,
};
use curriculum_ssl::method::pgd::PgdConfig;
use curriculum_ssl::method::{init_method, MoCo, MoCoConfig, PairLossConfig, SslMethod};
use curriculum_ssl::pipeline::{Augmenter, PipelineConfig};
use curriculum_ssl::train::{DataFingerprint, SelfSupervised, StartMode, TrainConfig, Trainer};
use curriculum_ssl_models::{
    AnyBackbone, AnyBackboneConfig, Backbone, BlockKind, EfficientNetConfig, LeNetConfig,
    MobileNetV3Config, ResNetConfig, Stem, VggConfig, VitConfig, WideResNetConfig,
};
use serde::{Deserialize, Serialize};

use crate::{backend, usage};

/// Autodiff backend the recipes train on.
pub type Train = burn::backend::Autodiff<backend::Inner>;
/// Its device.
pub type Device = <Train as burn::tensor::backend::BackendTypes>::Device;

/// MoCo (v1, v2 or Light-MoCo, as `config` says) around the recipe's backbone, seeded by
/// `--seed`; the queue's constraint on the batch is said in terms of `--batch-size`.
pub fn init_moco(
    recipe: &Prepared,
    config: &MoCoConfig,
    device: &Device,
) -> Result<MoCo<Train, AnyBackbone<Train>>> {
    let backbone = recipe.backbone_config();
    let batch_size = recipe.settings.batch_size;
    recipe
        .init(device, |d| {
            config.init(|d| backbone.init::<Train>(d), batch_size, d)
        })
        .map_err(|e| {
            if e.downcast_ref::<curriculum_ssl::ConfigError>()
                .is_none_or(|c| c.field != "size")
            {
                return e;
            }
            let per_key = if config.symmetric { 2 } else { 1 };
            if config.queue_size < per_key * batch_size {
                return usage(format!(
                    "the queue of {} keys (method.queue_size) must hold at least one step's \
                     keys ({} = --batch-size {batch_size}{}): a larger method.queue_size or a \
                     smaller --batch-size",
                    config.queue_size,
                    per_key * batch_size,
                    if config.symmetric { " × 2" } else { "" }
                ));
            }
            usage(format!(
                "--batch-size {batch_size}: the queue of {} keys must be a multiple of the keys \
                 enqueued per step ({} = the batch size{}); choose a batch size that divides {}",
                config.queue_size,
                per_key * batch_size,
                if config.symmetric {
                    " × 2, for the symmetric loss"
                } else {
                    ""
                },
                config.queue_size / per_key
            ))
        })
}

/// A recipe's defaults, overridden by the command line.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Recipe name.
    pub recipe: &'static str,
    /// Epochs.
    pub epochs: usize,
    /// Images per step.
    pub batch_size: usize,
    /// Peak learning rate.
    pub lr: f64,
    /// Warm-up epochs.
    pub warmup_epochs: usize,
    /// Backbone.
    pub backbone: BackboneChoice,
    /// Seed.
    pub seed: u64,
    /// Where the images come from.
    pub source: DataSource,
    /// The ResNet stem, when given.
    pub stem: Option<StemChoice>,
    /// Torchvision weights the backbone starts from.
    pub weights: Option<PathBuf>,
}

impl Settings {
    /// The recipe's defaults with the command line applied.
    pub fn new(
        recipe: &'static str,
        args: &RecipeArgs,
        epochs: usize,
        batch_size: usize,
        lr: f64,
    ) -> Self {
        Self {
            recipe,
            epochs: args.epochs.unwrap_or(epochs),
            batch_size: args.batch_size.unwrap_or(batch_size),
            lr: args.lr.unwrap_or(lr),
            warmup_epochs: 0,
            backbone: args
                .backbone
                .unwrap_or_else(BackboneChoice::default_for_backend),
            seed: args.seed,
            source: DataSource::from_args(args),
            stem: args.stem,
            weights: args.weights.clone(),
        }
    }

    /// The run directory (`runs/<recipe>` by default).
    pub fn run_dir(&self, args: &RecipeArgs) -> PathBuf {
        args.run_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from("runs").join(self.recipe))
    }
}

/// The pipeline for the data: the preset at the images' size, crops of at least half the image
/// on images smaller than 32 pixels (28×28 garments lose what tells them apart below that), and
/// the views normalised with `normalize` when given.
fn pipeline(
    preset: fn(usize, usize) -> PipelineConfig,
    data: &Data,
    seed: u64,
    normalize: Option<Normalize>,
) -> PipelineConfig {
    let (h, _, c) = data.shape();
    let mut p = preset(h, c);
    if h < 32 {
        for v in [&mut p.view1, &mut p.view2] {
            if let Some(crop) = v.crop.as_mut() {
                crop.scale = (crop.scale.0.max(0.5), crop.scale.1);
            }
        }
    }
    if let Some(n) = normalize {
        for v in [&mut p.view1, &mut p.view2] {
            v.normalize = Some(n.clone());
        }
        if let Some(local) = p.local_crops.as_mut() {
            local.view.normalize = Some(n);
        }
    }
    p.seed = seed;
    p
}

/// The views' normalisation: `--mean` / `--std` when given (checked against the channels),
/// else the statistics of the images themselves for the user's own files (image-folder,
/// folder), else `None` (the preset's statistics of the known dataset).
fn normalization(args: &RecipeArgs, source: &DataSource, data: &Data) -> Result<Option<Normalize>> {
    let channels = data.shape().2;
    if let (Some(mean), Some(std)) = (&args.mean, &args.std) {
        let given = Normalize::new(mean, std);
        given.validate_for(channels).map_err(|e| {
            usage(format!(
                "--mean / --std for images of {channels} channels: {e}"
            ))
        })?;
        return Ok(Some(given));
    }
    if !source.dataset.is_files() {
        return Ok(None);
    }
    let (mean, std) = data.trained_on().channel_stats();
    // A channel that never varies (a blank folder) would divide by zero.
    let std: Vec<f64> = std.into_iter().map(|s| s.max(1e-3)).collect();
    log::info!("normalisation computed from the images: mean {mean:.4?}, std {std:.4?}");
    Ok(Some(Normalize::new(&mean, &std)))
}

/// A recipe's own defaults (the command line overrides them).
pub struct Defaults {
    /// Recipe name (and the default run directory `runs/<name>`).
    pub recipe: &'static str,
    /// Epochs.
    pub epochs: usize,
    /// Images per step.
    pub batch_size: usize,
    /// Peak learning rate.
    pub lr: f64,
    /// Warm-up epochs (capped at the epochs).
    pub warmup_epochs: usize,
    /// Augmentation preset.
    pub preset: fn(usize, usize) -> PipelineConfig,
    /// Mixup of the positive pair (MICO), if the recipe uses one.
    pub mixup: Option<MixupCurriculumConfig>,
    /// Augmentation-strength curriculum (MICO), if the recipe uses one.
    pub strength: Option<StrengthCurriculumConfig>,
    /// The two-view loss, if the recipe is of the SimCLR family (`--loss` may replace it).
    pub pair_loss: Option<PairLossConfig>,
    /// Fréchet batch curation, if the recipe curates its batches (`--curation-warmup` and
    /// `--curation-retries` may change it).
    pub curation: Option<FrechetCurationConfig>,
    /// PGD-hardened negatives, if the recipe uses them (`--pgd-steps` may change the steps;
    /// the normalisation is set to the views').
    pub pgd: Option<PgdConfig>,
}

impl Defaults {
    /// The same recipe under another name, with a mixup of the positive pair.
    pub fn with_mixup(self, recipe: &'static str, mixup: MixupCurriculumConfig) -> Self {
        Self {
            recipe,
            mixup: Some(mixup),
            ..self
        }
    }
}

/// Everything a training recipe starts from: its options, settings, device, data and pipeline.
pub struct Prepared {
    /// Command-line options.
    pub args: RecipeArgs,
    /// Resolved settings.
    pub settings: Settings,
    /// The training device.
    pub device: Device,
    /// Train and test images.
    pub data: Data,
    /// The augmentation.
    pub pipeline: PipelineConfig,
    /// The two-view loss with the command line's changes, if the recipe is of the SimCLR family.
    pub pair_loss: Option<PairLossConfig>,
    /// Fréchet batch curation, if the recipe curates its batches.
    pub curation: Option<FrechetCurationConfig>,
    /// PGD-hardened negatives, if the recipe uses them, with the views' normalisation.
    pub pgd: Option<PgdConfig>,
    /// Whether a MoCo recipe took `--shuffle-bn` ([`Prepared::moco`]); another recipe refuses it.
    shuffle_bn_taken: std::sync::atomic::AtomicBool,
    /// The settings file's and the command line's settings of the method, optimiser and
    /// augmentation ([`Prepared::section`]).
    pub overrides: Overrides,
    /// The fingerprint of the images trained on, computed once for every replica.
    fingerprint: std::sync::OnceLock<DataFingerprint>,
}

/// Parses and checks the options, loads the data and builds the pipeline.
pub fn prepare(args: &[String], defaults: Defaults) -> Result<Prepared> {
    let (args, overrides) = RecipeArgs::parse_with_settings(defaults.recipe, args)?;
    let mut settings = Settings::new(
        defaults.recipe,
        &args,
        defaults.epochs,
        defaults.batch_size,
        defaults.lr,
    );
    validate(&settings, &args)?;
    settings.warmup_epochs = match args.warmup_epochs {
        Some(w) if w > settings.epochs => {
            return Err(usage(format!(
                "--warmup-epochs {w}: more than the run's {} epochs",
                settings.epochs
            )))
        }
        Some(w) => w,
        None => defaults.warmup_epochs.min(settings.epochs),
    };
    if settings.warmup_epochs > 0 && settings.warmup_epochs == settings.epochs {
        log::warn!(
            "the run is all warm-up: the learning rate rises over all {} epochs and ends at its \
             peak, {} (--warmup-epochs below --epochs, or more --epochs, leaves room for the \
             decay)",
            settings.epochs,
            settings.lr
        );
    }
    let mut mixup = defaults.mixup;
    if args.easy_to_hard {
        match &mut mixup {
            Some(m) => m.schedule = m.schedule.reversed(),
            None => {
                return Err(usage(format!(
                    "--easy-to-hard: recipe `{}` schedules no mixup",
                    defaults.recipe
                )))
            }
        }
    }
    let mut strength = defaults.strength;
    if args.strength.is_some() || args.schedule.is_some() {
        let Some(s) = strength.as_mut() else {
            return Err(usage(format!(
                "--strength / --schedule: recipe `{}` has no strength curriculum",
                defaults.recipe
            )));
        };
        if let Some(target) = args.strength {
            if !(target.is_finite() && target > 0.0 && target <= 4.0) {
                return Err(usage(format!("--strength {target}: must lie in (0, 4]")));
            }
            s.target = target;
        }
        if let Some(schedule) = args.schedule {
            s.schedule = schedule.config();
        }
    }
    let mut pair_loss = defaults.pair_loss;
    if let Some(choice) = args.loss {
        if pair_loss.is_none() {
            return Err(usage(format!(
                "--loss: recipe `{}` is not of the SimCLR family (simclr, hcl, hcl_curriculum, \
                 mixup_simclr, mico_simclr, curricular_weighting, huber_nt_xent)",
                defaults.recipe
            )));
        }
        pair_loss = Some(choice.config());
    }
    if let Some(k) = args.hard_positive_k {
        let Some(PairLossConfig::Hcl(h)) = pair_loss.as_mut() else {
            return Err(usage(format!(
                "--hard-positive-k: recipe `{}` does not train with HCL (add --loss hcl to a \
                 SimCLR-family recipe)",
                defaults.recipe
            )));
        };
        if !(k.is_finite() && k >= 0.0) {
            return Err(usage(format!(
                "--hard-positive-k {k}: must be finite and >= 0"
            )));
        }
        h.hard_positive_k = Some(k);
    }
    let curation = curation(&args, defaults.curation, defaults.recipe, settings.epochs)?
        .map(|c| overrides.apply("curation", c))
        .transpose()?;
    let mut pgd = defaults.pgd;
    if let Some(steps) = args.pgd_steps {
        let Some(p) = pgd.as_mut() else {
            return Err(usage(format!(
                "--pgd-steps: recipe `{}` does not harden its negatives (simclr_pgd and hcl_pgd \
                 do)",
                defaults.recipe
            )));
        };
        if !(1..=100).contains(&steps) {
            return Err(usage(format!("--pgd-steps {steps}: must lie in [1, 100]")));
        }
        p.steps = steps;
    }
    if pgd.is_some()
        && !matches!(
            pair_loss,
            Some(PairLossConfig::NtXent(_)) | Some(PairLossConfig::Hcl(_))
        )
    {
        return Err(usage(format!(
            "--loss: recipe `{}` hardens the negatives of NT-Xent and HCL only (--loss nt-xent \
             or hcl)",
            defaults.recipe
        )));
    }
    let device = backend::device(args.device)?;
    let data = settings.source.load()?;
    let channels = data.shape().2;
    BackboneSpec {
        config: settings
            .backbone
            .config(channels, data.shape().0, settings.stem),
        weights: settings.weights.clone(),
    }
    .check(data.shape(), "--backbone", &device)?;
    let normalize = normalization(&args, &settings.source, &data)?;
    let mut pipeline = pipeline(defaults.preset, &data, settings.seed, normalize);
    if let Some(count) = args.local_crops {
        match &mut pipeline.local_crops {
            None => {
                return Err(usage(format!(
                    "--local-crops: recipe `{}` trains on two views (multi-crop: swav, dino)",
                    defaults.recipe
                )))
            }
            Some(_) if count == 0 => pipeline.local_crops = None,
            Some(_) if count > 32 => {
                return Err(usage(format!(
                    "--local-crops {count}: at most 32 local crops per image"
                )))
            }
            Some(local) => local.count = count,
        }
    }
    pipeline.mixup_curriculum = mixup;
    pipeline.strength_curriculum = strength;
    let pipeline = overrides.apply("augmentation", pipeline)?;
    let pgd = pgd.map(|p| p.with_normalize(pipeline.view1.normalize.clone()));
    Ok(Prepared {
        args,
        settings,
        device,
        data,
        pipeline,
        pair_loss,
        curation,
        pgd,
        shuffle_bn_taken: Default::default(),
        overrides,
        fingerprint: Default::default(),
    })
}

/// The recipe's batch curation with `--curation-warmup` and `--curation-retries` applied.
fn curation(
    args: &RecipeArgs,
    curation: Option<FrechetCurationConfig>,
    recipe: &str,
    epochs: usize,
) -> Result<Option<FrechetCurationConfig>> {
    let Some(mut config) = curation else {
        if args.curation_warmup.is_some() || args.curation_retries.is_some() {
            return Err(usage(format!(
                "--curation-warmup / --curation-retries: recipe `{recipe}` does not curate its \
                 batches (bad_batches does)"
            )));
        }
        return Ok(None);
    };
    if let Some(warmup) = args.curation_warmup {
        if warmup == 0 {
            return Err(usage(
                "--curation-warmup 0: must be at least 1 (the threshold is the mean distance of \
                 the warm-up's last epoch)",
            ));
        }
        config.warmup_epochs = warmup;
    }
    if let Some(retries) = args.curation_retries {
        config.max_retries = retries;
    }
    if config.warmup_epochs >= epochs {
        log::warn!(
            "batch curation starts after epoch {} of {epochs}: this run only measures the \
             distances (a larger --epochs or a smaller --curation-warmup curates)",
            config.warmup_epochs
        );
    }
    Ok(Some(config))
}

impl Prepared {
    /// `config` (of the method, or the optimiser) with the settings file's `[section]` and the
    /// command line's `section.KEY=VALUE` applied, recorded for the run's recipe.toml.
    ///
    /// # Errors
    /// A key the configuration does not have, or a value of the wrong kind.
    pub fn section<C>(&self, section: &str, config: C) -> Result<C>
    where
        C: Serialize + serde::de::DeserializeOwned,
    {
        self.overrides.apply(section, config)
    }

    /// The backbone's configuration for the data's channel count.
    pub fn backbone_config(&self) -> BackboneSpec {
        BackboneSpec {
            config: self.settings.backbone.config(
                self.data.shape().2,
                self.data.shape().0,
                self.settings.stem,
            ),
            weights: self.settings.weights.clone(),
        }
    }

    /// Builds the method on `device` with the backend's generator seeded by `--seed`, so that
    /// its initial weights depend on the seed alone (every replica of a data-parallel run starts
    /// from the same weights).
    ///
    /// The networks' size is checked from their shapes before their weights are drawn: a run
    /// that cannot fit in memory (e.g. `method.hidden_dim=100000000`) is refused naming its size,
    /// instead of growing until the system kills it.
    pub fn init<S, E>(
        &self,
        device: &Device,
        build: impl FnOnce(&Device) -> Result<S, E>,
    ) -> Result<S>
    where
        S: SslMethod<Train>,
        E: Into<anyhow::Error>,
    {
        let replicas = self.args.devices.max(1);
        init_method::<Train, S, anyhow::Error>(device, self.settings.seed, |d| {
            let method = build(d).map_err(Into::into)?;
            check_fits(parameter_count(method.online()), replicas)?;
            Ok(method)
        })
    }

    /// A MoCo recipe's method with the command line's `--shuffle-bn`.
    pub fn moco(&self, config: MoCoConfig) -> MoCoConfig {
        self.shuffle_bn_taken
            .store(true, std::sync::atomic::Ordering::Relaxed);
        config.with_shuffle_bn(self.args.shuffle_bn)
    }

    /// The data-parallel layout of `--devices` and `--nodes` (`None`: one device).
    fn data_parallel(&self) -> Result<Option<DataParallelConfig>> {
        let args = &self.args;
        let nodes = match (
            args.nodes,
            args.node_rank,
            &args.orchestrator,
            &args.node_address,
        ) {
            (None, None, None, None) => None,
            (Some(nodes), Some(rank), Some(orchestrator), Some(address)) => {
                let port = address
                    .rsplit(':')
                    .next()
                    .and_then(|p| p.trim_end_matches('/').parse::<u16>().ok())
                    .ok_or_else(|| {
                        usage(format!("--node-address {address}: not ws://HOST:PORT"))
                    })?;
                Some(MultiNode {
                    nodes,
                    rank,
                    orchestrator: orchestrator.clone(),
                    address: address.clone(),
                    data_port: port,
                    timeout_s: args.timeout,
                })
            }
            _ => {
                return Err(usage(
                    "--nodes, --node-rank, --orchestrator and --node-address go together (a \
                     run on several machines needs all four)",
                ))
            }
        };
        let config = DataParallelConfig {
            devices: args.devices,
            nodes,
        };
        config.validate().map_err(|e| usage(e.to_string()))?;
        if config.replicas() == 1 && config.nodes.is_none() {
            return Ok(None);
        }
        let batch = self.settings.batch_size;
        if !batch.is_multiple_of(config.replicas()) {
            return Err(usage(format!(
                "--batch-size {batch}: the global batch must split equally over the {} replicas",
                config.replicas()
            )));
        }
        if batch / config.replicas() < 2 {
            return Err(usage(format!(
                "--batch-size {batch}: each of the {} replicas would get {} image(s) of every \
                 batch; each needs at least 2 (batch norm's statistics on one replica): use \
                 --batch-size {} or more",
                config.replicas(),
                batch / config.replicas(),
                2 * config.replicas()
            )));
        }
        if backend::NAME.starts_with("cpu") && config.devices > MAX_CPU_REPLICAS {
            return Err(usage(format!(
                "--devices {}: the CPU backend runs each replica as a thread on the same cores; \
                 at most {MAX_CPU_REPLICAS} (this machine has {} cores)",
                config.devices,
                std::thread::available_parallelism().map_or(1, |n| n.get())
            )));
        }
        Ok(Some(config))
    }

    /// Trains the method `build` makes (configured by `method_config`, recorded in
    /// `config.json`) with the optimiser it makes, and prints what the run measured. With
    /// `--devices` or `--nodes`, every replica builds its own from the same seed.
    pub fn train<S, O>(
        self,
        method_config: &impl Serialize,
        build: impl Fn(&Prepared, &Device) -> Result<(S, O)> + Sync,
    ) -> Result<()>
    where
        S: SslMethod<Train>,
        <S::Backbone as AutodiffModule<Train>>::InnerModule: Backbone<backend::Inner>,
        O: Optimizer<S::Online, Train> + 'static,
    {
        let method_config = serde_json::to_value(method_config)?;
        if self.args.shuffle_bn
            && !self
                .shuffle_bn_taken
                .load(std::sync::atomic::Ordering::Relaxed)
        {
            return Err(usage(
                "--shuffle-bn: only the MoCo recipes (MoCo v1/v2, Light-MoCo and their MICO \
                 variants) have a key encoder whose batch can be shuffled",
            ));
        }
        let Some(parallel) = self.data_parallel()? else {
            let (method, optimizer) = build(&self, &self.device)?;
            return run(&self, method, method_config, optimizer, &self.device, None);
        };
        let devices = backend::devices(self.args.device, parallel.devices)?;
        // The replicas' errors themselves, so that the exit code of the first (2 for what the
        // user gave) survives the replicas' threads.
        let errors: std::sync::Mutex<Vec<(usize, anyhow::Error)>> = Default::default();
        let outcome =
            replicas::run::<Train, (), String, _>(&parallel, &devices, |replica, device| {
                let rank = replica.rank();
                let result = build(&self, device).and_then(|(method, optimizer)| {
                    run(
                        &self,
                        method,
                        method_config.clone(),
                        optimizer,
                        device,
                        Some(replica),
                    )
                });
                result.map_err(|error| {
                    let text = crate::chain_text(&error);
                    errors
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((rank, error));
                    text
                })
            });
        match outcome {
            Ok(_) => Ok(()),
            Err(DataParallelError::Replica {
                rank,
                replicas,
                reason,
                others,
            }) => {
                let mut errors = errors.into_inner().unwrap_or_else(|e| e.into_inner());
                let interrupted = |e: &anyhow::Error| {
                    matches!(
                        e.downcast_ref::<curriculum_ssl::train::TrainError>(),
                        Some(curriculum_ssl::train::TrainError::Interrupted { .. })
                    )
                };
                // Stopped on purpose (Ctrl-C) everywhere: the lowest replica's word, which
                // wrote the last checkpoint on machine 0.
                if !errors.is_empty() && errors.iter().all(|(_, e)| interrupted(e)) {
                    errors.sort_by_key(|(rank, _)| *rank);
                    let (rank, error) = errors.swap_remove(0);
                    return Err(error.context(format!("replica {rank} of {replicas}")));
                }
                for (other, reason) in others {
                    log::warn!("replica {other} stopped too: {reason}");
                }
                // The error of the replica that failed first (a panic has no error of its own:
                // its text is the reason).
                let (rank, error) = match errors.is_empty() {
                    true => (rank, anyhow::anyhow!(reason)),
                    false => errors.swap_remove(0),
                };
                Err(error.context(format!("replica {rank} of {replicas}")))
            }
            Err(error) => Err(usage(error.to_string())),
        }
    }
}

/// The most parameters a run may have whatever the machine: 2³² (16 GiB of f32 weights alone).
const MAX_PARAMETERS: u64 = 1 << 32;

/// Bytes a run needs per parameter at the least: f32 weights, their gradients, the optimiser's
/// state (momentum; Adam and LARS keep more) and a momentum encoder's copy. Activations come
/// on top, so a run refused by this bound could never have fitted.
const BYTES_PER_PARAMETER: u64 = 16;

/// Refuses networks of `parameters` values (on each of `replicas` replicas) that cannot fit:
/// above [`MAX_PARAMETERS`], or, on the CPU backend, above the memory the system says is
/// available.
fn check_fits(parameters: u64, replicas: usize) -> Result<()> {
    let needed = parameters
        .saturating_mul(BYTES_PER_PARAMETER)
        .saturating_mul(replicas as u64);
    let gib = |bytes: u64| bytes as f64 / f64::from(1u32 << 30);
    let refuse = |limit: String| {
        usage(format!(
            "the networks have {parameters} parameters: at least {:.1} GiB with their gradients \
             and optimiser state{}, more than {limit}; lower the method's widths \
             (method.hidden_dim, method.output_dim) or choose a smaller --backbone",
            gib(needed),
            if replicas > 1 {
                format!(" on {replicas} replicas")
            } else {
                String::new()
            }
        ))
    };
    if parameters > MAX_PARAMETERS {
        return Err(refuse(format!("the {MAX_PARAMETERS} a run may have")));
    }
    if backend::NAME.starts_with("cpu") {
        if let Some(available) = available_memory() {
            if needed > available {
                return Err(refuse(format!(
                    "the {:.1} GiB of memory available",
                    gib(available)
                )));
            }
        }
    }
    Ok(())
}

/// The memory the system can give without swapping (`MemAvailable` of /proc/meminfo), where it
/// says: read once, before the replicas' threads allocate their networks.
fn available_memory() -> Option<u64> {
    static AVAILABLE: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        let text = std::fs::read_to_string("/proc/meminfo").ok()?;
        let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    })
}

/// The most replicas `--devices` runs on the CPU backend: each is a thread sharing the same
/// cores, so more only slow a run down (and thousands exhaust the system's threads).
const MAX_CPU_REPLICAS: usize = 64;

/// The kNN hook of a training recipe whose data has labels.
fn knn_hook<S, O>(
    trainer: &Trainer<Train, SelfSupervised<Train, S, O, ImageArray>>,
) -> Option<&KnnHook>
where
    S: SslMethod<Train> + 'static,
    O: Optimizer<S::Online, Train> + 'static,
{
    trainer.hook::<KnnHook>()
}

/// Trains `method` and prints what the run measured; in a data-parallel run, as one replica
/// (replica 0 writes and prints).
fn run<S, O>(
    prepared: &Prepared,
    method: S,
    method_config: serde_json::Value,
    optimizer: O,
    device: &Device,
    replica: Option<Replica<Train>>,
) -> Result<()>
where
    S: SslMethod<Train>,
    <S::Backbone as AutodiffModule<Train>>::InnerModule: Backbone<backend::Inner>,
    O: Optimizer<S::Online, Train> + 'static,
{
    let (args, settings) = (&prepared.args, &prepared.settings);
    let (data, pipeline) = (prepared.data.clone(), prepared.pipeline.clone());
    let curation = prepared.curation.clone();
    let lead = replica.as_ref().is_none_or(|r| r.is_lead());
    let replicas = replica.as_ref().map_or(1, |r| r.replicas());
    let channels = data.train.image_shape().2;
    let augmenter: Augmenter = pipeline.clone().init(channels)?;
    let loader_config = LoaderConfig {
        batch_size: settings.batch_size,
        seed: settings.seed,
        workers: args.workers,
        ..LoaderConfig::default()
    };
    let monitor = match &data.test {
        Some(test) if data.train.is_labeled() => Some(KnnMonitor::new(
            data.train.clone(),
            test.clone(),
            pipeline.view1.normalize.clone(),
        )?),
        _ => None,
    };
    let (images, what) = match data.pretrain {
        Some(pretrain) => (pretrain, "pre-training images"),
        None => (data.train, "training images"),
    };
    let fingerprint = prepared
        .fingerprint
        .get_or_init(|| DataFingerprint::of_images(&images))
        .clone();
    let loader = Loader::new(images, what, loader_config)?;
    let train_config = TrainConfig::new()
        .with_epochs(settings.epochs)
        .with_lr(settings.lr)
        .with_warmup_epochs(settings.warmup_epochs)
        .with_checkpoint_every(args.checkpoint_every)
        .with_seed(settings.seed);
    let run_dir = settings.run_dir(args);
    let description = RecipeRun {
        recipe: settings.recipe.to_string(),
        backbone: settings.backbone,
        data: settings.source.dir.clone(),
        dataset: settings.source.dataset,
        image_size: settings.source.image_size,
        knn_data: settings.source.knn_data.clone(),
        input_shape: {
            let (h, w, c) = prepared.data.shape();
            Some([h, w, c])
        },
        stem: settings.stem,
        weights: settings.weights.clone(),
        method: method_config,
        backend: backend::NAME.to_string(),
    };
    let mode = if args.extend {
        StartMode::Extend
    } else if args.resume {
        StartMode::Resume
    } else {
        StartMode::Fresh
    };
    if lead && !backend::NAME.starts_with("cpu") {
        for (flag, on) in [
            ("--augment-ahead", args.augment_ahead),
            ("--view-threads", args.view_threads),
        ] {
            if on == Some(true) {
                log::warn!(
                    "{flag} true on the {} backend: with burn 0.21, two threads working on one \
                     GPU device at once changed training results on wgpu (docs/gpu.md)",
                    backend::NAME
                );
            }
        }
    }
    prepared.overrides.check_used(settings.recipe)?;
    let uses_boxes = method.uses_object_boxes();
    let adaptive = augmenter.is_adaptive();
    let mut builder = Trainer::builder(method, optimizer, augmenter, loader)
        .config(train_config)
        .run_dir(&run_dir)
        .describe(&description)
        .data(fingerprint)
        .machine_specific(MACHINE_SPECIFIC)
        .stop_when(crate::signals::stop_flag());
    if let Some(curation) = curation {
        builder = builder.hook(FrechetCurationHook::new(curation)?);
    }
    if uses_boxes {
        builder = builder.hook(ObjectBoxesHook::new());
    }
    if adaptive {
        builder = builder.hook(SelfPacedAutoAugmentHook::new());
    }
    if let Some(monitor) = monitor {
        builder = builder.hook(KnnHook::new(monitor, args.knn_every));
    } else if lead {
        log::info!(
            "no labelled images: the kNN monitor is off (--knn-data DIR with a train/ and a val/ \
             tree of class folders turns it on)"
        );
    }
    let mut builder = builder
        .start(mode)
        .augment_ahead(args.augment_ahead.unwrap_or(backend::AUGMENT_AHEAD))
        .view_threads(args.view_threads.unwrap_or(backend::VIEW_THREADS));
    if let Some(replica) = replica {
        builder = builder.replica(replica);
    }
    let mut trainer = builder.build(device)?;
    if lead {
        prepared
            .overrides
            .write(&run_dir, settings.recipe, options_table(args, settings))?;
    }
    if !lead {
        // Replica 0 reports; the others train.
        trainer.fit()?;
        return Ok(());
    }
    match trainer.resumed_from() {
        Some(dir) => println!("resuming from {}", dir.display()),
        None if mode != StartMode::Fresh => {
            println!("no checkpoint in {}: starting afresh", run_dir.display())
        }
        None => {}
    }
    println!(
        "{}: {} epochs, batch {}{}, lr {}, backbone {:?}, backend {}, run directory {}",
        settings.recipe,
        settings.epochs,
        settings.batch_size,
        if replicas > 1 {
            format!(" over {replicas} replicas")
        } else {
            String::new()
        },
        settings.lr,
        settings.backbone,
        backend::NAME,
        run_dir.display()
    );
    // The same backbone before any training, measured once per run and kept beside it, so that
    // the summary can say how much the training helped (also after a resume).
    // And the normalised pixels themselves, the baseline a representation has to beat.
    let init_file = run_dir.join(KNN_AT_INIT);
    let raw_file = run_dir.join(KNN_RAW_PIXELS);
    let (at_init, raw): (Vec<KnnResult>, Vec<KnnResult>) = if trainer.step() == 0 {
        match knn_hook(&trainer) {
            Some(hook) => {
                let results = hook.evaluate(trainer.method(), device)?;
                let raw = hook.monitor().evaluate::<backend::Inner, _>(
                    &RawPixels::new(prepared.data.shape()),
                    device,
                )?;
                for (file, r) in [(&init_file, &results), (&raw_file, &raw)] {
                    std::fs::write(file, serde_json::to_vec_pretty(r)?)
                        .with_context(|| format!("writing {}", file.display()))?;
                }
                (results, raw)
            }
            None => Default::default(),
        }
    } else {
        (read_knn_results(&init_file), read_knn_results(&raw_file))
    };
    let started = std::time::Instant::now();
    let summary = trainer.fit()?;
    let seconds = started.elapsed().as_secs_f64();
    let images: usize = summary.steps.len() * settings.batch_size;
    let mut lines = Vec::new();
    if let Some(last) = summary.epochs.last() {
        lines.push(format!(
            "done in {}: {} steps, {:.1} images/s, mean loss of the last epoch {:.4}",
            curriculum_ssl::train::run_log::format_duration(std::time::Duration::from_secs_f64(
                seconds
            )),
            summary.steps.len(),
            images as f64 / seconds,
            last.mean_loss,
        ));
        let measured = knn_hook(&trainer)
            .and_then(|h| h.last())
            .map_or(&[][..], |(_, r)| r);
        if knn_hook(&trainer).is_none() {
            lines.push(
                "kNN monitor off: the images have no labels (--knn-data DIR measures the \
                 features on a labelled train/ + val/ tree)"
                    .to_string(),
            );
        }
        for r in measured {
            let same = |i: &&KnnResult| i.k == r.k && i.temperature == r.temperature;
            let init = at_init.iter().find(same);
            let pixels = raw.iter().find(same).map_or(String::new(), |p| {
                format!("; raw pixels {:.2}%", 100.0 * p.accuracy.top1)
            });
            let gain = init.map_or(String::new(), |i| {
                format!(
                    " (at initialisation {:.2}%: {:+.2} points{pixels})",
                    100.0 * i.accuracy.top1,
                    100.0 * (r.accuracy.top1 - i.accuracy.top1)
                )
            });
            lines.push(format!(
                "kNN (k = {}, T = {}): top-1 {:.2}%{gain}, top-5 {:.2}%",
                r.k,
                r.temperature,
                100.0 * r.accuracy.top1,
                100.0 * r.accuracy.top5
            ));
        }
    }
    for line in &lines {
        println!("{line}");
    }
    // The run is complete: a plot or summary that cannot be written is a warning, not a
    // failed run.
    let plots = crate::plots::plot_run(&run_dir).unwrap_or_else(|e| {
        log::warn!(
            "the run is complete, but its plots could not be drawn: {}",
            crate::chain_text(&e)
        );
        Default::default()
    });
    if let Err(e) = write_summary(&run_dir, settings, &lines, &plots) {
        log::warn!(
            "the run is complete, but its summary could not be written: {}",
            crate::chain_text(&e)
        );
    }
    print_where(&run_dir);
    Ok(())
}

/// The run record's settings that may differ between the machines of a run on several
/// (paths: each machine reads its own copy of the data; the data's fingerprint is compared).
pub(crate) const MACHINE_SPECIFIC: &[&str] = &["run.data", "run.knn_data", "run.weights"];

/// `summary.md` in the run directory: the settings, the results and the plots.
fn write_summary(
    run_dir: &Path,
    settings: &Settings,
    results: &[String],
    plots: &crate::plots::Plots,
) -> Result<()> {
    let source = match &settings.source.dir {
        Some(dir) => format!("{:?} in {}", settings.source.dataset, dir.display()),
        None => "the embedded Fashion-MNIST subset".to_string(),
    };
    let mut text = format!("# {}\n\n| setting | value |\n|---|---|\n", settings.recipe);
    for (name, value) in [
        ("data", source),
        ("backbone", format!("{:?}", settings.backbone)),
        ("backend", backend::NAME.to_string()),
        ("epochs", settings.epochs.to_string()),
        ("batch size", settings.batch_size.to_string()),
        ("learning rate", settings.lr.to_string()),
        ("warm-up epochs", settings.warmup_epochs.to_string()),
        ("seed", settings.seed.to_string()),
    ] {
        text.push_str(&format!("| {name} | {value} |\n"));
    }
    text.push_str(
        "\nEvery setting: [config.json](config.json); per step: [steps.csv](steps.csv); per \
         epoch: [epochs.csv](epochs.csv).\n\n## Results\n\n",
    );
    for line in results {
        text.push_str(&format!("- {line}\n"));
    }
    if !plots.constants.is_empty() {
        text.push_str("\nConstant throughout the run (no plot):\n\n");
        for (name, value) in &plots.constants {
            text.push_str(&format!("- {name}: {value}\n"));
        }
    }
    text.push_str("\n## Plots\n\n");
    for plot in &plots.files {
        if let Ok(relative) = plot.strip_prefix(run_dir) {
            let name = relative.display();
            text.push_str(&format!("![{name}]({name})\n"));
        }
    }
    let path = run_dir.join("summary.md");
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
}

/// The kNN results a run directory keeps in `file` ([`KNN_AT_INIT`], [`KNN_RAW_PIXELS`]); none
/// when the file is absent or unreadable (runs recorded before it, runs without labels).
pub fn read_knn_results(file: &Path) -> Vec<KnnResult> {
    std::fs::read(file)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

/// The file of the run directory holding the kNN accuracies of the backbone at initialisation.
pub const KNN_AT_INIT: &str = "knn_at_init.json";
/// The file of the run directory holding the kNN accuracies of the raw pixels (the baseline).
pub const KNN_RAW_PIXELS: &str = "knn_raw_pixels.json";

pub(crate) fn print_where(run_dir: &Path) {
    println!(
        "metrics: {0}/steps.csv, {0}/epochs.csv; checkpoints: {0}/checkpoints; evaluate with \
         `recipe eval --run-dir {0}`",
        run_dir.display()
    );
}
