//! What the command-line tests share: a scratch directory, a tiny IDX dataset, the binary and
//! the checks of its exit.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// Removes what a test that passed its checks wrote under [`scratch`]: a run of a ViT or a
/// ResNet-18 keeps checkpoints of 100–400 MB, and the suite's runs would otherwise hold
/// several GB until the next run sweeps them (CI's disk is small). A failing test panics
/// before this, so its files stay for looking at.
pub(crate) fn checked(paths: &[&Path]) {
    for path in paths {
        if path.is_dir() {
            let _ = std::fs::remove_dir_all(path);
        } else {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// This process's scratch directory (`recipe-cli-<pid>` in the temporary directory). The runs
/// of one test process filled some 3 GB before the largest were removed as they pass
/// ([`checked`]), and the harness has no hook at its end, so the first call removes the
/// directories that earlier test processes left, where their process is gone.
pub(crate) fn scratch() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let tmp = std::env::temp_dir();
        // Where /proc tells which processes live (Linux); elsewhere nothing is removed.
        let procfs = Path::new("/proc/self").exists();
        for entry in std::fs::read_dir(&tmp).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            let pid = name
                .strip_prefix("recipe-cli-")
                .and_then(|p| p.parse::<u32>().ok());
            if procfs && pid.is_some_and(|p| !Path::new(&format!("/proc/{p}")).exists()) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        let dir = tmp.join(format!("recipe-cli-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    })
}

pub(crate) fn write_idx(dir: &Path, prefix: &str, n: usize) {
    let mut images = Vec::new();
    for v in [0x0803u32, n as u32, 28, 28] {
        images.extend(v.to_be_bytes());
    }
    let mut labels = Vec::new();
    for v in [0x0801u32, n as u32] {
        labels.extend(v.to_be_bytes());
    }
    for i in 0..n {
        let class = i % 10;
        for p in 0..28 * 28 {
            // Class-dependent stripes plus a little per-image variation.
            let stripe = ((p % 28) / 3 + p / 28 / 3 * class) % 2;
            images.push((stripe * 200 + (i * 7 + p) % 40) as u8);
        }
        labels.push(class as u8);
    }
    std::fs::write(dir.join(format!("{prefix}-images-idx3-ubyte")), images).unwrap();
    std::fs::write(dir.join(format!("{prefix}-labels-idx1-ubyte")), labels).unwrap();
}

/// 64 training and 40 test images of 28×28.
pub(crate) fn data() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = scratch().join("data");
        std::fs::create_dir_all(&dir).unwrap();
        write_idx(&dir, "train", 64);
        write_idx(&dir, "t10k", 40);
        dir
    })
}

pub(crate) fn recipe(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_recipe"));
    c.args(args).current_dir(scratch()).env("RUST_LOG", "info");
    c
}

/// A run long enough to be watched or interrupted: one epoch of `light_moco` on the embedded
/// Fashion-MNIST subset (no `--data`), batches of 32.
pub(crate) fn long_run(run_dir: &Path) -> Command {
    recipe(&[
        "light_moco",
        "--run-dir",
        run_dir.to_str().unwrap(),
        "--epochs",
        "1",
        "--batch-size",
        "32",
        "--knn-every",
        "0",
        "--workers",
        "1",
    ])
}

pub(crate) fn run(args: &[&str]) -> Output {
    recipe(args).output().unwrap()
}

pub(crate) fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A quick light_moco run on the tiny data: 1 epoch of 2 steps unless overridden.
pub(crate) fn tiny(run_dir: &str, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "light_moco",
        "--data",
        data().to_str().unwrap(),
        "--run-dir",
        run_dir,
        "--epochs",
        "1",
        "--batch-size",
        "32",
        "--knn-every",
        "0",
        "--workers",
        "1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // Later options override earlier ones (clap keeps the last).
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

pub(crate) fn as_strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Exit code and the checks every failing command must pass.
pub(crate) fn check_error_shape(o: &Output, case: &str) -> i32 {
    let err = stderr(o);
    assert!(!err.contains("panicked"), "{case}: panic\n{err}");
    let code = o.status.code().expect("exited");
    if code != 0 {
        let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(errors.len(), 1, "{case}: one error line\n{err}");
        assert!(
            !err.contains("error: error"),
            "{case}: doubled prefix\n{err}"
        );
        // No part of the message said twice (an OS error quoted by a message and again as its
        // cause).
        let line = errors[0];
        let parts: Vec<&str> = line.split(": ").filter(|p| p.len() >= 12).collect();
        for (i, part) in parts.iter().enumerate() {
            assert!(
                !parts[i + 1..].contains(part),
                "{case}: `{part}` said twice\n{err}"
            );
        }
    }
    code
}

/// `tiny`'s run with SimCLR.
pub(crate) fn simclr(run_dir: &str, extra: &[&str]) -> Vec<String> {
    let mut args = tiny(run_dir, extra);
    args[0] = "simclr".into();
    args
}

/// A pixel value that differs by image, row, column and channel.
pub(crate) fn pixel(n: usize, r: usize, c: usize, ch: usize) -> u8 {
    ((n * 37 + r * 5 + c * 3 + ch * 71) % 256) as u8
}

/// `n` CIFAR records (label bytes, then 32×32 planes), labels cycling over 10 classes.
pub(crate) fn cifar_records(n: usize, label_bytes: usize) -> Vec<u8> {
    let mut v = Vec::new();
    for i in 0..n {
        v.extend(std::iter::repeat_n((i % 10) as u8, label_bytes));
        for ch in 0..3 {
            for r in 0..32 {
                for c in 0..32 {
                    v.push(pixel(i, r, c, ch));
                }
            }
        }
    }
    v
}

/// The losses of a run's steps.csv, as written.
pub(crate) fn losses(run_dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(run_dir.join("steps.csv")).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let column = header
        .iter()
        .position(|c| *c == "loss")
        .expect("a loss column");
    lines
        .map(|l| l.split(',').nth(column).unwrap().to_string())
        .collect()
}

/// The example binary that `cargo test` builds beside the test binaries.
pub(crate) fn example(name: &str) -> PathBuf {
    let recipe = PathBuf::from(env!("CARGO_BIN_EXE_recipe"));
    let path = recipe.parent().unwrap().join("examples").join(name);
    assert!(
        path.is_file(),
        "{} is not built: `cargo test --workspace` builds the examples",
        path.display()
    );
    path
}
