//! Fuzzing the checkpoint reader with mutated checkpoints of a real run.
//!
//! A finished one-epoch run gives a template checkpoint. Each case copies it and mutates one
//! file: flipped bytes, truncation, bytes inserted, or a rewritten `latest` pointer. Mutated
//! records are tried twice: as they are (the checksums must reject them, naming the file) and with
//! their SHA-256 fixed up in `meta.json`, so that the bytes reach burn's deserialiser and the
//! loaders behind it. Properties: no panic; an error is a `TrainError` whose message names a file
//! of the checkpoint and carries no burn-internal hint; `latest` never resolves outside
//! `checkpoints/`.
//!
//! Why proptest: it runs on stable Rust as ordinary tests, so CI runs a bounded number of cases
//! (`FUZZ_CASES`, default 32 per property); `FUZZ_CASES=2000 cargo test --release --test
//! fuzz_checkpoint` runs more locally. (cargo-fuzz needs a nightly toolchain.)

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use burn::backend::{Autodiff, Flex};
use curriculum_ssl::data::{embedded, Loader, LoaderConfig};
use curriculum_ssl::method::{init_method, SimClrConfig};
use curriculum_ssl::optim::SgdConfig;
use curriculum_ssl::pipeline::PipelineConfig;
use curriculum_ssl::train::{
    files, load_backbone, resolve_checkpoint, sha256_hex, StartMode, TrainConfig, Trainer,
};
use curriculum_ssl_models::LeNetConfig;
use proptest::prelude::*;

type Ad = Autodiff<Flex>;
type Dev = <Ad as burn::tensor::backend::BackendTypes>::Device;

fn cases() -> u32 {
    std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32)
}

/// This process's directory for the template and the cases (made empty once).
fn root() -> PathBuf {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| crate::common::run_scratch("curriculum-ssl-fuzz-checkpoint", "cases"))
        .clone()
}

fn trainer(dir: &Path, mode: StartMode) -> Result<(), curriculum_ssl::train::TrainError> {
    let device = Dev::default();
    let data = embedded::train()
        .unwrap()
        .select(&(0..64).collect::<Vec<_>>())
        .unwrap();
    let method = init_method::<Ad, _, _>(&device, 1, |d| {
        SimClrConfig::new()
            .with_hidden_dim(16)
            .with_output_dim(8)
            .init(|d| LeNetConfig::lenet5().with_embedding_dim(16).init(d), d)
    })
    .unwrap();
    let loader = Loader::new(
        data,
        "embedded",
        LoaderConfig {
            batch_size: 32,
            workers: 0,
            ..LoaderConfig::default()
        },
    )
    .unwrap();
    let mut t = Trainer::builder(
        method,
        SgdConfig::new().init::<Ad, _>().unwrap(),
        PipelineConfig::simclr(28, 1).init(1).unwrap(),
        loader,
    )
    .config(
        TrainConfig::new()
            .with_epochs(1)
            .with_lr(0.05)
            .with_progress_bar(false),
    )
    .run_dir(dir)
    .start(mode)
    .build(&device)?;
    if mode == StartMode::Fresh {
        t.fit()?;
    }
    Ok(())
}

/// The run directory of a finished one-epoch run, made once.
fn template() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = root().join("template");
        let _ = std::fs::remove_dir_all(&dir);
        trainer(&dir, StartMode::Fresh).unwrap();
        dir
    })
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

/// A fresh copy of the template run for one case.
fn copy() -> PathBuf {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = root().join(format!("case-{n}"));
    let _ = std::fs::remove_dir_all(&dir);
    copy_dir(template(), &dir);
    dir
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(Vec<(usize, u8)>),
    Truncate(usize),
    Insert(usize, Vec<u8>),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        prop::collection::vec((any::<usize>(), 1u8..=255), 1..8).prop_map(Mutation::Flip),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(at, bytes)| Mutation::Insert(at, bytes)),
    ]
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
    if bytes.is_empty() {
        return;
    }
    match m {
        Mutation::Flip(flips) => {
            for (at, x) in flips {
                let i = at % bytes.len();
                bytes[i] ^= x;
            }
        }
        Mutation::Truncate(at) => bytes.truncate(at % bytes.len()),
        Mutation::Insert(at, extra) => {
            let i = at % bytes.len();
            bytes.splice(i..i, extra.iter().copied());
        }
    }
}

/// Rewrites the checksum of `file` in the checkpoint's `meta.json` to match its bytes.
fn fix_checksum(checkpoint: &Path, file: &str) {
    let meta_path = checkpoint.join(files::META);
    let mut meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&meta_path).unwrap()).unwrap();
    let sum = sha256_hex(&std::fs::read(checkpoint.join(file)).unwrap());
    meta["checksums"][file] = serde_json::Value::String(sum);
    std::fs::write(meta_path, serde_json::to_vec(&meta).unwrap()).unwrap();
}

fn checkpoint_of(run: &Path) -> PathBuf {
    run.join("checkpoints").join(files::checkpoint_name(1))
}

/// Loads the backbone and resumes the run; asserts the shape of any error.
fn read_everything(run: &Path) {
    let device = Dev::default();
    let fresh = curriculum_ssl::seed::init_module::<Ad, _>(&device, 0, |d| {
        LeNetConfig::lenet5().with_embedding_dim(16).init(d)
    });
    for err in [
        load_backbone::<Ad, _>(run, fresh, &device).err(),
        trainer(run, StartMode::Resume).err(),
    ]
    .into_iter()
    .flatten()
    {
        let text = err.to_string();
        assert!(!text.contains("record-backward-compat"), "{text}");
        assert!(
            text.contains(&*run.to_string_lossy()),
            "names the file: {text}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn a_mutated_record_is_rejected_by_its_checksum_or_read_without_a_panic(
        file in prop::sample::select(vec![files::ONLINE, files::BACKBONE, files::METHOD, files::OPTIMIZER, files::RUN]),
        m in mutation(),
        fix in any::<bool>(),
    ) {
        let run = copy();
        let checkpoint = checkpoint_of(&run);
        let path = checkpoint.join(file);
        let mut bytes = std::fs::read(&path).unwrap();
        let original = bytes.clone();
        apply(&mut bytes, &m);
        std::fs::write(&path, &bytes).unwrap();
        if fix {
            fix_checksum(&checkpoint, file);
        } else if bytes != original {
            let device = Dev::default();
            let fresh = curriculum_ssl::seed::init_module::<Ad, _>(&device, 0, |d| {
                LeNetConfig::lenet5().with_embedding_dim(16).init(d)
            });
            let err = load_backbone::<Ad, _>(&checkpoint, fresh, &device).unwrap_err();
            prop_assert!(err.to_string().contains(file), "{}", err);
        }
        read_everything(&run);
        let _ = std::fs::remove_dir_all(&run);
    }

    #[test]
    fn a_mutated_meta_json_gives_an_error_not_a_panic(m in mutation()) {
        let run = copy();
        let path = checkpoint_of(&run).join(files::META);
        let mut bytes = std::fs::read(&path).unwrap();
        apply(&mut bytes, &m);
        std::fs::write(&path, &bytes).unwrap();
        read_everything(&run);
        let _ = std::fs::remove_dir_all(&run);
    }

    #[test]
    fn latest_never_resolves_outside_the_checkpoints(pointer in "[./a-z0-9-]{0,24}") {
        let run = copy();
        std::fs::write(run.join("checkpoints").join(files::LATEST), &pointer).unwrap();
        if let Ok(found) = resolve_checkpoint(&run) {
            prop_assert_eq!(found.parent().unwrap(), run.join("checkpoints"));
        }
        read_everything(&run);
        let _ = std::fs::remove_dir_all(&run);
    }
}
