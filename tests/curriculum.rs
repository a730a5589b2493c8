//! Curricula in training: the mixed view each framework receives is `λ·x1 + (1 − λ)·x2` with the
//! λ the schedule gives at that step, the knob is a column of `steps.csv`, and a run with a
//! curriculum resumes bit-exactly.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use burn::backend::{Autodiff, Flex};
use burn::prelude::*;
use curriculum_ssl::augment::{Augmenter, PipelineConfig};
use curriculum_ssl::curriculum::{MixupCurriculumConfig, Pace, SchedulerConfig};
use curriculum_ssl::data::{embedded, ImageArray, Loader, LoaderConfig};
use curriculum_ssl::method::*;
use curriculum_ssl::optim::SgdConfig;
use curriculum_ssl::train::{StartMode, TrainConfig, Trainer};
use curriculum_ssl_models::{LeNet, LeNetConfig};

type Ad = Autodiff<Flex>;
type Dev = <Ad as burn::tensor::backend::BackendTypes>::Device;

fn run_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir()
        .join("curriculum-ssl-curriculum")
        .join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn data() -> ImageArray {
    embedded::train()
        .unwrap()
        .select(&(0..64).collect::<Vec<_>>())
        .unwrap()
}

fn loader() -> Loader<ImageArray> {
    Loader::new(
        data(),
        "embedded",
        LoaderConfig {
            batch_size: 16,
            seed: 2,
            workers: 1,
            ..LoaderConfig::default()
        },
    )
    .unwrap()
}

/// SimCLR's pipeline with a 4-step λ per step (0.2, 0.4, 0.6, 0.8 over the run).
fn pipeline(mixup: Option<MixupCurriculumConfig>) -> PipelineConfig {
    let mut p = PipelineConfig::simclr(28, 1);
    p.seed = 9;
    p.mixup_curriculum = mixup;
    p
}

fn per_step_mico() -> MixupCurriculumConfig {
    MixupCurriculumConfig {
        mode: curriculum_ssl::curriculum::MixupCurriculum::Share,
        schedule: SchedulerConfig::Steps {
            values: vec![0.2, 0.4, 0.6, 0.8],
            pace: Pace::Step,
        },
    }
}

type Seen = Arc<Mutex<Vec<(usize, Vec<f32>, Vec<f32>)>>>;

/// Records the views a method receives, then lets it train on them.
struct Spy<S> {
    inner: S,
    seen: Seen,
}

fn host(x: &Tensor<Ad, 4>) -> Vec<f32> {
    x.clone().inner().into_data().to_vec::<f32>().unwrap()
}

impl<S: SslMethod<Ad>> SslMethod<Ad> for Spy<S> {
    type Online = S::Online;
    type Backbone = S::Backbone;
    type State = S::State;
    fn online(&self) -> &S::Online {
        self.inner.online()
    }
    fn backbone(&self) -> &S::Backbone {
        self.inner.backbone()
    }
    fn state(&self) -> S::State {
        self.inner.state()
    }
    fn load_state(&mut self, s: S::State) -> Result<(), curriculum_ssl::ConfigError> {
        self.inner.load_state(s)
    }
    fn set_online(&mut self, online: S::Online) {
        self.inner.set_online(online)
    }
    fn forward(&mut self, v1: Tensor<Ad, 4>, v2: Tensor<Ad, 4>, p: Progress) -> MethodOutput<Ad> {
        self.seen
            .lock()
            .unwrap()
            .push((p.step, host(&v1), host(&v2)));
        self.inner.forward(v1, v2, p)
    }
    fn after_step(&mut self, p: Progress) {
        self.inner.after_step(p)
    }
}

fn lenet(d: &Dev) -> LeNet<Ad> {
    LeNetConfig::lenet5().with_embedding_dim(32).init(d)
}

/// Trains `method` for one epoch (4 steps) with the per-step 4-step λ, and checks each step's
/// second view against the mix of the unmixed views computed independently.
fn check_mixed_views<S: SslMethod<Ad>>(name: &str, method: S) {
    let device = Dev::default();
    let seen: Seen = Arc::default();
    let spy = Spy {
        inner: method,
        seen: seen.clone(),
    };
    let dir = run_dir(name);
    let summary = Trainer::builder(
        spy,
        SgdConfig::new().init::<Ad, S::Online>().unwrap(),
        pipeline(Some(per_step_mico())).init(1).unwrap(),
        loader(),
    )
    .config(
        TrainConfig::new()
            .with_epochs(1)
            .with_lr(0.01)
            .with_knn_every(0)
            .with_progress_bar(false),
    )
    .run_dir(&dir)
    .build(&device)
    .unwrap()
    .fit()
    .unwrap();
    let plain: Augmenter = pipeline(None).init(1).unwrap();
    let batches: Vec<_> = loader().epoch(0).map(|b| b.unwrap()).collect();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 4, "{name}");
    for (step, v1, v2) in seen.iter() {
        let lambda = [0.2f32, 0.4, 0.6, 0.8][*step];
        let x = batches[*step].to_device::<Flex>(&device).images;
        let views = plain.two_views(x, *step as u64);
        let x1 = views.view1.into_data().to_vec::<f32>().unwrap();
        let x2 = views.view2.into_data().to_vec::<f32>().unwrap();
        assert_eq!(v1, &x1, "{name} step {step}: the first view is not mixed");
        let worst = v2
            .iter()
            .zip(x1.iter().zip(&x2))
            .map(|(m, (a, b))| (m - (lambda * a + (1.0 - lambda) * b)).abs())
            .fold(0.0f32, f32::max);
        assert!(worst < 1e-5, "{name} step {step}: off by {worst}");
        let logged = &summary.steps[*step].stats;
        assert!(
            logged
                .iter()
                .any(|(n, v)| n == "mixup_lambda" && (v - f64::from(lambda)).abs() < 1e-6),
            "{name}: {logged:?}"
        );
    }
    let header = std::fs::read_to_string(dir.join("steps.csv")).unwrap();
    assert!(
        header.lines().next().unwrap().ends_with("mixup_lambda"),
        "{header}"
    );
}

fn init<S: SslMethod<Ad>>(build: impl FnOnce(&Dev) -> Result<S, curriculum_ssl::ConfigError>) -> S {
    init_method::<Ad, S, _>(&Dev::default(), 4, build).unwrap()
}

#[test]
fn every_framework_trains_on_the_scheduled_mix_of_its_views() {
    check_mixed_views(
        "simsiam",
        init(|d| {
            SimSiamConfig::new()
                .with_dim(16)
                .with_predictor_dim(8)
                .init(lenet(d), d)
        }),
    );
    check_mixed_views(
        "byol",
        init(|d| {
            ByolConfig::new()
                .with_hidden_dim(32)
                .with_output_dim(16)
                .init(lenet, d)
        }),
    );
    check_mixed_views(
        "simclr",
        init(|d| {
            SimClrConfig::new()
                .with_hidden_dim(32)
                .with_output_dim(16)
                .init(lenet(d), d)
        }),
    );
    check_mixed_views(
        "moco",
        init(|d| {
            MoCoConfig::moco_v2()
                .with_hidden_dim(Some(32))
                .with_output_dim(16)
                .with_queue_size(64)
                .init(lenet, 16, d)
        }),
    );
}

fn rows_without_speed(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("steps.csv"))
        .unwrap()
        .lines()
        .map(|l| {
            let mut cols: Vec<&str> = l.split(',').collect();
            cols.remove(4); // images_per_s
            cols.join(",")
        })
        .collect()
}

/// Two epochs straight and one epoch + resume + one epoch give identical rows of steps.csv
/// (losses and the λ column) under MICO's per-epoch 4-step schedule.
#[test]
fn a_run_with_a_mixup_curriculum_resumes_exactly() {
    let device = Dev::default();
    let make = |dir: &Path, mode: StartMode| {
        let method = init(|d| {
            SimSiamConfig::new()
                .with_dim(16)
                .with_predictor_dim(8)
                .init(lenet(d), d)
        });
        Trainer::builder(
            method,
            SgdConfig::new().init::<Ad, _>().unwrap(),
            pipeline(Some(MixupCurriculumConfig::mico()))
                .init(1)
                .unwrap(),
            loader(),
        )
        .config(
            TrainConfig::new()
                .with_epochs(4)
                .with_lr(0.05)
                .with_checkpoint_every(1)
                .with_knn_every(0)
                .with_progress_bar(false),
        )
        .run_dir(dir)
        .start(mode)
        .build(&device)
        .unwrap()
    };
    let straight = run_dir("mico-straight");
    make(&straight, StartMode::Fresh).fit().unwrap();
    let resumed = run_dir("mico-resumed");
    make(&resumed, StartMode::Fresh).fit_epochs(2).unwrap();
    let mut t = make(&resumed, StartMode::Resume);
    assert_eq!(t.epoch(), 2);
    t.fit().unwrap();
    let a = rows_without_speed(&straight);
    let b = rows_without_speed(&resumed);
    assert_eq!(a.len(), 17);
    assert_eq!(a, b);
    // 4 epochs of 4 steps: λ 0.2, 0.4, 0.6, 0.8 per epoch.
    let lambdas: Vec<&str> = a[1..]
        .iter()
        .map(|r| r.rsplit(',').next().unwrap())
        .collect();
    assert_eq!(lambdas[0], "2e-1");
    assert_eq!(lambdas[4], "4e-1");
    assert_eq!(lambdas[8], "6e-1");
    assert_eq!(lambdas[15], "8e-1");
}
