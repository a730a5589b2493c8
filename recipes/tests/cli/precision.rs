//! `--precision` (every tensor of the run in bf16 or f16) and `recipe bench_step`.

use super::common::*;

/// Relative difference of two losses.
fn relative(a: f64, b: f64) -> f64 {
    (a - b).abs() / a.abs().max(1e-12)
}

fn float_losses(run_dir: &std::path::Path) -> Vec<f64> {
    losses(run_dir)
        .iter()
        .map(|l| l.parse::<f64>().unwrap())
        .collect()
}

/// Whether `x` is exactly a bf16 value: an f32 whose low 16 bits are zero.
fn is_bf16(x: f64) -> bool {
    (x as f32) as f64 == x && (x as f32).to_bits() & 0xFFFF == 0
}

/// A bf16 run computes in bf16 and follows f32:
/// - every loss it logs is a bf16 value (the loss tensor is bf16), while the f32 run's are not:
///   the run is not f32 under another name;
/// - its first loss (the same initial weights and views as f32's, every operation rounded to 8
///   significant bits) is within 3e-2 of f32's. Measured here 9.3e-3 (4.125 against 4.0871):
///   2.4 steps of bf16's spacing at 4 (2^-6, 3.8e-3 relative). A CPU that sums in another order
///   changes the f32 reference by about 1e-6 and may move the bf16 loss by a step or two; 3e-2
///   allows about eight. The control: the f32 run from seed 1 differs from seed 0's by 5.8e-2,
///   more than the tolerance (f32, the same on every CPU to 1e-6), so the check tells runs
///   apart;
/// - the precision is recorded (recipe.toml, the run record): a resume stays in bf16 and a
///   resume asked for f32 is refused as a changed setting;
/// - its checkpoint (written in f32 by the full-precision recorder, the values bf16's) evaluates
///   in an f32 process.
#[test]
fn bf16_runs_compute_in_bf16_and_follow_f32() {
    let base = scratch().join("precision");
    let _ = std::fs::remove_dir_all(&base);
    let train = |name: &str, extra: &[&str]| -> std::path::PathBuf {
        let dir = base.join(name);
        // The small backbone, whose numbers the tolerance below was measured on.
        let mut options = vec!["--epochs", "2", "--backbone", "small"];
        options.extend_from_slice(extra);
        let o = run(&as_strs(&simclr(dir.to_str().unwrap(), &options)));
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        dir
    };
    let f32_dir = train("f32", &[]);
    let seed1_dir = train("f32-seed1", &["--seed", "1"]);
    let bf16_dir = train("bf16", &["--precision", "bf16"]);
    let (f32, seed1, bf16) = (
        float_losses(&f32_dir),
        float_losses(&seed1_dir),
        float_losses(&bf16_dir),
    );
    assert_eq!(bf16.len(), 4, "{bf16:?}");
    assert!(
        bf16.iter().all(|&l| l.is_finite() && is_bf16(l)),
        "{bf16:?}"
    );
    assert!(!f32.iter().all(|&l| is_bf16(l)), "{f32:?}");
    let tolerance = 3e-2;
    let first = relative(f32[0], bf16[0]);
    let control = relative(f32[0], seed1[0]);
    assert!(
        first <= tolerance && control > tolerance,
        "bf16 against f32: {first:.2e}; seed 1 against seed 0: {control:.2e} ({bf16:?} / {f32:?} / \
         {seed1:?})"
    );

    let toml = |dir: &std::path::Path| std::fs::read_to_string(dir.join("recipe.toml")).unwrap();
    assert!(!toml(&f32_dir).contains("precision"), "{}", toml(&f32_dir));
    assert!(
        toml(&bf16_dir).contains("precision = \"bf16\""),
        "{}",
        toml(&bf16_dir)
    );

    // A resume asked for f32 is refused, naming the setting; one that lengthens the run keeps
    // bf16.
    let o = run(&as_strs(&simclr(
        bf16_dir.to_str().unwrap(),
        &["--resume", "--backbone", "small", "--precision", "f32"],
    )));
    assert_eq!(check_error_shape(&o, "resume in f32"), 2, "{}", stderr(&o));
    // Named by its option with both values (it read `run.precision: run "bf16", given absent`).
    assert!(
        stderr(&o).contains("--precision: run \"bf16\", given \"f32\""),
        "{}",
        stderr(&o)
    );
    let o = run(&[
        "resume",
        bf16_dir.to_str().unwrap(),
        "--extend",
        "--epochs",
        "3",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let longer = float_losses(&bf16_dir);
    assert_eq!(longer.len(), 6, "{longer:?}");
    assert!(longer.iter().all(|&l| is_bf16(l)), "{longer:?}");
    assert!(
        toml(&bf16_dir).contains("precision = \"bf16\""),
        "{}",
        toml(&bf16_dir)
    );

    let o = run(&[
        "eval",
        "--run-dir",
        bf16_dir.to_str().unwrap(),
        "--probe-epochs",
        "1",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("linear probe"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}

/// An unknown precision is a usage error naming the choices; f16 is refused with the reason and
/// the type to use instead, before anything is written.
#[test]
fn unknown_and_f16_precisions_are_refused() {
    let dir = scratch().join("precision-bad");
    for (precision, expect) in [("f8", "bf16"), ("f16", "--precision f16: not offered")] {
        let o = run(&as_strs(&simclr(
            dir.to_str().unwrap(),
            &["--precision", precision],
        )));
        assert_eq!(check_error_shape(&o, precision), 2);
        assert!(stderr(&o).contains(expect), "{}", stderr(&o));
        assert!(!dir.exists(), "nothing written");
    }
    let o = run(&["bench_step", "--precision", "f16"]);
    assert_eq!(check_error_shape(&o, "bench_step --precision f16"), 2);
}

/// `recipe bench_step` prints one JSON line with the timing of the steps asked for (images/s
/// and ms/step of the same measurement, the issue time within it), from the same seeded weights in every run (two f32 runs
/// give the same first loss to the bit), and a bf16 run's loss is a bf16 value within 3e-2 of
/// f32's (as the runs above); bad sizes exit 2.
#[test]
fn bench_step_times_the_step() {
    let timing = |precision: &str| -> serde_json::Value {
        let o = run(&[
            "bench_step",
            "--method",
            "moco_v2",
            "--batch-size",
            "4",
            "--image-size",
            "8",
            "--steps",
            "1",
            "--warmup",
            "1",
            "--precision",
            precision,
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let out = String::from_utf8(o.stdout).unwrap();
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
    };
    let a = timing("f32");
    let b = timing("f32");
    let c = timing("bf16");
    assert_eq!(a["method"], "moco_v2");
    assert_eq!(a["precision"], "f32");
    assert_eq!(c["precision"], "bf16");
    assert_eq!(a["steps"], 1);
    assert_eq!(a["batch_size"], 4);
    let (per_s, ms) = (
        a["images_per_s"].as_f64().unwrap(),
        a["ms_per_step"].as_f64().unwrap(),
    );
    assert!(relative(per_s, 4.0 * 1e3 / ms) < 1e-9, "{a}");
    let first = |v: &serde_json::Value| v["first_loss"].as_f64().unwrap();
    assert!(first(&a).is_finite(), "{a}");
    assert_eq!(first(&a), first(&b), "seeded weights: {a} {b}");
    assert!(!is_bf16(first(&a)) && is_bf16(first(&c)), "{a} {c}");
    assert!(relative(first(&a), first(&c)) <= 3e-2, "{a} {c}");

    let o = run(&["bench_step", "--steps", "0"]);
    assert_eq!(check_error_shape(&o, "bench_step --steps 0"), 2);
    assert!(stderr(&o).contains("--steps"), "{}", stderr(&o));
    // The CPU time of the process's threads per step (Linux), the training thread's among them.
    if cfg!(target_os = "linux") {
        let threads = a["cpu_ms_per_step"].as_object().expect("cpu_ms_per_step");
        assert!(threads.values().all(|v| v.as_f64().unwrap() > 0.0), "{a}");
    }
    assert!(a.get("kernels_per_step").is_none(), "{a}");
    assert!(a.get("kernels_by_phase").is_none(), "{a}");
    // Device memory is cubecl's pools: none on the CPU backend.
    assert!(a.get("memory_mib").is_none(), "{a}");
    // The host's issuing is part of the step: more than nothing, at most the whole (on the CPU
    // backend the work is done in the call).
    let issue = a["issue_ms_per_step"].as_f64().unwrap();
    assert!(issue > 0.0 && issue <= ms, "{a}");
    // Kernels are cubecl's: the CPU build says so.
    for flag in ["--count-kernels", "--profile-kernels"] {
        let o = run(&["bench_step", flag]);
        assert_eq!(check_error_shape(&o, &format!("bench_step {flag}")), 2);
        assert!(stderr(&o).contains("wgpu or CUDA build"), "{}", stderr(&o));
    }
}
