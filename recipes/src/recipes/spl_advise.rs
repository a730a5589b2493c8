//! `spl_advise`, `spld`, `random_sampling`: supervised classification with self-paced example
//! selection — Thangarasa & Taylor, "Self-Paced Learning with Adaptive Deep Visual Embeddings",
//! BMVC 2018, <https://arxiv.org/abs/1807.09200> (docs/methods.md#spl-advise), and the two
//! baselines of its Table 1.
//!
//! ```text
//! every epoch:
//!     spl_advise: embed the training set with the embedding network, k-means++ per class (K 8)
//!     spld:       fixed k-means++ clusters of the raw pixels (K 8 per class)
//!     losses = student's cross-entropy on every training image
//!     pool = SPLD(losses, clusters): within a cluster, rank r kept if L < λ + γ/(√r + √(r−1))
//!            (random_sampling: every image)
//!     N/B steps of the student on batches from the pool (the same steps for the three methods)
//!     spl_advise: one magnet-loss step of the embedding network (M 8 clusters × D 8) per step
//!     λ ← μλ, γ ← μγ
//! ```
//!
//! The paper's Fashion-MNIST setting, the default on a GPU: ResNet-18 student trained with SGD
//! (Nesterov momentum 0.9, weight decay 5e-4, lr 1e-3), LeNet embedding network (VGG-16 for RGB
//! images) with a 32-wide embedding layer trained with Adam at 1e-4, batch 128, augmentation by
//! normalisation, horizontal and vertical flips, translation and rotation. On the CPU the
//! default student is the CPU default backbone (`small-2x`) trained with Adam at 1e-3
//! (`--optimizer` chooses).

use super::RecipeEntry;
use anyhow::Result;
use burn::optim::{AdamConfig, Optimizer};
use clap::{Parser, ValueEnum};
use curriculum_ssl::augment::normalize::{self, Normalize};
use curriculum_ssl::optim::SgdConfig;
use curriculum_ssl::spl_advise::{
    EmbeddingNet, EmbeddingNetConfig, KMeansConfig, PaceConfig, RandomSampling, SplAdvise,
    SplAdviseConfig, SpldConfig, SpldSampling,
};
use curriculum_ssl::train::{
    Cell, ClassifierAugmentConfig, DataFingerprint, LinearClassifier, StartMode, Supervised,
    SupervisedConfig, TrainConfig, Trainer,
};
use curriculum_ssl_models::AnyBackbone;
use serde::Serialize;

use super::common::{self, BackboneChoice, BackboneSpec, Device, RecipeArgs, Settings, Train};
use crate::backend;
use crate::usage::usage;

/// The three ways of choosing the student's examples.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Selection {
    /// SPLD over the clusters of a magnet-loss embedding (the paper).
    SplAdvise,
    /// SPLD over fixed k-means clusters of the raw pixels.
    Spld,
    /// Every example.
    Random,
}

impl Selection {
    fn recipe(self) -> &'static str {
        match self {
            Self::SplAdvise => "spl_advise",
            Self::Spld => "spld",
            Self::Random => "random_sampling",
        }
    }
}

/// The student's optimiser.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
pub enum OptimizerChoice {
    /// Adam (β 0.9, 0.999), no weight decay.
    Adam,
    /// SGD with Nesterov momentum 0.9 and weight decay 5e-4 (the paper's).
    Sgd,
}

/// Options of the supervised recipes.
#[derive(Parser, Debug, Clone)]
#[command(no_binary_name = true, name = "recipe", args_override_self = true)]
pub struct SupervisedArgs {
    /// The options every recipe has.
    #[command(flatten)]
    pub common: RecipeArgs,
    /// The student's optimiser (default: sgd, the paper's, on a GPU; adam on the CPU).
    #[arg(long, value_enum)]
    pub optimizer: Option<OptimizerChoice>,
    /// spl_advise: the embedding network (default: lenet5, the paper's for Fashion-MNIST; VGG-16
    /// for RGB images on a GPU).
    #[arg(long, value_enum)]
    pub embedding_backbone: Option<BackboneChoice>,
    /// spl_advise, spld: clusters per class K (default 8).
    #[arg(long)]
    pub clusters: Option<usize>,
    /// Train on this fraction of the training labels only (per class, at least one image of
    /// each, as `recipe eval --label-fraction` chooses them): the same network trained from
    /// scratch on the labels a few-label probe gets, the baseline a self-supervised
    /// representation has to beat with 1 % of the labels (0.01). The test split stays whole.
    #[arg(long)]
    pub label_fraction: Option<f64>,
    /// The seed of the --label-fraction subset (default: the run's --seed; `recipe eval`'s
    /// --label-seed defaults to the evaluated run's seed, so equal seeds give equal subsets).
    #[arg(long)]
    pub label_seed: Option<u64>,
}

/// What the run directory records about the run (`run` in `config.json`).
#[derive(Debug, Clone, Serialize)]
struct SupervisedRun {
    recipe: &'static str,
    selection: Selection,
    backbone: BackboneChoice,
    embedding_backbone: Option<BackboneChoice>,
    optimizer: OptimizerChoice,
    data: Option<std::path::PathBuf>,
    dataset: common::DatasetChoice,
    stem: Option<common::StemChoice>,
    /// The grid the ResNet's features are pooled to, when not 1 (absent in runs recorded
    /// before the option, which pooled globally).
    #[serde(skip_serializing_if = "Option::is_none")]
    pooled_grid: Option<usize>,
    backend: &'static str,
    #[serde(skip_serializing_if = "crate::backend::Precision::is_f32")]
    precision: crate::backend::Precision,
    /// `--label-fraction` and its seed (absent: every training label).
    #[serde(skip_serializing_if = "Option::is_none")]
    label_fraction: Option<(f64, u64)>,
}

/// Runs `spl_advise`.
pub fn spl_advise(args: &[String]) -> Result<()> {
    run(args, Selection::SplAdvise)
}

/// Runs `spld`.
pub fn spld(args: &[String]) -> Result<()> {
    run(args, Selection::Spld)
}

/// Runs `random_sampling`.
pub fn random_sampling(args: &[String]) -> Result<()> {
    run(args, Selection::Random)
}

fn on_gpu() -> bool {
    !backend::on_cpu()
}

/// The paper's augmentation of Fashion-MNIST (the magnitudes are not given: ±10° and ±2
/// pixels, the common choices), with the dataset's normalisation.
pub fn augmentation(channels: usize, seed: u64) -> ClassifierAugmentConfig {
    ClassifierAugmentConfig::new()
        .with_hflip(0.5)
        .with_vflip(0.5)
        .with_translate(2)
        .with_rotate_degrees(10.0)
        .with_normalize(Some(normalization(channels)))
        .with_seed(seed)
}

fn normalization(channels: usize) -> Normalize {
    match channels {
        1 => Normalize::new(
            &normalize::FASHION_MNIST_MEAN,
            &normalize::FASHION_MNIST_STD,
        ),
        _ => Normalize::new(&normalize::CIFAR10_MEAN, &normalize::CIFAR10_STD),
    }
}

/// The options that belong to the self-supervised recipes, refused here by name.
fn refuse_ssl_options(args: &RecipeArgs, recipe: &str) -> Result<()> {
    let given = [
        ("--loss", args.method.loss.is_some()),
        ("--hard-positive-k", args.method.hard_positive_k.is_some()),
        ("--curation-warmup", args.method.curation_warmup.is_some()),
        ("--curation-retries", args.method.curation_retries.is_some()),
        ("--pgd-steps", args.method.pgd_steps.is_some()),
        ("--strength", args.curriculum.strength.is_some()),
        ("--schedule", args.curriculum.schedule.is_some()),
        ("--easy-to-hard", args.curriculum.easy_to_hard),
        ("--weights", args.backbone.weights.is_some()),
        ("--augment-ahead", args.method.augment_ahead.is_some()),
        ("--view-threads", args.method.view_threads.is_some()),
        ("--knn-data", args.source.knn_data.is_some()),
        ("--stream", args.source.stream.is_some()),
        (
            "--checkpoint-every-steps",
            args.run.checkpoint_every_steps > 0,
        ),
        ("--mean / --std", args.source.mean.is_some()),
        (
            "--config / KEY=VALUE settings",
            args.config.is_some() || !args.overrides.is_empty(),
        ),
    ];
    if args.compute.devices != 1 || args.compute.nodes.is_some() {
        return Err(usage(format!(
            "--devices / --nodes: recipe `{recipe}` is supervised and trains on one device \
             (data-parallel training covers the self-supervised recipes)"
        )));
    }
    match given.iter().find(|(_, on)| *on) {
        Some((option, _)) => Err(usage(format!(
            "{option}: recipe `{recipe}` is supervised; the option belongs to the \
             self-supervised recipes"
        ))),
        None => Ok(()),
    }
}

fn run(raw: &[String], selection: Selection) -> Result<()> {
    let recipe = selection.recipe();
    let args = SupervisedArgs::command_parse(recipe, raw)?;
    let common_args = &args.common;
    refuse_ssl_options(common_args, recipe)?;
    check_selection_options(&args, selection)?;
    let epochs = if on_gpu() { 50 } else { 10 };
    let settings = Settings::new(recipe, common_args, epochs, 128, 1e-3);
    common::validate(&settings, &common_args.start)?;
    let optimizer = args.optimizer.unwrap_or(if on_gpu() {
        OptimizerChoice::Sgd
    } else {
        OptimizerChoice::Adam
    });
    if settings.source.dataset == common::DatasetChoice::Shards {
        return Err(usage(format!(
            "recipe `{recipe}` trains on labelled images decoded into memory: --dataset shards \
             is streamed (give the image folder the shards were packed from)"
        )));
    }
    let compute = &common_args.compute;
    let device: Device = crate::backend::open(compute.device, compute.precision)?;
    let label_fraction = args
        .label_fraction
        .map(|f| (f, args.label_seed.unwrap_or(settings.seed)));
    let data = labelled_data(&settings, label_fraction, recipe)?;
    let (_, _, channels) = data.train.image_shape();
    let embedding_backbone = (selection == Selection::SplAdvise).then(|| {
        args.embedding_backbone
            .unwrap_or(if channels == 3 && on_gpu() {
                BackboneChoice::Vgg16Bn
            } else {
                BackboneChoice::Lenet5
            })
    });
    let classes = data.train.num_classes().max(data.test.as_ref().map_or(0, |t| t.num_classes()));
    let spec = student_spec(&settings, &data.train, &device)?;
    if common_args.run.check {
        println!("recipe `{recipe}`: the options are valid (--check: nothing trained)");
        return Ok(());
    }
    let model = student(&spec, classes, settings.seed, &device);
    let selector = selector(
        selection,
        &data.train,
        embedding_backbone,
        settings.seed,
        args.clusters.unwrap_or(8),
        &device,
    )?;
    let description = SupervisedRun {
        recipe,
        selection,
        backbone: settings.backbone,
        embedding_backbone,
        optimizer,
        data: settings.source.dir.clone(),
        dataset: settings.source.dataset,
        stem: settings.stem,
        pooled_grid: settings.recorded_pooled_grid(data.train.image_shape().0),
        backend: backend::NAME,
        precision: compute.precision,
        label_fraction,
    };
    let config = SupervisedConfig::new()
        .with_batch_size(settings.schedule.batch_size)
        .with_seed(settings.seed);
    // The seed of the stochastic layers of each step's forward, `(seed, step)`: the run's too.
    let train_config = TrainConfig::new()
        .with_seed(settings.seed)
        .with_epochs(settings.schedule.epochs)
        .with_lr(settings.schedule.lr)
        .with_checkpoint_every(common_args.run.checkpoint_every);
    let mode = match (common_args.start.extend, common_args.start.resume) {
        (true, _) => StartMode::Extend,
        (false, true) => StartMode::Resume,
        (false, false) => StartMode::Fresh,
    };
    let run_dir = settings.run_dir.clone();
    crate::run_files::check_run_dir_writable(&run_dir)?;
    let parts = Parts {
        model,
        selector,
        data,
        config,
        train_config,
        augment: augmentation(channels, settings.seed),
        description,
        run_dir,
        mode,
        device,
    };
    train_with(parts, optimizer)
}

/// Trains `parts` with the student's optimiser: Adam, or SGD with Nesterov momentum 0.9 and
/// weight decay 5e-4.
fn train_with(parts: Parts, optimizer: OptimizerChoice) -> Result<()> {
    match optimizer {
        OptimizerChoice::Adam => train(parts, AdamConfig::new().init()),
        OptimizerChoice::Sgd => train(
            parts,
            SgdConfig::new()
                .with_momentum(0.9)
                .with_nesterov(true)
                .with_weight_decay(5e-4)
                .init()?,
        ),
    }
}

/// The options of the selection methods, checked against the recipe's: `--embedding-backbone`
/// for spl_advise alone, `--clusters` in [1, 1000] and not for random sampling,
/// `--label-fraction` in (0, 1] and `--label-seed` only with it.
fn check_selection_options(args: &SupervisedArgs, selection: Selection) -> Result<()> {
    let recipe = selection.recipe();
    if args.embedding_backbone.is_some() && selection != Selection::SplAdvise {
        return Err(usage(format!(
            "--embedding-backbone: recipe `{recipe}` has no embedding network (spl_advise has)"
        )));
    }
    if args.clusters.is_some() && selection == Selection::Random {
        return Err(usage(
            "--clusters: recipe `random_sampling` clusters nothing (spl_advise and spld do)",
        ));
    }
    if let Some(k) = args.clusters {
        if !(1..=1000).contains(&k) {
            return Err(usage(format!("--clusters {k}: must lie in [1, 1000]")));
        }
    }
    if let Some(f) = args.label_fraction.filter(|f| !(*f > 0.0 && *f <= 1.0)) {
        return Err(usage(format!("--label-fraction {f}: must lie in (0, 1]")));
    }
    if args.label_seed.is_some() && args.label_fraction.is_none() {
        return Err(usage("--label-seed: only with --label-fraction"));
    }
    Ok(())
}

/// The run's labelled splits (an error naming the recipe if they have no labels), the training
/// split cut to a fraction of its labels by [`keep_few_labels`] when `label_fraction` is given.
fn labelled_data(
    settings: &Settings,
    label_fraction: Option<(f64, u64)>,
    recipe: &str,
) -> Result<common::Data> {
    let mut data = settings.source.load_splits(false)?;
    data.labelled(&format!("recipe `{recipe}`"))?;
    if let Some((fraction, seed)) = label_fraction {
        keep_few_labels(&mut data, fraction, seed, recipe)?;
    }
    Ok(data)
}

/// The student's backbone (`--backbone`, `--stem`, the pooled grid) for the training split's
/// images, checked against them.
fn student_spec(
    settings: &Settings,
    train: &curriculum_ssl::data::ImageArray,
    device: &Device,
) -> Result<BackboneSpec> {
    let (side, _, channels) = train.image_shape();
    let spec = BackboneSpec {
        config: settings.backbone.config(
            channels,
            side,
            settings.stem,
            settings.pooled_grid(side),
        ),
        weights: None,
    };
    spec.check(train.image_shape(), "--backbone", device)?;
    Ok(spec)
}

/// The training split cut to `fraction` of its labelled images per class, drawn from `seed`
/// (`--label-fraction`, `--label-seed`); the test split stays whole.
fn keep_few_labels(data: &mut common::Data, fraction: f64, seed: u64, recipe: &str) -> Result<()> {
    let labels = data.train.labels().expect("labelled() checked the labels");
    let indices = curriculum_ssl::eval::few_label_indices(labels, fraction, seed)?;
    println!(
        "recipe `{recipe}`: training on {} of the {} labelled images (--label-fraction \
         {fraction}, seed {seed}); the test split whole",
        indices.len(),
        labels.len()
    );
    data.train = data.train.select(&indices)?;
    Ok(())
}

/// The selection method of the recipe on the training split `train`: random sampling, SPLD on
/// the pixels' clusters, or SPL-ADVisE with its embedding network (`embedding_backbone`, drawn
/// from `seed`), both with `clusters` k-means clusters.
fn selector(
    selection: Selection,
    train: &curriculum_ssl::data::ImageArray,
    embedding_backbone: Option<BackboneChoice>,
    seed: u64,
    clusters: usize,
    device: &Device,
) -> Result<Selector> {
    let (side, _, channels) = train.image_shape();
    let images = ClassifierAugmentConfig::new().with_normalize(Some(normalization(channels)));
    let kmeans = KMeansConfig::new()
        .with_clusters(clusters)
        .with_max_iterations(50);
    let pace = PaceConfig::new(SpldConfig::new());
    Ok(match selection {
        Selection::Random => Selector::Random(RandomSampling::new()),
        Selection::Spld => Selector::Spld(Box::new(SpldSampling::on_pixels(
            train, &pace, &kmeans, seed,
        )?)),
        Selection::SplAdvise => {
            let choice = embedding_backbone.expect("spl_advise has one");
            let spec = BackboneSpec {
                config: choice.config(
                    channels,
                    side,
                    None,
                    choice.default_pooled_grid(None, side),
                ),
                weights: None,
            };
            spec.check(train.image_shape(), "--embedding-backbone", device)?;
            let net = embedding_net(&spec, seed, device);
            let config = SplAdviseConfig::new(pace)
                .with_kmeans(kmeans)
                .with_seed(seed);
            Selector::SplAdvise(Box::new(SplAdvise::new(
                config,
                net,
                AdamConfig::new().init(),
                train.clone(),
                images,
                device,
            )?))
        }
    })
}

/// The stream of the run's seed that draws the embedding network's weights: not the student's
/// (a LeNet student and a LeNet embedding network would otherwise start alike).
const EMBEDDING_STREAM: u64 = 0x0065_6d62_6564;

/// The student (the backbone of `spec` under a linear classifier of `classes`), every weight
/// drawn now from `seed`, the run's `--seed`
/// ([`init_module`](curriculum_ssl::seed::init_module)): unseeded, its lazily initialised
/// weights were drawn at the first step under the trainer's seed of that step, the same for
/// every `--seed`.
fn student(
    spec: &BackboneSpec,
    classes: usize,
    seed: u64,
    device: &Device,
) -> LinearClassifier<Train, AnyBackbone<Train>> {
    curriculum_ssl::seed::init_module::<Train, _>(device, seed, |d| {
        LinearClassifier::new(spec.init::<Train>(d), classes, d)
    })
}

/// SPL-ADVisE's embedding network on the backbone of `spec`, every weight drawn now from the
/// run's `seed` (its own stream of it, [`EMBEDDING_STREAM`]).
fn embedding_net(
    spec: &BackboneSpec,
    seed: u64,
    device: &Device,
) -> EmbeddingNet<Train, AnyBackbone<Train>> {
    let seed = curriculum_ssl::seed::mix_seed(seed, EMBEDDING_STREAM);
    curriculum_ssl::seed::init_module::<Train, _>(device, seed, |d| {
        EmbeddingNetConfig::new().init(spec.init::<Train>(d), d)
    })
}

/// The student's selection, as chosen on the command line.
enum Selector {
    Random(RandomSampling),
    Spld(Box<SpldSampling>),
    SplAdvise(Box<SplAdvise<Train, AnyBackbone<Train>, EmbeddingAdam>>),
}

type EmbeddingAdam = burn::optim::adaptor::OptimizerAdaptor<
    burn::optim::Adam,
    EmbeddingNet<Train, AnyBackbone<Train>>,
    Train,
>;

struct Parts {
    model: LinearClassifier<Train, AnyBackbone<Train>>,
    selector: Selector,
    data: common::Data,
    config: SupervisedConfig,
    train_config: TrainConfig,
    augment: ClassifierAugmentConfig,
    description: SupervisedRun,
    run_dir: std::path::PathBuf,
    mode: StartMode,
    device: Device,
}

fn train<O>(parts: Parts, optimizer: O) -> Result<()>
where
    O: Optimizer<LinearClassifier<Train, AnyBackbone<Train>>, Train> + 'static,
{
    let Parts {
        model,
        selector,
        data,
        config,
        train_config,
        augment,
        description,
        run_dir,
        mode,
        device,
    } = parts;
    println!(
        "{}: {} epochs of {} steps, batch {}, lr {}, {:?} student with {:?}{} on {}; run \
         directory {}",
        description.recipe,
        train_config.epochs,
        data.train.len() / config.batch_size,
        config.batch_size,
        train_config.lr,
        description.backbone,
        description.optimizer,
        description
            .embedding_backbone
            .map_or(String::new(), |e| format!(", {e:?} embedding network")),
        backend::NAME,
        run_dir.display()
    );
    let test = data.test.expect("checked to be labelled before training");
    let fingerprint = DataFingerprint::of_images(&data.train);
    let step = Supervised::new(model, optimizer, data.train, test, config, augment);
    let builder = Trainer::with_task(step).config(train_config);
    let builder = match selector {
        Selector::Random(s) => builder.hook(s),
        Selector::Spld(s) => builder.hook(*s),
        Selector::SplAdvise(s) => builder.hook(*s),
    };
    let mut trainer = builder
        .run_dir(&run_dir)
        .describe(&description)
        .data(fingerprint)
        .stop_when(crate::signals::stop_flag())
        .start(mode)
        .build(&device)?;
    let summary = trainer.fit()?;
    if let Some(last) = summary.epochs.last() {
        let stat = |name: &str| {
            let column = last.columns.iter().find_map(|(n, c)| match c {
                Cell::Value(v) if n == name => Some(*v),
                _ => None,
            });
            last.stats
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| *v)
                .or(column)
                .unwrap_or(f64::NAN)
        };
        println!(
            "epoch {}: test top-1 {:.2}%, top-5 {:.2}%, {:.0}% of the training set selected",
            last.epoch + 1,
            100.0 * stat("test_top1"),
            100.0 * stat("test_top5"),
            100.0 * stat("selected_fraction"),
        );
    }
    if let Err(e) = crate::plots::plot_run(&run_dir) {
        log::warn!("the run is complete, but its plots could not be drawn: {}", crate::usage::chain_text(&e));
    }
    common::print_where(&run_dir);
    Ok(())
}

impl SupervisedArgs {
    /// Parses the arguments of `recipe` (its name heads the usage line of `--help`).
    pub fn command_parse(recipe: &str, args: &[String]) -> Result<Self> {
        common::parse_recipe_args(recipe, args)
    }
}


/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[
    RecipeEntry {
        name: "spl_advise",
        summary: "SPL-ADVisE (Thangarasa and Taylor 2018; FMNIST 94.12): supervised, SPLD over the clusters of a magnet-loss embedding",
        run: spl_advise,
    },
    RecipeEntry {
        name: "spld",
        summary: "SPL-ADVisE Table 1 baseline (FMNIST 93.17): supervised, SPLD over fixed k-means clusters of the raw pixels",
        run: spld,
    },
    RecipeEntry {
        name: "random_sampling",
        summary: "SPL-ADVisE Table 1 baseline (FMNIST 92.77): supervised, every training image every epoch",
        run: random_sampling,
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_papers_augmentation_and_the_optimiser_choice() {
        let a = augmentation(1, 3);
        assert_eq!((a.hflip, a.vflip, a.translate), (0.5, 0.5, 2));
        assert_eq!(a.rotate_degrees, 10.0);
        assert_eq!(a.seed, 3);
        assert_eq!(
            a.normalize.unwrap().mean,
            normalize::FASHION_MNIST_MEAN.to_vec()
        );
        let args = SupervisedArgs::command_parse(
            "spld",
            &[
                "--optimizer".into(),
                "sgd".into(),
                "--clusters".into(),
                "4".into(),
            ],
        )
        .unwrap();
        assert_eq!(args.optimizer, Some(OptimizerChoice::Sgd));
        assert_eq!(args.clusters, Some(4));
    }

    /// Every float value of `module`'s parameters (and running statistics), in visiting order.
    fn weights<M: burn::module::Module<Train>>(module: &M) -> Vec<f32> {
        struct Values(Vec<f32>);
        impl burn::module::ModuleVisitor<Train> for Values {
            fn visit_float<const D: usize>(
                &mut self,
                param: &burn::module::Param<burn::tensor::Tensor<Train, D>>,
            ) {
                let data = param.val().into_data().convert::<f32>();
                self.0.extend(data.to_vec::<f32>().unwrap());
            }
        }
        let mut values = Values(Vec::new());
        module.visit(&mut values);
        values.0
    }

    /// The student of the three recipes (`student`: the one of `spl_advise`, `spld` and
    /// `random_sampling` alike) and SPL-ADVisE's embedding network start from weights drawn
    /// from `--seed`: seeds 0 and 1 differ in (nearly) every weight drawn, seed 0 twice is the
    /// same bit for bit. Before, both were built unseeded and drawn at the first step under the
    /// trainer's `train.seed` of 0: every seed of a study started from the same student.
    #[test]
    fn the_seed_draws_the_students_and_the_embedding_networks_weights() {
        let device = crate::backend::device(None).unwrap();
        let spec = |choice: BackboneChoice| BackboneSpec {
            config: choice.config(1, 28, None, choice.default_pooled_grid(None, 28)),
            weights: None,
        };
        for choice in [BackboneChoice::Small2x, BackboneChoice::Lenet5] {
            let spec = spec(choice);
            let a = weights(&student(&spec, 10, 0, &device));
            let again = weights(&student(&spec, 10, 0, &device));
            let b = weights(&student(&spec, 10, 1, &device));
            assert_eq!(a.len(), b.len());
            assert_eq!(
                a.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                again.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{choice:?}: seed 0 twice"
            );
            // Biases and normalisation start at constants; the drawn weights differ.
            let differ = a.iter().zip(&b).filter(|(x, y)| x != y).count();
            assert!(differ > a.len() / 2, "{choice:?}: {differ} of {} differ", a.len());
        }
        let spec = spec(BackboneChoice::Lenet5);
        let a = weights(&embedding_net(&spec, 0, &device));
        let again = weights(&embedding_net(&spec, 0, &device));
        let b = weights(&embedding_net(&spec, 1, &device));
        assert_eq!(a, again);
        let differ = a.iter().zip(&b).filter(|(x, y)| x != y).count();
        assert!(differ > a.len() / 2, "{differ} of {}", a.len());
        // Its own stream of the seed: not the LeNet student's backbone with the same seed.
        let s = weights(&student(&spec, 10, 0, &device));
        let shared = a.iter().zip(&s).take_while(|(x, y)| x == y).count();
        assert!(shared < 10, "the first {shared} weights equal the student's");
    }
}
