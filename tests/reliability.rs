//! What protects a run: run-directory rules (a directory without `latest` is still a run, a
//! foreign directory is refused before any work), the settings recorded in every checkpoint,
//! checksums with fallback to the previous checkpoint, `latest` never followed outside the run,
//! other architectures refused without a panic, `extend`, and determinism when trainings run on
//! several threads of one process. The cases and the tests that hold them are listed in
//! `docs/reliability.md`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use burn::backend::{Autodiff, Flex};
use burn::prelude::*;
use curriculum_ssl::data::{embedded, ImageArray, Loader, LoaderConfig};
use curriculum_ssl::method::Progress;
use curriculum_ssl::method::{init_method, SimClr, SimClrConfig, SslMethod};
use curriculum_ssl::optim::{SgdConfig, SgdOptimizer};
use curriculum_ssl::pipeline::{Augmenter, PipelineConfig};
use curriculum_ssl::train::{
    files, load_backbone, read_meta, verify, DataFingerprint, Hook, RunRecord, RunView,
    SelfSupervised, StartMode, TrainConfig, TrainError, Trainer,
};
use curriculum_ssl_models::{LeNet, LeNetConfig};

type Ad = Autodiff<Flex>;
type Dev = <Ad as burn::tensor::backend::BackendTypes>::Device;
type Method = SimClr<Ad, LeNet<Ad>>;
type Online = <Method as SslMethod<Ad>>::Online;
type Run = Trainer<Ad, SelfSupervised<Ad, Method, SgdOptimizer<Online, Ad>, ImageArray>>;

fn run_dir(name: &str) -> PathBuf {
    crate::common::run_scratch("curriculum-ssl-reliability", name)
}

/// 64 embedded images from `first`.
fn images_from(first: usize) -> ImageArray {
    let train = embedded::train().unwrap();
    train
        .select(&(first..first + 64).collect::<Vec<_>>())
        .unwrap()
}

fn method(device: &Dev, width: usize) -> Method {
    init_method::<Ad, _, _>(device, 11, |d| {
        SimClrConfig::new()
            .with_hidden_dim(32)
            .with_output_dim(16)
            .init(
                |d| LeNetConfig::lenet5().with_embedding_dim(width).init(d),
                d,
            )
    })
    .unwrap()
}

type Step = SelfSupervised<Ad, Method, SgdOptimizer<Online, Ad>, ImageArray>;

struct Setup {
    epochs: usize,
    lr: f64,
    batch: usize,
    width: usize,
    describe: bool,
    /// The first of the 64 embedded images trained on.
    first_image: usize,
    hooks: Vec<Box<dyn Hook<Ad, Step>>>,
    stop: Option<Arc<AtomicBool>>,
}

impl Default for Setup {
    fn default() -> Self {
        Self {
            epochs: 2,
            lr: 0.05,
            batch: 32,
            width: 84,
            describe: true,
            first_image: 0,
            hooks: Vec::new(),
            stop: None,
        }
    }
}

fn trainer(dir: &Path, mode: StartMode, s: Setup) -> Result<Run, TrainError> {
    let device = Dev::default();
    let mut pipeline = PipelineConfig::simclr(28, 1);
    pipeline.seed = 3;
    let augmenter: Augmenter = pipeline.init(1).unwrap();
    let images = images_from(s.first_image);
    let fingerprint = DataFingerprint::of_images(&images);
    let loader = Loader::new(
        images,
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
        .data(fingerprint)
        .start(mode);
    for hook in s.hooks {
        builder = builder.boxed_hook(hook);
    }
    if let Some(stop) = s.stop {
        builder = builder.stop_when(stop);
    }
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
    drop(t); // it holds the run directory's lock
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
    drop(t); // it holds the run directory's lock
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
                // The lock is not fair: let the other tests of this binary take it too.
                std::thread::yield_now();
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
    expected.push(files::META_SUM.to_string());
    expected.sort();
    assert_eq!(names, expected);
}

/// Two processes (or trainers) writing one run directory at once would overwrite each other's
/// checkpoints and mix their logs: the second is refused, naming the first's process, before it
/// writes anything; the lock goes with the first.
#[test]
fn a_second_writer_is_refused_while_the_first_holds_the_run_directory() {
    let dir = finished_run("locked");
    let config = std::fs::read(dir.join("config.json")).unwrap();
    let first = trainer(&dir, StartMode::Resume, Setup::default()).unwrap();
    for mode in [StartMode::Resume, StartMode::Extend] {
        let err = trainer(
            &dir,
            mode,
            Setup {
                epochs: 4,
                ..Setup::default()
            },
        )
        .err()
        .expect("a second writer is refused");
        let text = err.to_string();
        assert!(
            text.contains(&format!("is in use by process {}", std::process::id())),
            "{text}"
        );
        assert!(err.is_input_error());
    }
    assert_eq!(std::fs::read(dir.join("config.json")).unwrap(), config);
    drop(first);
    let again = trainer(&dir, StartMode::Resume, Setup::default()).unwrap();
    assert_eq!(again.epoch(), 2);
    // A directory that holds only the lock of a run that never started counts as empty.
    let empty = run_dir("lock-only");
    drop(trainer(&empty, StartMode::Fresh, Setup::default()).unwrap());
    std::fs::remove_file(empty.join("config.json")).unwrap();
    for name in ["steps.csv", "epochs.csv"] {
        let _ = std::fs::remove_file(empty.join(name));
    }
    let _ = std::fs::remove_dir_all(empty.join("tensorboard"));
    trainer(&empty, StartMode::Fresh, Setup::default()).unwrap();
}

/// `latest` naming an older complete checkpoint (a stop between a checkpoint's rename and the
/// pointer's update): the resume takes the newest complete checkpoint, not the pointer's, so
/// that it does not overwrite the newer ones.
#[test]
fn a_stale_latest_does_not_hide_a_newer_checkpoint() {
    let dir = finished_run("stale-latest");
    std::fs::write(dir.join("checkpoints/latest"), "epoch-0001").unwrap();
    let t = trainer(&dir, StartMode::Resume, Setup::default()).unwrap();
    assert!(t.resumed_from().unwrap().ends_with("epoch-0002"));
    assert_eq!((t.epoch(), t.step()), (2, 4));
}

/// One changed byte in the newest checkpoint's meta.json (a step count that still parses) is
/// damage like any other: the resume falls back to the previous checkpoint instead of refusing
/// the run for "another batch size".
#[test]
fn a_damaged_meta_json_falls_back_to_the_previous_checkpoint() {
    let dir = finished_run("damaged-meta");
    let meta = dir.join("checkpoints/epoch-0002/meta.json");
    let text = std::fs::read_to_string(&meta).unwrap();
    assert!(text.contains("\"step\": 4"), "{text}");
    std::fs::write(&meta, text.replace("\"step\": 4", "\"step\": 5")).unwrap();
    let t = trainer(&dir, StartMode::Resume, Setup::default()).unwrap();
    assert!(t.resumed_from().unwrap().ends_with("epoch-0001"));
    assert_eq!(t.step(), 2);
}

/// What a killed or failed writer leaves (its temporary directory, a checkpoint left only as
/// its `.old` copy between the two renames of a rewrite) is cleared by the next resume, the
/// checkpoint put back.
#[test]
fn leftovers_of_an_interrupted_write_are_cleared_on_resume() {
    let dir = finished_run("leftovers");
    let checkpoints = dir.join("checkpoints");
    std::fs::create_dir_all(checkpoints.join(".epoch-0003.12345.tmp")).unwrap();
    std::fs::write(
        checkpoints.join(".epoch-0003.12345.tmp/online.mpk"),
        b"half",
    )
    .unwrap();
    std::fs::write(checkpoints.join(".latest.12345.tmp"), b"epoch-0003").unwrap();
    std::fs::rename(
        checkpoints.join("epoch-0002"),
        checkpoints.join(".epoch-0002.old"),
    )
    .unwrap();
    let t = trainer(&dir, StartMode::Resume, Setup::default()).unwrap();
    assert!(t.resumed_from().unwrap().ends_with("epoch-0002"));
    let mut names: Vec<String> = std::fs::read_dir(&checkpoints)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["epoch-0001", "epoch-0002", "latest"]);
}

/// Every file of a run directory below `dir` with its bytes, to show a refused resume
/// changed nothing (but the lock, which holds the process id of whoever opened the run last).
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().is_some_and(|n| n == ".lock") {
            continue;
        }
        if path.is_dir() {
            out.extend(snapshot(&path));
        } else {
            out.push((path.clone(), std::fs::read(&path).unwrap()));
        }
    }
    out.sort();
    out
}

/// A checkpoint is renamed into place only once written whole, so one without `meta.json` has
/// lost files since: damage like a changed byte. With every checkpoint so damaged the resume is
/// refused naming each (it once saw an empty folder, started afresh and wrote over the intact
/// model files and the logs); with the newest alone, it falls back to the previous one.
#[test]
fn checkpoints_without_meta_json_are_damage_not_an_empty_folder() {
    let dir = finished_run("no-meta");
    let checkpoints = dir.join("checkpoints");
    for name in ["epoch-0001", "epoch-0002"] {
        std::fs::remove_file(checkpoints.join(name).join("meta.json")).unwrap();
    }
    let before = snapshot(&dir);
    let err = trainer(&dir, StartMode::Resume, Setup::default())
        .err()
        .expect("refused");
    let text = err.to_string();
    assert!(text.contains("every checkpoint is damaged"), "{text}");
    for name in ["epoch-0001", "epoch-0002"] {
        assert!(
            text.contains(&format!("{name}: holds no meta.json")),
            "{text}"
        );
    }
    assert_eq!(snapshot(&dir), before, "a refused resume changed the run");

    let dir = finished_run("no-meta-newest");
    std::fs::remove_file(dir.join("checkpoints/epoch-0002/meta.json")).unwrap();
    let t = trainer(&dir, StartMode::Resume, Setup::default()).unwrap();
    assert!(t.resumed_from().unwrap().ends_with("epoch-0001"));
    assert_eq!(t.step(), 2);
}

/// `latest` names a checkpoint and the folder holds none: they were removed. A resume refuses
/// (it once started the run afresh and wrote over steps.csv and epochs.csv), naming the pointer
/// and what to do, and changes nothing.
#[test]
fn a_run_whose_checkpoints_were_removed_is_not_restarted_over_its_logs() {
    let dir = finished_run("checkpoints-removed");
    for name in ["epoch-0001", "epoch-0002"] {
        std::fs::remove_dir_all(dir.join("checkpoints").join(name)).unwrap();
    }
    let before = snapshot(&dir);
    let err = trainer(&dir, StartMode::Resume, Setup::default())
        .err()
        .expect("refused");
    let text = err.to_string();
    assert!(
        text.contains("latest")
            && text.contains("names epoch-0002")
            && text.contains("holds no checkpoint")
            && text.contains("new run directory"),
        "{text}"
    );
    assert_eq!(snapshot(&dir), before, "a refused resume changed the run");
}

/// The only checkpoint left as its `.old` copy by a kill between the two renames of a rewrite:
/// reading it without a resume (eval, export) is refused saying that a resume puts it back, not
/// that the checkpoints were removed; the resume does put it back.
#[test]
fn a_checkpoint_left_as_its_old_copy_is_named_and_put_back_by_a_resume() {
    let dir = finished_run("only-old");
    let checkpoints = dir.join("checkpoints");
    std::fs::remove_dir_all(checkpoints.join("epoch-0001")).unwrap();
    std::fs::rename(
        checkpoints.join("epoch-0002"),
        checkpoints.join(".epoch-0002.old"),
    )
    .unwrap();
    let err = curriculum_ssl::train::resolve_checkpoint(&dir).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("left as .epoch-0002.old") && text.contains("recipe resume"),
        "{text}"
    );
    let t = trainer(&dir, StartMode::Resume, Setup::default()).unwrap();
    assert!(t.resumed_from().unwrap().ends_with("epoch-0002"));
}

/// A log with a malformed row, or written over with bytes that are not CSV, is damage to the
/// run directory, the user's to mend: an input error (exit code 2 in the binary) naming the
/// file and what to do, not a failure of the run (it was `TrainError::Io`, exit code 1).
#[test]
fn a_damaged_log_is_an_input_error_naming_it() {
    let dir = finished_run("damaged-log");
    let steps = dir.join("steps.csv");
    let text = std::fs::read_to_string(&steps).unwrap();
    let second_row = text.match_indices('\n').nth(1).unwrap().0;
    let damaged = [
        // The header, the first row, a row of two fields, the rest: a record with too few
        // fields in the middle (a cut last line is a kill's, and dropped: below).
        [
            &text.as_bytes()[..second_row + 1],
            b"1,2\n",
            &text.as_bytes()[second_row + 1..],
        ]
        .concat(),
        // Not UTF-8.
        vec![0xff, 0xfe, b',', 0x80, b'\n', 0xc3, b'\n'],
    ];
    for bytes in damaged {
        std::fs::write(&steps, &bytes).unwrap();
        let err = trainer(&dir, StartMode::Resume, Setup::default())
            .err()
            .expect("refused");
        assert!(matches!(err, TrainError::Run { .. }), "{err:?}");
        assert!(err.is_input_error());
        let text = err.to_string();
        assert!(
            text.contains("steps.csv") && text.contains("is not the log the run wrote"),
            "{text}"
        );
        assert_eq!(
            std::fs::read(&steps).unwrap(),
            bytes,
            "the log was rewritten"
        );
    }
}

/// A last line cut short (a kill while the writer's buffer reached the file: it lies past the
/// last checkpoint, whose rows were synced whole) is dropped with a warning, and the resumed
/// run writes the steps after the checkpoint once each (it was refused, and the advice to move
/// the log away lost its rows).
#[test]
fn a_log_line_cut_by_a_kill_is_dropped_and_the_run_resumes() {
    let dir = finished_run("cut-line");
    let steps = dir.join("steps.csv");
    let mut text = std::fs::read_to_string(&steps).unwrap();
    let rows = text.lines().count();
    text.push_str("5,2.07");
    std::fs::write(&steps, &text).unwrap();
    let mut t = trainer(
        &dir,
        StartMode::Extend,
        Setup {
            epochs: 3,
            ..Setup::default()
        },
    )
    .unwrap();
    assert_eq!(t.step(), 4);
    t.fit().unwrap();
    drop(t);
    let text = std::fs::read_to_string(&steps).unwrap();
    let firsts: Vec<&str> = text
        .lines()
        .skip(1)
        .map(|l| l.split(',').next().unwrap())
        .collect();
    assert_eq!(firsts, ["1", "2", "3", "4", "5", "6"], "{text}");
    assert_eq!(rows, 5, "the finished run's header and four steps");
}

/// A hook whose checkpoint file cannot be written (its name points into a folder that does
/// not exist): the write fails and takes its temporary directory with it.
struct UnwritableFile;

impl Hook<Ad, Step> for UnwritableFile {
    fn name(&self) -> &'static str {
        "unwritable"
    }

    fn files(&self) -> Result<Vec<(&'static str, Vec<u8>)>, TrainError> {
        Ok(vec![("missing-folder/state.bin", vec![1, 2, 3])])
    }
}

#[test]
fn a_failed_checkpoint_write_leaves_no_temporary_directory() {
    let dir = run_dir("failed-write");
    let err = trainer(
        &dir,
        StartMode::Fresh,
        Setup {
            hooks: vec![Box::new(UnwritableFile)],
            ..Setup::default()
        },
    )
    .unwrap()
    .fit()
    .unwrap_err();
    assert!(
        err.to_string().contains("missing-folder/state.bin"),
        "{err}"
    );
    let left: Vec<String> = std::fs::read_dir(dir.join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // The epoch's rows were on disk before its checkpoint was to be committed: a kill just
    // after a checkpoint's rename can no longer leave the logs behind it (they lost the epoch's
    // last steps and its row, the checkpoint being written first). 64 images in batches of 32:
    // two steps in epoch 1.
    let epochs = std::fs::read_to_string(dir.join("epochs.csv")).unwrap();
    let rows: Vec<&str> = epochs.lines().skip(1).collect();
    assert_eq!(rows.len(), 1, "{epochs}");
    assert!(rows[0].starts_with("1,"), "{epochs}");
    let steps = std::fs::read_to_string(dir.join("steps.csv")).unwrap();
    let firsts: Vec<&str> = steps
        .lines()
        .skip(1)
        .map(|l| l.split(',').next().unwrap())
        .collect();
    assert_eq!(firsts, ["1", "2"], "{steps}");
}

/// A run log another command wrote over (`recipe embed --out RUN/steps.npy` writes
/// `RUN/steps.csv`): the resume refuses, naming the file, before it rewrites config.json.
#[test]
fn a_run_log_written_over_is_named_before_the_run_is_rewritten() {
    let dir = finished_run("log-overwritten");
    std::fs::write(dir.join("steps.csv"), "index,file,label\n0,a.png,1\n").unwrap();
    let config = std::fs::read(dir.join("config.json")).unwrap();
    let err = trainer(
        &dir,
        StartMode::Extend,
        Setup {
            epochs: 4,
            ..Setup::default()
        },
    )
    .err()
    .expect("refused");
    let text = err.to_string();
    assert!(
        text.contains("steps.csv") && text.contains("is not this run's log"),
        "{text}"
    );
    assert_eq!(std::fs::read(dir.join("config.json")).unwrap(), config);
}

/// The run records what it trains on; a resume on other images (a folder whose files changed)
/// is refused saying so, while the same images resume.
#[test]
fn a_resume_on_changed_data_is_refused() {
    let dir = finished_run("data-changed");
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("config.json")).unwrap()).unwrap();
    assert_eq!(record["data"]["examples"], 64, "{record}");
    let err = trainer(
        &dir,
        StartMode::Resume,
        Setup {
            first_image: 64,
            ..Setup::default()
        },
    )
    .err()
    .expect("refused");
    let text = err.to_string();
    assert!(
        text.contains("the training data changed since the run was written (64 labelled images 28x28x1, SHA-256"),
        "{text}"
    );
    trainer(&dir, StartMode::Resume, Setup::default()).unwrap();
}

/// Makes the networks' values infinite after step `at` (0-based), as a diverging step does to
/// a batch norm's running variance while the loss is still finite.
struct Diverges {
    at: usize,
}

impl Hook<Ad, Step> for Diverges {
    fn name(&self) -> &'static str {
        "diverges"
    }

    fn after_step(
        &mut self,
        run: &mut RunView<'_, Ad, Step>,
        progress: Progress,
        _: f64,
    ) -> Result<Vec<(String, f64)>, TrainError> {
        if progress.step == self.at {
            struct Infinite;
            impl burn::module::ModuleMapper<Ad> for Infinite {
                fn map_float<const D: usize>(
                    &mut self,
                    param: burn::module::Param<Tensor<Ad, D>>,
                ) -> burn::module::Param<Tensor<Ad, D>> {
                    param.map(|t| t.mul_scalar(f64::INFINITY))
                }
            }
            let method = run.method_mut();
            let online = method.online().clone().map(&mut Infinite);
            method.set_online(online);
        }
        Ok(Vec::new())
    }
}

/// A checkpoint is written only if every value of the networks is finite: a run whose values
/// became infinite stops at the checkpoint that would have held them, naming a tensor, and the
/// last good checkpoint is the one before (before, it was written with the infinities, and
/// `recipe export` exported them).
#[test]
fn a_checkpoint_with_values_that_are_not_finite_is_not_written() {
    let dir = run_dir("diverges");
    let err = trainer(
        &dir,
        StartMode::Fresh,
        Setup {
            hooks: vec![Box::new(Diverges { at: 3 })],
            ..Setup::default()
        },
    )
    .unwrap()
    .fit()
    .unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(
            err,
            TrainError::NonFiniteState {
                epoch: 2,
                step: 4,
                ..
            }
        ),
        "{text}"
    );
    assert!(
        text.contains("not finite")
            && text.contains("The last good checkpoint is")
            && text.contains("epoch-0001"),
        "{text}"
    );
    assert!(!dir.join("checkpoints/epoch-0002").exists());
    // The checkpoint that stays loads, with finite values.
    let device = Dev::default();
    let fresh =
        curriculum_ssl::seed::init_module::<Ad, _>(&device, 0, |d| LeNetConfig::lenet5().init(d));
    load_backbone::<Ad, _>(&dir, fresh, &device).unwrap();
}

/// Stops the run at the end of step `at` (0-based), as Ctrl-C does in the command line.
struct PressesStop {
    at: usize,
    flag: Arc<AtomicBool>,
}

impl Hook<Ad, Step> for PressesStop {
    fn name(&self) -> &'static str {
        "presses-stop"
    }

    fn after_step(
        &mut self,
        _: &mut RunView<'_, Ad, Step>,
        progress: Progress,
        _: f64,
    ) -> Result<Vec<(String, f64)>, TrainError> {
        if progress.step == self.at {
            self.flag.store(true, Ordering::SeqCst);
        }
        Ok(Vec::new())
    }
}

/// A run asked to stop ends after the step under way, saying where it was and which
/// checkpoint a resume continues from; the resume finishes it.
#[test]
fn a_run_asked_to_stop_ends_after_its_step_and_resumes() {
    let dir = run_dir("stopped");
    let flag = Arc::new(AtomicBool::new(false));
    let err = trainer(
        &dir,
        StartMode::Fresh,
        Setup {
            hooks: vec![Box::new(PressesStop {
                at: 2,
                flag: flag.clone(),
            })],
            stop: Some(flag),
            ..Setup::default()
        },
    )
    .unwrap()
    .fit()
    .unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with(
            "interrupted at step 3 (epoch 2); the run continues from its last checkpoint"
        ) && text.contains("epoch-0001"),
        "{text}"
    );
    let mut t = trainer(&dir, StartMode::Resume, Setup::default()).unwrap();
    assert_eq!(t.step(), 2);
    assert_eq!(t.fit().unwrap().steps.len(), 2);
}

/// Every run record committed with the studies (written by the builds of many sittings, before
/// settings that were added since) reads with today's code: a run of an older build can still be
/// resumed, extended and evaluated.
#[test]
fn every_committed_run_record_reads() {
    fn records(dir: &Path, found: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                records(&path, found);
            } else if path.file_name().is_some_and(|n| n == files::CONFIG) {
                found.push(path);
            }
        }
    }
    let mut found = Vec::new();
    records(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("studies"),
        &mut found,
    );
    assert!(found.len() >= 100, "{} records", found.len());
    let mut self_supervised = 0;
    for path in found {
        // As the loop reads it (any step), then as the self-supervised step's record.
        let record: Result<RunRecord<serde_json::Value, serde_json::Value>, _> =
            RunRecord::read_file(&path);
        let record = record.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if record.task.get("supervised").is_none() {
            let typed: Result<RunRecord, _> = RunRecord::read_file(&path);
            assert!(typed.is_ok(), "{}: {}", path.display(), typed.unwrap_err());
            self_supervised += 1;
        }
    }
    assert!(
        self_supervised >= 80,
        "{self_supervised} self-supervised records"
    );
}
