//! Preparing a run: the recipe's defaults, the resolved settings, the data and the pipeline,
//! and the method built from its seed (its size checked against the machine first).

use super::args::{
    loader_workers, recorded, value_name, BackboneArgs, ComputeArgs, CurriculumArgs, DatasetChoice,
    MethodArgs, RecipeArgs, RunArgs, ScheduleArgs, SourceArgs, StartArgs,
};
use super::backbone::{with_vit_pool, BackboneChoice, BackboneSpec, StemChoice};
use super::config_file::Overrides;
use super::data::{available_memory, is_inside, DataSource, TrainData};
use crate::backend;
use crate::backend::{Device, Train};
use crate::usage::usage;
use anyhow::Result;
use curriculum_ssl::augment::normalize::Normalize;
use curriculum_ssl::curation::FrechetCurationConfig;
use curriculum_ssl::curriculum::{MixupCurriculumConfig, StrengthCurriculumConfig};
use curriculum_ssl::method::PgdConfig;
use curriculum_ssl::method::{init_method, MocoConfig, PairLossConfig, SslMethod};
use curriculum_ssl::pipeline::PipelineConfig;
use curriculum_ssl::seed;
use curriculum_ssl::train::DataFingerprint;
use curriculum_ssl_models::VitPool;
use serde::Serialize;
use std::path::PathBuf;

/// A recipe's defaults, overridden by the command line.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Recipe name.
    pub recipe: &'static str,
    /// Epochs, batch and learning rate.
    pub schedule: Schedule,
    /// Backbone.
    pub backbone: BackboneChoice,
    /// Seed.
    pub seed: u64,
    /// Where the images come from.
    pub source: DataSource,
    /// The ResNet stem, when given.
    pub stem: Option<StemChoice>,
    /// The grid the ResNet's last map is pooled to, when given (`--pooled-grid`;
    /// [`Settings::pooled_grid`] resolves it).
    pub given_pooled_grid: Option<usize>,
    /// Torchvision weights the backbone starts from.
    pub weights: Option<PathBuf>,
    /// Whether the image files are streamed (`--stream`, or chosen for large data; resolved
    /// once the data is listed).
    pub stream: bool,
    /// The run directory (`--run-dir`, else `runs/<recipe>`).
    pub run_dir: PathBuf,
    /// What a ViT backbone's features are (the recipe's: [`Defaults::vit_pool`]).
    pub vit_pool: VitPool,
}

impl Settings {
    /// The grid the backbone's features are pooled to on images of `side` pixels:
    /// `--pooled-grid`, else the backbone's [`BackboneChoice::default_pooled_grid`] (resolved
    /// here, not when the command line is read, because a recipe may replace the default
    /// backbone with its own and the images' size is known once they are read).
    pub fn pooled_grid(&self, side: usize) -> usize {
        self.given_pooled_grid
            .unwrap_or(self.backbone.default_pooled_grid(self.stem, side))
    }

    /// The grid as a run on images of `side` pixels records it: `None` for 1 (global average
    /// pooling), which is also what every run recorded before `--pooled-grid` existed did.
    pub fn recorded_pooled_grid(&self, side: usize) -> Option<usize> {
        Some(self.pooled_grid(side)).filter(|&g| g != 1)
    }

    /// The backbone for images of `(side, _, channels)`: its configuration with the stem and
    /// the pooled grid, and its weights.
    pub fn backbone_spec(&self, (side, _, channels): (usize, usize, usize)) -> BackboneSpec {
        BackboneSpec {
            config: with_vit_pool(
                self.backbone
                    .config(channels, side, self.stem, self.pooled_grid(side)),
                self.vit_pool,
            ),
            weights: self.weights.clone(),
        }
    }

    /// The settings of a recipe without a learning-rate rule or a warm-up (the supervised
    /// recipes'): the options over the defaults `epochs`, `batch_size` and `lr`, on
    /// `--backbone` or the backend's default.
    pub fn new(
        recipe: &'static str,
        args: &RecipeArgs,
        epochs: usize,
        batch_size: usize,
        lr: f64,
    ) -> Self {
        let defaults = Schedule {
            epochs,
            batch_size,
            lr,
            warmup_epochs: 0,
        };
        // No warm-up: these recipes do not read `--warmup-epochs`.
        let schedule = Schedule {
            warmup_epochs: 0,
            ..Schedule::resolve(&args.schedule, defaults, None)
        };
        let backbone = args
            .backbone
            .backbone
            .unwrap_or_else(BackboneChoice::default_for_backend);
        Self::from_options(recipe, args, schedule, backbone)
    }

    /// The settings of the options with the schedule and the backbone resolved: the data
    /// (checked by [`DataSource::validate`]), the seed, the backbone's options and the run
    /// directory as given.
    fn from_options(
        recipe: &'static str,
        args: &RecipeArgs,
        schedule: Schedule,
        backbone: BackboneChoice,
    ) -> Self {
        let source = &args.source;
        Self {
            recipe,
            schedule,
            backbone,
            seed: args.run.seed,
            source: DataSource {
                dataset: source.dataset.unwrap_or_default(),
                dir: source.data.clone(),
                image_size: source.image_size,
                knn_data: source.knn_data.clone(),
                classes: source.classes.clone(),
                val_labels: source.val_labels.clone(),
            },
            stem: args.backbone.stem,
            given_pooled_grid: args.backbone.pooled_grid.map(|g| g as usize),
            weights: args.backbone.weights.clone(),
            stream: false,
            run_dir: args.start.run_dir(recipe),
            vit_pool: VitPool::Token,
        }
    }
}

/// A run's schedule as resolved from the options and the recipe's defaults: what the trainer
/// receives, and what recipe.toml records (`epochs`, `batch_size`, `lr`, `warmup_epochs`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Schedule {
    /// Epochs.
    pub epochs: usize,
    /// Images per step (the global batch).
    pub batch_size: usize,
    /// Peak learning rate.
    pub lr: f64,
    /// Epochs of linear learning-rate warm-up before the cosine decay.
    pub warmup_epochs: usize,
}

impl Schedule {
    /// The schedule the options give over `defaults`: the one place where `--epochs`,
    /// `--batch-size`, `--lr` and `--warmup-epochs` meet a recipe's defaults. Without `--lr` the
    /// learning rate follows the batch size by `lr_rule` where the recipe has one
    /// ([`Defaults::lr_rule_for`]); without `--warmup-epochs` the warm-up is the default's,
    /// capped at the epochs (one given is checked by [`Schedule::check_warmup`]).
    pub fn resolve(
        given: &ScheduleArgs,
        defaults: Schedule,
        lr_rule: Option<fn(usize) -> f64>,
    ) -> Self {
        let epochs = given.epochs.unwrap_or(defaults.epochs);
        let batch_size = given.batch_size.unwrap_or(defaults.batch_size);
        let lr = given
            .lr
            .unwrap_or_else(|| lr_rule.map_or(defaults.lr, |rule| rule(batch_size)));
        Self {
            epochs,
            batch_size,
            lr,
            warmup_epochs: given
                .warmup_epochs
                .unwrap_or(defaults.warmup_epochs.min(epochs)),
        }
    }

    /// Checks the epochs, the batch and the learning rate, naming the option at fault.
    fn validate(&self) -> Result<()> {
        if self.epochs == 0 {
            return Err(usage("--epochs: must be at least 1"));
        }
        if self.batch_size < 2 {
            return Err(usage(format!(
                "--batch-size {}: must be at least 2 (batch norm needs two images per channel, \
                 and the contrastive losses need negatives)",
                self.batch_size
            )));
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return Err(usage(format!(
                "--lr {}: must be a finite number > 0",
                self.lr
            )));
        }
        Ok(())
    }

    /// Checks the warm-up against the epochs, and warns of a run that is all warm-up.
    fn check_warmup(&self) -> Result<()> {
        if self.warmup_epochs > self.epochs {
            return Err(usage(format!(
                "--warmup-epochs {}: more than the run's {} epochs",
                self.warmup_epochs, self.epochs
            )));
        }
        if self.warmup_epochs > 0 && self.warmup_epochs == self.epochs {
            log::warn!(
                "the run is all warm-up: the learning rate rises over all {} epochs and ends at \
                 its peak, {} (--warmup-epochs below --epochs, or more --epochs, leaves room for \
                 the decay)",
                self.epochs,
                self.lr
            );
        }
        Ok(())
    }
}

/// The pipeline for the data: the preset at the images' size, crops of at least half the image
/// on images smaller than 32 pixels (28×28 garments lose what tells them apart below that), and
/// the views normalised with `normalize` when given.
fn pipeline(
    preset: fn(usize, usize) -> PipelineConfig,
    data: &TrainData,
    seed: u64,
    normalize: Option<Normalize>,
) -> PipelineConfig {
    let (h, _, c) = data.shape();
    let mut p = preset(h, c);
    if h < 32 {
        for v in [&mut p.view1, &mut p.view2] {
            if let Some(crop) = v.crop.as_mut() {
                // (Not above the preset's largest: EMP-SSL's fixed quarter-size patches stay
                // as they are.)
                crop.scale = (crop.scale.0.max(0.5).min(crop.scale.1), crop.scale.1);
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
/// folder; of an evenly spread sample of [`STATS_SAMPLE`] files, centre-cut, when streamed),
/// else `None` (the preset's statistics of the known dataset).
fn normalization(
    args: &SourceArgs,
    source: &DataSource,
    data: &TrainData,
) -> Result<Option<Normalize>> {
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
    let (mean, std) = match data {
        TrainData::Memory(data) => data.trained_on().channel_stats(),
        TrainData::Stream(s) => {
            let n = curriculum_ssl::data::stream::ImageSource::len(&s.files);
            let m = n.min(STATS_SAMPLE);
            let sample: Vec<usize> = (0..m).map(|i| i * n / m).collect();
            let set = s.eval_set(&s.files.subset(&sample))?;
            curriculum_ssl::data::channel_stats(&set, 64)?
        }
    };
    // A channel that never varies (a blank folder) would divide by zero.
    let std: Vec<f64> = std.into_iter().map(|s| s.max(1e-3)).collect();
    log::info!("normalisation computed from the images: mean {mean:.4?}, std {std:.4?}");
    Ok(Some(Normalize::new(&mean, &std)))
}

/// Files whose statistics a streamed run normalises its views with (a few seconds of decoding).
const STATS_SAMPLE: usize = 1000;

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
    /// The peak learning rate as a function of the batch size (the paper's scaling rule), used
    /// when `--lr` is not given ([`Defaults::lr_rule`]).
    pub lr_rule: Option<fn(usize) -> f64>,
    /// The rule on a ViT backbone, where the recipe's differs (MoCo v3's AdamW rate;
    /// [`Defaults::vit_lr_rule`]).
    pub vit_lr_rule: Option<fn(usize) -> f64>,
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
    /// The backbone when `--backbone` is not given (`None`: the backend's default), for a
    /// method that needs one kind (MAE: a ViT).
    pub backbone: Option<BackboneChoice>,
    /// Whether the recipe's method has a key encoder whose batch `--shuffle-bn` shuffles (the
    /// MoCo recipes, [`Defaults::shuffle_bn`]); another recipe refuses the option.
    pub shuffle_bn: bool,
    /// What a ViT backbone's features are: the class token's output, or the mean of the patch
    /// tokens encoded alone for a method that never trains the class token (AIM).
    pub vit_pool: VitPool,
}

impl Defaults {
    /// A recipe's defaults: its name (and default run directory), epochs, batch size, peak
    /// learning rate and augmentation preset; no warm-up and none of the optional pieces.
    pub fn new(
        recipe: &'static str,
        epochs: usize,
        batch_size: usize,
        lr: f64,
        preset: fn(usize, usize) -> PipelineConfig,
    ) -> Self {
        Self {
            recipe,
            epochs,
            batch_size,
            lr,
            lr_rule: None,
            vit_lr_rule: None,
            warmup_epochs: 0,
            preset,
            mixup: None,
            strength: None,
            pair_loss: None,
            curation: None,
            pgd: None,
            backbone: None,
            shuffle_bn: false,
            vit_pool: VitPool::Token,
        }
    }

    /// A ViT backbone's features pooled by `pool` ([`VitPool`]; other backbones unchanged).
    pub fn vit_pool(self, pool: VitPool) -> Self {
        Self {
            vit_pool: pool,
            ..self
        }
    }

    /// `--shuffle-bn` applies: the method has a MoCo key encoder ([`Prepared::moco`]).
    pub fn shuffle_bn(self) -> Self {
        Self {
            shuffle_bn: true,
            ..self
        }
    }

    /// The backbone when `--backbone` is not given.
    pub fn backbone(self, backbone: BackboneChoice) -> Self {
        Self {
            backbone: Some(backbone),
            ..self
        }
    }

    /// The same defaults under another recipe's name.
    pub fn named(self, recipe: &'static str) -> Self {
        Self { recipe, ..self }
    }

    /// The peak learning rate follows the batch size by `rule` (the paper's scaling rule) when
    /// `--lr` is not given; `lr` becomes the rule's rate at the default batch.
    pub fn lr_rule(self, rule: fn(usize) -> f64) -> Self {
        Self {
            lr: rule(self.batch_size),
            lr_rule: Some(rule),
            ..self
        }
    }

    /// On a ViT backbone the peak learning rate follows the batch size by `rule` instead when
    /// `--lr` is not given (`lr` stays the other backbones' rate at the default batch).
    pub fn vit_lr_rule(self, rule: fn(usize) -> f64) -> Self {
        Self {
            vit_lr_rule: Some(rule),
            ..self
        }
    }

    /// The schedule when no option changes it.
    fn schedule(&self) -> Schedule {
        Schedule {
            epochs: self.epochs,
            batch_size: self.batch_size,
            lr: self.lr,
            warmup_epochs: self.warmup_epochs,
        }
    }

    /// The learning-rate rule for `backbone`: the ViTs' where the recipe has one, else its rule.
    pub fn lr_rule_for(&self, backbone: BackboneChoice) -> Option<fn(usize) -> f64> {
        match self.vit_lr_rule {
            Some(rule) if backbone.is_vit() => Some(rule),
            _ => self.lr_rule,
        }
    }

    /// Warm-up epochs (capped at the epochs).
    pub fn warmup(self, warmup_epochs: usize) -> Self {
        Self {
            warmup_epochs,
            ..self
        }
    }

    /// A mixup of the positive pair (MICO).
    pub fn mixup(self, mixup: MixupCurriculumConfig) -> Self {
        Self {
            mixup: Some(mixup),
            ..self
        }
    }

    /// An augmentation-strength curriculum (MICO).
    pub fn strength(self, strength: StrengthCurriculumConfig) -> Self {
        Self {
            strength: Some(strength),
            ..self
        }
    }

    /// The two-view loss of a recipe of the SimCLR family.
    pub fn pair_loss(self, pair_loss: PairLossConfig) -> Self {
        Self {
            pair_loss: Some(pair_loss),
            ..self
        }
    }

    /// Fréchet batch curation.
    pub fn curation(self, curation: FrechetCurationConfig) -> Self {
        Self {
            curation: Some(curation),
            ..self
        }
    }

    /// PGD-hardened negatives.
    pub fn pgd(self, pgd: PgdConfig) -> Self {
        Self {
            pgd: Some(pgd),
            ..self
        }
    }

    /// The same recipe under another name, with a mixup of the positive pair.
    pub fn with_mixup(self, recipe: &'static str, mixup: MixupCurriculumConfig) -> Self {
        self.named(recipe).mixup(mixup)
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
    /// Train and test images, in memory or streamed.
    pub data: TrainData,
    /// The augmentation.
    pub pipeline: PipelineConfig,
    /// The two-view loss with the command line's changes, if the recipe is of the SimCLR family.
    pub pair_loss: Option<PairLossConfig>,
    /// Fréchet batch curation, if the recipe curates its batches.
    pub curation: Option<FrechetCurationConfig>,
    /// PGD-hardened negatives, if the recipe uses them, with the views' normalisation.
    pub pgd: Option<PgdConfig>,
    /// The settings file's and the command line's settings of the method, optimiser and
    /// augmentation ([`Prepared::section`]).
    pub overrides: Overrides,
    /// The fingerprint of the images trained on, computed once for every replica.
    pub(super) fingerprint: std::sync::OnceLock<DataFingerprint>,
}

/// Parses and checks the options, loads the data and builds the pipeline.
pub fn prepare(args: &[String], defaults: Defaults) -> Result<Prepared> {
    let (args, overrides) = RecipeArgs::parse_with_settings(defaults.recipe, args)?;
    let recipe = defaults.recipe;
    if args.method.shuffle_bn && !defaults.shuffle_bn {
        return Err(usage(
            "--shuffle-bn: only the MoCo recipes (MoCo v1/v2, Light-MoCo and their MICO \
             variants) have a key encoder whose batch can be shuffled",
        ));
    }
    let mut settings = settings(&args, &defaults)?;
    let (mixup, strength) = curricula(&args.curriculum, defaults.mixup, defaults.strength, recipe)?;
    let pair_loss = pair_loss(&args.method, defaults.pair_loss, recipe)?;
    let curation = curation(
        &args.method,
        defaults.curation,
        recipe,
        settings.schedule.epochs,
    )?
    .map(|c| overrides.apply("curation", c))
    .transpose()?;
    // The settings the policy refuses (a quantile outside (0, 1], an empty window) are usage
    // errors here, before anything is written (`--check` included).
    if let Some(Err(e)) = curation.as_ref().map(|c| c.init()) {
        return Err(usage(format!("curation.{}: {}", e.field, e.reason)));
    }
    let pgd = pgd(&args.method, defaults.pgd, pair_loss.as_ref(), recipe)?;
    let device = backend::open(args.compute.device, args.compute.precision)?;
    // A resume streams as its run did (recipe.toml says so since `stream` existed; config.json
    // for the runs before).
    let stream = match args.source.stream {
        None if args.start.resume || args.start.extend => {
            super::data::recorded_stream(&settings.run_dir)
        }
        given => given,
    };
    let data = settings.source.load_for_training(stream)?;
    settings.stream = matches!(data, TrainData::Stream(_));
    check_backbone(&settings, &data, &device)?;
    let normalize = normalization(&args.source, &settings.source, &data)?;
    let mut pipeline = pipeline(defaults.preset, &data, settings.seed, normalize);
    local_crops(&args.method, &mut pipeline, recipe)?;
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
        overrides,
        fingerprint: Default::default(),
    })
}

/// The run's settings from the options and the recipe's defaults, checked: the backbone
/// (`--backbone`, else the recipe's, else the backend's default) and, for it, the schedule.
fn settings(args: &RecipeArgs, defaults: &Defaults) -> Result<Settings> {
    let backbone = args
        .backbone
        .backbone
        .or(defaults.backbone)
        .unwrap_or_else(BackboneChoice::default_for_backend);
    let schedule = Schedule::resolve(
        &args.schedule,
        defaults.schedule(),
        defaults.lr_rule_for(backbone),
    );
    let settings = Settings {
        vit_pool: defaults.vit_pool,
        ..Settings::from_options(defaults.recipe, args, schedule, backbone)
    };
    validate(&settings, &args.start)?;
    settings.schedule.check_warmup()?;
    Ok(settings)
}

/// The recipe's mixup and strength curricula with `--easy-to-hard`, `--strength` and
/// `--schedule` applied (refused by a recipe without them).
fn curricula(
    args: &CurriculumArgs,
    mut mixup: Option<MixupCurriculumConfig>,
    mut strength: Option<StrengthCurriculumConfig>,
    recipe: &str,
) -> Result<(
    Option<MixupCurriculumConfig>,
    Option<StrengthCurriculumConfig>,
)> {
    if args.easy_to_hard {
        match &mut mixup {
            Some(m) => m.schedule = m.schedule.reversed(),
            None => {
                return Err(usage(format!(
                    "--easy-to-hard: recipe `{}` schedules no mixup",
                    recipe
                )))
            }
        }
    }
    if args.strength.is_some() || args.schedule.is_some() {
        let Some(s) = strength.as_mut() else {
            return Err(usage(format!(
                "--strength / --schedule: recipe `{}` has no strength curriculum",
                recipe
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
    Ok((mixup, strength))
}

/// The SimCLR family's pair loss with `--loss` and `--hard-positive-k` applied (refused by
/// another recipe).
fn pair_loss(
    args: &MethodArgs,
    mut pair_loss: Option<PairLossConfig>,
    recipe: &str,
) -> Result<Option<PairLossConfig>> {
    if let Some(choice) = args.loss {
        if pair_loss.is_none() {
            return Err(usage(format!(
                "--loss: recipe `{}` is not of the SimCLR family (simclr, hcl, hcl_curriculum, \
                 mixup_simclr, mico_simclr, curricular_weighting, huber_nt_xent, bad_batches, \
                 macl, simclr_pgd, hcl_pgd)",
                recipe
            )));
        }
        pair_loss = Some(choice.config());
    }
    if let Some(k) = args.hard_positive_k {
        let Some(PairLossConfig::Hcl(h)) = pair_loss.as_mut() else {
            return Err(usage(format!(
                "--hard-positive-k: recipe `{}` does not train with HCL (add --loss hcl to a \
                 SimCLR-family recipe)",
                recipe
            )));
        };
        if !(k.is_finite() && k >= 0.0) {
            return Err(usage(format!(
                "--hard-positive-k {k}: must be finite and >= 0"
            )));
        }
        h.hard_positive_k = Some(k);
    }
    Ok(pair_loss)
}

/// The recipe's PGD-hardened negatives with `--pgd-steps` applied, on a loss they harden.
fn pgd(
    args: &MethodArgs,
    mut pgd: Option<PgdConfig>,
    pair_loss: Option<&PairLossConfig>,
    recipe: &str,
) -> Result<Option<PgdConfig>> {
    if let Some(steps) = args.pgd_steps {
        let Some(p) = pgd.as_mut() else {
            return Err(usage(format!(
                "--pgd-steps: recipe `{}` does not harden its negatives (simclr_pgd and hcl_pgd \
                 do)",
                recipe
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
            recipe
        )));
    }
    Ok(pgd)
}

/// The backbone checked against the data: a ViT's patches tile the image, the network fits.
fn check_backbone(settings: &Settings, data: &TrainData, device: &Device) -> Result<()> {
    let spec = settings.backbone_spec(data.shape());
    if let curriculum_ssl_models::AnyBackboneConfig::Vit(vit) = &spec.config {
        // A ViT whose patches do not tile the image (it dropped the edge pixels silently).
        vit.check().map_err(|e| {
            let p = vit.patch_size;
            let hint = if settings.source.dataset.is_files() {
                let below = vit.image_size / p * p;
                format!(
                    "; give --image-size a multiple of {p} (e.g. {} or {})",
                    below.max(p),
                    below + p
                )
            } else {
                String::new()
            };
            usage(format!(
                "--backbone {}: {e}{hint}",
                value_name(settings.backbone)
            ))
        })?;
    }
    spec.check(data.shape(), "--backbone", device)?;
    Ok(())
}

/// `--local-crops` applied to a multi-crop recipe's pipeline (refused by another).
fn local_crops(args: &MethodArgs, pipeline: &mut PipelineConfig, recipe: &str) -> Result<()> {
    if let Some(count) = args.local_crops {
        match &mut pipeline.local_crops {
            None => {
                return Err(usage(format!(
                    "--local-crops: recipe `{}` trains on two views (multi-crop: swav, dino)",
                    recipe
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
    Ok(())
}

/// The recipe's batch curation with `--curation-warmup` and `--curation-retries` applied.
fn curation(
    args: &MethodArgs,
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
        self.settings.backbone_spec(self.data.shape())
    }

    /// Builds the method on `device` with the backend's generator seeded by `--seed`, so that
    /// its initial weights depend on the seed alone (every replica of a data-parallel run starts
    /// from the same weights).
    ///
    /// The networks' size is checked from their shapes before their weights are drawn: a run
    /// that cannot fit in memory (e.g. `method.hidden_dim=100000000`) is refused naming its size,
    /// instead of growing until the system kills it. The methods check it themselves before they
    /// draw or copy a network ([`seed::with_size_limit`]: a momentum encoder's copy drew the
    /// online network while it was built, before any check after the build).
    pub fn init<S, E>(
        &self,
        device: &Device,
        build: impl FnOnce(&Device) -> Result<S, E>,
    ) -> Result<S>
    where
        S: SslMethod<Train>,
        E: Into<anyhow::Error>,
    {
        let replicas = self.args.compute.devices.max(1);
        let limit = parameter_limit(replicas);
        let (built, refused) = seed::with_size_limit(limit, || {
            init_method::<Train, S, anyhow::Error>(device, self.settings.seed, |d| {
                build(d).map_err(Into::into)
            })
        });
        // `init_method` checked the online network against the limit before drawing it: a
        // refusal is worded with the size and the settings to lower.
        if let Some(parameters) = refused {
            check_fits(parameters, replicas)?;
        }
        built
    }

    /// A MoCo recipe's method with the command line's `--shuffle-bn` (which only the recipes
    /// whose [`Defaults::shuffle_bn`] is set accept).
    pub fn moco(&self, config: MocoConfig) -> MocoConfig {
        config.with_shuffle_bn(self.args.method.shuffle_bn)
    }
}

/// The most parameters a run may have whatever the machine: 2³² (16 GiB of f32 weights alone).
const MAX_PARAMETERS: u64 = 1 << 32;

/// Bytes a run needs per parameter at the least: f32 weights, their gradients, the optimiser's
/// state (momentum; Adam and LARS keep more) and a momentum encoder's copy. Activations come
/// on top, so a run refused by this bound could never have fitted.
const BYTES_PER_PARAMETER: u64 = 16;

/// The most parameters [`check_fits`] lets through on `replicas` replicas (a network of more is
/// refused by it): the limit the methods check before they draw a network.
fn parameter_limit(replicas: usize) -> u64 {
    let mut limit = MAX_PARAMETERS;
    if backend::NAME.starts_with("cpu") {
        if let Some(available) = available_memory() {
            limit = limit.min(available / BYTES_PER_PARAMETER / replicas.max(1) as u64);
        }
    }
    limit
}

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
             and optimiser state{}, more than {limit}; lower the method's sizes \
             (method.hidden_dim, method.output_dim, a queue's method.queue_size) or choose a \
             smaller --backbone",
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

/// Checks the settings a training recipe resolved, naming the option at fault.
pub(crate) fn validate(settings: &Settings, start: &StartArgs) -> Result<()> {
    settings.schedule.validate()?;
    if start.extend && start.resume {
        return Err(usage("--extend resumes by itself: give --extend alone"));
    }
    if settings.source.dataset.is_files() {
        // A folder's images are read at any depth: a run directory inside it would have its
        // plots trained on by the next run (and would change the data of its own resume).
        let run_dir = &settings.run_dir;
        for (option, dir) in [
            ("--data-dir", settings.source.dir.as_ref()),
            ("--knn-data", settings.source.knn_data.as_ref()),
        ] {
            if let Some(dir) = dir.filter(|d| is_inside(run_dir, d)) {
                return Err(usage(format!(
                    "--run-dir {}: inside {option} {}, whose images are read at any depth (the \
                     run's plots would become training images); choose a run directory outside \
                     it",
                    run_dir.display(),
                    dir.display()
                )));
            }
        }
    }
    if settings.stem.is_some() && !settings.backbone.is_resnet() {
        return Err(usage(format!(
            "--stem: only for the ResNets (resnet18, resnet34, resnet50, small, small-wide, small-2x), not {}",
            value_name(settings.backbone)
        )));
    }
    if settings.given_pooled_grid.is_some() && !settings.backbone.is_resnet() {
        return Err(usage(format!(
            "--pooled-grid: only for the ResNets (resnet18, resnet34, resnet50, small, small-wide, small-2x), not {}",
            value_name(settings.backbone)
        )));
    }
    settings.source.validate()
}

/// recipe.toml's `[options]`: every option that shapes the run, under its long name (`batch_size`
/// is `--batch-size`: [`super::config_file`] reads each back as `--key=value`). The option
/// groups write themselves (their `Serialize` leaves out what belongs to one invocation: the
/// run directory, resuming, the device, the machines). The schedule, the backbone, `stream` and
/// `workers` are the values the run resolved instead of the ones given, so that a resume trains
/// as the run did whatever default changed since (a recipe's, the backend's, the data's or the
/// machine's): they are fields of their own here, placed among the groups.
#[derive(Serialize)]
struct RecordedOptions<'a> {
    #[serde(flatten)]
    source: &'a SourceArgs,
    /// Whether the files were streamed (chosen from the data's size when `--stream` is not
    /// given): for the datasets that can stream, and whenever `--stream` was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<bool>,
    /// Epochs, batch and learning rate with the recipe's defaults and rules applied.
    #[serde(flatten)]
    schedule: &'a Schedule,
    /// `--backbone`, else the recipe's or the backend's default.
    #[serde(serialize_with = "recorded::name")]
    backbone: BackboneChoice,
    #[serde(flatten)]
    backbone_options: &'a BackboneArgs,
    #[serde(flatten)]
    run: &'a RunArgs,
    /// The loader's threads: `--workers`, else chosen from the machine's cores.
    workers: usize,
    #[serde(flatten)]
    curriculum: &'a CurriculumArgs,
    #[serde(flatten)]
    method: &'a MethodArgs,
    #[serde(flatten)]
    compute: &'a ComputeArgs,
}

impl<'a> RecordedOptions<'a> {
    /// The options of `args` with the values `settings` resolved and the loader's `workers`.
    fn new(args: &'a RecipeArgs, settings: &'a Settings, workers: usize) -> Self {
        let dataset = settings.source.dataset;
        let streams = dataset.is_files() || dataset == DatasetChoice::Stl10;
        Self {
            source: &args.source,
            stream: (streams || args.source.stream.is_some()).then_some(settings.stream),
            schedule: &settings.schedule,
            backbone: settings.backbone,
            backbone_options: &args.backbone,
            run: &args.run,
            workers,
            curriculum: &args.curriculum,
            method: &args.method,
            compute: &args.compute,
        }
    }

    /// The options as a TOML table.
    ///
    /// # Errors
    /// None in practice: every option serialises to TOML.
    fn table(&self) -> Result<toml::Table> {
        Ok(toml::Table::try_from(self)?)
    }
}

impl Prepared {
    /// The options of the run as recipe.toml records them ([`RecordedOptions`]).
    ///
    /// # Errors
    /// None in practice: every option serialises to TOML.
    pub fn recorded_options(&self) -> Result<toml::Table> {
        RecordedOptions::new(&self.args, &self.settings, self.loader_workers()).table()
    }

    /// The loader threads of each replica ([`loader_workers`]).
    pub fn loader_workers(&self) -> usize {
        loader_workers(
            self.args.compute.workers,
            self.settings.stream,
            !backend::on_cpu(),
            self.args.compute.devices,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::args::parse_recipe_args;
    use super::super::config_file::{self, Overrides, RECIPE_TOML};
    use super::*;
    use clap::CommandFactory;

    /// The options of `command` (its words) as recipe.toml records them, with the schedule
    /// resolved over a recipe's defaults (epochs 20, batch 128, lr 0.1, warm-up 2), `stream`
    /// the run's and 3 loader threads unless `--workers` says otherwise.
    fn recorded(command: &str, stream: bool) -> toml::Table {
        let argv: Vec<String> = command.split_whitespace().map(String::from).collect();
        recorded_args(&argv, stream)
    }

    /// [`recorded`] of the arguments `argv`.
    fn recorded_args(argv: &[String], stream: bool) -> toml::Table {
        let args: RecipeArgs = parse_recipe_args("t", argv).unwrap();
        let defaults = Schedule {
            epochs: 20,
            batch_size: 128,
            lr: 0.1,
            warmup_epochs: 2,
        };
        let schedule = Schedule::resolve(&args.schedule, defaults, None);
        let backbone = args.backbone.backbone.unwrap_or(BackboneChoice::Small);
        let mut settings = Settings::from_options("t", &args, schedule, backbone);
        settings.stream = stream;
        let workers = args.compute.workers.unwrap_or(3);
        RecordedOptions::new(&args, &settings, workers)
            .table()
            .unwrap()
    }

    fn table(text: &str) -> toml::Table {
        text.parse().unwrap()
    }

    /// Every option recipe.toml records, given: each under its key with the value and type
    /// the file has always had (a seed above i64's range as text, the value enums by their
    /// command-line names, `checkpoint_every_steps` and `precision` when not their defaults);
    /// what belongs to one invocation is left out.
    #[test]
    fn the_options_are_recorded_under_their_keys_with_their_types() {
        let command = "--dataset image-folder --data-dir /d --image-size 32 --classes /c.txt \
             --val-labels /v.csv --stream --knn-data /k --mean 0.5,0.25,0.125 --std \
             0.2,0.3,0.4 --run-dir /r --epochs 3 --batch-size 16 --lr 0.05 --warmup-epochs \
             1 --backbone resnet18 --stem imagenet --pooled-grid 2 --weights /w.safetensors \
             --seed 18446744073709551615 --knn-every 2 --no-baselines --checkpoint-every 3 \
             --checkpoint-every-steps 7 --check --print-settings --easy-to-hard --strength \
             1.5 --schedule two-step --workers 5 --device 1 --devices 2 --precision bf16 \
             --nodes 2 --node-rank 0 --orchestrator ws://a:1 --node-address ws://b:2 \
             --timeout 9 --shuffle-bn --local-crops 4 --augment-ahead false --view-threads \
             true --loss hcl --hard-positive-k 2 --curation-warmup 2 --curation-retries 1 \
             --pgd-steps 3";
        let expected = table(
            r#"
            dataset = "image-folder"
            data_dir = "/d"
            image_size = 32
            knn_data = "/k"
            classes = "/c.txt"
            val_labels = "/v.csv"
            stream = true
            mean = [0.5, 0.25, 0.125]
            std = [0.2, 0.3, 0.4]
            epochs = 3
            batch_size = 16
            lr = 0.05
            warmup_epochs = 1
            backbone = "resnet18"
            stem = "imagenet"
            pooled_grid = 2
            weights = "/w.safetensors"
            seed = "18446744073709551615"
            knn_every = 2
            checkpoint_every = 3
            checkpoint_every_steps = 7
            workers = 5
            easy_to_hard = true
            strength = 1.5
            schedule = "two-step"
            shuffle_bn = true
            local_crops = 4
            augment_ahead = false
            view_threads = true
            loss = "hcl"
            hard_positive_k = 2.0
            curation_warmup = 2
            curation_retries = 1
            pgd_steps = 3
            precision = "bf16"
            "#,
        );
        let got = recorded(command, true);
        assert_eq!(got, expected, "{got}");
    }

    /// With no option given: the resolved values (the dataset, the schedule, the backbone, the
    /// loader's threads) and the switches; no `stream` for a dataset that cannot stream, no
    /// `checkpoint_every_steps` at 0, no `precision` in f32, a seed in range as an integer.
    #[test]
    fn the_defaults_are_recorded_as_the_run_resolved_them() {
        let expected = table(
            r#"
            dataset = "fashion-mnist"
            epochs = 20
            batch_size = 128
            lr = 0.1
            warmup_epochs = 2
            backbone = "small"
            seed = 0
            knn_every = 5
            checkpoint_every = 5
            workers = 3
            easy_to_hard = false
            shuffle_bn = false
            "#,
        );
        let got = recorded("", false);
        assert_eq!(got, expected, "{got}");
        // STL-10 and the user's files record whether they streamed, given or not.
        let got = recorded("--dataset stl10 --data-dir /s", false);
        assert_eq!(got["stream"].as_bool(), Some(false), "{got}");
    }

    /// recipe.toml's options read back (as `--config`, `--resume` and `--extend` read them)
    /// into the same options: every key names an option, every value parses.
    #[test]
    fn the_recorded_options_read_back_to_the_same_options() {
        let command =
            "--dataset folder --data-dir /d --stream false --mean 0.5 --std 0.25 --epochs 3 \
             --lr 0.05 --backbone vit-tiny --seed 18446744073709551615 \
             --checkpoint-every-steps 7 --easy-to-hard --schedule linear --shuffle-bn \
             --loss dclw --precision bf16 --view-threads false";
        let written = recorded(command, false);
        let dir = std::env::temp_dir().join(format!("prepare-options-rt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Overrides::default()
            .write(&dir, "t", written.clone())
            .unwrap();
        let file = dir.join(RECIPE_TOML);
        let (flags, _) = config_file::resolve(
            &RecipeArgs::command(),
            "t",
            Some((&file, "recipe.toml")),
            &[],
            &[],
        )
        .unwrap();
        assert_eq!(recorded_args(&flags, false), written, "{flags:?}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
