//! The training loop on the GPU path against the CPU: runs of 2 epochs × 2 steps on 16 images of
//! the embedded Fashion-MNIST subset (cropped to 12 × 12), from the same weights, with the
//! knobs that live in the augmenter and the loop; checkpoints written on one backend and resumed
//! on the other. Both backends augment on the training thread, the GPU backends' default
//! (augmentation ahead is not safe on them: `docs/gpu.md`).

use std::path::{Path, PathBuf};

use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl::augment::mixup::{Mixup, MixupLambda};
use curriculum_ssl::curation::FrechetCurationConfig;
use curriculum_ssl::curriculum::{
    MixupCurriculumConfig, SchedulerConfig, SelfPacedAutoAugmentConfig, StrengthCurriculumConfig,
};
use curriculum_ssl::data::{embedded, ImageArray, Loader, LoaderConfig};
use curriculum_ssl::hooks::{FrechetCurationHook, ObjectBoxesHook, SelfPacedAutoAugmentHook};
use curriculum_ssl::loss::NtXentLossConfig;
use curriculum_ssl::method::RotationMode;
use curriculum_ssl::method::*;
use curriculum_ssl::optim::SgdConfig;
use curriculum_ssl::pipeline::PipelineConfig;
use curriculum_ssl::train::{StartMode, TrainConfig, TrainSummary, Trainer};

use crate::build::*;
use crate::harness::*;
use crate::{BATCH, SIDE};

fn run_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir()
        .join("curriculum-ssl-gpu-path")
        .join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn data() -> ImageArray {
    embedded::train()
        .unwrap()
        .select(&(0..2 * BATCH).collect::<Vec<_>>())
        .unwrap()
}

/// One run's settings besides the method.
#[derive(Clone)]
struct Run {
    pipeline: PipelineConfig,
    curation: Option<FrechetCurationConfig>,
}

impl Run {
    fn new(pipeline: PipelineConfig) -> Self {
        Self {
            pipeline,
            curation: None,
        }
    }
}

/// Trains `method` in `dir` for at most `epochs` of a 2-epoch run; returns what it did and the
/// weights at the end.
fn train<B, S>(
    method: S,
    run: &Run,
    dir: &Path,
    mode: StartMode,
    epochs: usize,
    device: &B::Device,
) -> (TrainSummary, Vec<Vec<f32>>)
where
    B: AutodiffBackend,
    S: SslMethod<B>,
{
    let loader = Loader::new(
        data(),
        "embedded",
        LoaderConfig {
            batch_size: BATCH,
            seed: 4,
            workers: 1,
            ..LoaderConfig::default()
        },
    )
    .unwrap();
    let uses_boxes = method.uses_object_boxes();
    let mut builder = Trainer::builder(
        method,
        SgdConfig::new()
            .with_momentum(0.9)
            .init::<B, S::Online>()
            .unwrap(),
        run.pipeline.clone().init(1).unwrap(),
        loader,
    )
    .config(
        TrainConfig::new()
            .with_epochs(2)
            .with_lr(0.05)
            .with_checkpoint_every(1)
            .with_progress_bar(false),
    );
    if let Some(curation) = run.curation.clone() {
        builder = builder.hook(FrechetCurationHook::new(curation).unwrap());
    }
    if uses_boxes {
        builder = builder.hook(ObjectBoxesHook::new());
    }
    if run.pipeline.auto_augment.is_some() {
        builder = builder.hook(SelfPacedAutoAugmentHook::new());
    }
    let mut trainer = builder
        .run_dir(dir)
        .start(mode)
        .augment_ahead(false)
        .build(device)
        .unwrap();
    let summary = trainer.fit_epochs(epochs).unwrap();
    assert_on_device(
        "online networks after training",
        trainer.method().online(),
        device,
    );
    let weights = params(trainer.method().online());
    (summary, weights)
}

/// The steps of two runs, value by value (the speed aside).
fn compare_steps(name: &str, cpu: &TrainSummary, gpu: &TrainSummary, seen: &mut Comparisons) {
    assert_eq!(cpu.steps.len(), gpu.steps.len(), "{name}: steps");
    for (a, b) in cpu.steps.iter().zip(&gpu.steps) {
        assert_eq!((a.step, a.epoch, a.lr), (b.step, b.epoch, b.lr), "{name}");
        seen.scalar(&format!("{name} step {} loss", a.step), a.loss, b.loss);
        let names = |r: &curriculum_ssl::train::StepRecord| {
            r.stats.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>()
        };
        assert_eq!(names(a), names(b), "{name} step {}: columns", a.step);
        for ((n, x), (_, y)) in a.stats.iter().zip(&b.stats) {
            seen.scalar(&format!("{name} step {} {n}", a.step), *x, *y);
        }
    }
}

/// The method on both backends, the GPU's loaded with the CPU's weights and state.
fn pair<Mc, Mg>(cpu: Mc, mut gpu: Mg, device: &GpuDevice) -> (Mc, Mg)
where
    Mc: SslMethod<CpuAd>,
    Mg: SslMethod<GpuAd>,
{
    same_start::<CpuAd, GpuAd, _, _>(&cpu, &mut gpu, device);
    (cpu, gpu)
}

type GpuDevice = <GpuAd as burn::tensor::backend::BackendTypes>::Device;

/// A 2-epoch run on each backend from the same start: the same losses, statistics and scheduled
/// knobs at every step, and the same weights at the end.
fn compare_runs<Mc, Mg>(
    name: &str,
    cpu: Mc,
    gpu: Mg,
    run: &Run,
    device: &GpuDevice,
    seen: &mut Comparisons,
) where
    Mc: SslMethod<CpuAd>,
    Mg: SslMethod<GpuAd>,
{
    let (cpu, gpu) = pair(cpu, gpu, device);
    let dir_c = run_dir(&format!("{name}-cpu"));
    let dir_g = run_dir(&format!("{name}-gpu"));
    let (a, wa) = train(cpu, run, &dir_c, StartMode::Fresh, 2, &CpuDevice::default());
    let (b, wb) = train(gpu, run, &dir_g, StartMode::Fresh, 2, device);
    compare_steps(name, &a, &b, seen);
    seen.all(&format!("{name} final weights"), &wa, &wb);
    for d in [dir_c, dir_g] {
        let _ = std::fs::remove_dir_all(d);
    }
}

fn nt_xent() -> PairLossConfig {
    PairLossConfig::NtXent(NtXentLossConfig::new().with_temperature(0.2))
}

/// The small-image MoCo v2 pipeline (crop to 12 × 12, blur) on one channel.
fn pipeline() -> PipelineConfig {
    let mut p = PipelineConfig::moco_v2(SIDE, 1);
    p.seed = 9;
    p
}

/// The knobs of the curriculum recipes that act through the augmenter and the loop: plain
/// mixup (MoCo v2), MICO's mixup curriculum (SimSiam), the strength curriculum and the
/// self-paced AutoAugment (MoCo v1), Fréchet batch curation with its redraws (SimCLR) and
/// crop-and-rotate's object boxes from the backbone's heat maps (RotNet).
#[test]
fn curriculum_knobs_train_as_on_the_cpu() {
    let Some(device) = gpu() else { return };
    let cpu_device = CpuDevice::default();
    let mut seen = Comparisons::default();

    let mut mixed = pipeline();
    mixed.mixup = Some(Mixup {
        lambda: MixupLambda::Fixed(0.5),
    });
    let v2 = MocoConfig::moco_v2().with_hidden_dim(Some(16));
    compare_runs(
        "MoCo v2 + mixup",
        moco::<CpuAd>(v2.clone(), &cpu_device),
        moco::<GpuAd>(v2, &device),
        &Run::new(mixed),
        &device,
        &mut seen,
    );

    let mut mico = pipeline();
    mico.mixup_curriculum = Some(MixupCurriculumConfig::mico());
    compare_runs(
        "SimSiam + MICO mixup",
        simsiam::<CpuAd>(&cpu_device),
        simsiam::<GpuAd>(&device),
        &Run::new(mico),
        &device,
        &mut seen,
    );

    let mut strength = pipeline();
    strength.strength_curriculum = Some(StrengthCurriculumConfig {
        target: 2.0,
        schedule: Some(SchedulerConfig::four_step()),
    });
    strength.auto_augment = Some(SelfPacedAutoAugmentConfig::new().with_controller_gain(1.0));
    compare_runs(
        "MoCo v1 + strength + self-paced AutoAugment",
        moco::<CpuAd>(MocoConfig::moco_v1(), &cpu_device),
        moco::<GpuAd>(MocoConfig::moco_v1(), &device),
        &Run::new(strength),
        &device,
        &mut seen,
    );

    let curated = Run {
        curation: Some(
            FrechetCurationConfig::new()
                .with_warmup_epochs(1)
                .with_max_retries(2),
        ),
        ..Run::new(pipeline())
    };
    compare_runs(
        "SimCLR + Frechet curation",
        simclr::<CpuAd>(nt_xent(), None, &cpu_device),
        simclr::<GpuAd>(nt_xent(), None, &device),
        &curated,
        &device,
        &mut seen,
    );

    compare_runs(
        "RotNet crop-and-rotate",
        rotnet::<CpuAd>(RotationMode::CropAndRotate, &cpu_device),
        rotnet::<GpuAd>(RotationMode::CropAndRotate, &device),
        &Run::new(pipeline()),
        &device,
        &mut seen,
    );
    seen.report("curriculum knobs in the trainer");
}

/// MoCo v2 runs: straight on each backend; the first epoch on one backend and the second resumed
/// from its checkpoint on the other (the same next-step losses as the straight run).
#[test]
fn checkpoints_move_between_the_backends() {
    let Some(device) = gpu() else { return };
    let cpu_device = CpuDevice::default();
    let mut seen = Comparisons::default();
    let config = MocoConfig::moco_v2().with_hidden_dim(Some(16));
    let start = || {
        pair(
            moco::<CpuAd>(config.clone(), &cpu_device),
            moco::<GpuAd>(config.clone(), &device),
            &device,
        )
    };
    let run = Run::new(pipeline());

    let (cpu, gpu) = start();
    let (cpu_straight, cpu_weights) = train(
        cpu,
        &run,
        &run_dir("straight-cpu"),
        StartMode::Fresh,
        2,
        &cpu_device,
    );
    let (gpu_straight, gpu_weights) = train(
        gpu,
        &run,
        &run_dir("straight-gpu"),
        StartMode::Fresh,
        2,
        &device,
    );
    compare_steps("MoCo v2 straight", &cpu_straight, &gpu_straight, &mut seen);
    seen.all("MoCo v2 straight weights", &cpu_weights, &gpu_weights);

    // Written on the GPU path, resumed on the CPU.
    let dir = run_dir("gpu-then-cpu");
    let (cpu, gpu) = start();
    let (first, _) = train(gpu, &run, &dir, StartMode::Fresh, 1, &device);
    assert_eq!(first.steps.len(), 2);
    let (second, weights) = train(cpu, &run, &dir, StartMode::Resume, 1, &cpu_device);
    let resumed = TrainSummary {
        steps: [first.steps, second.steps].concat(),
        epochs: Vec::new(),
    };
    compare_steps(
        "written on wgpu, resumed on the CPU",
        &gpu_straight,
        &resumed,
        &mut seen,
    );
    seen.all(
        "written on wgpu, resumed on the CPU: weights",
        &gpu_weights,
        &weights,
    );

    // Written on the CPU, resumed on the GPU path.
    let dir = run_dir("cpu-then-gpu");
    let (cpu, gpu) = start();
    let (first, _) = train(cpu, &run, &dir, StartMode::Fresh, 1, &cpu_device);
    let (second, weights) = train(gpu, &run, &dir, StartMode::Resume, 1, &device);
    let resumed = TrainSummary {
        steps: [first.steps, second.steps].concat(),
        epochs: Vec::new(),
    };
    compare_steps(
        "written on the CPU, resumed on wgpu",
        &cpu_straight,
        &resumed,
        &mut seen,
    );
    seen.all(
        "written on the CPU, resumed on wgpu: weights",
        &cpu_weights,
        &weights,
    );

    seen.report("checkpoints across backends");
}
