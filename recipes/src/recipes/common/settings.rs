//! A run's settings: the recipe's defaults ([`Defaults`]) with the command line's options
//! applied and checked ([`Settings`], its [`Schedule`]), and the options that change a
//! recipe's curricula, pair loss, batch curation and PGD negatives.

use super::args::{CurriculumArgs, MethodArgs, RecipeArgs, ScheduleArgs, StartArgs};
use super::backbone::{BackboneChoice, StemChoice};
use super::data::{is_inside, DataSource};
use crate::usage::usage;
use anyhow::Result;
use curriculum_ssl::curation::FrechetCurationConfig;
use curriculum_ssl::curriculum::{MixupCurriculumConfig, StrengthCurriculumConfig};
use curriculum_ssl::method::{PairLossConfig, PgdConfig};
use curriculum_ssl::pipeline::PipelineConfig;
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
    pub(super) fn from_options(
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
        if self.batch_size > MAX_BATCH_SIZE {
            return Err(usage(format!(
                "--batch-size {}: at most {MAX_BATCH_SIZE} images a step (2^24; the batch must \
                 also fit the data and the device)",
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

/// The largest `--batch-size` taken: 2^24 images a step, far above any device's memory, and
/// low enough that what the methods size from it (MoCo's keys a step, SMoG's memory bank of
/// 300 batches) is counted without overflow.
pub const MAX_BATCH_SIZE: usize = 1 << 24;

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

/// The run's settings from the options and the recipe's defaults, checked: the backbone
/// (`--backbone`, else the recipe's, else the backend's default) and, for it, the schedule.
pub(super) fn settings(args: &RecipeArgs, defaults: &Defaults) -> Result<Settings> {
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
pub(super) fn curricula(
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
pub(super) fn pair_loss(
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
pub(super) fn pgd(
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
        let most = curriculum_ssl::method::MAX_PGD_STEPS;
        if !(1..=most).contains(&steps) {
            return Err(usage(format!(
                "--pgd-steps {steps}: must lie in [1, {most}]"
            )));
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

/// The recipe's batch curation with `--curation-warmup` and `--curation-retries` applied.
pub(super) fn curation(
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
            settings.backbone
        )));
    }
    if settings.given_pooled_grid.is_some() && !settings.backbone.is_resnet() {
        return Err(usage(format!(
            "--pooled-grid: only for the ResNets (resnet18, resnet34, resnet50, small, small-wide, small-2x), not {}",
            settings.backbone
        )));
    }
    settings.source.validate()
}
