//! The training recipes' shared command-line options and how they are parsed.

use super::backbone::{BackboneChoice, StemChoice};
use super::config_file;
use super::config_file::Overrides;
use crate::run_files::RECIPE_TOML;
use anyhow::Result;
use clap::{Args, Parser, ValueEnum};
use curriculum_ssl::curriculum::SchedulerConfig;
use curriculum_ssl::loss::{
    CurricularLossConfig, DclLossConfig, HclLossConfig, HuberNtXentLossConfig, MaclLossConfig,
    NtXentLossConfig,
};
use curriculum_ssl::method::PairLossConfig;
use curriculum_ssl_models::VitPool;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Options of every training recipe (defaults are the recipe's own when not given).
#[derive(Parser, Debug, Clone)]
#[command(no_binary_name = true, name = "recipe", args_override_self = true)]
pub struct RecipeArgs {
    /// Settings of the recipe as KEY=VALUE, over its defaults and a --config file: an option
    /// (`epochs=10`), or a setting of the method, the optimiser or the augmentation
    /// (`optimizer.weight_decay=1e-5`, `augmentation.view1.blur.p=0.2`, MoCo's
    /// `method.temperature=0.1`, SimCLR's `method.loss.NtXent.temperature=0.1`; `none` turns a
    /// setting off). recipe.toml in a run directory lists every one; each is given once.
    #[arg(value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    /// A settings file (TOML) as every run writes to its directory (recipe.toml): its options
    /// and its [method], [optimizer] and [augmentation] settings replace the recipe's defaults;
    /// the command line wins over it. --resume and --extend read the run directory's.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The images and how they are read.
    #[command(flatten)]
    pub source: SourceArgs,
    /// Where the run goes and how it starts.
    #[command(flatten)]
    pub start: StartArgs,
    /// Epochs, batch and learning rate.
    #[command(flatten)]
    pub schedule: ScheduleArgs,
    /// The backbone.
    #[command(flatten)]
    pub backbone: BackboneArgs,
    /// Seed, monitor, checkpoints and `--check`.
    #[command(flatten)]
    pub run: RunArgs,
    /// The MICO recipes' curricula.
    #[command(flatten)]
    pub curriculum: CurriculumArgs,
    /// Threads, devices, precision and machines.
    #[command(flatten)]
    pub compute: ComputeArgs,
    /// The options of one family of recipes.
    #[command(flatten)]
    pub method: MethodArgs,
}

/// The images a recipe trains on: the dataset, its directory, how its files are read and the
/// views' normalisation (recorded in recipe.toml; `dataset` resolved, and `stream` as the run
/// resolved it: prepare.rs's `RecordedOptions`).
#[derive(Args, Debug, Clone, Serialize)]
pub struct SourceArgs {
    /// The dataset of --data-dir (default: fashion-mnist, whose IDX files also read MNIST's).
    #[arg(long, value_enum)]
    #[serde(serialize_with = "recorded::dataset")]
    pub dataset: Option<DatasetChoice>,
    /// The dataset's directory; with neither --dataset nor --data-dir: the embedded
    /// Fashion-MNIST subset (8,000 training and 2,000 test images).
    #[arg(long = "data-dir", alias = "data")]
    #[serde(rename = "data_dir", serialize_with = "recorded::path")]
    pub data: Option<PathBuf>,
    /// image-folder, folder: resize every image to cover this many pixels square and crop its
    /// centre (default: the size of the first image, which all must then have).
    #[arg(long)]
    pub image_size: Option<usize>,
    /// image-folder: a class list file (one class folder name per line, e.g. ImageNet-100's
    /// 100 synsets): only those folders of train/ and val/ are read, labelled in sorted order.
    #[arg(long)]
    #[serde(serialize_with = "recorded::path")]
    pub classes: Option<PathBuf>,
    /// image-folder: the labels of a val/ that holds its images without class folders (the
    /// ImageNet download's): Kaggle's LOC_val_solution.csv, or lines of `FILE SYNSET`.
    #[arg(long)]
    #[serde(serialize_with = "recorded::path")]
    pub val_labels: Option<PathBuf>,
    /// image-folder, folder: decode the image files anew every epoch on the loader's workers,
    /// the views cut from the original images, instead of decoding them once into memory at
    /// --image-size (`--stream false` keeps them in memory; default: streamed when, decoded,
    /// they would take more than a quarter of the memory available).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    #[serde(skip)] // recorded as resolved: `RecordedOptions`
    pub stream: Option<bool>,
    /// The kNN monitor's labelled images: a folder with a train/ and a val/ tree of class
    /// folders (PNG / JPEG), read at the size of the images trained on; the monitor of a
    /// --dataset folder run, which has no labels of its own.
    #[arg(long)]
    #[serde(serialize_with = "recorded::path")]
    pub knn_data: Option<PathBuf>,
    /// Per-channel means of the views' normalisation, comma-separated on the [0, 1] scale
    /// (default: computed from the images for image-folder and folder, the dataset's known
    /// statistics otherwise).
    #[arg(long, value_delimiter = ',', requires = "std")]
    pub mean: Option<Vec<f64>>,
    /// Per-channel standard deviations of the views' normalisation (with --mean).
    #[arg(long, value_delimiter = ',', requires = "mean")]
    pub std: Option<Vec<f64>>,
}

/// Where the run goes and how it starts: one invocation's, never recorded in recipe.toml.
#[derive(Args, Debug, Clone)]
pub struct StartArgs {
    /// Run directory (config.json, steps.csv, epochs.csv, checkpoints/).
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
    /// Continue the run in --run-dir from its newest valid checkpoint (of an epoch's end, or of
    /// its middle with --checkpoint-every-steps), with the run's settings (--checkpoint-every,
    /// --checkpoint-every-steps, --knn-every, --workers, --device, --augment-ahead and
    /// --view-threads may change).
    #[arg(long)]
    pub resume: bool,
    /// Resume and make the run longer on purpose (a larger --epochs): the learning rate is
    /// re-planned from the current step to reach its final value at the new end.
    #[arg(long)]
    pub extend: bool,
}

/// The training schedule: epochs, batch and learning rate, resolved with the recipe's
/// defaults into a [`super::Schedule`] (what the trainer receives and recipe.toml records).
#[derive(Args, Debug, Clone)]
pub struct ScheduleArgs {
    /// Epochs.
    #[arg(long)]
    pub epochs: Option<usize>,
    /// Images per step.
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Peak learning rate.
    #[arg(long)]
    pub lr: Option<f64>,
    /// Epochs of linear learning-rate warm-up before the cosine decay (default: the recipe's,
    /// at most --epochs; a run that is all warm-up ends at the peak learning rate, with a
    /// warning).
    #[arg(long)]
    pub warmup_epochs: Option<usize>,
}

/// The backbone and how it is built (recorded; the backbone itself as resolved: prepare.rs's
/// `RecordedOptions`).
#[derive(Args, Debug, Clone, Serialize)]
pub struct BackboneArgs {
    /// Backbone (default: resnet18 on a GPU, small-2x on the CPU).
    #[arg(long, value_enum)]
    #[serde(skip)] // recorded as resolved: `RecordedOptions`
    pub backbone: Option<BackboneChoice>,
    /// ResNets: the stem (default: cifar for resnet18/34/50, imagenet for small and small-wide,
    /// stride2 for small-2x).
    #[arg(long, value_enum)]
    #[serde(serialize_with = "recorded::optional_name")]
    pub stem: Option<StemChoice>,
    /// ResNets: average-pool the last map to an N × N grid and flatten it (N² times the
    /// features; default: 2 for small-2x where its last map is at least 2×2, as on 28-pixel
    /// images, else 1 — global average pooling —, and 1 for the others).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=16))]
    pub pooled_grid: Option<u64>,
    /// Start the backbone from torchvision weights (a safetensors export of its state_dict;
    /// ResNets, EfficientNets, MobileNet-V3s).
    #[arg(long)]
    #[serde(serialize_with = "recorded::path")]
    pub weights: Option<PathBuf>,
}

/// The run's seed, its kNN monitor and checkpoints, and `--check` (recorded but for the
/// baselines and the check, which belong to one invocation).
#[derive(Args, Debug, Clone, Serialize)]
pub struct RunArgs {
    /// Seed of the model initialisation, the batch order and the augmentation.
    #[arg(long, default_value_t = 0)]
    #[serde(serialize_with = "recorded::seed")]
    pub seed: u64,
    /// kNN monitor every N epochs (0: only at the end).
    #[arg(long, default_value_t = 5)]
    pub knn_every: usize,
    /// Skip the two kNN baselines measured before the first step — the network at
    /// initialisation and the raw pixels — whose report lines then say nothing of them (each is
    /// a pass over the training and test images: on the full Fashion-MNIST with a ViT-Tiny
    /// about 5 minutes on 2 cores). The kNN after training is unchanged.
    #[arg(long)]
    #[serde(skip)]
    pub no_baselines: bool,
    /// Checkpoint every N epochs (0: only at the end).
    #[arg(long, default_value_t = 5)]
    pub checkpoint_every: usize,
    /// Also checkpoint every N steps inside an epoch (0: never), so that a run stopped in the
    /// middle of a long epoch (ImageNet's: hours) resumes there exactly; only the newest such
    /// checkpoint is kept.
    #[arg(long, default_value_t = 0)]
    #[serde(skip_serializing_if = "recorded::is_zero")]
    pub checkpoint_every_steps: usize,
    /// Check the options, every KEY=VALUE setting, the data and the backbone, print that they
    /// are fine, and stop before anything trains or is written (what `recipe study` asks of
    /// each arm before its first run).
    #[arg(long)]
    #[serde(skip)]
    pub check: bool,
    /// With --check: print the settings the run would have — recipe.toml's table, as one JSON
    /// line — so that `recipe study` can tell a finished run whose arm now resolves otherwise
    /// (a changed default) from one that still matches.
    #[arg(long, hide = true, requires = "check")]
    #[serde(skip)]
    pub print_settings: bool,
}

/// The curricula of the MICO recipes: the mixup's order and the strength curriculum
/// (recorded).
#[derive(Args, Debug, Clone, Serialize)]
pub struct CurriculumArgs {
    /// Curriculum recipes (mico_*): run the schedule from easy to hard (λ 0.8 → 0.2), the
    /// reverse of the paper's order.
    #[arg(long)]
    pub easy_to_hard: bool,
    /// Strength curricula (moco_strength_curriculum): the target colour strength (MICO: 1, 1.5,
    /// 2, 3).
    #[arg(long)]
    pub strength: Option<f64>,
    /// Strength curricula: how the target is reached.
    #[arg(long, value_enum)]
    #[serde(serialize_with = "recorded::optional_name")]
    pub schedule: Option<ScheduleChoice>,
}

/// Where and how the run computes: the loader's threads, the device or devices, the float type
/// and the machines. Only the precision is recorded (and the loader's threads as resolved:
/// prepare.rs's `RecordedOptions`); the rest may change from one invocation to the next.
#[derive(Args, Debug, Clone, Serialize)]
pub struct ComputeArgs {
    /// Loader threads per replica (at most four per core; default 2, and when a GPU trains on
    /// streamed files, every core but one per replica shared among the replicas, at most 16).
    #[arg(long)]
    #[serde(skip)] // recorded as resolved: `RecordedOptions`
    pub workers: Option<usize>,
    /// The device to train on: with --features cuda the CUDA device of this index, with
    /// --features wgpu the N-th discrete GPU (default: device 0, or wgpu's default adapter); the
    /// CPU backend has one device, 0. May change on --resume.
    #[arg(long)]
    #[serde(skip)]
    pub device: Option<usize>,
    /// Data-parallel training: this many replicas on this machine, each on its shard of every
    /// --batch-size batch (the global batch), with averaged gradients, gathered negatives and
    /// synchronised batch norm. On the CPU they share its cores; with --features cuda or wgpu
    /// replica i runs on device --device + i. A run resumes on any number of replicas.
    #[arg(long, default_value_t = 1)]
    #[serde(skip)]
    pub devices: usize,
    /// The float type of every tensor of the run: parameters, activations, gradients and
    /// optimiser state (burn 0.21 has no automatic mixed precision; docs/gpu.md#precision).
    /// A backend without the type refuses it; f16 is refused everywhere (no loss scaling).
    #[arg(long, value_enum, default_value = "f32")]
    #[serde(
        skip_serializing_if = "crate::backend::Precision::is_f32",
        serialize_with = "recorded::name"
    )]
    pub precision: crate::backend::Precision,
    /// Several machines: how many take part (each with --devices replicas).
    #[arg(long)]
    #[serde(skip)]
    pub nodes: Option<u32>,
    /// Several machines: this machine's rank, 0 .. --nodes (machine 0 writes the run
    /// directory).
    #[arg(long)]
    #[serde(skip)]
    pub node_rank: Option<u32>,
    /// Several machines: the orchestrator's address, ws://HOST:PORT (`recipe orchestrator
    /// --port PORT` on a machine all reach).
    #[arg(long)]
    #[serde(skip)]
    pub orchestrator: Option<String>,
    /// Several machines: this machine's address as the others reach it, ws://HOST:PORT; its
    /// data service listens on PORT.
    #[arg(long)]
    #[serde(skip)]
    pub node_address: Option<String>,
    /// Several machines: the longest wait, in seconds, for the other machines (to reach the
    /// orchestrator, for all to register, at every collective operation); past it the run ends
    /// naming the machines that did not arrive. It also bounds what machine 0 does alone
    /// between two steps while the others wait (the kNN monitor at the start and every
    /// --knn-every epochs, a checkpoint): raise it when that takes longer.
    #[arg(long, default_value_t = curriculum_ssl::data_parallel::DEFAULT_TIMEOUT_S)]
    #[serde(skip)]
    pub timeout: u64,
}

/// The options of one family of recipes (MoCo's shuffling batch norm, multi-crop, the SimCLR
/// family's losses, HCL, batch curation, PGD), refused by the others, and how a step runs its
/// augmentation and its views' passes (recorded).
#[derive(Args, Debug, Clone, Serialize)]
pub struct MethodArgs {
    /// MoCo recipes on several replicas: MoCo's shuffling BatchNorm (each replica's own batch
    /// statistics, the key encoder on a shuffled global batch) instead of synchronised batch
    /// norm.
    #[arg(long)]
    pub shuffle_bn: bool,
    /// Multi-crop recipes (swav, dino): local crops per image besides the two global views (0:
    /// the two views alone; default 6).
    #[arg(long)]
    pub local_crops: Option<usize>,
    /// Upload and augment each batch on a thread of its own while the step before runs (`false`:
    /// between steps, on the training thread); on the CPU the numbers are the same either way
    /// (default: true on the CPU; false on a GPU backend, where two threads working on one
    /// device can change results: docs/gpu.md).
    #[arg(long, action = clap::ArgAction::Set)]
    pub augment_ahead: Option<bool>,
    /// Back-propagate the two views' passes on two threads where the method allows it
    /// (SimCLR, symmetric MoCo, MoCo v3, BYOL, SimSiam, Barlow Twins, VICReg; not MoCo v1/v2's
    /// one query pass, nor a step with PGD's third pass); `false`: one view after the other. On
    /// the CPU the gradients are the same numbers either way (default: true on the CPU; on a
    /// GPU backend neither: the two views go through the networks as one batch whose batch
    /// norms take them apart, half the kernel launches; docs/gpu.md).
    #[arg(long, action = clap::ArgAction::Set)]
    pub view_threads: Option<bool>,
    /// SimCLR-family recipes: the two-view loss, with its own defaults (the recipe's loss when
    /// not given).
    #[arg(long, value_enum)]
    #[serde(serialize_with = "recorded::optional_name")]
    pub loss: Option<LossChoice>,
    /// HCL recipes (hcl, hcl_curriculum, or `--loss hcl`): MICO's hard-positive weighting (§3.3
    /// eq. 3) with this `k` in `e^{(k − β)s⁺/τ}`; off when not given.
    #[arg(long, allow_negative_numbers = true)]
    pub hard_positive_k: Option<f64>,
    /// Batch curation (bad_batches): epochs before curation starts; the threshold is the mean
    /// FRD of the last of them (the paper's 5 when not given).
    #[arg(long)]
    pub curation_warmup: Option<usize>,
    /// Batch curation (bad_batches): redraws of a rejected batch before it trains anyway, with
    /// a warning (3 when not given).
    #[arg(long)]
    pub curation_retries: Option<usize>,
    /// PGD recipes (simclr_pgd, hcl_pgd): ascent steps of the attack on the negatives (Madry et
    /// al.'s 7 when not given; each costs a forward and backward pass on both views).
    #[arg(long)]
    pub pgd_steps: Option<usize>,
}

/// The two-view losses of the SimCLR family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LossChoice {
    /// NT-Xent (SimCLR, Chen et al. 2020), τ = 0.2.
    NtXent,
    /// Hard negative sampling (Robinson et al. 2021): β = 1, τ⁺ = 0.1, τ = 0.5.
    Hcl,
    /// Curricular weighting of hard negatives (Zhuang et al. 2024) with its adaptive `t`.
    Curricular,
    /// NT-Xent with a Huber penalty on the positive pairs (Göksu and Pugeault 2024).
    Huber,
    /// The decoupled contrastive loss (Yeh et al. 2022): NT-Xent without the positive in the
    /// denominator, τ = 0.1.
    Dcl,
    /// DCL with the negative von Mises-Fisher weights on the positives, τ = 0.1, σ = 0.5.
    Dclw,
    /// The model-aware contrastive loss (Huang et al. 2023): a temperature following the
    /// views' alignment, τ = 0.1, α = 0.5, A₀ = 0.
    Macl,
}

impl LossChoice {
    /// The loss with its defaults.
    pub fn config(self) -> PairLossConfig {
        match self {
            Self::NtXent => PairLossConfig::NtXent(NtXentLossConfig::new().with_temperature(0.2)),
            Self::Hcl => PairLossConfig::Hcl(HclLossConfig::new()),
            Self::Curricular => PairLossConfig::Curricular(CurricularLossConfig::new()),
            Self::Huber => PairLossConfig::Huber(HuberNtXentLossConfig::new()),
            Self::Dcl => PairLossConfig::Dcl(DclLossConfig::new()),
            Self::Dclw => PairLossConfig::Dcl(DclLossConfig::weighted(0.5)),
            Self::Macl => PairLossConfig::Macl(MaclLossConfig::new()),
        }
    }
}

/// The schedules of MICO's ablation (its Table 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ScheduleChoice {
    /// The target from the start (the tables' baseline).
    None,
    /// 2-step: 0.33, 0.66 of the target.
    TwoStep,
    /// 4-step: 0.2, 0.4, 0.6, 0.8 of the target.
    FourStep,
    /// Linear from 0 to the target.
    Linear,
    /// Reverse cosine from 0.8 to 0.2 of the target.
    ReverseCosine,
}

impl ScheduleChoice {
    /// The schedule, per epoch.
    pub fn config(self) -> Option<SchedulerConfig> {
        match self {
            Self::None => None,
            Self::TwoStep => Some(SchedulerConfig::two_step()),
            Self::FourStep => Some(SchedulerConfig::four_step()),
            Self::Linear => Some(SchedulerConfig::linear()),
            Self::ReverseCosine => Some(SchedulerConfig::reverse_cosine()),
        }
    }
}

/// What a recipe's run directory records about the run besides the trainer, loader and
/// augmentation settings (`run` in `config.json`): read back by `recipe eval`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RecipeRun {
    /// Recipe name.
    pub recipe: String,
    /// Backbone.
    pub backbone: BackboneChoice,
    /// Data directory, or none for the embedded subset.
    pub data: Option<PathBuf>,
    /// The dataset of `data` (Fashion-MNIST in runs recorded before the option existed).
    #[serde(default)]
    pub dataset: DatasetChoice,
    /// image-folder, folder: the square size images were resized to.
    #[serde(default)]
    pub image_size: Option<usize>,
    /// The kNN monitor's labelled folder (--knn-data).
    #[serde(default)]
    pub knn_data: Option<PathBuf>,
    /// The class list the run read (--classes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classes: Option<PathBuf>,
    /// The labels file of its val/ (--val-labels).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub val_labels: Option<PathBuf>,
    /// Whether the image files were streamed (decoded every epoch, the views cut from the
    /// originals) rather than decoded once into memory: other views of the same files, so a
    /// resume the other way is refused (absent when false, as in every run recorded before).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stream: bool,
    /// `[height, width, channels]` of the images trained on (runs recorded before it: `None`).
    #[serde(default)]
    pub input_shape: Option<[usize; 3]>,
    /// The ResNet stem given with `--stem` (`None`: the backbone's default).
    #[serde(default)]
    pub stem: Option<StemChoice>,
    /// The grid the ResNet's features were pooled to (`--pooled-grid`, resolved), when not 1:
    /// absent for global average pooling, as in every run recorded before the option
    /// ([`RecipeRun::grid`]), so that those runs resume and compare as they were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pooled_grid: Option<usize>,
    /// What the ViT's features are, when not the class token's output (the recipe's: AIM's
    /// mean of the patch tokens); absent for the class token, as in every run recorded before.
    #[serde(default, skip_serializing_if = "VitPool::is_token")]
    pub vit_pool: VitPool,
    /// Torchvision weights the backbone started from.
    #[serde(default)]
    pub weights: Option<PathBuf>,
    /// The method's configuration.
    pub method: serde_json::Value,
    /// The optimiser's configuration (recipe.toml's `[optimizer]` as built), compared on resume
    /// like the method's (absent in runs recorded before it: a resume of one takes the given
    /// optimiser and records it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optimizer: Option<serde_json::Value>,
    /// The backend it trained on.
    pub backend: String,
    /// The float type of its tensors (`--precision`; absent in f32 runs and in runs recorded
    /// before the option): a resume with another is refused as a changed setting.
    #[serde(default, skip_serializing_if = "crate::backend::Precision::is_f32")]
    pub precision: crate::backend::Precision,
}

impl RecipeRun {
    /// The grid the run's ResNet pooled its features to: the recorded one, or 1 (global
    /// average pooling) for a run recorded before `--pooled-grid` existed.
    pub fn grid(&self) -> usize {
        self.pooled_grid.unwrap_or(1)
    }
}

impl RecipeArgs {
    /// Parses the arguments of `recipe` with its settings file (--config, or the run
    /// directory's recipe.toml on --resume / --extend) and its KEY=VALUE overrides: the options,
    /// and the overrides of the method, optimiser and augmentation the recipe applies as it
    /// builds them.
    pub fn parse_with_settings(recipe: &str, args: &[String]) -> Result<(Self, Overrides)> {
        let first: Self = parse_recipe_args(recipe, args)?;
        // The file and how an error names it: the user's `--config`, or the run's own settings
        // (no `--config` was given: naming the option would lead astray).
        let file = match &first.config {
            Some(path) => Some((path.clone(), format!("--config {}", path.display()))),
            None if first.start.resume || first.start.extend => {
                let own = first.start.run_dir(recipe).join(RECIPE_TOML);
                let name = format!(
                    "{} (the run's own settings, read on --resume)",
                    own.display()
                );
                std::fs::symlink_metadata(&own)
                    .is_ok()
                    .then_some((own, name))
            }
            None => None,
        };
        let (resolved, overrides) = config_file::resolve(
            &<Self as clap::CommandFactory>::command(),
            recipe,
            file.as_ref().map(|(p, n)| (p.as_path(), n.as_str())),
            args,
            &first.overrides,
        )?;
        let args: Self = parse_recipe_args(recipe, &resolved)?;
        if let Some((file, _)) = &file {
            log::info!("settings from {}", file.display());
        }
        Ok((args, overrides))
    }
}

impl StartArgs {
    /// The run directory: `--run-dir`, else `runs/<recipe>`.
    pub fn run_dir(&self, recipe: &str) -> PathBuf {
        self.run_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from("runs").join(recipe))
    }
}

/// How recipe.toml writes the options' values that its types alone would write otherwise
/// (`serialize_with` of the option groups and of prepare.rs's `RecordedOptions`): as the command
/// line spells them, since [`config_file`] reads each key back as `--key=value`. An option not
/// given (`None`) is left out of the table (TOML has no null: `toml` omits it).
pub(super) mod recorded {
    use clap::ValueEnum;
    use serde::Serializer;
    use std::path::PathBuf;

    /// A value of a `value_enum` option by its name on the command line (`small-2x`, not the
    /// variant's `Small2x` that the run record writes).
    pub fn name<V: ValueEnum, S: Serializer>(value: &V, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::value_name(value.clone()))
    }

    /// An optional [`name`].
    pub fn optional_name<V: ValueEnum, S: Serializer>(
        value: &Option<V>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(v) => name(v, s),
            None => s.serialize_none(),
        }
    }

    /// The dataset, Fashion-MNIST when not given (always written: the data the run read).
    pub fn dataset<S: Serializer>(
        value: &Option<super::DatasetChoice>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        name(&value.unwrap_or_default(), s)
    }

    /// A path as it displays (a path that is not UTF-8 is written lossily, not refused).
    pub fn path<S: Serializer>(value: &Option<PathBuf>, s: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(p) => s.serialize_str(&p.display().to_string()),
            None => s.serialize_none(),
        }
    }

    /// The seed: an integer, or above i64's range (TOML's integers) its digits as text, which
    /// clap reads back.
    pub fn seed<S: Serializer>(seed: &u64, s: S) -> Result<S::Ok, S::Error> {
        match i64::try_from(*seed) {
            Ok(n) => s.serialize_i64(n),
            Err(_) => s.serialize_str(&seed.to_string()),
        }
    }

    /// Whether a count is 0 (`--checkpoint-every-steps`: written only when on).
    pub fn is_zero(n: &usize) -> bool {
        *n == 0
    }
}

/// Parses a recipe's arguments into its options struct `T` (the recipe's name heads the usage
/// line of `--help`; a clap error is a usage error).
pub fn parse_recipe_args<T: Parser>(recipe: &str, args: &[String]) -> Result<T> {
    let command = T::command()
        .bin_name(format!("recipe {recipe}"))
        .about(format!(
            "Options of `recipe {recipe}` (the recipe's defaults when not given)"
        ));
    parse_with(command, args)
}

/// Parses a command's arguments (`args[0]` its name) into `T`, as every command of the binary
/// does: `--lr -1` is the option's value, refused by the option's own check naming it, and a
/// path may start with a hyphen (`--out -x.npy`), where clap read both as an unknown flag with a
/// tip that led astray. A clap error is a usage error.
///
/// # Errors
/// A usage error: clap's, or a path option whose value is another option (`--out --run-dir`:
/// the path was forgotten).
pub fn parse_args<T: Parser>(args: &[String]) -> Result<T> {
    parse_with(T::command(), args)
}

fn parse_with<T: Parser>(command: clap::Command, args: &[String]) -> Result<T> {
    let is_path =
        |a: &clap::Arg| a.get_value_parser().type_id() == std::any::TypeId::of::<PathBuf>();
    let command = command.mut_args(|a| {
        if !a.get_action().takes_values() || a.is_positional() {
            a
        } else if is_path(&a) {
            a.allow_hyphen_values(true)
        } else {
            a.allow_negative_numbers(true)
        }
    });
    let paths: Vec<String> = command
        .get_arguments()
        .filter(|a| is_path(a) && !a.is_positional())
        .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
        .collect();
    // A path option followed by another option: the path was forgotten.
    for pair in args.windows(2) {
        if paths.contains(&pair[0]) && pair[1].starts_with("--") {
            return Err(crate::usage::usage(format!(
                "{} {}: {} needs a path; {} is an option",
                pair[0], pair[1], pair[0], pair[1]
            )));
        }
    }
    command
        .try_get_matches_from(args)
        .and_then(|m| T::from_arg_matches(&m))
        .map_err(crate::usage::help_or_error)
}

/// The name of a value on the command line (`resnet18`, `fashion-mnist`).
pub fn value_name(v: impl ValueEnum) -> String {
    v.to_possible_value()
        .expect("no skipped variant")
        .get_name()
        .to_string()
}

/// The datasets the recipes read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, Serialize, Deserialize)]
pub enum DatasetChoice {
    /// Fashion-MNIST IDX files (`train-images-idx3-ubyte[.gz]`, …), or the embedded subset.
    #[default]
    FashionMnist,
    /// MNIST IDX files (the same layout).
    Mnist,
    /// CIFAR-10 binary batches (`data_batch_1.bin` … `test_batch.bin`).
    Cifar10,
    /// CIFAR-100 binary files (`train.bin`, `test.bin`), fine labels.
    Cifar100,
    /// STL-10 binaries: pre-training on the unlabeled split, the kNN monitor on train/test.
    Stl10,
    /// A `train/` tree of class folders of PNG or JPEG images, and a `val/` one for the kNN
    /// monitor (without `val/` the monitor is off).
    ImageFolder,
    /// Any folder of PNG or JPEG images, flat or nested (sub-folders are not classes): no
    /// labels; the kNN monitor is off unless --knn-data names a labelled `train/` + `val/` tree.
    Folder,
    /// WebDataset shards (`.tar` files of `KEY.jpg` + `KEY.cls`, as `recipe pack` writes them):
    /// `train/` and `val/` folders of shards (the kNN monitor on val/), or a folder of shards;
    /// always streamed.
    Shards,
}

/// As on the command line (`fashion-mnist`, `image-folder`), for messages.
impl std::fmt::Display for DatasetChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&value_name(*self))
    }
}

/// The most loader threads per replica chosen without `--workers`: each holds up to
/// `prefetch + 1` batches (two 224-px views of 256 images are 77 MB), and 16 cut about 6,700
/// images/s, more than a GPU trains on.
const MAX_DEFAULT_WORKERS: usize = 16;

/// The loader threads of each replica: `--workers`, else 2, or, when a GPU trains on streamed
/// files (the CPU then only decodes and cuts), the machine's cores but one per replica, shared
/// among the `devices` replicas (at least 2): a GPU takes a few thousand images a second, a
/// loader thread cuts about 420 (docs/gpu.md).
pub fn loader_workers(
    workers: Option<usize>,
    streamed: bool,
    on_gpu: bool,
    devices: usize,
) -> usize {
    workers.unwrap_or_else(|| {
        if streamed && on_gpu {
            let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
            (cores.saturating_sub(devices.max(1)) / devices.max(1)).clamp(2, MAX_DEFAULT_WORKERS)
        } else {
            2
        }
    })
}

impl DatasetChoice {
    /// Whether the images are the user's own files (image-folder, folder): resized with
    /// --image-size, normalised with their own statistics.
    pub fn is_files(self) -> bool {
        matches!(self, Self::ImageFolder | Self::Folder | Self::Shards)
    }
}

#[cfg(test)]
mod tests {
    use super::loader_workers;

    /// `--workers` is kept as given; without it a CPU run or an in-memory run gets 2, and a GPU
    /// fed from files gets the cores but one per replica, shared among the replicas, at least 2.
    #[test]
    fn the_loader_gets_the_cores_a_gpu_leaves_free() {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        assert_eq!(loader_workers(Some(5), true, true, 1), 5);
        assert_eq!(loader_workers(None, true, false, 1), 2);
        assert_eq!(loader_workers(None, false, true, 1), 2);
        assert_eq!(
            loader_workers(None, true, true, 1),
            (cores - 1).clamp(2, 16)
        );
        assert_eq!(
            loader_workers(None, true, true, 4),
            (cores.saturating_sub(4) / 4).clamp(2, 16)
        );
    }
}
