//! `bench_step`: the training step of SimCLR, MoCo v2, BYOL or SimSiam with ResNet-18 (CIFAR
//! stem) on fixed views, timed on the selected backend: the same work as
//! `benches/train_step.rs` (the CPU, criterion) and `benches/pytorch/train_step.py` (PyTorch,
//! CPU or CUDA), for the GPU, where the binary is what travels (`scripts/gpu_check.sh`).
//!
//! A step is what the recipes' loop does minus augmentation and data: both views forward, the
//! loss, backward, SGD (momentum 0.9, weight decay 5e-4), the EMA / queue update. The views are
//! fixed pseudo-random images. The device is synchronised after the warm-up steps and after the
//! timed ones, so the time is the device's, not the launches'.

use std::time::Instant;

use anyhow::Result;
use burn::optim::Optimizer;
use burn::prelude::*;
use clap::{Parser, ValueEnum};
use curriculum_ssl::base::progress::Progress;
use curriculum_ssl::method::{ByolConfig, MoCoConfig, SimClrConfig, SimSiamConfig, SslMethod};
use curriculum_ssl::optim::SgdConfig;
use curriculum_ssl_models::{ResNet, ResNetConfig, Stem};

use super::RecipeEntry;
use crate::backend::{self, Precision, Train};

/// The methods timed.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    /// SimCLR: BN projector, NT-Xent.
    Simclr,
    /// MoCo v2: MLP head, InfoNCE against a queue, momentum encoder.
    #[value(name = "moco_v2")]
    MocoV2,
    /// BYOL: predictor, EMA target.
    Byol,
    /// SimSiam: predictor, stop-gradient.
    Simsiam,
}

/// `recipe bench_step`'s options.
#[derive(Parser, Debug)]
#[command(no_binary_name = true, name = "recipe", args_override_self = true)]
struct BenchArgs {
    /// The method.
    #[arg(long, value_enum, default_value = "simclr")]
    method: Method,
    /// Images per step.
    #[arg(long, default_value_t = 256)]
    batch_size: usize,
    /// Side of the square RGB views.
    #[arg(long, default_value_t = 32)]
    image_size: usize,
    /// Steps timed.
    #[arg(long, default_value_t = 20)]
    steps: usize,
    /// Steps run before the timing (kernels compiled and tuned, memory pools grown).
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    /// The float type of every tensor (`recipe help simclr`, --precision).
    #[arg(long, value_enum, default_value = "f32")]
    precision: Precision,
    /// The device (as the training recipes' --device).
    #[arg(long)]
    device: Option<usize>,
}

/// One timing's result.
#[derive(serde::Serialize)]
struct Timing {
    method: &'static str,
    backend: &'static str,
    precision: &'static str,
    batch_size: usize,
    image_size: usize,
    steps: usize,
    warmup_s: f64,
    ms_per_step: f64,
    images_per_s: f64,
    first_loss: f32,
    last_loss: f32,
}

fn resnet18(device: &backend::Device) -> ResNet<Train> {
    ResNetConfig::resnet18()
        .with_stem(Stem::Cifar)
        .init(device)
}

/// Fixed views in [0, 1): a multiplicative hash of the index and the seed (no generator state).
fn views(n: usize, side: usize, seed: u64, device: &backend::Device) -> Tensor<Train, 4> {
    let len = n * 3 * side * side;
    let values: Vec<f32> = (0..len as u64)
        .map(|i| {
            let h = (i ^ (seed << 40)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            (h >> 40) as f32 / (1u64 << 24) as f32
        })
        .collect();
    Tensor::from_data(TensorData::new(values, [n, 3, side, side]), device)
}

fn host_scalar(loss: Tensor<Train, 1>) -> f32 {
    loss.into_data()
        .convert::<f32>()
        .to_vec::<f32>()
        .map(|v| v[0])
        .unwrap_or(f32::NAN)
}

fn time<S: SslMethod<Train>>(
    mut method: S,
    name: &'static str,
    args: &BenchArgs,
    device: &backend::Device,
) -> Result<Timing> {
    let mut optimizer = SgdConfig::new().init::<Train, S::Online>()?;
    let (v1, v2) = (
        views(args.batch_size, args.image_size, 1, device),
        views(args.batch_size, args.image_size, 2, device),
    );
    let total = args.warmup + args.steps;
    // The first and the last step's losses, read back once the timing is over.
    let (mut first, mut last) = (None, None);
    let mut step = |i: usize| {
        let progress = Progress {
            step: i,
            total_steps: total.max(1_000),
            epoch: 0,
            total_epochs: 1,
        };
        let out = method.forward(v1.clone(), v2.clone(), progress);
        let loss = out.loss.clone().detach();
        let grads = method.gradients(&out.loss);
        let online = optimizer.step(0.05, method.online().clone(), grads);
        method.set_online(online);
        method.after_step(progress);
        loss
    };
    let sync = |device: &backend::Device| <Train as burn::tensor::backend::Backend>::sync(device);
    let started = Instant::now();
    for i in 0..args.warmup {
        let t = Instant::now();
        let loss = step(i);
        first.get_or_insert(loss);
        sync(device)?;
        // On a GPU the first steps compile and tune kernels: each one's time says how long.
        eprintln!(
            "warm-up step {}/{}: {:.2} s",
            i + 1,
            args.warmup,
            t.elapsed().as_secs_f64()
        );
    }
    let warmup_s = started.elapsed().as_secs_f64();
    let timed = Instant::now();
    for i in args.warmup..total {
        let loss = step(i);
        if first.is_none() {
            first = Some(loss);
        } else {
            last = Some(loss);
        }
    }
    sync(device)?;
    let seconds = timed.elapsed().as_secs_f64();
    let first_loss = first.map(host_scalar).unwrap_or(f32::NAN);
    let last_loss = last.map(host_scalar).unwrap_or(first_loss);
    Ok(Timing {
        method: name,
        backend: backend::NAME,
        precision: args.precision.name(),
        batch_size: args.batch_size,
        image_size: args.image_size,
        steps: args.steps,
        warmup_s,
        ms_per_step: seconds * 1e3 / args.steps as f64,
        images_per_s: (args.batch_size * args.steps) as f64 / seconds,
        first_loss,
        last_loss,
    })
}

/// `recipe bench_step [--method M] [--batch-size N] [--image-size S] [--steps N] [--warmup N]
/// [--precision P] [--device N]`.
pub fn run_cli(args: &[String]) -> Result<()> {
    let args: BenchArgs = super::common::parse_recipe_args("bench_step", args)?;
    if args.steps == 0 || args.batch_size < 2 || args.image_size < 8 {
        return Err(crate::usage::usage(format!(
            "recipe bench_step needs --steps of at least 1, --batch-size of at least 2 and \
             --image-size of at least 8 (got {}, {}, {})",
            args.steps, args.batch_size, args.image_size
        )));
    }
    let device = backend::open(args.device, args.precision)?;
    // The weights from seed 0: every run of a method starts from the same ones.
    let timing = match args.method {
        Method::Simclr => {
            let method = curriculum_ssl::seed::with_seed::<Train, _>(&device, 0, || {
                SimClrConfig::new().init(resnet18(&device), &device)
            })?;
            time(method, "simclr", &args, &device)?
        }
        Method::MocoV2 => {
            let method = curriculum_ssl::seed::with_seed::<Train, _>(&device, 0, || {
                MoCoConfig::moco_v2().init(resnet18, args.batch_size, &device)
            })?;
            time(method, "moco_v2", &args, &device)?
        }
        Method::Byol => {
            let method = curriculum_ssl::seed::with_seed::<Train, _>(&device, 0, || {
                ByolConfig::new().init(resnet18, &device)
            })?;
            time(method, "byol", &args, &device)?
        }
        Method::Simsiam => {
            let method = curriculum_ssl::seed::with_seed::<Train, _>(&device, 0, || {
                SimSiamConfig::new().init(resnet18(&device), &device)
            })?;
            time(method, "simsiam", &args, &device)?
        }
    };
    println!("{}", serde_json::to_string(&timing)?);
    Ok(())
}

/// The recipe of this module.
pub const RECIPES: &[RecipeEntry] = &[RecipeEntry {
    name: "bench_step",
    summary: "time the training step of SimCLR, MoCo v2, BYOL or SimSiam with ResNet-18 (CIFAR \
              stem) on fixed views on the selected backend, f32 or half precision (one JSON line)",
    run: run_cli,
}];
