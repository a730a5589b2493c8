//! Curricula in training: the mixed view each framework receives is `λ·x1 + (1 − λ)·x2` with the
//! λ the schedule gives at that step, the knob is a column of `steps.csv`, and a run with a
//! curriculum resumes bit-exactly.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use burn::backend::{Autodiff, Flex};
use burn::prelude::*;
use curriculum_ssl::curriculum::{MixupCurriculumConfig, Pace, SchedulerConfig};
use curriculum_ssl::data::{embedded, ImageArray, Loader, LoaderConfig};
use curriculum_ssl::hooks::{FrechetCurationHook, ObjectBoxesHook, SelfPacedAutoAugmentHook};
use curriculum_ssl::method::*;
use curriculum_ssl::optim::SgdConfig;
use curriculum_ssl::pipeline::{Augmenter, PipelineConfig, Preset};
use curriculum_ssl::train::{SelfSupervised, StartMode, TrainConfig, Trainer};
use curriculum_ssl_models::{Backbone, LeNet, LeNetConfig, TrainableBackbone};

type Ad = Autodiff<Flex>;
type Dev = <Ad as burn::tensor::backend::BackendTypes>::Device;

fn run_dir(name: &str) -> PathBuf {
    crate::common::run_scratch("curriculum-ssl-curriculum", name)
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
    fn forward_views(&mut self, views: Views<Ad>, p: Progress) -> MethodOutput<Ad> {
        let [v1, v2] = &views.global;
        self.seen.lock().unwrap().push((p.step, host(v1), host(v2)));
        self.inner.forward_views(views, p)
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
                .init(lenet, d)
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
                .init(lenet, d)
        }),
    );
    check_mixed_views(
        "moco",
        init(|d| {
            MocoConfig::moco_v2()
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

/// The rows of steps.csv (without the speed column) of a 4-epoch SimSiam run straight, and of
/// the same run stopped after 2 epochs and resumed.
fn straight_and_resumed(name: &str, augmentation: PipelineConfig) -> (Vec<String>, Vec<String>) {
    let device = Dev::default();
    let make = |dir: &Path, mode: StartMode| {
        let method = init(|d| {
            SimSiamConfig::new()
                .with_dim(16)
                .with_predictor_dim(8)
                .init(lenet, d)
        });
        let mut builder = Trainer::builder(
            method,
            SgdConfig::new().init::<Ad, _>().unwrap(),
            augmentation.clone().init(1).unwrap(),
            loader(),
        )
        .config(
            TrainConfig::new()
                .with_epochs(4)
                .with_lr(0.05)
                .with_checkpoint_every(1)
                .with_progress_bar(false),
        );
        if augmentation.auto_augment.is_some() {
            builder = builder.hook(SelfPacedAutoAugmentHook::new());
        }
        builder.run_dir(dir).start(mode).build(&device).unwrap()
    };
    let straight = run_dir(&format!("{name}-straight"));
    make(&straight, StartMode::Fresh).fit().unwrap();
    let resumed = run_dir(&format!("{name}-resumed"));
    make(&resumed, StartMode::Fresh).fit_epochs(2).unwrap();
    let mut t = make(&resumed, StartMode::Resume);
    assert_eq!(t.epoch(), 2);
    t.fit().unwrap();
    (rows_without_speed(&straight), rows_without_speed(&resumed))
}

/// Two epochs straight and one epoch + resume + one epoch give identical rows of steps.csv
/// (losses and the λ column) under MICO's per-epoch 4-step schedule.
#[test]
fn a_run_with_a_mixup_curriculum_resumes_exactly() {
    let (a, b) = straight_and_resumed("mico", pipeline(Some(MixupCurriculumConfig::mico())));
    assert_eq!(a.len(), 17);
    assert_eq!(a, b);
    // 4 epochs of 4 steps: λ 0.2, 0.4, 0.6, 0.8 per epoch.
    let lambdas: Vec<&str> = a[1..]
        .iter()
        .map(|r| r.rsplit(',').next().unwrap())
        .collect();
    assert_eq!(lambdas[0], "0.2");
    assert_eq!(lambdas[4], "0.4");
    assert_eq!(lambdas[8], "0.6");
    assert_eq!(lambdas[15], "0.8");
}

/// The self-paced AutoAugment learns from the losses (an adaptive state, not a function of the
/// step): its magnitudes and running losses travel in the checkpoint, so the resumed run draws
/// the same sub-policies at the same magnitudes and gives the same losses.
#[test]
fn a_run_with_self_paced_auto_augment_resumes_exactly() {
    use curriculum_ssl::curriculum::SelfPacedAutoAugmentConfig;
    let mut p = pipeline(None);
    p.auto_augment = Some(SelfPacedAutoAugmentConfig::new().with_controller_gain(1.0));
    let (a, b) = straight_and_resumed("auto-augment", p.clone());
    assert_eq!(a.len(), 17);
    assert!(a[0].ends_with("aa_policy,aa_magnitude"), "{}", a[0]);
    assert_eq!(a, b);
    let magnitudes: Vec<f64> = a[1..]
        .iter()
        .map(|r| r.rsplit(',').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(magnitudes[0], 0.1, "the initial magnitude");
    assert!(
        magnitudes[8..].iter().any(|&m| m != 0.1),
        "the magnitudes learned before the checkpoint carry over: {magnitudes:?}"
    );
    // Without the hook that feeds the losses back, the run is refused, naming the hook.
    let method = init(|d| {
        SimSiamConfig::new()
            .with_dim(16)
            .with_predictor_dim(8)
            .init(lenet, d)
    });
    let err = match Trainer::builder(
        method,
        SgdConfig::new().init::<Ad, _>().unwrap(),
        p.init(1).unwrap(),
        loader(),
    )
    .config(TrainConfig::new().with_epochs(1).with_progress_bar(false))
    .run_dir(run_dir("auto-augment-no-hook"))
    .build(&Dev::default())
    {
        Ok(_) => panic!("a self-paced AutoAugment without its hook was accepted"),
        Err(e) => e,
    };
    assert!(err.is_input_error());
    assert!(
        err.to_string().contains("SelfPacedAutoAugmentHook"),
        "{err}"
    );
}

/// The strength curriculum changes the images, not only a stored number: at the step where the
/// multiplier changes, the views differ; with the same multiplier they are the same.
#[test]
fn the_strength_curriculum_changes_the_views() {
    use curriculum_ssl::curriculum::StrengthCurriculumConfig;
    let device = Dev::default();
    let mut p = PipelineConfig::moco_v2(28, 1);
    p.seed = 1;
    p.strength_curriculum = Some(StrengthCurriculumConfig {
        target: 2.0,
        schedule: Some(SchedulerConfig::Steps {
            values: vec![0.5, 1.0],
            pace: Pace::Epoch,
        }),
    });
    let augmenter = p.clone().init(1).unwrap();
    let batch = loader().epoch(0).next().unwrap().unwrap();
    let x = batch.to_device::<Flex>(&device).images;
    let at = |epoch| Progress {
        step: 3,
        total_steps: 8,
        epoch,
        total_epochs: 2,
    };
    let host = |v: Tensor<Flex, 4>| v.into_data().to_vec::<f32>().unwrap();
    let early = augmenter.two_views_at(x.clone(), at(0));
    let late = augmenter.two_views_at(x.clone(), at(1));
    assert_eq!(early.knobs, [("strength", 1.0)]);
    assert_eq!(late.knobs, [("strength", 2.0)]);
    assert_ne!(
        host(early.view1.clone()),
        host(late.view1),
        "strength must change the images"
    );
    // Multiplier 1 is the pipeline without a curriculum, bit for bit.
    let mut plain = p;
    plain.strength_curriculum = None;
    let plain = plain.init(1).unwrap().two_views_at(x, at(0));
    assert_eq!(host(early.view1), host(plain.view1));
}

/// HCL with a large β/τ stays finite in f32 and matches float64 (unshifted, exp(β(s − 1)/τ)
/// underflows to 0 for every negative of a row and the loss is 0/0).
#[test]
fn hcl_at_a_large_beta_is_finite_in_f32_and_matches_f64() {
    use burn::backend::NdArray;
    use curriculum_ssl::loss::HclLossConfig;
    let loss = HclLossConfig::new()
        .with_temperature(0.1)
        .with_beta(40.0)
        .init()
        .unwrap();
    // Four pairs of unit vectors in the plane, 30° apart: every negative similarity is at most
    // cos 60° = 0.5, so β(s − 1)/τ ≤ −200 for every negative (below f32's exp range).
    let angle = |deg: f64| [deg.to_radians().cos(), deg.to_radians().sin()];
    let z1: Vec<[f64; 2]> = [0.0, 90.0, 180.0, 270.0].map(angle).to_vec();
    let z2: Vec<[f64; 2]> = [30.0, 120.0, 210.0, 300.0].map(angle).to_vec();
    let flat = |z: &[[f64; 2]]| z.iter().flatten().copied().collect::<Vec<f64>>();
    let f64_value = {
        let d = Default::default();
        let t = |z: &[[f64; 2]]| {
            Tensor::<NdArray<f64>, 2>::from_data(TensorData::new(flat(z), [4, 2]), &d)
        };
        loss.forward(t(&z1), t(&z2)).into_scalar()
    };
    let f32_value = {
        let d = Default::default();
        let t = |z: &[[f64; 2]]| {
            let v: Vec<f32> = flat(z).iter().map(|&x| x as f32).collect();
            Tensor::<Flex, 2>::from_data(TensorData::new(v, [4, 2]), &d)
        };
        loss.forward(t(&z1), t(&z2)).into_scalar()
    };
    assert!(f32_value.is_finite(), "{f32_value}");
    assert!(
        (f64::from(f32_value) - f64_value).abs() < 1e-4 * f64_value.abs().max(1.0),
        "f32 {f32_value} vs f64 {f64_value}"
    );
}

/// Each anchor's HCL loss in plain f64, from the formula of joshr17/HCL (independent of the
/// library's tensor code), and its positive similarity.
fn hcl_per_anchor_reference(
    z1: &[[f64; 2]],
    z2: &[[f64; 2]],
    tau: f64,
    tau_plus: f64,
    beta: f64,
) -> Vec<(f64, f64)> {
    let z: Vec<[f64; 2]> = z1.iter().chain(z2).copied().collect();
    let (b, n) = (z1.len(), 2 * z1.len());
    let dot = |i: usize, j: usize| z[i][0] * z[j][0] + z[i][1] * z[j][1];
    let count = (n - 2) as f64;
    (0..n)
        .map(|i| {
            let p = (i + b) % n;
            let s_pos = dot(i, p);
            let pos = (s_pos / tau).exp();
            let negs: Vec<f64> = (0..n)
                .filter(|&j| j != i && j != p)
                .map(|j| dot(i, j))
                .collect();
            let imp: Vec<f64> = negs.iter().map(|s| (beta * s / tau).exp()).collect();
            let reweight = imp
                .iter()
                .zip(&negs)
                .map(|(w, s)| w * (s / tau).exp())
                .sum::<f64>()
                / (imp.iter().sum::<f64>() / count);
            let ng = ((-tau_plus * count * pos + reweight) / (1.0 - tau_plus))
                .max(count * (-1.0 / tau).exp());
            (-(pos / (pos + ng)).ln(), s_pos)
        })
        .collect()
}

/// MICO §3.3 eq. 3: the positive pairs weighted by `e^{(k − β)s⁺/τ}` normalised to mean 1; at
/// `k = β` the loss is plain HCL; for `k − β < 0` the hardest pair weighs most.
#[test]
fn hcl_hard_positive_weights_follow_eq3() {
    use burn::backend::NdArray;
    use curriculum_ssl::loss::HclLossConfig;
    let angle = |deg: f64| [deg.to_radians().cos(), deg.to_radians().sin()];
    // The worked geometry of docs/methods.md (HCL): z1 = u(0°, 90°, 200°), z2 = u(30°, 100°, 180°), τ = 0.5.
    let z1: Vec<[f64; 2]> = [0.0, 90.0, 200.0].map(angle).to_vec();
    let z2: Vec<[f64; 2]> = [30.0, 100.0, 180.0].map(angle).to_vec();
    let (tau, tau_plus, beta) = (0.5, 0.1, 1.0);
    let reference = hcl_per_anchor_reference(&z1, &z2, tau, tau_plus, beta);
    let plain: f64 = reference.iter().map(|r| r.0).sum::<f64>() / reference.len() as f64;
    assert!((plain - 0.375811).abs() < 1e-6, "worked value: {plain}");
    let t = |z: &[[f64; 2]]| {
        let flat: Vec<f64> = z.iter().flatten().copied().collect();
        Tensor::<NdArray<f64>, 2>::from_data(TensorData::new(flat, [3, 2]), &Default::default())
    };
    let loss_with = |k: Option<f64>| {
        HclLossConfig::new()
            .with_temperature(tau)
            .with_tau_plus(tau_plus)
            .with_beta(beta)
            .with_hard_positive_k(k)
            .init()
            .unwrap()
            .forward(t(&z1), t(&z2))
            .into_scalar()
    };
    assert!((loss_with(None) - plain).abs() < 1e-12);
    assert!((loss_with(Some(beta)) - plain).abs() < 1e-12, "k = beta");
    for k in [0.0, 3.0] {
        let w: Vec<f64> = reference
            .iter()
            .map(|r| ((k - beta) * r.1 / tau).exp())
            .collect();
        let mean_w = w.iter().sum::<f64>() / w.len() as f64;
        let expected = reference
            .iter()
            .zip(&w)
            .map(|(r, w)| r.0 * w / mean_w)
            .sum::<f64>()
            / reference.len() as f64;
        let got = loss_with(Some(k));
        assert!(
            (got - expected).abs() < 1e-12,
            "k = {k}: {got} vs {expected}"
        );
        assert!((got - plain).abs() > 1e-4, "k = {k} must change the loss");
    }
    // Out-of-range k is refused, naming the field.
    let err = HclLossConfig::new()
        .with_hard_positive_k(Some(-1.0))
        .init()
        .unwrap_err();
    assert!(err.to_string().contains("hard_positive_k"), "{err}");
}

type SimClrLeNet = SimClr<Ad, LeNet<Ad>>;
type CuratedTrainer = Trainer<
    Ad,
    SelfSupervised<
        Ad,
        SimClrLeNet,
        curriculum_ssl::optim::SgdOptimizer<curriculum_ssl::method::Projected<Ad, LeNet<Ad>>, Ad>,
        ImageArray,
    >,
>;

/// SimCLR runs of 3 epochs, 4 steps each, with Fréchet batch curation (two warm-up epochs:
/// epochs 0 and 1 train on everything, epoch 1 sets the threshold) and at most 2 redraws.
fn curated(dir: &Path, mode: StartMode, curation: bool) -> CuratedTrainer {
    use curriculum_ssl::curation::FrechetCurationConfig;
    let config = FrechetCurationConfig::new()
        .with_warmup_epochs(2)
        .with_max_retries(2);
    curated_with(dir, mode, curation.then_some(config))
}

/// [`curated`] with the given curation settings (none: no curation).
fn curated_with(
    dir: &Path,
    mode: StartMode,
    curation: Option<curriculum_ssl::curation::FrechetCurationConfig>,
) -> CuratedTrainer {
    let device = Dev::default();
    let method = init(|d| {
        SimClrConfig::new()
            .with_hidden_dim(32)
            .with_output_dim(8)
            .init(lenet, d)
    });
    let mut builder = Trainer::builder(
        method,
        SgdConfig::new().init::<Ad, _>().unwrap(),
        pipeline(None).init(1).unwrap(),
        loader(),
    )
    .config(
        TrainConfig::new()
            .with_epochs(3)
            .with_lr(0.05)
            .with_checkpoint_every(1)
            .with_progress_bar(false),
    );
    if let Some(config) = curation {
        builder = builder.hook(FrechetCurationHook::new(config).unwrap());
    }
    builder.run_dir(dir).start(mode).build(&device).unwrap()
}

/// The lines of a run's epochs.csv, the header first.
fn epoch_rows(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("epochs.csv"))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

fn column(rows: &[String], name: &str) -> Vec<String> {
    let i = rows[0].split(',').position(|c| c == name).unwrap();
    rows[1..]
        .iter()
        .map(|r| r.split(',').nth(i).unwrap().to_string())
        .collect()
}

/// Fréchet batch curation in the loop: the warm-up epoch trains exactly as a run without
/// curation; afterwards batches above the threshold are redrawn (at most twice) without an
/// extra optimiser step, the counts are columns of epochs.csv, each step's FRD and redraws are
/// columns of steps.csv, and a resumed run keeps the threshold and the counters.
#[test]
fn batch_curation_redraws_batches_above_the_threshold_and_resumes_exactly() {
    let plain = run_dir("curation-off");
    curated(&plain, StartMode::Fresh, false).fit().unwrap();
    let straight = run_dir("curation-straight");
    let mut t = curated(&straight, StartMode::Fresh, true);
    t.fit().unwrap();
    assert_eq!(t.step(), 12, "a redraw is not an optimiser step");
    let state = t
        .hook::<FrechetCurationHook>()
        .unwrap()
        .curation()
        .state()
        .clone();
    let threshold = state.threshold.unwrap();
    // The threshold is the mean FRD of epoch 1 (steps 5-8 in the file).
    let rows = rows_without_speed(&straight);
    let frd: Vec<f64> = column(&rows, "frd")
        .iter()
        .map(|v| v.parse().unwrap())
        .collect();
    let mean1 = frd[4..8].iter().sum::<f64>() / 4.0;
    assert!(
        (threshold - mean1).abs() <= 1e-12 * mean1.abs(),
        "{threshold} vs {mean1}"
    );
    // The warm-up is not curated: its losses equal the run without curation.
    let losses = column(&rows, "loss");
    assert_eq!(
        losses[..8],
        column(&rows_without_speed(&plain), "loss")[..8]
    );
    // Afterwards every applied batch is at most the threshold unless it used up its redraws.
    let redraws: Vec<usize> = column(&rows, "redraws")
        .iter()
        .map(|v| v.parse().unwrap())
        .collect();
    assert!(redraws[..8].iter().all(|&r| r == 0));
    for s in 8..12 {
        assert!(redraws[s] <= 2, "step {s}: {}", redraws[s]);
        assert!(
            frd[s] <= threshold || redraws[s] == 2,
            "step {s}: {} > {threshold}",
            frd[s]
        );
    }
    let total_rejections = state.total_counters.rejections as usize;
    assert_eq!(redraws.iter().sum::<usize>(), total_rejections);
    assert!(
        total_rejections > 0,
        "this seed rejects some batches: {redraws:?}"
    );
    // Per-epoch counts in epochs.csv.
    let epochs = epoch_rows(&straight);
    let per_epoch: usize = column(&epochs, "curation_rejections")
        .iter()
        .map(|v| v.parse::<usize>().unwrap())
        .sum();
    assert_eq!(per_epoch, total_rejections);
    // Stopped after 2 epochs (the calibration done, the threshold not yet applied) and resumed:
    // the same rows, threshold and counters.
    let resumed = run_dir("curation-resumed");
    curated(&resumed, StartMode::Fresh, true)
        .fit_epochs(2)
        .unwrap();
    let mut t = curated(&resumed, StartMode::Resume, true);
    assert_eq!(
        t.hook::<FrechetCurationHook>()
            .unwrap()
            .curation()
            .state()
            .calibration_batches,
        4
    );
    t.fit().unwrap();
    assert_eq!(rows_without_speed(&resumed), rows);
    assert_eq!(
        t.hook::<FrechetCurationHook>().unwrap().curation().state(),
        &state
    );
}

/// The quantile threshold (not the paper's) in the loop: one warm-up epoch, then each batch's
/// threshold is the median of the previous four batches' first-attempt distances. Checked from
/// the files alone: steps.csv's `first_frd` (each step's first attempt) gives every curated
/// step's threshold, computed here independently of the policy (the median of four values is the
/// mean of the middle two); a step is redrawn exactly when its first attempt is above it, an
/// applied one is at most at it unless its redraws ran out; epochs.csv's means are the means of
/// those thresholds and first attempts; and a run stopped after the first curated epoch and
/// resumed writes the same rows.
#[test]
fn the_quantile_threshold_is_the_recent_batches_median_in_the_loop() {
    use curriculum_ssl::curation::{FrechetCurationConfig, ThresholdRule};
    let config = FrechetCurationConfig::new()
        .with_warmup_epochs(1)
        .with_max_retries(2)
        .with_threshold(ThresholdRule::RecentQuantile { q: 0.5, window: 4 });
    let straight = run_dir("curation-quantile");
    curated_with(&straight, StartMode::Fresh, Some(config.clone()))
        .fit()
        .unwrap();
    let rows = rows_without_speed(&straight);
    let numbers = |name: &str| -> Vec<f64> {
        column(&rows, name)
            .iter()
            .map(|v| v.parse().unwrap())
            .collect()
    };
    let (frd, first, redraws) = (numbers("frd"), numbers("first_frd"), numbers("redraws"));
    // The warm-up's steps are not curated: applied at once, their first attempt.
    assert_eq!(frd[..4], first[..4]);
    assert!(redraws[..4].iter().all(|&r| r == 0.0));
    let mut thresholds = Vec::new();
    for s in 4..12 {
        let mut window = first[s - 4..s].to_vec();
        window.sort_by(f64::total_cmp);
        let t = (window[1] + window[2]) / 2.0;
        assert_eq!(
            first[s] > t,
            redraws[s] > 0.0,
            "step {s}: {} vs {t}",
            first[s]
        );
        assert!(
            frd[s] <= t || redraws[s] == 2.0,
            "step {s}: {} > {t}",
            frd[s]
        );
        thresholds.push(t);
    }
    assert!(
        redraws.iter().sum::<f64>() > 0.0,
        "this seed redraws: {redraws:?}"
    );
    let epochs = epoch_rows(&straight);
    let cells = |name: &str| column(&epochs, name);
    assert_eq!(
        cells("curation_threshold_mean")[0],
        "",
        "no threshold in the warm-up"
    );
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * b.abs();
    for epoch in 1..3 {
        let mean_t = thresholds[(epoch - 1) * 4..epoch * 4].iter().sum::<f64>() / 4.0;
        let got: f64 = cells("curation_threshold_mean")[epoch].parse().unwrap();
        assert!(close(got, mean_t), "epoch {epoch}: {got} vs {mean_t}");
    }
    for epoch in 0..3 {
        let mean_f = first[epoch * 4..(epoch + 1) * 4].iter().sum::<f64>() / 4.0;
        let got: f64 = cells("curation_frd_mean")[epoch].parse().unwrap();
        assert!(close(got, mean_f), "epoch {epoch}: {got} vs {mean_f}");
    }
    let rejections: f64 = cells("curation_rejections")
        .iter()
        .map(|v| v.parse::<f64>().unwrap())
        .sum();
    assert_eq!(rejections, redraws.iter().sum::<f64>());
    // Stopped after the first curated epoch and resumed: the same rows.
    let resumed = run_dir("curation-quantile-resumed");
    curated_with(&resumed, StartMode::Fresh, Some(config.clone()))
        .fit_epochs(2)
        .unwrap();
    curated_with(&resumed, StartMode::Resume, Some(config))
        .fit()
        .unwrap();
    assert_eq!(rows_without_speed(&resumed), rows);
}

// MICO's crop-and-rotate in the loop: the object boxes, when they are computed, how they reach
// the method, what the method rotates, and exact resume.

use curriculum_ssl::augment::crop::CropBox;
use curriculum_ssl::augment::rotate::rot90;
use curriculum_ssl::curriculum::rotation::{
    box_in_view, boxes_from_heatmap, channel_mean, ObjectBoxes, RotationCurriculumConfig,
    DEFAULT_BOX_THRESHOLD,
};
use curriculum_ssl::hooks::CurriculumStates;
use curriculum_ssl::method::{RotNet, RotNetConfig, RotNetNetwork, RotationMode};

type Inner = Flex;

/// What a crop-and-rotate step received and rotated.
struct CropStep {
    step: usize,
    /// The two views, `[N, 1, 28, 28]` each.
    views: [Tensor<Inner, 4>; 2],
    /// The boxes handed over before the forward (view1's, then view2's).
    boxes: Vec<CropBox>,
    /// The method's rotated batch for those views and boxes, and its labels.
    rotated: Tensor<Inner, 4>,
    labels: Vec<usize>,
}

type CropSeen = Arc<Mutex<Vec<CropStep>>>;

/// RotNet in crop-and-rotate mode, recording each step's views, boxes and rotated batch.
struct CropSpy<M: Backbone<Ad>> {
    inner: RotNet<Ad, M>,
    boxes: Option<Vec<CropBox>>,
    seen: CropSeen,
}

impl<M> SslMethod<Ad> for CropSpy<M>
where
    M: TrainableBackbone<Ad>,
{
    type Online = RotNetNetwork<Ad, M>;
    type Backbone = M;
    type State = ();
    fn online(&self) -> &Self::Online {
        self.inner.online()
    }
    fn backbone(&self) -> &M {
        self.inner.backbone()
    }
    fn state(&self) {}
    fn load_state(&mut self, s: ()) -> Result<(), curriculum_ssl::ConfigError> {
        self.inner.load_state(s)
    }
    fn set_online(&mut self, online: Self::Online) {
        self.inner.set_online(online)
    }
    fn forward_views(&mut self, views: Views<Ad>, p: Progress) -> MethodOutput<Ad> {
        let [v1, v2] = views.two();
        let boxes = self.boxes.take().expect("boxes before every forward");
        let batch = self
            .inner
            .rotation_batch(v1.clone(), v2.clone(), p, Some(&boxes));
        self.seen.lock().unwrap().push(CropStep {
            step: p.step,
            views: [v1.clone().inner(), v2.clone().inner()],
            boxes: boxes.clone(),
            rotated: batch.images.inner(),
            labels: batch.labels,
        });
        self.inner.forward(v1, v2, p)
    }
    fn after_step(&mut self, p: Progress) {
        self.inner.after_step(p)
    }
    fn uses_object_boxes(&self) -> bool {
        self.inner.uses_object_boxes()
    }
    fn set_object_boxes(&mut self, boxes: Vec<CropBox>) {
        self.boxes = Some(boxes.clone());
        self.inner.set_object_boxes(boxes);
    }
}

type CropTrainer<M> = Trainer<
    Ad,
    SelfSupervised<
        Ad,
        CropSpy<M>,
        curriculum_ssl::optim::SgdOptimizer<RotNetNetwork<Ad, M>, Ad>,
        ImageArray,
    >,
>;

fn crop_rotnet<M>(
    curriculum: RotationCurriculumConfig,
    backbone: impl Fn(&Dev) -> M,
) -> RotNet<Ad, M>
where
    M: TrainableBackbone<Ad>,
{
    init(|d| {
        RotNetConfig::new()
            .with_mode(RotationMode::CropAndRotate)
            .with_curriculum(curriculum)
            .with_seed(6)
            .init(&backbone, d)
    })
}

/// A backbone whose heat map peaks on the brightest part of each image: its feature map is
/// `exp(6·x̄)` of the image average-pooled 4×4 (`x̄`), so only the cells within about 0.4 of the
/// brightest pass ContrastiveCrop's 10 % threshold; its features are a linear map of `x̄`.
#[derive(Module, Debug)]
struct Glimpse<B: Backend> {
    fc: burn::nn::Linear<B>,
}

impl<B: Backend> Glimpse<B> {
    fn new(device: &B::Device) -> Self {
        Self {
            fc: burn::nn::LinearConfig::new(49, 8).init(device),
        }
    }

    fn map(images: Tensor<B, 4>) -> Tensor<B, 4> {
        burn::tensor::module::avg_pool2d(images, [4, 4], [4, 4], [0, 0], true, false)
    }
}

impl<B: Backend> Backbone<B> for Glimpse<B> {
    fn forward_features(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        let map = Self::map(images);
        let [n, c, h, w] = map.dims();
        burn::tensor::activation::relu(self.fc.forward(map.reshape([n, c * h * w])))
    }
    fn feature_dim(&self) -> usize {
        8
    }
    fn forward_feature_map(&self, images: Tensor<B, 4>) -> Option<Tensor<B, 4>> {
        Some(Self::map(images).mul_scalar(6.0).exp())
    }
}

/// A crop-and-rotate run of `epochs` epochs of 4 steps (64 embedded images, batch 16),
/// checkpointed every epoch, on a LeNet.
fn crop_trainer(
    dir: &Path,
    mode: StartMode,
    epochs: usize,
    curriculum: RotationCurriculumConfig,
    seen: &CropSeen,
) -> CropTrainer<LeNet<Ad>> {
    crop_trainer_with(dir, mode, epochs, crop_rotnet(curriculum, lenet), seen)
}

fn crop_trainer_with<M>(
    dir: &Path,
    mode: StartMode,
    epochs: usize,
    rotnet: RotNet<Ad, M>,
    seen: &CropSeen,
) -> CropTrainer<M>
where
    M: TrainableBackbone<Ad>,
{
    let spy = CropSpy {
        inner: rotnet,
        boxes: None,
        seen: seen.clone(),
    };
    Trainer::builder(
        spy,
        SgdConfig::new().with_momentum(0.9).init::<Ad, _>().unwrap(),
        pipeline(None).init(1).unwrap(),
        loader(),
    )
    .config(
        TrainConfig::new()
            .with_epochs(epochs)
            .with_lr(0.05)
            .with_checkpoint_every(1)
            .with_progress_bar(false),
    )
    .hook(ObjectBoxesHook::new())
    .run_dir(dir)
    .start(mode)
    .build(&Dev::default())
    .unwrap()
}

fn curricula(dir: &Path, epoch: usize) -> CurriculumStates {
    let path = dir.join(format!("checkpoints/epoch-{epoch:04}/curricula.json"));
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// The boxes in use during the epoch before checkpoint `epoch`.
fn boxes_at(dir: &Path, epoch: usize) -> ObjectBoxes {
    curricula(dir, epoch)
        .object_boxes
        .expect("a crop-and-rotate checkpoint holds its boxes")
}

/// The boxes of the 64 training images computed here, independently of the trainer: all at
/// once (not in the loader's batches), from LeNet's feature map of the images normalised as
/// view1 is.
fn independent_boxes(backbone: &LeNet<Inner>) -> Vec<CropBox> {
    let data = data();
    let (h, w, c) = data.image_shape();
    let pixels: Vec<f32> = data
        .all_pixels()
        .iter()
        .map(|&p| p as f32 / 255.0)
        .collect();
    let x = Tensor::<Inner, 4>::from_data(
        TensorData::new(pixels, [data.len(), h, w, c]),
        &Default::default(),
    )
    .permute([0, 3, 1, 2]);
    let x = pipeline(None).view1.normalize.unwrap().apply(x);
    let map = backbone.forward_map(x);
    boxes_from_heatmap(channel_mean(map), [h, w], DEFAULT_BOX_THRESHOLD)
}

/// The backbone of a checkpoint, in inference mode.
fn checkpoint_backbone(dir: &Path, epoch: usize) -> LeNet<Inner> {
    use burn::module::AutodiffModule;
    let path = dir.join(format!("checkpoints/epoch-{epoch:04}"));
    let blank = curriculum_ssl::seed::init_module::<Ad, _>(&Dev::default(), 0, lenet);
    curriculum_ssl::train::load_backbone::<Ad, _>(&path, blank, &Dev::default())
        .unwrap()
        .valid()
}

fn host4(x: Tensor<Inner, 4>) -> Vec<f32> {
    x.into_data().to_vec().unwrap()
}

/// Crop-and-rotate in the training loop, all four angles from the start: before every forward
/// the method gets each image's box (the stored box of its dataset index mapped through each
/// view's crop and flip, recomputed here from the augmenter's geometry), and the batch it trains
/// on is each view rotated inside the square around its box and untouched outside it. (On
/// [`Glimpse`], whose heat maps outline the garments: an untrained LeNet's boxes cover nearly
/// the whole image.)
#[test]
fn crop_and_rotate_rotates_each_image_only_inside_its_boxs_square() {
    let seen: CropSeen = Arc::default();
    let dir = run_dir("crop-rotate-pixels");
    let rotnet = crop_rotnet(RotationCurriculumConfig::all_angles(), Glimpse::new);
    let mut t = crop_trainer_with(&dir, StartMode::Fresh, 2, rotnet, &seen);
    t.fit().unwrap();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 8);
    let augmenter = pipeline(None).init(1).unwrap();
    let (mut partial, mut turned) = (0, 0);
    for s in seen.iter() {
        let epoch = s.step / 4;
        // The boxes of the step's images, mapped into its views here.
        let stored = boxes_at(&dir, epoch + 1);
        assert_eq!(stored.epoch, epoch, "two epochs: boxes at epochs 0 and 1");
        let batch = loader()
            .epoch(epoch as u64)
            .nth(s.step % 4)
            .unwrap()
            .unwrap();
        let images = batch.to_device::<Inner>(&Default::default()).images;
        let views = augmenter.two_views_at(
            images,
            Progress {
                step: s.step,
                total_steps: 8,
                epoch,
                total_epochs: 2,
            },
        );
        let expected: Vec<CropBox> = views
            .geometry
            .iter()
            .flat_map(|g| {
                batch
                    .indices
                    .iter()
                    .zip(g)
                    .map(|(&i, g)| box_in_view(&stored.boxes[i], g))
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(s.boxes, expected, "step {}", s.step);
        // What the method rotated.
        let both = Tensor::cat(vec![s.views[0].clone(), s.views[1].clone()], 0);
        let before = host4(both.clone());
        let after = host4(s.rotated.clone());
        for (n, (b, &k)) in s.boxes.iter().zip(&s.labels).enumerate() {
            let sq = b.square_in([28, 28]);
            let (t0, l0, side) = (sq.top, sq.left, sq.height);
            for i in 0..28 {
                for j in 0..28 {
                    let inside = (t0..t0 + side).contains(&i) && (l0..l0 + side).contains(&j);
                    let at = (n * 28 + i) * 28 + j;
                    if !inside {
                        assert_eq!(
                            after[at], before[at],
                            "step {} image {n} ({i}, {j})",
                            s.step
                        );
                    }
                }
            }
            let crop = both
                .clone()
                .slice([n..n + 1, 0..1, t0..t0 + side, l0..l0 + side]);
            let got = s
                .rotated
                .clone()
                .slice([n..n + 1, 0..1, t0..t0 + side, l0..l0 + side]);
            assert_eq!(
                host4(got),
                host4(rot90(crop, k)),
                "step {} image {n}",
                s.step
            );
            partial += usize::from(side < 28);
            turned += usize::from(k != 0 && side > 1);
        }
    }
    // Not vacuous: some squares leave part of the view outside, and some are really turned.
    assert!(partial > 50, "{partial} partial squares of 256");
    assert!(turned > 50, "{turned} rotated squares of 256");
}

/// A 6-epoch run computes the boxes at the start of epochs 0, 1, 3 and 4 (each quarter), from
/// the backbone as it is then (checked against boxes computed here from the checkpoint before),
/// keeps them in every checkpoint with the epoch they were computed at, and times each
/// computation in epochs.csv. Stopped after 2 epochs and resumed, it trains epoch 2 with the
/// boxes of epoch 1 from the checkpoint (no recomputation) and writes the same rows.
#[test]
fn boxes_are_recomputed_each_quarter_and_kept_in_checkpoints() {
    let seen: CropSeen = Arc::default();
    let dir = run_dir("crop-rotate-quarters");
    let mut t = crop_trainer(
        &dir,
        StartMode::Fresh,
        6,
        RotationCurriculumConfig::new(),
        &seen,
    );
    t.fit().unwrap();
    let computed_at: Vec<usize> = (1..=6).map(|e| boxes_at(&dir, e).epoch).collect();
    assert_eq!(computed_at, [0, 1, 1, 3, 4, 4]);
    assert_eq!(
        t.hook::<ObjectBoxesHook>().unwrap().boxes(),
        Some(&boxes_at(&dir, 6))
    );
    // Each computation is the boxes of the backbone at the start of its epoch.
    let initial = {
        use burn::module::AutodiffModule;
        crop_rotnet(RotationCurriculumConfig::new(), lenet)
            .backbone()
            .valid()
    };
    let first = boxes_at(&dir, 1);
    assert_eq!(first.image_size, [28, 28]);
    assert_eq!(first.boxes, independent_boxes(&initial));
    // The trained network's heat maps narrow down (the untrained one's cover the images).
    assert!(
        boxes_at(&dir, 5)
            .boxes
            .iter()
            .filter(|b| **b != CropBox::whole([28, 28]))
            .count()
            > 5,
        "some boxes are smaller than the image"
    );
    for q in [1, 3, 4] {
        let boxes = boxes_at(&dir, q + 1);
        assert_eq!(
            boxes.boxes,
            independent_boxes(&checkpoint_backbone(&dir, q)),
            "epoch {q}"
        );
    }
    assert_ne!(
        first.boxes,
        boxes_at(&dir, 5).boxes,
        "training moves the boxes"
    );
    // Timed in epochs.csv: seconds in the epochs that computed, 0 in the others.
    let epochs = epoch_rows(&dir);
    let seconds: Vec<f64> = column(&epochs, "box_seconds")
        .iter()
        .map(|v| v.parse().unwrap())
        .collect();
    for (e, s) in seconds.iter().enumerate() {
        assert_eq!(*s > 0.0, [0, 1, 3, 4].contains(&e), "epoch {e}: {s}");
    }
    // Resumed after 2 epochs: the boxes of epoch 1 come from the checkpoint.
    let resumed = run_dir("crop-rotate-quarters-resumed");
    crop_trainer(
        &resumed,
        StartMode::Fresh,
        6,
        RotationCurriculumConfig::new(),
        &Arc::default(),
    )
    .fit_epochs(2)
    .unwrap();
    let mut r = crop_trainer(
        &resumed,
        StartMode::Resume,
        6,
        RotationCurriculumConfig::new(),
        &Arc::default(),
    );
    assert_eq!(
        r.hook::<ObjectBoxesHook>().unwrap().boxes(),
        Some(&boxes_at(&dir, 2))
    );
    r.fit().unwrap();
    assert_eq!(rows_without_speed(&resumed), rows_without_speed(&dir));
    let resumed_epochs = epoch_rows(&resumed);
    assert_eq!(column(&resumed_epochs, "box_seconds")[2], "0");
    for e in 1..=6 {
        assert_eq!(boxes_at(&resumed, e), boxes_at(&dir, e), "checkpoint {e}");
    }
}

/// The brief's resume check: 4 epochs straight, and 2 epochs + resume + 2 epochs, give the
/// same steps.csv rows (but the speed) and the same boxes in every checkpoint.
#[test]
fn a_crop_and_rotate_run_resumes_exactly() {
    let straight = run_dir("crop-rotate-straight");
    let curriculum = RotationCurriculumConfig::new;
    crop_trainer(
        &straight,
        StartMode::Fresh,
        4,
        curriculum(),
        &Arc::default(),
    )
    .fit()
    .unwrap();
    let resumed = run_dir("crop-rotate-resumed");
    crop_trainer(&resumed, StartMode::Fresh, 4, curriculum(), &Arc::default())
        .fit_epochs(2)
        .unwrap();
    let mut t = crop_trainer(
        &resumed,
        StartMode::Resume,
        4,
        curriculum(),
        &Arc::default(),
    );
    assert_eq!(t.epoch(), 2);
    t.fit().unwrap();
    let rows = rows_without_speed(&straight);
    assert_eq!(rows.len(), 17);
    assert!(rows[0].ends_with("rotation_angles"), "{}", rows[0]);
    assert_eq!(rows_without_speed(&resumed), rows);
    for e in 1..=4 {
        let boxes = boxes_at(&straight, e);
        assert_eq!(boxes.epoch, e - 1);
        assert_eq!(boxes_at(&resumed, e), boxes, "checkpoint {e}");
    }
}

/// A backbone without a feature map cannot run crop-and-rotate: the trainer refuses it before
/// any step, with an error naming the backbone, not a panic; other methods never ask for one.
#[test]
fn crop_and_rotate_needs_a_backbone_with_a_feature_map() {
    use burn::nn::{Linear, LinearConfig};
    /// A user's backbone that implements only the required methods.
    #[derive(Module, Debug)]
    struct Flat<B: Backend> {
        fc: Linear<B>,
    }
    impl<B: Backend> Backbone<B> for Flat<B> {
        fn forward_features(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
            let [n, c, h, w] = images.dims();
            self.fc.forward(images.reshape([n, c * h * w]))
        }
        fn feature_dim(&self) -> usize {
            8
        }
    }
    let build = |mode: RotationMode| {
        let method = init(|d| {
            RotNetConfig::new().with_mode(mode).init(
                |d| Flat {
                    fc: LinearConfig::new(28 * 28, 8).init(d),
                },
                d,
            )
        });
        let builder = Trainer::builder(
            method,
            SgdConfig::new().init::<Ad, _>().unwrap(),
            pipeline(None).init(1).unwrap(),
            loader(),
        )
        .config(TrainConfig::new().with_epochs(1).with_progress_bar(false))
        .run_dir(run_dir(&format!("crop-rotate-flat-{mode:?}")));
        match mode {
            RotationMode::CropAndRotate => builder.hook(ObjectBoxesHook::new()),
            _ => builder,
        }
        .build(&Dev::default())
    };
    let err = match build(RotationMode::CropAndRotate) {
        Ok(_) => panic!("a backbone without a feature map was accepted"),
        Err(e) => e,
    };
    assert!(err.is_input_error());
    let text = err.to_string();
    assert!(
        text.contains("backbone") && text.contains("forward_feature_map"),
        "{text}"
    );
    // Plain rotation trains with it.
    build(RotationMode::Rotate).unwrap().fit().unwrap();
    // Crop-and-rotate without a hook that provides the boxes is refused, naming the hook.
    let method = init(|d| {
        RotNetConfig::new()
            .with_mode(RotationMode::CropAndRotate)
            .init(lenet, d)
    });
    let err = match Trainer::builder(
        method,
        SgdConfig::new().init::<Ad, _>().unwrap(),
        pipeline(None).init(1).unwrap(),
        loader(),
    )
    .config(TrainConfig::new().with_epochs(1).with_progress_bar(false))
    .run_dir(run_dir("crop-rotate-no-hook"))
    .build(&Dev::default())
    {
        Ok(_) => panic!("crop-and-rotate without object boxes was accepted"),
        Err(e) => e,
    };
    assert!(err.is_input_error());
    assert!(err.to_string().contains("ObjectBoxesHook"), "{err}");
}

/// A curricula.json of checkpoint layout 3 (before the boxes) reads as a state without boxes.
#[test]
fn curriculum_states_of_layout_3_read_without_boxes() {
    let v3 = r#"{"augmenter": {"auto_augment": null}, "curation": null}"#;
    let states: CurriculumStates = serde_json::from_str(v3).unwrap();
    assert_eq!(states.object_boxes, None);
    assert_eq!(states, CurriculumStates::default());
}

/// A hook of this test that selects, at every epoch, the even examples of the first 40 (its own
/// rule), and records the indices of every batch the loop trains on.
struct EvenFirstForty {
    seen: Arc<Mutex<Vec<Vec<usize>>>>,
}

impl<K: curriculum_ssl::train::SelfSupervisedTask<Ad>> curriculum_ssl::train::Hook<Ad, K>
    for EvenFirstForty
{
    fn name(&self) -> &'static str {
        "even_first_forty"
    }

    fn epoch_start(
        &mut self,
        run: &mut curriculum_ssl::train::RunView<'_, Ad, K>,
        _: usize,
    ) -> Result<(), curriculum_ssl::train::TrainError> {
        run.select((0..40).step_by(2).collect())
    }

    fn before_forward(
        &mut self,
        _: &mut curriculum_ssl::train::RunView<'_, Ad, K>,
        batch: &mut curriculum_ssl::train::BatchView<'_, K::Inputs>,
    ) {
        self.seen.lock().unwrap().push(batch.indices.to_vec());
    }
}

/// A hook's selection of examples steers a self-supervised run too: every batch of two epochs
/// comes from the 20 selected examples, each epoch still takes its 4 steps (the pool of 20 is
/// reshuffled when used up: 64 draws = 3 rounds and 4 more), and the two epochs draw different
/// orders. A selection naming an example the data lack is refused before the epoch's first step.
#[test]
fn a_hook_selects_the_examples_of_a_self_supervised_epoch() {
    let seen: Arc<Mutex<Vec<Vec<usize>>>> = Arc::default();
    let method = init(|d| {
        SimSiamConfig::new()
            .with_dim(16)
            .with_predictor_dim(8)
            .init(lenet, d)
    });
    let mut trainer = Trainer::builder(
        method,
        SgdConfig::new().init::<Ad, _>().unwrap(),
        pipeline(None).init(1).unwrap(),
        loader(),
    )
    .config(TrainConfig::new().with_epochs(2).with_progress_bar(false))
    .run_dir(run_dir("selected-ssl"))
    .hook(EvenFirstForty { seen: seen.clone() })
    .build(&Dev::default())
    .unwrap();
    let summary = trainer.fit().unwrap();
    assert_eq!(summary.steps.len(), 8);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 8);
    for batch in &seen {
        assert_eq!(batch.len(), 16);
        assert!(batch.iter().all(|&i| i < 40 && i % 2 == 0), "{batch:?}");
    }
    // The first 20 draws of an epoch are one round: every selected example once.
    let mut first_round: Vec<usize> = seen[0].iter().chain(&seen[1][..4]).copied().collect();
    first_round.sort_unstable();
    assert_eq!(first_round, (0..40).step_by(2).collect::<Vec<_>>());
    assert_ne!(seen[0], seen[4], "each epoch has its own order");

    struct Outside;
    impl<K: curriculum_ssl::train::SelfSupervisedTask<Ad>> curriculum_ssl::train::Hook<Ad, K>
        for Outside
    {
        fn name(&self) -> &'static str {
            "outside"
        }
        fn epoch_start(
            &mut self,
            run: &mut curriculum_ssl::train::RunView<'_, Ad, K>,
            _: usize,
        ) -> Result<(), curriculum_ssl::train::TrainError> {
            run.select(vec![3, 64])
        }
    }
    let method = init(|d| {
        SimSiamConfig::new()
            .with_dim(16)
            .with_predictor_dim(8)
            .init(lenet, d)
    });
    let err = Trainer::builder(
        method,
        SgdConfig::new().init::<Ad, _>().unwrap(),
        pipeline(None).init(1).unwrap(),
        loader(),
    )
    .config(TrainConfig::new().with_epochs(1).with_progress_bar(false))
    .run_dir(run_dir("selected-outside"))
    .hook(Outside)
    .build(&Dev::default())
    .unwrap()
    .fit()
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("outside") && err.contains("outside the 64 training examples"),
        "{err}"
    );
}

/// A hook of this test that changes the batch (the second view becomes the first, flipped
/// upside down) and asks for a checkpoint after the first epoch.
struct FlipSecondView;

impl<K: curriculum_ssl::train::SelfSupervisedTask<Ad>> curriculum_ssl::train::Hook<Ad, K>
    for FlipSecondView
{
    fn name(&self) -> &'static str {
        "flip_second_view"
    }

    fn before_forward(
        &mut self,
        _: &mut curriculum_ssl::train::RunView<'_, Ad, K>,
        batch: &mut curriculum_ssl::train::BatchView<'_, K::Inputs>,
    ) {
        batch.inputs.view2 = batch.inputs.view1.clone().flip([2]);
    }

    fn epoch_end(
        &mut self,
        _: &mut curriculum_ssl::train::RunView<'_, Ad, K>,
        epoch: usize,
        _: bool,
    ) -> Result<curriculum_ssl::train::EpochReport, curriculum_ssl::train::TrainError> {
        Ok(curriculum_ssl::train::EpochReport {
            checkpoint: epoch == 0,
            ..Default::default()
        })
    }
}

/// A hook changes the batch the forward pass sees: at every step the method receives, as its
/// second view, its first view flipped vertically (checked pixel by pixel against the first
/// view the method received). A hook's request for a checkpoint is honoured: a 3-epoch run with
/// `checkpoint_every = 0` keeps the checkpoint after epoch 1 (asked) and after epoch 3 (the end),
/// and no other.
#[test]
fn a_hook_changes_the_batch_and_asks_for_a_checkpoint() {
    let seen: Seen = Arc::default();
    let spy = Spy {
        inner: init(|d| {
            SimSiamConfig::new()
                .with_dim(16)
                .with_predictor_dim(8)
                .init(lenet, d)
        }),
        seen: seen.clone(),
    };
    let dir = run_dir("hook-changes-batch");
    let mut trainer = Trainer::builder(
        spy,
        SgdConfig::new().init::<Ad, _>().unwrap(),
        pipeline(None).init(1).unwrap(),
        loader(),
    )
    .config(
        TrainConfig::new()
            .with_epochs(3)
            .with_checkpoint_every(0)
            .with_progress_bar(false),
    )
    .run_dir(&dir)
    .hook(FlipSecondView)
    .build(&Dev::default())
    .unwrap();
    trainer.fit().unwrap();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 12);
    let (h, w) = (28, 28);
    for (step, v1, v2) in seen.iter() {
        let n = v1.len() / (h * w);
        for image in 0..n {
            for y in 0..h {
                for x in 0..w {
                    let a = v1[image * h * w + y * w + x];
                    let b = v2[image * h * w + (h - 1 - y) * w + x];
                    assert_eq!(a, b, "step {step}, image {image}, ({y}, {x})");
                }
            }
        }
    }
    let mut kept: Vec<String> = std::fs::read_dir(dir.join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("epoch-"))
        .collect();
    kept.sort();
    assert_eq!(kept, ["epoch-0001", "epoch-0003"]);
}

/// Runs `method` for two epochs of one step with every curriculum piece that works on two
/// views: MICO's curriculum Mixup (λ per step), the strength curriculum (×2 on a 2-step
/// schedule), Fréchet batch curation (one warm-up epoch, so the second step is curated, one
/// redraw at most) and the kNN monitor; returns the run's steps.csv rows.
fn with_every_piece<S: SslMethod<Ad>>(name: &str, method: S) -> Vec<String> {
    use curriculum_ssl::curation::FrechetCurationConfig;
    use curriculum_ssl::curriculum::StrengthCurriculumConfig;
    use curriculum_ssl::eval::KnnMonitor;
    use curriculum_ssl::hooks::KnnHook;
    let device = Dev::default();
    let mut p = pipeline(Some(per_step_mico()));
    p.strength_curriculum = Some(StrengthCurriculumConfig {
        target: 2.0,
        schedule: Some(SchedulerConfig::Steps {
            values: vec![0.5, 1.0],
            pace: Pace::Epoch,
        }),
    });
    let images = data();
    let monitor = KnnMonitor::new(
        images.select(&(0..32).collect::<Vec<_>>()).unwrap(),
        images.select(&(32..48).collect::<Vec<_>>()).unwrap(),
        p.view1.normalize.clone(),
    )
    .unwrap();
    let loader = Loader::new(
        images.select(&(0..16).collect::<Vec<_>>()).unwrap(),
        "embedded",
        LoaderConfig {
            batch_size: 16,
            seed: 2,
            workers: 1,
            ..LoaderConfig::default()
        },
    )
    .unwrap();
    let dir = run_dir(name);
    let mut trainer = Trainer::builder(
        method,
        SgdConfig::new().init::<Ad, S::Online>().unwrap(),
        p.init(1).unwrap(),
        loader,
    )
    .config(
        TrainConfig::new()
            .with_epochs(2)
            .with_lr(0.05)
            .with_progress_bar(false),
    )
    .hook(
        FrechetCurationHook::new(
            FrechetCurationConfig::new()
                .with_warmup_epochs(1)
                .with_max_retries(1),
        )
        .unwrap(),
    )
    .hook(KnnHook::new(monitor, 5))
    .run_dir(&dir)
    .build(&device)
    .unwrap();
    let summary = trainer.fit().unwrap();
    assert_eq!(summary.steps.len(), 2, "{name}");
    assert!(
        summary.steps.iter().all(|s| s.loss.is_finite()),
        "{name}: {:?}",
        summary.steps
    );
    // The monitor scored the trained backbone after the last epoch (16 queries: any accuracy).
    let (epoch, knn) = trainer.hook::<KnnHook>().unwrap().last().unwrap();
    assert_eq!(epoch, 1, "{name}");
    assert!((0.0..=1.0).contains(&knn[0].accuracy.top1), "{name}");
    let rows = rows_without_speed(&dir);
    for knob in ["mixup_lambda", "strength", "frd"] {
        assert!(rows[0].split(',').any(|c| c == knob), "{name}: {}", rows[0]);
    }
    rows
}

/// The method table's two-view methods with every curriculum and selection piece, two steps
/// each: Barlow Twins, VICReg and VIbCReg (their three terms logged), W-MSE, FroSSL (its two), SimCLR with DCL, with
/// DCLW and with MACL (its temperature logged), DirectCLR (its sub-vector's norm logged), LeJEPA
/// (its two terms), MMCR (its momentum), SwAV and DINO on their two global views (their multi-crop runs in tests/data_parallel.rs and the
/// CLI tests), NNCLR, NNSiam, NNBYOL (its momentum logged), ReSSL, TiCo and MoCo v3.
#[test]
fn the_new_two_view_methods_run_with_every_curriculum_and_selection_piece() {
    use curriculum_ssl::loss::{BarlowTwinsLossConfig, DclLossConfig, WmseLossConfig};
    let bt = init(|d| {
        BarlowTwinsConfig::new()
            .with_hidden_dim(32)
            .with_output_dim(16)
            .with_loss(BarlowTwinsLossConfig::new())
            .init(lenet, d)
    });
    with_every_piece("barlow_twins", bt);
    let vicreg = init(|d| {
        VicRegConfig::new()
            .with_hidden_dim(32)
            .with_output_dim(16)
            .init(lenet, d)
    });
    let rows = with_every_piece("vicreg", vicreg);
    for term in ["vicreg_invariance", "vicreg_variance", "vicreg_covariance"] {
        assert!(rows[0].split(',').any(|c| c == term), "{}", rows[0]);
    }
    let vibcreg = init(|d| {
        VibcRegConfig::new()
            .with_hidden_dim(32)
            .with_output_dim(16)
            .with_whitening_groups(4)
            .init(lenet, d)
    });
    let rows = with_every_piece("vibcreg", vibcreg);
    for term in [
        "vibcreg_invariance",
        "vibcreg_variance",
        "vibcreg_covariance",
    ] {
        assert!(rows[0].split(',').any(|c| c == term), "{}", rows[0]);
    }
    let wmse = init(|d| {
        WmseConfig::new()
            .with_hidden_dim(32)
            .with_output_dim(4)
            .with_loss(WmseLossConfig::new().with_w_size(8))
            .init(lenet, d)
    });
    with_every_piece("wmse", wmse);
    for (name, loss) in [
        ("dcl", DclLossConfig::new()),
        ("dclw", DclLossConfig::weighted(0.5)),
    ] {
        let simclr = init(|d| {
            SimClrConfig::new()
                .with_hidden_dim(32)
                .with_output_dim(16)
                .with_loss(PairLossConfig::Dcl(loss))
                .init(lenet, d)
        });
        with_every_piece(name, simclr);
    }
    let frossl = init(|d| {
        FroSslConfig::new()
            .with_hidden_dim(32)
            .with_output_dim(16)
            .init(lenet, d)
    });
    let rows = with_every_piece("frossl", frossl);
    assert!(
        rows[0].split(',').any(|c| c == "frossl_invariance"),
        "{}",
        rows[0]
    );
    let macl = init(|d| {
        SimClrConfig::new()
            .with_hidden_dim(32)
            .with_output_dim(16)
            .with_loss(PairLossConfig::Macl(
                curriculum_ssl::loss::MaclLossConfig::new(),
            ))
            .init(lenet, d)
    });
    let rows = with_every_piece("macl", macl);
    assert!(
        rows[0].split(',').any(|c| c == "macl_temperature"),
        "{}",
        rows[0]
    );
    let directclr = init(|d| {
        DirectClrConfig::new()
            .with_loss(curriculum_ssl::loss::DirectClrLossConfig::new().with_loss_dim(16))
            .init(lenet, d)
    });
    let rows = with_every_piece("directclr", directclr);
    assert!(
        rows[0].split(',').any(|c| c == "directclr_norm"),
        "{}",
        rows[0]
    );
    let lejepa = init(|d| {
        LeJepaConfig::new()
            .with_hidden_dim(32)
            .with_output_dim(16)
            .init(lenet, d)
    });
    let rows = with_every_piece("lejepa", lejepa);
    assert!(
        rows[0].split(',').any(|c| c == "lejepa_sigreg"),
        "{}",
        rows[0]
    );
    let emp_ssl = init(|d| {
        EmpSslConfig::new()
            .with_hidden_dim(32)
            .with_output_dim(16)
            .init(lenet, d)
    });
    let rows = with_every_piece("emp_ssl", emp_ssl);
    assert!(
        rows[0].split(',').any(|c| c == "emp_ssl_coding_rate"),
        "{}",
        rows[0]
    );
    let mmcr = init(|d| {
        MmcrConfig::new()
            .with_hidden_dim(32)
            .with_output_dim(16)
            .init(lenet, d)
    });
    let rows = with_every_piece("mmcr", mmcr);
    assert!(rows[0].split(',').any(|c| c == "momentum"), "{}", rows[0]);
    let swav = init(|d| {
        SwavConfig::new()
            .with_hidden_dim(32)
            .with_output_dim(16)
            .with_num_prototypes(20)
            .init(lenet, d)
    });
    let rows = with_every_piece("swav", swav);
    assert!(
        rows[0].split(',').any(|c| c == "prototypes_frozen"),
        "{}",
        rows[0]
    );
    let dino = init(|d| {
        DinoConfig::new()
            .with_hidden_dim(32)
            .with_bottleneck_dim(8)
            .with_output_dim(20)
            .init(lenet, d)
    });
    let rows = with_every_piece("dino", dino);
    assert!(
        rows[0].split(',').any(|c| c == "teacher_temp"),
        "{}",
        rows[0]
    );
    let nnclr = init(|d| {
        NnClrConfig::new()
            .with_hidden_dim(32)
            .with_output_dim(16)
            .with_predictor_hidden_dim(32)
            .with_support_set_size(64)
            .init(lenet, 16, d)
    });
    with_every_piece("nnclr", nnclr);
    let nnsiam = init(|d| {
        NnSiamConfig::new()
            .with_simsiam(SimSiamConfig::new().with_dim(16).with_predictor_dim(8))
            .with_support_set_size(64)
            .init(lenet, 16, d)
    });
    with_every_piece("nnsiam", nnsiam);
    let nnbyol = init(|d| {
        NnByolConfig::new()
            .with_byol(ByolConfig::new().with_hidden_dim(32).with_output_dim(16))
            .with_support_set_size(64)
            .init(lenet, 16, d)
    });
    let rows = with_every_piece("nnbyol", nnbyol);
    assert!(rows[0].split(',').any(|c| c == "momentum"), "{}", rows[0]);
    let ressl = init(|d| {
        ReSslConfig::new()
            .with_hidden_dim(32)
            .with_output_dim(16)
            .with_queue_size(64)
            .init(lenet, 16, d)
    });
    with_every_piece("ressl", ressl);
    let tico = init(|d| {
        TicoConfig::new()
            .with_hidden_dim(32)
            .with_output_dim(16)
            .init(lenet, d)
    });
    with_every_piece("tico", tico);
    let moco_v3 = init(|d| {
        MocoV3Config::new()
            .with_hidden_dim(32)
            .with_output_dim(16)
            .init(lenet, d)
    });
    with_every_piece("moco_v3", moco_v3);
}

/// VISReg with every curriculum and selection piece, two steps, its four terms logged.
#[test]
fn visreg_runs_with_every_curriculum_and_selection_piece() {
    let visreg = init(|d| {
        VisRegConfig::new()
            .with_hidden_dim(32)
            .with_output_dim(16)
            .init(lenet, d)
    });
    let rows = with_every_piece("visreg", visreg);
    for term in [
        "visreg_invariance",
        "visreg_scale",
        "visreg_shape",
        "visreg_center",
    ] {
        assert!(rows[0].split(',').any(|c| c == term), "{term}: {}", rows[0]);
    }
}

/// All4One (its default dropout 0.1, drawn in the trainer's seeded forward) with every
/// curriculum and selection piece, two steps, its three terms and the momentum logged.
#[test]
fn all4one_runs_with_every_curriculum_and_selection_piece() {
    let all4one = init(|d| {
        All4OneConfig::new()
            .with_hidden_dim(32)
            .with_output_dim(16)
            .with_predictor_hidden_dim(32)
            .with_support_set_size(64)
            .init(lenet, 16, d)
    });
    let rows = with_every_piece("all4one", all4one);
    for column in [
        "centroid_loss",
        "neighbour_loss",
        "feature_loss",
        "momentum",
    ] {
        assert!(
            rows[0].split(',').any(|c| c == column),
            "{column}: {}",
            rows[0]
        );
    }
}

/// A pipeline with local crops and a method whose loss takes two views: refused before any step,
/// naming the setting.
#[test]
fn local_crops_are_refused_for_a_two_view_method() {
    let mut p = PipelineConfig::multi_crop(Preset::SimClr, 28, 1, 2, (0.5, 1.0), (0.2, 0.5));
    p.seed = 3;
    let simclr = init(|d| {
        SimClrConfig::new()
            .with_hidden_dim(32)
            .with_output_dim(16)
            .init(lenet, d)
    });
    let err = match Trainer::builder(
        simclr,
        SgdConfig::new().init::<Ad, _>().unwrap(),
        p.clone().init(1).unwrap(),
        loader(),
    )
    .config(TrainConfig::new().with_epochs(1).with_progress_bar(false))
    .run_dir(run_dir("local-crops-simclr"))
    .build(&Dev::default())
    {
        Ok(_) => panic!("local crops for SimCLR were accepted"),
        Err(e) => e,
    };
    assert!(err.is_input_error());
    assert!(err.to_string().contains("local_crops"), "{err}");
    assert!(err.to_string().contains("2 local crops"), "{err}");
}
