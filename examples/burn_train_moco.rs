//! MoCo v2 trained by burn-train's `Learner` instead of the crate's own loop: burn's data
//! loaders, its loss metric, its checkpoints and summary, and the method of this crate as the
//! model ([`LearnerMethod`]). After training, the method comes back out of the Learner and the
//! crate's kNN monitor scores its backbone on the test split.
//!
//! ```text
//! cargo run --release --example burn_train_moco
//! ```
//!
//! What the crate's [`Trainer`](curriculum_ssl::train::Trainer) adds beyond this: checkpoints
//! that hold the method's own states (the key encoder, the queue) and the loader's and
//! augmenter's, so that a run resumes exactly; the hooks that steer training (batch curation,
//! the self-paced AutoAugment, the SPL selections, object boxes); augmenting the next batch
//! while a step runs; data-parallel replicas; the run directory of `recipe`.

use std::error::Error;
use std::path::Path;

use burn::backend::{Autodiff, Flex};
use burn::data::dataloader::DataLoaderBuilder;
use burn::module::AutodiffModule;
use burn::record::CompactRecorder;
use burn_train::metric::LossMetric;
use burn_train::{Learner, SupervisedTraining};
use curriculum_ssl::data::embedded::load_or_embedded;
use curriculum_ssl::data::idx::Split;
use curriculum_ssl::data::{ImageArray, ImageBatcher};
use curriculum_ssl::eval::KnnMonitor;
use curriculum_ssl::method::{init_method, Moco, MocoConfig, SslMethod};
use curriculum_ssl::optim::SgdConfig;
use curriculum_ssl::pipeline::PipelineConfig;
use curriculum_ssl::train::LearnerMethod;
use curriculum_ssl_models::{BlockKind, ResNet, ResNetConfig, Stem};

type Train = Autodiff<Flex>;

/// Images per step.
pub const BATCH: usize = 128;

/// MoCo v2 on a small ResNet, trained for `epochs` epochs of `images` by burn-train's Learner
/// in `dir` (its logs and checkpoints); `valid` is what the Learner validates on (the
/// backbone's features). Returns the trained method.
pub fn train(
    images: ImageArray,
    valid: ImageArray,
    epochs: usize,
    dir: &Path,
) -> Result<Moco<Train, ResNet<Train>>, Box<dyn Error>> {
    let device = Default::default();
    // MoCo's queue takes a whole batch of keys per step, and burn's loaders keep a short last
    // batch: train on a multiple of the batch size.
    let images = images.select(&(0..images.len() / BATCH * BATCH).collect::<Vec<_>>())?;
    let steps_per_epoch = images.len() / BATCH;
    let backbone = ResNetConfig::new(BlockKind::Basic, [1, 1, 1, 1])
        .with_base_width(8)
        .with_in_channels(1)
        .with_stem(Stem::ImageNet);
    let config = MocoConfig::moco_v2().with_queue_size(4096);
    let method =
        init_method::<Train, _, _>(&device, 0, |d| config.init(|d| backbone.init(d), BATCH, d))?;
    let augmenter = PipelineConfig::moco_v2(28, 1).init(1)?;
    let model = LearnerMethod::new(method, augmenter, steps_per_epoch, epochs)?;

    let train_loader = DataLoaderBuilder::<Train, _, _>::new(ImageBatcher)
        .batch_size(BATCH)
        .shuffle(0)
        .num_workers(2)
        .build(images);
    let valid_loader = DataLoaderBuilder::<Flex, _, _>::new(ImageBatcher)
        .batch_size(500)
        .build(valid);
    let optimizer = SgdConfig::new()
        .with_weight_decay(1e-4)
        .init::<Train, LearnerMethod<Train, Moco<Train, ResNet<Train>>>>()?;
    let result = SupervisedTraining::new(dir, train_loader, valid_loader)
        .metric_train_numeric(LossMetric::new())
        .with_file_checkpointer(CompactRecorder::new())
        .with_application_logger(None)
        .num_epochs(epochs)
        .summary()
        .launch(Learner::new(model, optimizer, 0.06));
    // The Learner hands back its inference model; the method (with its key encoder and queue)
    // comes back out of it.
    let model = LearnerMethod::<Train, _>::from_inner(result.model);
    model
        .into_method()
        .map_err(|_| Box::<dyn Error>::from("the Learner kept a copy of the model"))
}

fn main() -> Result<(), Box<dyn Error>> {
    let images = load_or_embedded(None, Split::Train)?; // 8,000 Fashion-MNIST images
    let test = load_or_embedded(None, Split::Test)?;
    let dir = std::env::temp_dir().join(format!("burn-train-moco-{}", std::process::id()));
    let method = train(images.clone(), test.clone(), 2, &dir)?;
    let normalize = PipelineConfig::moco_v2(28, 1).view1.normalize;
    let monitor = KnnMonitor::new(images, test, normalize)?;
    let backbone = method.backbone().valid();
    for result in monitor.evaluate(&backbone, &Default::default())? {
        println!(
            "kNN k = {}: {:.2} % top-1",
            result.k,
            100.0 * result.accuracy.top1
        );
    }
    println!("the Learner's logs and checkpoints: {}", dir.display());
    Ok(())
}
