//! What every training recipe shares: its command-line options, the data, the backbone, and the
//! run itself (trainer, kNN monitor, resume, summary).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use burn::module::AutodiffModule;
use burn::optim::Optimizer;
use clap::{Parser, ValueEnum};
use curriculum_ssl::curation::FrechetCurationConfig;
use curriculum_ssl::curriculum::{
    MixupCurriculumConfig, SchedulerConfig, StrengthCurriculumConfig,
};
use curriculum_ssl::data::embedded::load_or_embedded;
use curriculum_ssl::data::idx::Split;
use curriculum_ssl::data::{ImageArray, Loader, LoaderConfig};
use curriculum_ssl::eval::{KnnMonitor, KnnResult};
use curriculum_ssl::hooks::{
    FrechetCurationHook, KnnHook, ObjectBoxesHook, SelfPacedAutoAugmentHook,
};
use curriculum_ssl::loss::{
    CurricularLossConfig, HclLossConfig, HuberNtXentLossConfig, NtXentLossConfig,
};
use curriculum_ssl::method::pgd::PgdConfig;
use curriculum_ssl::method::{init_method, MoCo, MoCoConfig, PairLossConfig, SslMethod};
use curriculum_ssl::pipeline::{Augmenter, PipelineConfig};
use curriculum_ssl::train::{SelfSupervised, StartMode, TrainConfig, Trainer};
use curriculum_ssl_models::{
    AnyBackbone, AnyBackboneConfig, Backbone, BlockKind, EfficientNetConfig, LeNetConfig,
    MobileNetV3Config, ResNetConfig, Stem, VggConfig, WideResNetConfig,
};
use serde::{Deserialize, Serialize};

use crate::{backend, usage};

/// Autodiff backend the recipes train on.
pub type Train = burn::backend::Autodiff<backend::Inner>;
/// Its device.
pub type Device = <Train as burn::tensor::backend::BackendTypes>::Device;

/// The backbone a recipe trains: every model of `curriculum_ssl_models`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, serde::Deserialize)]
pub enum BackboneChoice {
    /// ResNet-18 (512-d features): the papers' small-image backbone (CIFAR stem by default).
    Resnet18,
    /// ResNet-34 (512-d features).
    Resnet34,
    /// ResNet-50 (2048-d features, bottleneck blocks).
    Resnet50,
    /// WideResNet-16-8 (512-d features).
    #[value(name = "wrn-16-8")]
    Wrn16x8,
    /// WideResNet-28-10 (640-d features).
    #[value(name = "wrn-28-10")]
    Wrn28x10,
    /// EfficientNet-B0 (1280-d features): one of Light-MoCo's small backbones.
    #[value(name = "efficientnet-b0")]
    EfficientnetB0,
    /// EfficientNet-B1 (1280-d features).
    #[value(name = "efficientnet-b1")]
    EfficientnetB1,
    /// MobileNet-V3-Large (960-d features): Light-MoCo's subject.
    #[value(name = "mobilenet-v3-large")]
    MobilenetV3Large,
    /// MobileNet-V3-Small (576-d features).
    #[value(name = "mobilenet-v3-small")]
    MobilenetV3Small,
    /// VGG-16 with batch norm (512-d features; images of at least 32 pixels).
    #[value(name = "vgg16-bn")]
    Vgg16Bn,
    /// LeNet-5 (84-d features): the SPL-ADVisE embedding network for Fashion-MNIST.
    #[value(name = "lenet5")]
    Lenet5,
    /// ResNet with one block per stage, widths 8–64, ImageNet stem (64-d features): a fast
    /// backbone for CPU demos and CI.
    Small,
}

/// The first layers of a ResNet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, serde::Deserialize)]
pub enum StemChoice {
    /// 3×3 convolution, stride 1, no pooling (small images).
    Cifar,
    /// 7×7 convolution, stride 2, then max pooling (ImageNet).
    Imagenet,
}

impl BackboneChoice {
    /// The default for the build: ResNet-18 on a GPU backend, the small ResNet on the CPU.
    pub fn default_for_backend() -> Self {
        if backend::NAME.starts_with("cpu") {
            Self::Small
        } else {
            Self::Resnet18
        }
    }

    /// Whether `--stem` applies.
    pub fn is_resnet(self) -> bool {
        matches!(
            self,
            Self::Resnet18 | Self::Resnet34 | Self::Resnet50 | Self::Small
        )
    }

    /// Its configuration for `channels` input channels; `stem` for the ResNets (default: the
    /// CIFAR stem for ResNet-18/34/50, the ImageNet stem for the small ResNet).
    pub fn config(self, channels: usize, stem: Option<StemChoice>) -> AnyBackboneConfig {
        let stem = |default| match stem.unwrap_or(default) {
            StemChoice::Cifar => Stem::Cifar,
            StemChoice::Imagenet => Stem::ImageNet,
        };
        let resnet = |c: ResNetConfig| {
            AnyBackboneConfig::ResNet(
                c.with_stem(stem(StemChoice::Cifar))
                    .with_in_channels(channels),
            )
        };
        match self {
            Self::Resnet18 => resnet(ResNetConfig::resnet18()),
            Self::Resnet34 => resnet(ResNetConfig::resnet34()),
            Self::Resnet50 => resnet(ResNetConfig::resnet50()),
            Self::Small => AnyBackboneConfig::ResNet(
                ResNetConfig::new(BlockKind::Basic, [1, 1, 1, 1])
                    .with_base_width(8)
                    .with_in_channels(channels)
                    .with_stem(stem(StemChoice::Imagenet))
                    .with_banded_stem(backend::BANDED_STEM),
            ),
            Self::Wrn16x8 => AnyBackboneConfig::WideResNet(
                WideResNetConfig::wrn_16_8().with_in_channels(channels),
            ),
            Self::Wrn28x10 => AnyBackboneConfig::WideResNet(
                WideResNetConfig::wrn_28_10().with_in_channels(channels),
            ),
            Self::EfficientnetB0 => {
                AnyBackboneConfig::EfficientNet(EfficientNetConfig::b0().with_in_channels(channels))
            }
            Self::EfficientnetB1 => {
                AnyBackboneConfig::EfficientNet(EfficientNetConfig::b1().with_in_channels(channels))
            }
            Self::MobilenetV3Large => AnyBackboneConfig::MobileNetV3(
                MobileNetV3Config::large().with_in_channels(channels),
            ),
            Self::MobilenetV3Small => AnyBackboneConfig::MobileNetV3(
                MobileNetV3Config::small().with_in_channels(channels),
            ),
            Self::Vgg16Bn => {
                AnyBackboneConfig::Vgg(VggConfig::vgg16_bn().with_in_channels(channels))
            }
            Self::Lenet5 => {
                AnyBackboneConfig::LeNet(LeNetConfig::lenet5().with_in_channels(channels))
            }
        }
    }
}

/// A recipe's backbone: its configuration and the torchvision weights it starts from.
#[derive(Debug, Clone)]
pub struct BackboneSpec {
    /// The model.
    pub config: AnyBackboneConfig,
    /// Weights checked by [`BackboneSpec::check`] when the recipe was prepared.
    pub weights: Option<PathBuf>,
}

impl BackboneSpec {
    /// Builds the backbone (with its weights).
    ///
    /// # Panics
    /// If the weights cannot be loaded, which [`BackboneSpec::check`] rules out before
    /// any backbone is built (the same file into the same model).
    pub fn init<B: burn::tensor::backend::Backend>(&self, device: &B::Device) -> AnyBackbone<B> {
        let mut backbone = self.config.init(device);
        if let Some(path) = &self.weights {
            backbone
                .load_torchvision(path)
                .expect("the weights were checked when the recipe was prepared");
        }
        backbone
    }

    /// Builds a throwaway backbone once and checks it against the data before anything else
    /// happens: images of `(height, width, channels)` must fit it (channels, smallest size), and
    /// the weights, if given, must load into it.
    ///
    /// # Errors
    /// Naming `option` (the backbone's option) or `--weights` and what is wrong.
    pub fn check(
        &self,
        (height, width, channels): (usize, usize, usize),
        option: &str,
        device: &Device,
    ) -> Result<()> {
        let mut backbone = self.config.init::<backend::Inner>(device);
        backbone
            .check_input([1, channels, height, width])
            .map_err(|e| usage(format!("{option}: {e}")))?;
        if let Some(path) = &self.weights {
            backbone
                .load_torchvision(path)
                .map_err(|e| usage(format!("--weights {}: {e}", path.display())))?;
        }
        Ok(())
    }
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
    /// A `train/` and a `val/` tree of class folders of PNG or JPEG images.
    ImageFolder,
}

/// Where a recipe's images come from (recorded in the run's description).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct DataSource {
    /// The dataset.
    pub dataset: DatasetChoice,
    /// Its directory; `None`: the embedded subset.
    pub dir: Option<PathBuf>,
    /// image-folder: the square size images are resized to.
    pub image_size: Option<usize>,
}

impl DataSource {
    /// The source the options name (checked by [`DataSource::validate`]).
    pub fn from_args(args: &RecipeArgs) -> Self {
        Self {
            dataset: args.dataset.unwrap_or_default(),
            dir: args.data.clone(),
            image_size: args.image_size,
        }
    }

    /// Checks the combination before anything is read.
    ///
    /// # Errors
    /// A dataset other than Fashion-MNIST without `--data-dir`, `--image-size` outside
    /// image-folder or out of range, a `--data-dir` that is not a readable directory.
    pub fn validate(&self) -> Result<()> {
        let dataset = self.dataset;
        if self.dir.is_none() && dataset != DatasetChoice::FashionMnist {
            return Err(usage(format!(
                "--dataset {}: needs --data-dir (only Fashion-MNIST has an embedded subset)",
                dataset
                    .to_possible_value()
                    .expect("no skipped variant")
                    .get_name()
            )));
        }
        if let Some(size) = self.image_size {
            if dataset != DatasetChoice::ImageFolder {
                return Err(usage("--image-size: only for --dataset image-folder"));
            }
            if !(8..=1024).contains(&size) {
                return Err(usage(format!("--image-size {size}: must lie in [8, 1024]")));
            }
        }
        if let Some(dir) = &self.dir {
            check_data_dir(dir)?;
        }
        Ok(())
    }

    /// Loads the images: what the method trains on, and the labeled train and test splits of
    /// the kNN monitor. (The readers' errors name the file that is missing or damaged, so the
    /// context only says which split was being read.)
    pub fn load(&self) -> Result<Data> {
        self.load_splits(true)
    }

    /// As [`DataSource::load`]; without `pretrain`, STL-10's unlabeled split is not read (an
    /// evaluation needs only the labeled splits).
    pub fn load_splits(&self, pretrain: bool) -> Result<Data> {
        use curriculum_ssl::data::{cifar, idx, image_folder, stl10};
        let Some(dir) = self.dir.as_deref() else {
            let train = load_or_embedded(None, Split::Train)
                .context("loading the training images of the embedded subset")?;
            let test = load_or_embedded(None, Split::Test)
                .context("loading the test images of the embedded subset")?;
            return Ok(Data {
                pretrain: None,
                train,
                test,
            });
        };
        let (pretrain, train, test) = match self.dataset {
            DatasetChoice::FashionMnist | DatasetChoice::Mnist => (
                None,
                idx::load(dir, Split::Train).context("loading the training images")?,
                idx::load(dir, Split::Test).context("loading the test images")?,
            ),
            DatasetChoice::Cifar10 => (
                None,
                cifar::load_cifar10(dir, cifar::Split::Train)
                    .context("loading the training images")?,
                cifar::load_cifar10(dir, cifar::Split::Test).context("loading the test images")?,
            ),
            DatasetChoice::Cifar100 => {
                let fine = cifar::Cifar100Labels::Fine;
                (
                    None,
                    cifar::load_cifar100(dir, cifar::Split::Train, fine)
                        .context("loading the training images")?,
                    cifar::load_cifar100(dir, cifar::Split::Test, fine)
                        .context("loading the test images")?,
                )
            }
            DatasetChoice::Stl10 => (
                if pretrain {
                    Some(
                        stl10::load_unlabeled(dir, stl10::Split::Unlabeled)
                            .context("loading the unlabeled images")?,
                    )
                } else {
                    None
                },
                stl10::load(dir, stl10::Split::Train).context("loading the training images")?,
                stl10::load(dir, stl10::Split::Test).context("loading the test images")?,
            ),
            DatasetChoice::ImageFolder => {
                let options = image_folder::ImageFolderOptions {
                    channels: Some(3),
                    size: self.image_size.map(|s| (s, s)),
                    resize: self.image_size.is_some(),
                    threads: 0,
                };
                (
                    None,
                    image_folder::load(dir.join("train"), options)
                        .context("loading the training images (train/)")?,
                    image_folder::load(dir.join("val"), options)
                        .context("loading the validation images (val/)")?,
                )
            }
        };
        Ok(Data {
            pretrain,
            train,
            test,
        })
    }
}

/// Options of every training recipe (defaults are the recipe's own when not given).
#[derive(Parser, Debug, Clone)]
#[command(no_binary_name = true, name = "recipe", args_override_self = true)]
pub struct RecipeArgs {
    /// The dataset of --data-dir (default: fashion-mnist, whose IDX files also read MNIST's).
    #[arg(long, value_enum)]
    pub dataset: Option<DatasetChoice>,
    /// The dataset's directory; with neither --dataset nor --data-dir: the embedded
    /// Fashion-MNIST subset (8,000 training and 2,000 test images).
    #[arg(long = "data-dir", alias = "data")]
    pub data: Option<PathBuf>,
    /// image-folder: resize every image to this many pixels square (default: the size of the
    /// first image, which all must then have).
    #[arg(long)]
    pub image_size: Option<usize>,
    /// Run directory (config.json, steps.csv, epochs.csv, checkpoints/).
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
    /// Continue the run in --run-dir from its newest valid checkpoint, with the run's settings
    /// (--checkpoint-every, --knn-every, --workers, --device, --augment-ahead and --view-threads may
    /// change).
    #[arg(long)]
    pub resume: bool,
    /// Resume and make the run longer on purpose (a larger --epochs): the learning rate is
    /// re-planned from the current step to reach its final value at the new end.
    #[arg(long)]
    pub extend: bool,
    /// Epochs.
    #[arg(long)]
    pub epochs: Option<usize>,
    /// Images per step.
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Peak learning rate.
    #[arg(long)]
    pub lr: Option<f64>,
    /// Backbone (default: resnet18 on a GPU, small on the CPU).
    #[arg(long, value_enum)]
    pub backbone: Option<BackboneChoice>,
    /// ResNets: the stem (default: cifar for resnet18/34/50, imagenet for small).
    #[arg(long, value_enum)]
    pub stem: Option<StemChoice>,
    /// Start the backbone from torchvision weights (a safetensors export of its state_dict;
    /// ResNets, EfficientNets, MobileNet-V3s).
    #[arg(long)]
    pub weights: Option<PathBuf>,
    /// Seed of the model initialisation, the batch order and the augmentation.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// kNN monitor every N epochs (0: only at the end).
    #[arg(long, default_value_t = 5)]
    pub knn_every: usize,
    /// Checkpoint every N epochs (0: only at the end).
    #[arg(long, default_value_t = 5)]
    pub checkpoint_every: usize,
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
    pub schedule: Option<ScheduleChoice>,
    /// Loader threads (at most four per core).
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// The device to train on: with --features cuda the CUDA device of this index, with
    /// --features wgpu the N-th discrete GPU (default: device 0, or wgpu's default adapter); the
    /// CPU backend has one device, 0. May change on --resume.
    #[arg(long)]
    pub device: Option<usize>,
    /// Upload and augment each batch on a thread of its own while the step before runs (`false`:
    /// between steps, on the training thread); on the CPU the numbers are the same either way
    /// (default: true on the CPU; false on a GPU backend, where two threads working on one
    /// device can change results: docs/gpu.md).
    #[arg(long, action = clap::ArgAction::Set)]
    pub augment_ahead: Option<bool>,
    /// Back-propagate the two views' passes on two threads where the method allows it
    /// (SimCLR, symmetric MoCo, BYOL, SimSiam; not MoCo v1/v2's one query pass, nor a step with
    /// PGD's third pass); on the CPU the gradients are the same numbers either way (default:
    /// true on the CPU; false on a GPU backend, as --augment-ahead).
    #[arg(long, action = clap::ArgAction::Set)]
    pub view_threads: Option<bool>,
    /// SimCLR-family recipes: the two-view loss, with its own defaults (the recipe's loss when
    /// not given).
    #[arg(long, value_enum)]
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
}

impl LossChoice {
    /// The loss with its defaults.
    pub fn config(self) -> PairLossConfig {
        match self {
            Self::NtXent => PairLossConfig::NtXent(NtXentLossConfig::new().with_temperature(0.2)),
            Self::Hcl => PairLossConfig::Hcl(HclLossConfig::new()),
            Self::Curricular => PairLossConfig::Curricular(CurricularLossConfig::new()),
            Self::Huber => PairLossConfig::Huber(HuberNtXentLossConfig::new()),
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
    /// image-folder: the square size images were resized to.
    #[serde(default)]
    pub image_size: Option<usize>,
    /// The ResNet stem given with `--stem` (`None`: the backbone's default).
    #[serde(default)]
    pub stem: Option<StemChoice>,
    /// Torchvision weights the backbone started from.
    #[serde(default)]
    pub weights: Option<PathBuf>,
    /// The method's configuration.
    pub method: serde_json::Value,
    /// The backend it trained on.
    pub backend: String,
}

impl RecipeArgs {
    /// Parses the arguments of `recipe` (its name heads the usage line of `--help`).
    pub fn parse_from(recipe: &str, args: &[String]) -> Result<Self> {
        parse_recipe_args(recipe, args)
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
    command
        .try_get_matches_from(args)
        .and_then(|m| T::from_arg_matches(&m))
        .map_err(crate::help_or_error)
}

/// Checks that `--data-dir DIR` names a directory (before anything is read or written).
pub fn check_data_dir(dir: &Path) -> Result<()> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(usage(format!(
            "--data-dir {}: not a directory",
            dir.display()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Err(usage(format!(
            "--data-dir {}: permission denied",
            dir.display()
        ))),
        Err(_) => Err(usage(format!(
            "--data-dir {}: no such directory",
            dir.display()
        ))),
    }
}

/// Checks the settings a training recipe resolved, naming the option at fault.
pub(crate) fn validate(settings: &Settings, args: &RecipeArgs) -> Result<()> {
    if settings.epochs == 0 {
        return Err(usage("--epochs: must be at least 1"));
    }
    if settings.batch_size < 2 {
        return Err(usage(format!(
            "--batch-size {}: must be at least 2 (batch norm needs two images per channel, and \
             the contrastive losses need negatives)",
            settings.batch_size
        )));
    }
    if !(settings.lr.is_finite() && settings.lr > 0.0) {
        return Err(usage(format!(
            "--lr {}: must be a finite number > 0",
            settings.lr
        )));
    }
    if args.extend && args.resume {
        return Err(usage("--extend resumes by itself: give --extend alone"));
    }
    if settings.stem.is_some() && !settings.backbone.is_resnet() {
        return Err(usage(format!(
            "--stem: only for the ResNets (resnet18, resnet34, resnet50, small), not {}",
            settings
                .backbone
                .to_possible_value()
                .expect("no skipped variant")
                .get_name()
        )));
    }
    settings.source.validate()
}

/// MoCo (v1, v2 or Light-MoCo, as `config` says) around the recipe's backbone, seeded by
/// `--seed`; the queue's constraint on the batch is said in terms of `--batch-size`.
pub fn init_moco(
    recipe: &Prepared,
    config: &MoCoConfig,
) -> Result<MoCo<Train, AnyBackbone<Train>>> {
    let backbone = recipe.backbone_config();
    let batch_size = recipe.settings.batch_size;
    recipe
        .init(|d| config.init(|d| backbone.init::<Train>(d), batch_size, d))
        .map_err(|e| {
            if e.field != "size" {
                return e.into();
            }
            let per_key = if config.symmetric { 2 } else { 1 };
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

/// Training and test images.
pub struct Data {
    /// What the method trains on when it is not `train` (STL-10's unlabeled split).
    pub pretrain: Option<ImageArray>,
    /// Labeled training split (trained on unless `pretrain` is given; the kNN monitor's bank).
    pub train: ImageArray,
    /// Test split.
    pub test: ImageArray,
}

/// The pipeline for the data: the preset at the images' size, crops of at least half the image
/// on images smaller than 32 pixels (28×28 garments lose what tells them apart below that).
fn pipeline(preset: fn(usize, usize) -> PipelineConfig, data: &Data, seed: u64) -> PipelineConfig {
    let (h, _, c) = data.train.image_shape();
    let mut p = preset(h, c);
    if h < 32 {
        for v in [&mut p.view1, &mut p.view2] {
            if let Some(crop) = v.crop.as_mut() {
                crop.scale = (crop.scale.0.max(0.5), crop.scale.1);
            }
        }
    }
    p.seed = seed;
    p
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
}

/// Parses and checks the options, loads the data and builds the pipeline.
pub fn prepare(args: &[String], defaults: Defaults) -> Result<Prepared> {
    let args = RecipeArgs::parse_from(defaults.recipe, args)?;
    let mut settings = Settings::new(
        defaults.recipe,
        &args,
        defaults.epochs,
        defaults.batch_size,
        defaults.lr,
    );
    settings.warmup_epochs = defaults.warmup_epochs.min(settings.epochs);
    validate(&settings, &args)?;
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
    let curation = curation(&args, defaults.curation, defaults.recipe, settings.epochs)?;
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
    let channels = data.train.image_shape().2;
    BackboneSpec {
        config: settings.backbone.config(channels, settings.stem),
        weights: settings.weights.clone(),
    }
    .check(data.train.image_shape(), "--backbone", &device)?;
    let mut pipeline = pipeline(defaults.preset, &data, settings.seed);
    pipeline.mixup_curriculum = mixup;
    pipeline.strength_curriculum = strength;
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
    /// The backbone's configuration for the data's channel count.
    pub fn backbone_config(&self) -> BackboneSpec {
        BackboneSpec {
            config: self
                .settings
                .backbone
                .config(self.data.train.image_shape().2, self.settings.stem),
            weights: self.settings.weights.clone(),
        }
    }

    /// Builds the method with the backend's generator seeded by `--seed`, so that its initial
    /// weights depend on the seed alone.
    pub fn init<S, E>(&self, build: impl FnOnce(&Device) -> Result<S, E>) -> Result<S, E>
    where
        S: SslMethod<Train>,
    {
        init_method::<Train, S, E>(&self.device, self.settings.seed, build)
    }

    /// Trains `method` (configured by `method_config`, recorded in `config.json`) with
    /// `optimizer` and prints what the run measured.
    pub fn train<S, O>(self, method: S, method_config: &impl Serialize, optimizer: O) -> Result<()>
    where
        S: SslMethod<Train>,
        <S::Backbone as AutodiffModule<Train>>::InnerModule: Backbone<backend::Inner>,
        O: Optimizer<S::Online, Train> + 'static,
    {
        let method_config = serde_json::to_value(method_config)?;
        run(
            &self.args,
            &self.settings,
            self.curation,
            self.data,
            self.pipeline,
            method,
            method_config,
            optimizer,
            &self.device,
        )
    }
}

/// The kNN hook every training recipe adds.
fn knn_hook<S, O>(trainer: &Trainer<Train, SelfSupervised<Train, S, O, ImageArray>>) -> &KnnHook
where
    S: SslMethod<Train> + 'static,
    O: Optimizer<S::Online, Train> + 'static,
{
    trainer
        .hook::<KnnHook>()
        .expect("every training recipe adds the kNN hook")
}

/// Trains `method` and prints what the run measured.
#[allow(clippy::too_many_arguments)]
fn run<S, O>(
    args: &RecipeArgs,
    settings: &Settings,
    curation: Option<FrechetCurationConfig>,
    data: Data,
    pipeline: PipelineConfig,
    method: S,
    method_config: serde_json::Value,
    optimizer: O,
    device: &Device,
) -> Result<()>
where
    S: SslMethod<Train>,
    <S::Backbone as AutodiffModule<Train>>::InnerModule: Backbone<backend::Inner>,
    O: Optimizer<S::Online, Train> + 'static,
{
    let channels = data.train.image_shape().2;
    let augmenter: Augmenter = pipeline.clone().init(channels)?;
    let loader_config = LoaderConfig {
        batch_size: settings.batch_size,
        seed: settings.seed,
        workers: args.workers,
        ..LoaderConfig::default()
    };
    let monitor = KnnMonitor::new(
        data.train.clone(),
        data.test.clone(),
        pipeline.view1.normalize.clone(),
    )?;
    let (images, what) = match data.pretrain {
        Some(pretrain) => (pretrain, "pre-training images"),
        None => (data.train, "training images"),
    };
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
    if !backend::NAME.starts_with("cpu") {
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
    let uses_boxes = method.uses_object_boxes();
    let adaptive = augmenter.is_adaptive();
    let mut builder = Trainer::builder(method, optimizer, augmenter, loader)
        .config(train_config)
        .run_dir(&run_dir)
        .describe(&description);
    if let Some(curation) = curation {
        builder = builder.hook(FrechetCurationHook::new(curation)?);
    }
    if uses_boxes {
        builder = builder.hook(ObjectBoxesHook::new());
    }
    if adaptive {
        builder = builder.hook(SelfPacedAutoAugmentHook::new());
    }
    let mut trainer = builder
        .hook(KnnHook::new(monitor, args.knn_every))
        .start(mode)
        .augment_ahead(args.augment_ahead.unwrap_or(backend::AUGMENT_AHEAD))
        .view_threads(args.view_threads.unwrap_or(backend::VIEW_THREADS))
        .build(device)?;
    match trainer.resumed_from() {
        Some(dir) => println!("resuming from {}", dir.display()),
        None if mode != StartMode::Fresh => {
            println!("no checkpoint in {}: starting afresh", run_dir.display())
        }
        None => {}
    }
    println!(
        "{}: {} epochs, batch {}, lr {}, backbone {:?}, backend {}, run directory {}",
        settings.recipe,
        settings.epochs,
        settings.batch_size,
        settings.lr,
        settings.backbone,
        backend::NAME,
        run_dir.display()
    );
    // The same backbone before any training, measured once per run and kept beside it, so that
    // the summary can say how much the training helped (also after a resume).
    let init_file = run_dir.join(KNN_AT_INIT);
    let at_init: Vec<KnnResult> = if trainer.step() == 0 {
        let results = knn_hook(&trainer).evaluate(trainer.method(), device)?;
        std::fs::write(&init_file, serde_json::to_vec_pretty(&results)?)
            .with_context(|| format!("writing {}", init_file.display()))?;
        results
    } else {
        std::fs::read(&init_file)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default()
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
        let measured = knn_hook(&trainer).last().map_or(&[][..], |(_, r)| r);
        for r in measured {
            let init = at_init
                .iter()
                .find(|i| i.k == r.k && i.temperature == r.temperature);
            let gain = init.map_or(String::new(), |i| {
                format!(
                    " (at initialisation {:.2}%: {:+.2} points)",
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
    let plots = crate::plots::plot_run(&run_dir)?;
    write_summary(&run_dir, settings, &lines, &plots)?;
    print_where(&run_dir);
    Ok(())
}

/// `summary.md` in the run directory: the settings, the results and the plots.
fn write_summary(
    run_dir: &Path,
    settings: &Settings,
    results: &[String],
    plots: &[PathBuf],
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
    text.push_str("\n## Plots\n\n");
    for plot in plots {
        if let Ok(relative) = plot.strip_prefix(run_dir) {
            let name = relative.display();
            text.push_str(&format!("![{name}]({name})\n"));
        }
    }
    let path = run_dir.join("summary.md");
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
}

/// The file of the run directory holding the kNN accuracies of the backbone at initialisation.
pub const KNN_AT_INIT: &str = "knn_at_init.json";

pub(crate) fn print_where(run_dir: &Path) {
    println!(
        "metrics: {0}/steps.csv, {0}/epochs.csv; checkpoints: {0}/checkpoints; evaluate with \
         `recipe eval --run-dir {0}`",
        run_dir.display()
    );
}
