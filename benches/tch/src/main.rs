//! SimCLR's and MoCo v2's ResNet-18 step (CIFAR stem, fixed random views, SGD at 0.05) on
//! `Autodiff<LibTorch>` (burn-tch, libtorch's CPU kernels) or `Autodiff<Flex>` (the crate's CPU
//! backend), the same work as `benches/train_step.rs` and `benches/pytorch/train_step.py`.
//!
//! `tch-step <tch|flex> [simclr,moco] [batch = 128] [timed steps = 3]`: one untimed step, then
//! each step timed on its own (the device synchronised), and the median.

use std::time::Instant;

use burn::backend::libtorch::LibTorchDevice;
use burn::backend::{Autodiff, Flex, LibTorch};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl::method::*;
use curriculum_ssl::optim::SgdConfig;
use curriculum_ssl_models::{ResNet, ResNetConfig, Stem};

#[path = "../../common/step.rs"]
mod step;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Times `steps` training steps of `method` after one untimed step and prints their median.
fn run<B: AutodiffBackend, S: SslMethod<B>>(
    label: &str,
    device: &B::Device,
    mut method: S,
    batch: usize,
    steps: usize,
) {
    let mut optimizer = SgdConfig::new().init::<B, S::Online>().unwrap();
    let views = step::fixed_views::<B>(batch, device);
    let mut times = vec![];
    for index in 0..=steps {
        let started = Instant::now();
        let loss = step::train_step(&mut method, &mut optimizer, &views, index);
        let loss: f32 = loss.into_scalar().elem();
        B::sync(device).unwrap();
        let ms = started.elapsed().as_secs_f64() * 1e3;
        if index > 0 {
            times.push(ms);
        }
        println!("{label} step {index}: {ms:.0} ms, loss {loss:.6}");
    }
    times.sort_by(f64::total_cmp);
    println!(
        "{label}: median {:.0} ms over {} timed steps",
        times[times.len() / 2],
        times.len()
    );
}

/// Runs the methods named in `which` on backend `B`.
fn methods<B: AutodiffBackend>(
    name: &str,
    device: B::Device,
    which: &str,
    batch: usize,
    steps: usize,
) {
    let resnet18 = |device: &B::Device| -> ResNet<B> {
        ResNetConfig::resnet18().with_stem(Stem::Cifar).init(device)
    };
    if which.contains("simclr") {
        let method = SimClrConfig::new()
            .init(|_| resnet18(&device), &device)
            .unwrap();
        run::<B, _>(&format!("{name} simclr"), &device, method, batch, steps);
    }
    if which.contains("moco") {
        let method = MocoConfig::moco_v2()
            .init(resnet18, batch, &device)
            .unwrap();
        run::<B, _>(&format!("{name} moco_v2"), &device, method, batch, steps);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let which = args.get(2).map_or("simclr,moco", String::as_str);
    let batch = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(128);
    let steps = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(3);
    match args.get(1).map(String::as_str) {
        Some("flex") => methods::<Autodiff<Flex>>("flex", Default::default(), which, batch, steps),
        Some("tch") => {
            methods::<Autodiff<LibTorch>>("tch", LibTorchDevice::Cpu, which, batch, steps)
        }
        _ => {
            eprintln!("usage: tch-step <tch|flex> [simclr,moco] [batch] [timed steps]");
            std::process::exit(2);
        }
    }
}
