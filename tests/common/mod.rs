//! Helpers shared by the integration tests: f64 backends, seeded random inputs, and scratch
//! files.
#![allow(dead_code)]

use burn::backend::{Autodiff, NdArray};
use burn::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Exact backend for value checks.
pub type Exact = NdArray<f64>;
/// Exact backend with autodiff for gradient checks.
pub type ExactAd = Autodiff<NdArray<f64>>;

/// Runs `f` with backend `B`'s generator seeded (0) under the library's lock: what a test that
/// draws from the backend (a key queue's first keys, a module's initial weights) does, so that it
/// cannot take draws meant for a seeded run on another test thread of this binary (the tests
/// share one process, and the generator is one per backend and process).
pub fn seeded<B: Backend, T>(f: impl FnOnce() -> T) -> T {
    curriculum_ssl::seed::with_seed::<B, _>(&Default::default(), 0, f)
}

/// `rows × cols` values uniform in [-1, 1) from a seeded generator.
pub fn random_values(rows: usize, cols: usize, seed: u64) -> Vec<f64> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..rows * cols)
        .map(|_| rng.random_range(-1.0..1.0))
        .collect()
}

/// A `[rows, cols]` tensor of the given values.
pub fn tensor<B: Backend>(values: &[f64], rows: usize, cols: usize) -> Tensor<B, 2> {
    Tensor::from_data(
        TensorData::new(values.to_vec(), [rows, cols]),
        &Default::default(),
    )
}

/// Rows normalised to unit length.
pub fn unit_rows(values: &[f64], cols: usize) -> Vec<f64> {
    values
        .chunks(cols)
        .flat_map(|row| {
            let norm = row.iter().map(|x| x * x).sum::<f64>().sqrt();
            row.iter().map(move |x| x / norm).collect::<Vec<_>>()
        })
        .collect()
}

/// Scalar value of a one-element tensor.
pub fn value<B: Backend>(t: Tensor<B, 1>) -> f64 {
    t.into_scalar().elem::<f64>()
}

/// A fresh, empty directory `group/name` under cargo's temporary directory for tests.
pub fn scratch_dir(group: &str, name: &str) -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(group)
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `bytes` as a gzip stream.
pub fn gz(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

/// Every float tensor of a module (parameters and running statistics), in visiting order.
#[derive(Default)]
struct Values(Vec<Vec<f64>>);

impl<B: Backend> burn::module::ModuleVisitor<B> for Values {
    fn visit_float<const D: usize>(&mut self, param: &burn::module::Param<Tensor<B, D>>) {
        self.0
            .push(param.val().into_data().convert::<f64>().to_vec().unwrap());
    }
}

/// A module's float tensors as f64, in visiting order (on any backend; the exact one in most
/// tests).
pub fn values<B: Backend, M: burn::module::Module<B>>(module: &M) -> Vec<Vec<f64>> {
    // `into_record` folds pending BatchNorm updates into the running statistics first.
    let _ = module.clone().into_record();
    let mut v = Values::default();
    module.visit(&mut v);
    v.0
}

/// A test's own run directory, `<temp>/<group>/<name>-<pid>`, not there yet (the trainer makes
/// it). The first call of a process for a group removes the directories that processes no
/// longer running left there (a failed test's directory stays for looking at until the next
/// run), so repeated `cargo test` runs do not fill the temp disk. Where `/proc` does not tell
/// which processes live, nothing is removed.
pub fn run_scratch(group: &str, name: &str) -> std::path::PathBuf {
    use std::collections::HashSet;
    use std::sync::Mutex;
    static SWEPT: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let root = std::env::temp_dir().join(group);
    let mut swept = SWEPT.lock().unwrap_or_else(|e| e.into_inner());
    if swept
        .get_or_insert_with(HashSet::new)
        .insert(group.to_string())
        && std::path::Path::new("/proc/self").exists()
    {
        for entry in std::fs::read_dir(&root).into_iter().flatten().flatten() {
            let file_name = entry.file_name().to_string_lossy().to_string();
            let pid = file_name
                .rsplit('-')
                .next()
                .and_then(|p| p.parse::<u32>().ok());
            if pid.is_some_and(|p| {
                p != std::process::id() && !std::path::Path::new(&format!("/proc/{p}")).exists()
            }) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    drop(swept);
    let dir = root.join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}
