//! burn-train's `Learner` training a method of the crate (`train::LearnerMethod`): the same
//! weights, key encoder and queue as the crate's own `Trainer` on the same batches, and the
//! example `burn_train_moco` run for two steps.
#![cfg(feature = "burn-train")]

use burn::backend::{Autodiff, Flex};
use burn::data::dataloader::DataLoaderBuilder;
use burn::module::AutodiffModule;
use burn_train::metric::LossMetric;
use burn_train::{Learner, SupervisedTraining};
use curriculum_ssl::curriculum::MixupCurriculumConfig;
use curriculum_ssl::data::{embedded, ImageArray, ImageBatcher, Loader, LoaderConfig};
use curriculum_ssl::method::{init_method, Moco, MocoConfig, SslMethod};
use curriculum_ssl::optim::SgdConfig;
use curriculum_ssl::pipeline::{Augmenter, PipelineConfig};
use curriculum_ssl::train::{LearnerMethod, TrainConfig, Trainer};
use curriculum_ssl_models::{LeNet, LeNetConfig};

#[path = "../examples/burn_train_moco.rs"]
#[allow(dead_code)]
mod example;

type Ad = Autodiff<Flex>;
type Method = Moco<Ad, LeNet<Ad>>;

const BATCH: usize = 32;
const EPOCHS: usize = 2;
const LR: f64 = 0.05;

fn subset(n: usize) -> ImageArray {
    embedded::train()
        .unwrap()
        .select(&(0..n).collect::<Vec<_>>())
        .unwrap()
}

/// MoCo v2 with a cosine momentum schedule (read at every `after_step`'s progress), seeded.
fn moco() -> Method {
    let device = Default::default();
    init_method::<Ad, _, curriculum_ssl::ConfigError>(&device, 11, |d| {
        MocoConfig::moco_v2()
            .with_hidden_dim(Some(64))
            .with_output_dim(32)
            .with_queue_size(256)
            .with_momentum(0.9)
            .with_cosine_momentum(true)
            .init(|d| LeNetConfig::lenet5().init(d), BATCH, d)
    })
    .unwrap()
}

/// SimCLR's views with MICO's mixup curriculum, whose λ follows the step: a progress counted
/// wrong draws other views.
fn augmenter() -> Augmenter {
    let mut config = PipelineConfig::simclr(28, 1);
    config.mixup_curriculum = Some(MixupCurriculumConfig::mico());
    config.seed = 4;
    config.init(1).unwrap()
}

fn largest_difference(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// The online networks, the key encoder and the queue of a method.
fn everything(method: &Method) -> [Vec<f32>; 3] {
    // `values` folds the batch norms' pending running statistics into the record first.
    let flat = |v: Vec<Vec<f64>>| v.into_iter().flatten().map(|x| x as f32).collect();
    [
        flat(crate::common::values(method.online())),
        flat(crate::common::values(method.key_encoder().network())),
        method
            .queue()
            .keys()
            .into_data()
            .convert::<f32>()
            .to_vec()
            .unwrap(),
    ]
}

/// Two epochs of two steps of MoCo v2 (64 images in dataset order, a constant learning rate)
/// trained by burn-train's Learner end with the weights, key encoder and queue the crate's own
/// Trainer gives on the same batches. Both run the same method code on the same backend in the
/// same order (views drawn from `(seed, step)`, the mixup's λ and the momentum from the step's
/// progress, the optimiser, then the EMA and the queue), so the numbers are expected to be
/// equal; the bound of 1e-6 leaves room for nothing but rounding, while a step's progress
/// counted wrong (other views, another λ or momentum), an `after_step` missed or run on the
/// weights before the update, or gradients lost would move the weights by orders more (the
/// test checks that training moved them).
#[test]
fn the_learner_trains_a_method_as_the_trainer_does() {
    let device = Default::default();
    let data = subset(2 * BATCH);
    let initial = everything(&moco());

    // The crate's loop.
    let loader = Loader::new(
        data.clone(),
        "embedded",
        LoaderConfig {
            batch_size: BATCH,
            shuffle: false,
            workers: 1,
            ..LoaderConfig::default()
        },
    )
    .unwrap();
    let mut trainer = Trainer::builder(
        moco(),
        SgdConfig::new().init::<Ad, _>().unwrap(),
        augmenter(),
        loader,
    )
    .config(
        TrainConfig::new()
            .with_epochs(EPOCHS)
            .with_lr(LR)
            .with_final_lr(LR)
            .with_progress_bar(false),
    )
    .run_dir(crate::common::run_scratch(
        "curriculum-ssl-tests",
        "learner-trainer",
    ))
    .build(&device)
    .unwrap();
    let summary = trainer.fit().unwrap();
    assert_eq!(summary.steps.len(), EPOCHS * 2);
    let ours = everything(trainer.method());

    // burn-train's.
    let model = LearnerMethod::new(moco(), augmenter(), 2, EPOCHS).unwrap();
    let train = DataLoaderBuilder::<Ad, _, _>::new(ImageBatcher)
        .batch_size(BATCH)
        .build(data);
    let valid = DataLoaderBuilder::<Flex, _, _>::new(ImageBatcher)
        .batch_size(BATCH)
        .build(subset(BATCH));
    let optimizer = SgdConfig::new()
        .init::<Ad, LearnerMethod<Ad, Method>>()
        .unwrap();
    let dir = crate::common::scratch_dir("learner", "burn-train");
    let result = SupervisedTraining::new(&dir, train, valid)
        .metric_train_numeric(LossMetric::new())
        .with_application_logger(None)
        .num_epochs(EPOCHS)
        .launch(Learner::new(model, optimizer, LR));
    let model = LearnerMethod::<Ad, Method>::from_inner(result.model);
    assert_eq!(model.steps(), EPOCHS * 2);
    let theirs = everything(&model.into_method().expect("no other copy of the model"));

    for ((name, a), (b, start)) in ["online networks", "key encoder", "queue"]
        .into_iter()
        .zip(&ours)
        .zip(theirs.iter().zip(&initial))
    {
        assert!(
            largest_difference(a, start) > 1e-3,
            "{name}: training changed nothing"
        );
        let d = largest_difference(a, b);
        assert!(d <= 1e-6, "{name}: the Learner's differ by {d}");
    }
}

/// The example trains for two steps (256 images): the queue holds the two batches' keys.
#[test]
fn the_burn_train_example_runs() {
    let images = subset(2 * example::BATCH + 17);
    let test = embedded::test()
        .unwrap()
        .select(&(0..100).collect::<Vec<_>>())
        .unwrap();
    let dir = crate::common::scratch_dir("learner", "example");
    let method = example::train(images, test, 1, &dir).unwrap();
    // Two steps of 128 keys each (the 17 images past the last whole batch are left out).
    assert_eq!(method.queue().pointer(), 2 * example::BATCH);
}

/// burn-train's batches carry no dataset indexes: a method that reads them (DeepCluster v2's
/// bank) is refused when the model is made, naming the method, rather than failing at its first
/// forward.
#[test]
fn a_method_that_reads_dataset_indexes_is_refused() {
    use curriculum_ssl::method::DeepClusterV2Config;
    let device = Default::default();
    let method = init_method::<Ad, _, curriculum_ssl::ConfigError>(&device, 11, |d| {
        DeepClusterV2Config::new()
            .with_hidden_dim(16)
            .with_output_dim(8)
            .with_prototypes(vec![4])
            .init(|d| LeNetConfig::lenet5().init(d), d)
    })
    .unwrap();
    assert!(method.uses_indexes());
    let Err(error) = LearnerMethod::new(method, augmenter(), 2, EPOCHS) else {
        panic!("DeepCluster v2 was accepted by the Learner");
    };
    assert_eq!(error.field, "method");
    assert!(error.to_string().contains("dataset indexes"), "{error}");
}

/// burn-train's Learner steps every parameter at one learning rate: a method with a parameter
/// group at a rate of its own (All4One's transformer at 0.1) is refused, naming the method; at a
/// factor of 1 the same method is accepted.
#[test]
fn a_method_with_its_own_learning_rates_is_refused() {
    use curriculum_ssl::method::All4OneConfig;
    let device = Default::default();
    let all4one = |factor: f64| {
        init_method::<Ad, _, curriculum_ssl::ConfigError>(&device, 11, |d| {
            All4OneConfig::new()
                .with_hidden_dim(16)
                .with_output_dim(8)
                .with_predictor_hidden_dim(16)
                .with_transformer_heads(2)
                .with_support_set_size(32)
                .with_transformer_lr_factor(factor)
                .init(|d| LeNetConfig::lenet5().init(d), 16, d)
        })
        .unwrap()
    };
    let Err(error) = LearnerMethod::new(all4one(0.1), augmenter(), 2, EPOCHS) else {
        panic!("All4One with its transformer at 0.1 was accepted by the Learner");
    };
    assert_eq!(error.field, "method");
    assert!(error.to_string().contains("learning rate"), "{error}");
    assert!(LearnerMethod::new(all4one(1.0), augmenter(), 2, EPOCHS).is_ok());
}
