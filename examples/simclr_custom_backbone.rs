//! SimCLR with a backbone defined here: any burn module that implements
//! [`curriculum_ssl_models::Backbone`] trains with every method of the crate.
//!
//! Trains a small convolutional network for one epoch on 2,048 images of the embedded
//! Fashion-MNIST subset and prints the kNN accuracy before and after.
//!
//! ```text
//! cargo run --release --example simclr_custom_backbone
//! ```

use burn::backend::{Autodiff, Flex};
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::pool::{AdaptiveAvgPool2d, AdaptiveAvgPool2dConfig};
use burn::nn::{BatchNorm, BatchNormConfig, PaddingConfig2d, Relu};
use burn::prelude::*;
use curriculum_ssl::data::embedded::load_or_embedded;
use curriculum_ssl::data::idx::Split;
use curriculum_ssl::data::{Loader, LoaderConfig};
use curriculum_ssl::eval::{KnnMonitor, KnnResult};
use curriculum_ssl::hooks::KnnHook;
use curriculum_ssl::method::{init_method, SimClrConfig};
use curriculum_ssl::optim::SgdConfig;
use curriculum_ssl::pipeline::PipelineConfig;
use curriculum_ssl::train::{SelfSupervised, TrainConfig, TrainError, Trainer};
use curriculum_ssl_models::Backbone;

type Train = Autodiff<Flex>;

/// Two strided 3×3 convolutions with batch norm, then global average pooling.
#[derive(Module, Debug)]
pub struct TinyConvNet<B: Backend> {
    conv1: Conv2d<B>,
    bn1: BatchNorm<B>,
    conv2: Conv2d<B>,
    bn2: BatchNorm<B>,
    pool: AdaptiveAvgPool2d,
    relu: Relu,
}

impl<B: Backend> TinyConvNet<B> {
    /// A network for `channels`-channel images with `width` output features.
    pub fn new(channels: usize, width: usize, device: &B::Device) -> Self {
        let conv = |i, o| {
            Conv2dConfig::new([i, o], [3, 3])
                .with_stride([2, 2])
                .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
                .with_bias(false)
                .init(device)
        };
        Self {
            conv1: conv(channels, width / 2),
            bn1: BatchNormConfig::new(width / 2).init(device),
            conv2: conv(width / 2, width),
            bn2: BatchNormConfig::new(width).init(device),
            pool: AdaptiveAvgPool2dConfig::new([1, 1]).init(),
            relu: Relu::new(),
        }
    }
}

impl<B: Backend> Backbone<B> for TinyConvNet<B> {
    fn forward_features(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        let x = self
            .relu
            .forward(self.bn1.forward(self.conv1.forward(images)));
        let x = self.relu.forward(self.bn2.forward(self.conv2.forward(x)));
        self.pool.forward(x).flatten(1, 3)
    }

    fn feature_dim(&self) -> usize {
        self.bn2.gamma.dims()[0]
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let device = Default::default();
    let train = load_or_embedded(None, Split::Train)?.select(&(0..2048).collect::<Vec<_>>())?;
    let test = load_or_embedded(None, Split::Test)?.select(&(0..512).collect::<Vec<_>>())?;
    let pipeline = PipelineConfig::simclr(28, 1);
    let monitor = KnnMonitor::new(train.clone(), test, pipeline.view1.normalize.clone())?;
    let config = SimClrConfig::new().with_hidden_dim(256).with_output_dim(64);
    // Initial weights drawn under the crate's seed lock: the same for a seed, whatever else runs.
    let method = init_method::<Train, _, _>(&device, 0, |d| {
        config.init(|d| TinyConvNet::new(1, 64, d), d)
    })?;
    let loader = Loader::new(train, "embedded subset", LoaderConfig::default())?;
    let run_dir = std::env::temp_dir().join(format!("simclr-custom-{}", std::process::id()));
    let mut trainer = Trainer::builder(
        method,
        SgdConfig::new().init::<Train, _>()?,
        pipeline.init(1)?,
        loader,
    )
    .config(TrainConfig::new().with_epochs(1).with_lr(0.3))
    .run_dir(&run_dir)
    .hook(KnnHook::new(monitor, 1))
    // On the CPU backend: augment the next batch while this one trains (off on a GPU).
    .augment_ahead(true)
    .build(&device)?;
    let knn = |t: &Trainer<_, SelfSupervised<_, _, _, _>>| -> Result<Vec<KnnResult>, TrainError> {
        let hook = t.hook::<KnnHook>().expect("the run has the kNN hook");
        hook.evaluate(t.method(), &device)
    };
    let before = knn(&trainer)?;
    trainer.fit()?;
    let after = knn(&trainer)?;
    for (b, a) in before.iter().zip(&after) {
        println!(
            "kNN (k = {}): top-1 {:.2}% at initialisation, {:.2}% after one epoch",
            a.k,
            100.0 * b.accuracy.top1,
            100.0 * a.accuracy.top1
        );
    }
    println!("run directory: {}", run_dir.display());
    Ok(())
}
