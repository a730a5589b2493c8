//! What protects a run: run-directory rules (a directory without `latest` is still a run, a
//! foreign directory is refused before any work), the settings recorded in every checkpoint,
//! checksums with fallback to the previous checkpoint, `latest` never followed outside the run,
//! other architectures refused without a panic, `extend`, and determinism when trainings run on
//! several threads of one process. The cases and the tests that hold them are listed in
//! `docs/reliability.md`.

use std::path::{Path, PathBuf};

use burn::backend::{Autodiff, Flex};
use burn::optim::adaptor::OptimizerAdaptor;
use burn::prelude::*;
use curriculum_ssl::data::{embedded, ImageArray, Loader, LoaderConfig};
use curriculum_ssl::method::{init_method, SimClr, SimClrConfig, SslMethod};
use curriculum_ssl::optim::{Sgd, SgdConfig};
use curriculum_ssl::pipeline::{Augmenter, PipelineConfig};
use curriculum_ssl::train::checkpoint::{files, read_meta, verify};
use curriculum_ssl::train::{
    load_backbone, RunRecord, SelfSupervised, StartMode, TrainConfig, TrainError, Trainer,
};
use curriculum_ssl_models::{LeNet, LeNetConfig};

type Ad = Autodiff<Flex>;
type Dev = <Ad as burn::tensor::backend::BackendTypes>::Device;
type Method = SimClr<Ad, LeNet<Ad>>;
type Online = <Method as SslMethod<Ad>>::Online;
type Run = Trainer<Ad, SelfSupervised<Ad, Method, OptimizerAdaptor<Sgd, Online, Ad>, ImageArray>>;

fn run_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir()
        .join("curriculum-ssl-reliability")
        .join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn data() -> ImageArray {
    let train = embedded::train().unwrap();
    train.select(&(0..64).collect::<Vec<_>>()).unwrap()
}

fn method(device: &Dev, width: usize) -> Method {
    init_method::<Ad, _, _>(device, 11, |d| {
        SimClrConfig::new()
            .with_hidden_dim(32)
            .with_output_dim(16)
            .init(LeNetConfig::lenet5().with_embedding_dim(width).init(d), d)
    })
    .unwrap()
}

struct Setup {
    epochs: usize,
    lr: f64,
    batch: usize,
    width: usize,
    describe: bool,
}

impl Default for Setup {
    fn default() -> Self {
        Self {
            epochs: 2,
            lr: 0.05,
            batch: 32,
            width: 84,
            describe: true,
        }
    }
}

fn trainer(dir: &Path, mode: StartMode, s: Setup) -> Result<Run, TrainError> {
    let device = Dev::default();
    let mut pipeline = PipelineConfig::simclr(28, 1);
    pipeline.seed = 3;
    let augmenter: Augmenter = pipeline.init(1).unwrap();
    let loader = Loader::new(
        data(),
        "embedded",
        LoaderConfig {
            batch_size: s.batch,
            seed: 5,
            workers: 1,
            ..LoaderConfig::default()
        },
    )
    .unwrap();
    let optimizer = SgdConfig::new().init::<Ad, _>().unwrap();
    let mut builder = Trainer::builder(method(&device, s.width), optimizer, augmenter, loader)
        .config(
            TrainConfig::new()
                .with_epochs(s.epochs)
                .with_lr(s.lr)
                .with_checkpoint_every(1)
                .with_progress_bar(false),
        )
        .run_dir(dir)
        .start(mode);
    if s.describe {
        builder =
            builder.describe(&serde_json::json!({ "backbone": format!("lenet-{}", s.width) }));
    }
    builder.build(&device)
}

fn losses(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("steps.csv"))
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(2).unwrap().to_string())
        .collect()
}

fn lrs(dir: &Path) -> Vec<f64> {
    std::fs::read_to_string(dir.join("steps.csv"))
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(3).unwrap().parse().unwrap())
        .collect()
}

/// A finished two-epoch run with checkpoints after epochs 1 and 2.
fn finished_run(name: &str) -> PathBuf {
    let dir = run_dir(name);
    trainer(&dir, StartMode::Fresh, Setup::default())
        .unwrap()
        .fit()
        .unwrap();
    dir
}

fn flip_byte_in_the_middle(path: &Path) {
    let mut bytes = std::fs::read(path).unwrap();
    let i = bytes.len() / 2;
    bytes[i] ^= 0x40;
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn a_run_without_latest_is_still_a_run_and_resumes_from_its_newest_checkpoint() {
    let dir = finished_run("no-latest");
    std::fs::remove_file(dir.join("checkpoints/latest")).unwrap();
    let config_before = std::fs::read(dir.join("config.json")).unwrap();
    let err = trainer(&dir, StartMode::Fresh, Setup::default())
        .err()
        .expect("a fresh start is refused");
    assert!(err.to_string().contains("already holds a run"), "{err}");
    assert_eq!(
        std::fs::read(dir.join("config.json")).unwrap(),
        config_before
    );
    let t = trainer(&dir, StartMode::Resume, Setup::default()).unwrap();
    assert!(t.resumed_from().unwrap().ends_with("epoch-0002"));
    assert_eq!((t.epoch(), t.step()), (2, 4));
}

#[test]
fn a_foreign_directory_is_refused_before_anything_is_written() {
    let dir = run_dir("foreign");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.json"), b"{\"mine\": true}").unwrap();
    std::fs::write(dir.join("epochs.csv"), b"a,b\n1,2\n").unwrap();
    for mode in [StartMode::Fresh, StartMode::Resume] {
        let err = trainer(&dir, mode, Setup::default())
            .err()
            .expect("refused");
        let text = err.to_string();
        assert!(text.contains("not a run directory"), "{text}");
        assert!(
            text.contains("config.json") && text.contains("epochs.csv"),
            "{text}"
        );
        assert!(err.is_input_error());
    }
    assert_eq!(
        std::fs::read(dir.join("config.json")).unwrap(),
        b"{\"mine\": true}"
    );
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["config.json", "epochs.csv"], "nothing was added");
    // A path that is a file is not a run directory either.
    let file = dir.join("epochs.csv");
    let err = trainer(&file, StartMode::Fresh, Setup::default())
        .err()
        .unwrap();
    assert!(err.to_string().contains("not a directory"), "{err}");
}

#[test]
fn a_resume_without_config_json_recovers_the_settings_from_the_checkpoint() {
    let dir = finished_run("no-config");
    std::fs::remove_file(dir.join("config.json")).unwrap();
    let err = trainer(
        &dir,
        StartMode::Resume,
        Setup {
            lr: 0.2,
            ..Setup::default()
        },
    )
    .err()
    .expect("other settings are refused");
    match &err {
        TrainError::Mismatch { differences, .. } => {
            assert_eq!(differences.len(), 1, "{differences:?}");
            assert_eq!(differences[0].to_string(), "train.lr: run 0.05, given 0.2");
        }
        other => panic!("expected a mismatch, got {other}"),
    }
    let t = trainer(&dir, StartMode::Resume, Setup::default()).unwrap();
    assert_eq!(t.epoch(), 2);
    let record: RunRecord = RunRecord::read(&dir).expect("config.json rewritten");
    assert_eq!(record.train.lr, 0.05);
}

#[test]
fn resume_mismatches_name_each_setting_and_allow_the_harmless_ones() {
    let dir = finished_run("mismatch");
    let err = trainer(
        &dir,
        StartMode::Resume,
        Setup {
            batch: 16,
            width: 50,
            ..Setup::default()
        },
    )
    .err()
    .unwrap();
    let text = err.to_string();
    assert!(
        text.contains("loader.batch_size: run 32, given 16"),
        "{text}"
    );
    assert!(
        text.contains("run.backbone: run \"lenet-84\", given \"lenet-50\""),
        "{text}"
    );
    assert_eq!(text.matches("loader.batch_size").count(), 1, "{text}");
    // Another architecture in a run that does not describe its backbone: refused by the shapes
    // recorded in the checkpoint, without a panic inside burn.
    let bare = run_dir("mismatch-bare");
    let plain = || Setup {
        describe: false,
        ..Setup::default()
    };
    trainer(&bare, StartMode::Fresh, plain())
        .unwrap()
        .fit()
        .unwrap();
    let err = trainer(
        &bare,
        StartMode::Resume,
        Setup {
            width: 50,
            ..plain()
        },
    )
    .err()
    .unwrap();
    let text = err.to_string();
    assert!(
        text.contains("online.mpk") && text.contains("another architecture"),
        "{text}"
    );
    // More epochs need `extend`.
    let err = trainer(
        &dir,
        StartMode::Resume,
        Setup {
            epochs: 3,
            ..Setup::default()
        },
    )
    .err()
    .unwrap();
    assert!(
        err.to_string().contains("train.epochs: run 2, given 3"),
        "{err}"
    );
}

#[test]
fn a_checkpoint_of_another_architecture_is_refused_without_a_panic() {
    let dir = finished_run("shapes");
    let device = Dev::default();
    let wide = curriculum_ssl::seed::init_module::<Ad, _>(&device, 0, |d| {
        LeNetConfig::lenet5().with_embedding_dim(50).init(d)
    });
    let err = load_backbone::<Ad, _>(&dir, wide, &device).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("backbone.mpk"), "{text}");
    assert!(text.contains("another architecture"), "{text}");
}

#[test]
fn damaged_files_are_named_and_resume_falls_back_to_the_previous_checkpoint() {
    let dir = finished_run("damaged");
    let newest = dir.join("checkpoints/epoch-0002");
    flip_byte_in_the_middle(&newest.join("method.mpk"));
    let err = verify(&newest, &read_meta(&newest).unwrap()).unwrap_err();
    assert!(err.to_string().contains("method.mpk"), "{err}");
    assert!(err.to_string().contains("damaged"), "{err}");
    let t = trainer(&dir, StartMode::Resume, Setup::default()).unwrap();
    assert!(t.resumed_from().unwrap().ends_with("epoch-0001"));
    assert_eq!(t.step(), 2);
    // Evaluation of the damaged checkpoint, named explicitly, is refused naming the file.
    flip_byte_in_the_middle(&newest.join("backbone.mpk"));
    let device = Dev::default();
    let fresh =
        curriculum_ssl::seed::init_module::<Ad, _>(&device, 0, |d| LeNetConfig::lenet5().init(d));
    let err = load_backbone::<Ad, _>(&newest, fresh, &device).unwrap_err();
    assert!(err.to_string().contains("damaged"), "{err}");
    // With every checkpoint damaged, each is named.
    flip_byte_in_the_middle(&dir.join("checkpoints/epoch-0001/optimizer.mpk"));
    let err = trainer(&dir, StartMode::Resume, Setup::default())
        .err()
        .unwrap();
    let text = err.to_string();
    assert!(text.contains("every checkpoint is damaged"), "{text}");
    assert!(text.contains("epoch-0001/optimizer.mpk"), "{text}");
}

#[test]
fn latest_pointing_outside_the_run_is_not_followed() {
    let dir = finished_run("outside");
    std::fs::write(dir.join("checkpoints/latest"), "../../x").unwrap();
    let err = trainer(&dir, StartMode::Resume, Setup::default())
        .err()
        .unwrap();
    let text = err.to_string();
    assert!(
        text.contains("../../x") && text.contains("not followed"),
        "{text}"
    );
    let device = Dev::default();
    let fresh =
        curriculum_ssl::seed::init_module::<Ad, _>(&device, 0, |d| LeNetConfig::lenet5().init(d));
    assert!(load_backbone::<Ad, _>(&dir, fresh, &device).is_err());
}

#[test]
fn extend_makes_a_finished_run_longer_and_replans_the_learning_rate() {
    let dir = finished_run("extend");
    let before = lrs(&dir);
    let err = trainer(&dir, StartMode::Extend, Setup::default())
        .err()
        .expect("extending needs more epochs");
    assert!(err.to_string().contains("more epochs"), "{err}");
    let mut t = trainer(
        &dir,
        StartMode::Extend,
        Setup {
            epochs: 4,
            ..Setup::default()
        },
    )
    .unwrap();
    assert_eq!(t.record().extensions.len(), 1);
    let summary = t.fit().unwrap();
    assert_eq!(summary.steps.len(), 4);
    let after = lrs(&dir);
    assert_eq!(
        &after[..4],
        &before[..],
        "the steps done keep their learning rates"
    );
    // From step 4 on, the plan of an 8-step run: 0.05 · ½(1 + cos(π s / 8)).
    for (s, lr) in after.iter().enumerate().skip(4) {
        let by_hand = 0.025 * (1.0 + (std::f64::consts::PI * s as f64 / 8.0).cos());
        assert!((lr - by_hand).abs() < 1e-12, "step {s}: {lr} vs {by_hand}");
    }
    let record: RunRecord = RunRecord::read(&dir).unwrap();
    assert_eq!(record.train.epochs, 4);
    assert_eq!(record.extensions[0].at_step, 4);
    // The extended run resumes under its new plan.
    let t = trainer(
        &dir,
        StartMode::Resume,
        Setup {
            epochs: 4,
            ..Setup::default()
        },
    )
    .unwrap();
    assert_eq!(t.epoch(), 4);
}

#[test]
fn extending_a_run_in_the_middle_follows_the_longer_plan_from_there() {
    let dir = run_dir("extend-middle");
    trainer(&dir, StartMode::Fresh, Setup::default())
        .unwrap()
        .fit_epochs(1)
        .unwrap();
    let mut t = trainer(
        &dir,
        StartMode::Extend,
        Setup {
            epochs: 3,
            ..Setup::default()
        },
    )
    .unwrap();
    // Old plan: 4 steps; after one epoch (step 2) the plan of a 6-step run takes over.
    let old = 0.025 * (1.0 + (std::f64::consts::PI * 1.0 / 4.0).cos());
    assert!(
        (t.lr_at(1) - old).abs() < 1e-12,
        "steps done keep their rates"
    );
    assert!((t.lr_at(2) - 0.0375).abs() < 1e-12);
    assert!((t.lr_at(4) - 0.0125).abs() < 1e-12);
    assert_eq!(t.fit().unwrap().steps.len(), 4);
}

#[test]
fn batch_size_one_is_refused_before_the_directory_is_created() {
    let dir = run_dir("batch-one");
    let err = trainer(
        &dir,
        StartMode::Fresh,
        Setup {
            batch: 1,
            ..Setup::default()
        },
    )
    .err()
    .unwrap();
    assert!(err.to_string().contains("batch_size"), "{err}");
    assert!(!dir.exists());
}

/// Two trainings on two threads of one process, while a third thread draws from the backend's
/// generator through the seed lock, give exactly the losses of a training run alone.
#[test]
fn trainings_on_concurrent_threads_are_each_deterministic() {
    let alone = {
        let dir = run_dir("alone");
        trainer(&dir, StartMode::Fresh, Setup::default())
            .unwrap()
            .fit()
            .unwrap();
        losses(&dir)
    };
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let noise = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let device = Dev::default();
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                curriculum_ssl::seed::with_seed::<Ad, _>(&device, i, || {
                    let _ =
                        Tensor::<Ad, 1>::random([64], burn::tensor::Distribution::Default, &device)
                            .into_data();
                });
                i += 1;
            }
        })
    };
    let threads: Vec<_> = (0..2)
        .map(|i| {
            std::thread::spawn(move || {
                let dir = run_dir(&format!("thread-{i}"));
                trainer(&dir, StartMode::Fresh, Setup::default())
                    .unwrap()
                    .fit()
                    .unwrap();
                losses(&dir)
            })
        })
        .collect();
    let results: Vec<Vec<String>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    noise.join().unwrap();
    assert_eq!(alone.len(), 4);
    for r in results {
        assert_eq!(r, alone);
    }
}

#[test]
fn the_file_names_of_a_checkpoint_are_those_on_disk() {
    let dir = finished_run("names");
    let newest = dir.join("checkpoints/epoch-0002");
    let mut names: Vec<String> = std::fs::read_dir(&newest)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut expected: Vec<String> = files::CHECKSUMMED.iter().map(|s| s.to_string()).collect();
    expected.push(files::META.to_string());
    expected.sort();
    assert_eq!(names, expected);
}
