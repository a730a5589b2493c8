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

/// A bf16 and an f16 run train, and their losses follow f32's: the first step's loss (the same
/// initial weights and views, every operation rounded to 8 significant bits in bf16, 11 in f16)
/// within 5e-2 relative, and the mean of four steps within 5e-2. Why 5e-2 holds on any CPU: the
/// loss passes through about a dozen layers (the small ResNet, the projector, the loss), each
/// rounding its outputs with a relative error of at most u (bf16: 2^-8 = 3.9e-3), so the loss is
/// off by at most about 12·u = 4.7e-2, whatever order a CPU's SIMD kernels sum in; measured
/// 3.6e-3 on the first step. A wrong kernel or a type mix-up changes the loss at the scale of
/// the loss itself. The run records the precision in its recipe.toml (a resume keeps it).
#[test]
fn half_precision_runs_follow_f32() {
    let base = scratch().join("precision");
    let _ = std::fs::remove_dir_all(&base);
    let mut by_precision = Vec::new();
    for precision in ["f32", "bf16", "f16"] {
        let dir = base.join(precision);
        let args = simclr(
            dir.to_str().unwrap(),
            &["--epochs", "2", "--precision", precision],
        );
        let o = run(&as_strs(&args));
        assert!(o.status.success(), "{precision}: {}", stderr(&o));
        let toml = std::fs::read_to_string(dir.join("recipe.toml")).unwrap();
        if precision == "f32" {
            assert!(!toml.contains("precision"), "{toml}");
        } else {
            assert!(
                toml.contains(&format!("precision = \"{precision}\"")),
                "{toml}"
            );
        }
        let losses = float_losses(&dir);
        assert_eq!(losses.len(), 4, "{precision}: {losses:?}");
        assert!(losses.iter().all(|l| l.is_finite()), "{losses:?}");
        by_precision.push((precision, losses));
    }
    let f32 = &by_precision[0].1;
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    for (precision, losses) in &by_precision[1..] {
        let first = relative(f32[0], losses[0]);
        let means = relative(mean(f32), mean(losses));
        assert!(
            first <= 5e-2 && means <= 5e-2,
            "{precision}: first step {first:.2e}, mean of four {means:.2e} ({losses:?} against \
             {f32:?})"
        );
        // bf16 / f16 rounding shows: not the f32 run under another name.
        assert_ne!(losses[0], f32[0], "{precision}");
    }
    // A bf16 run's checkpoint (bf16 parameters) evaluates in an f32 process.
    let dir = base.join("bf16");
    let o = run(&[
        "eval",
        "--run-dir",
        dir.to_str().unwrap(),
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

/// An unknown precision is a usage error naming the choices.
#[test]
fn unknown_precision_is_refused() {
    let dir = scratch().join("precision-bad");
    let args = simclr(dir.to_str().unwrap(), &["--precision", "f8"]);
    let o = run(&as_strs(&args));
    assert_eq!(check_error_shape(&o, "--precision f8"), 2);
    let err = stderr(&o);
    assert!(
        err.contains("f32") && err.contains("bf16") && err.contains("f16"),
        "{err}"
    );
    assert!(!dir.exists(), "nothing written");
}

/// `recipe bench_step` prints one JSON line with the timing of the steps asked for, from the
/// same seeded weights in every run (two f32 runs give the same first loss to the bit), and a
/// bf16 run whose first loss is within 5e-2 of f32's (as the runs above); bad sizes exit 2.
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
    assert!(a["images_per_s"].as_f64().unwrap() > 0.0, "{a}");
    assert!(a["ms_per_step"].as_f64().unwrap() > 0.0, "{a}");
    let first = |v: &serde_json::Value| v["first_loss"].as_f64().unwrap();
    assert!(first(&a).is_finite(), "{a}");
    assert_eq!(first(&a), first(&b), "seeded weights: {a} {b}");
    assert!(relative(first(&a), first(&c)) <= 5e-2, "{a} {c}");

    let o = run(&["bench_step", "--steps", "0"]);
    assert_eq!(check_error_shape(&o, "bench_step --steps 0"), 2);
    assert!(stderr(&o).contains("--steps"), "{}", stderr(&o));
}
