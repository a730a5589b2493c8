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

/// The rows of steps.csv (without the speed column) of a 4-epoch SimSiam run straight, and of
/// the same run stopped after 2 epochs and resumed.
fn straight_and_resumed(name: &str, augmentation: PipelineConfig) -> (Vec<String>, Vec<String>) {
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
            augmentation.clone().init(1).unwrap(),
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
    let (a, b) = straight_and_resumed("auto-augment", p);
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
    // SPEC's worked geometry: z1 = u(0°, 90°, 200°), z2 = u(30°, 100°, 180°), τ = 0.5.
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
    SimClrLeNet,
    burn::optim::adaptor::OptimizerAdaptor<
        curriculum_ssl::optim::sgd::Sgd,
        curriculum_ssl::method::simclr::SimClrNetwork<Ad, LeNet<Ad>>,
        Ad,
    >,
    ImageArray,
>;

/// SimCLR runs of 3 epochs, 4 steps each, with Fréchet batch curation (two warm-up epochs:
/// epochs 0 and 1 train on everything, epoch 1 sets the threshold) and at most 2 redraws.
fn curated(dir: &Path, mode: StartMode, curation: bool) -> CuratedTrainer {
    use curriculum_ssl::curation::FrechetCurationConfig;
    let device = Dev::default();
    let method = init(|d| {
        SimClrConfig::new()
            .with_hidden_dim(32)
            .with_output_dim(8)
            .init(lenet(d), d)
    });
    Trainer::builder(
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
            .with_knn_every(0)
            .with_progress_bar(false)
            .with_curation(curation.then(|| {
                FrechetCurationConfig::new()
                    .with_warmup_epochs(2)
                    .with_max_retries(2)
            })),
    )
    .run_dir(dir)
    .start(mode)
    .build(&device)
    .unwrap()
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
    let state = t.curation().unwrap().state().clone();
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
    let epochs: Vec<String> = std::fs::read_to_string(straight.join("epochs.csv"))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
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
    assert_eq!(t.curation().unwrap().state().calibration_batches, 4);
    t.fit().unwrap();
    assert_eq!(rows_without_speed(&resumed), rows);
    assert_eq!(t.curation().unwrap().state(), &state);
}
