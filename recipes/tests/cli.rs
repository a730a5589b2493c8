//! The `recipe` command line as a user meets it: exit code 2 with one `error: …` line for bad
//! input, 1 for a failure during a run, 0 otherwise, and no panic for any option at 0, 1,
//! negative, huge or NaN. Runs the real binary on a tiny IDX dataset the test writes.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn scratch() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("recipe-cli-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    })
}

fn write_idx(dir: &Path, prefix: &str, n: usize) {
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
fn data() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = scratch().join("data");
        std::fs::create_dir_all(&dir).unwrap();
        write_idx(&dir, "train", 64);
        write_idx(&dir, "t10k", 40);
        dir
    })
}

fn recipe(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_recipe"));
    c.args(args).current_dir(scratch()).env("RUST_LOG", "info");
    c
}

fn run(args: &[&str]) -> Output {
    recipe(args).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A quick light_moco run on the tiny data: 1 epoch of 2 steps unless overridden.
fn tiny(run_dir: &str, extra: &[&str]) -> Vec<String> {
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

fn as_strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Exit code and the checks every failing command must pass.
fn check_error_shape(o: &Output, case: &str) -> i32 {
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

#[test]
fn every_option_at_zero_one_negative_huge_and_nan_gives_no_panic() {
    let options = [
        "--epochs",
        "--batch-size",
        "--lr",
        "--seed",
        "--knn-every",
        "--checkpoint-every",
        "--workers",
        "--backbone",
        "--data",
        "--warmup-epochs",
    ];
    let values = ["0", "1", "-1", "18446744073709551616", "1e30", "NaN"];
    let mut cases = 0;
    for option in options {
        for value in values {
            let name = format!("sweep{}{}", option, value.replace('-', "m"));
            let args = tiny(&name, &[option, value]);
            let o = run(&as_strs(&args));
            let code = check_error_shape(&o, &format!("{option} {value}"));
            assert!(
                matches!(code, 0..=2),
                "{option} {value}: exit {code}\n{}",
                stderr(&o)
            );
            cases += 1;
        }
    }
    // In-range large values that run.
    for (option, value, expected) in [
        ("--workers", "100000", 0),
        ("--knn-every", "1000000", 0),
        ("--checkpoint-every", "1000000", 0),
        ("--seed", "18446744073709551615", 0),
        ("--batch-size", "1000000", 2),
    ] {
        let args = tiny(&format!("large{option}"), &[option, value]);
        let o = run(&as_strs(&args));
        let code = check_error_shape(&o, &format!("{option} {value}"));
        assert_eq!(code, expected, "{option} {value}\n{}", stderr(&o));
        if option == "--workers" {
            assert!(
                stderr(&o).contains("loader workers asked for"),
                "{}",
                stderr(&o)
            );
        }
        cases += 1;
    }
    // A huge epoch count trains (and would for long): no panic in its first seconds.
    let args = tiny("huge-epochs", &["--epochs", "1000000"]);
    let mut child = recipe(&as_strs(&args))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() && started.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(200));
    }
    let still_running = child.try_wait().unwrap().is_none();
    let _ = child.kill();
    let o = child.wait_with_output().unwrap();
    assert!(
        still_running,
        "a million epochs ended early:\n{}",
        stderr(&o)
    );
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    println!("{} option cases, no panic", cases + 1);
}

/// `--warmup-epochs` sets the warm-up (kept in config.json); a run that is all warm-up says
/// so; more warm-up than epochs is refused.
#[test]
fn warm_up_is_a_setting_and_a_run_of_warm_up_alone_is_named() {
    // light_moco's 5 warm-up epochs capped at the run's 1: all warm-up.
    let o = run(&as_strs(&tiny("warmup-all", &[])));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("the run is all warm-up"),
        "{}",
        stderr(&o)
    );
    let o = run(&as_strs(&tiny("warmup-none", &["--warmup-epochs", "0"])));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("all warm-up"), "{}", stderr(&o));
    let config: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(scratch().join("warmup-none/config.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(config["train"]["warmup_epochs"], 0, "{config}");
    let o = run(&as_strs(&tiny("warmup-long", &["--warmup-epochs", "2"])));
    assert_eq!(check_error_shape(&o, "--warmup-epochs 2"), 2);
    assert!(
        stderr(&o).contains("--warmup-epochs 2: more than the run's 1 epochs"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn bad_input_exits_2_with_a_message_naming_it() {
    let data_file = data().join("train-images-idx3-ubyte");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["no_such_recipe".into()],
            "unknown recipe `no_such_recipe`",
        ),
        (
            tiny("bs1", &["--batch-size", "1"]),
            "--batch-size 1: must be at least 2",
        ),
        (
            tiny("bs24", &["--batch-size", "24"]),
            "--batch-size 24: the queue of 4096 keys",
        ),
        (
            tiny("lr0", &["--lr", "0"]),
            "--lr 0: must be a finite number > 0",
        ),
        (
            tiny("datafile", &["--data", data_file.to_str().unwrap()]),
            "not a directory",
        ),
        (tiny("unknown-opt", &["--frobnicate"]), "--frobnicate"),
        (
            vec!["eval".into(), "--run-dir".into(), "missing-run".into()],
            "--run-dir missing-run: not a directory",
        ),
        // One image per replica: batch norm's statistics need two (it panicked in the
        // replicas' threads, and left a half-made run directory).
        (
            tiny("dp-bs2", &["--devices", "2", "--batch-size", "2"]),
            "--batch-size 2: each of the 2 replicas would get 1 image(s) of every batch",
        ),
        // A thread per replica: 100000 of them exhausted the system and aborted.
        (
            tiny("dp-many", &["--devices", "100000"]),
            "100000 replicas on one machine: at most 1024",
        ),
        (
            tiny("dp-cpu", &["--devices", "100", "--batch-size", "200"]),
            "--devices 100: the CPU backend runs each replica as a thread",
        ),
        // A negative value is the option's value, refused by the option's own check (it read
        // as a flag `-1`, with a tip that led astray).
        (
            tiny("lr-neg-pair", &["lr=-1"]),
            "--lr -1: must be a finite number > 0",
        ),
        (
            tiny("lr-neg", &["--lr", "-1"]),
            "--lr -1: must be a finite number > 0",
        ),
        // A setting given twice (it was resolved silently, the last winning).
        (
            tiny("twice", &["--epochs", "1", "epochs=2"]),
            "`epochs=2`: --epochs is given as well; give it once",
        ),
        (
            tiny(
                "twice-pair",
                &["method.queue_size=64", "method.queue_size=128"],
            ),
            "method.queue_size is given twice",
        ),
        // Not a number a setting can take (it read as "invalid type: null").
        (
            tiny("nan", &["method.temperature=nan"]),
            "`method.temperature=nan`: nan is not a finite number",
        ),
        (
            tiny("huge", &["method.temperature=1e400"]),
            "1e400 is not a finite number",
        ),
        // The help's own example, on a method whose temperature is its loss's.
        (
            simclr("simclr-temperature", &["method.temperature=0.1"]),
            "did you mean method.loss.NtXent.temperature?",
        ),
        // Networks that cannot fit are refused from their shapes, before their weights are
        // drawn (it grew to 24 GB until the system killed it).
        (
            simclr("huge-head", &["method.hidden_dim=100000000"]),
            "parameters: at least 292.1 GiB with their gradients and optimiser state",
        ),
    ];
    for (args, expected) in cases {
        let o = run(&as_strs(&args));
        let code = check_error_shape(&o, expected);
        assert_eq!(code, 2, "{expected}\n{}", stderr(&o));
        assert!(stderr(&o).contains(expected), "{expected}\n{}", stderr(&o));
        // Refused before anything is written.
        if let Some(i) = args.iter().position(|a| a == "--run-dir") {
            let dir = scratch().join(&args[i + 1]);
            assert!(!dir.exists(), "{expected}: {} was made", dir.display());
        }
    }
}

/// `tiny`'s run with SimCLR.
fn simclr(run_dir: &str, extra: &[&str]) -> Vec<String> {
    let mut args = tiny(run_dir, extra);
    args[0] = "simclr".into();
    args
}

#[test]
fn resume_names_the_options_that_differ_and_extend_makes_the_run_longer() {
    let dir = "resume-run";
    let o = run(&as_strs(&tiny(dir, &[])));
    assert_eq!(check_error_shape(&o, "first run"), 0, "{}", stderr(&o));
    for (extra, expected) in [
        (
            vec!["--resume", "--lr", "0.05"],
            "--lr: run 0.0125, given 0.05",
        ),
        (
            vec!["--resume", "--backbone", "resnet18"],
            "--backbone: run \"Small\", given \"Resnet18\"",
        ),
        (
            vec!["--resume", "--epochs", "2"],
            "--epochs: run 1, given 2",
        ),
        (vec![], "already holds a run"),
    ] {
        let o = run(&as_strs(&tiny(dir, &extra)));
        let code = check_error_shape(&o, expected);
        assert_eq!(code, 2, "{expected}\n{}", stderr(&o));
        assert!(stderr(&o).contains(expected), "{expected}\n{}", stderr(&o));
    }
    // Options that do not change the training may differ.
    let o = run(&as_strs(&tiny(
        dir,
        &[
            "--resume",
            "--checkpoint-every",
            "3",
            "--knn-every",
            "2",
            "--workers",
            "2",
        ],
    )));
    assert_eq!(check_error_shape(&o, "harmless"), 0, "{}", stderr(&o));
    let o = run(&as_strs(&tiny(dir, &["--extend", "--epochs", "2"])));
    assert_eq!(check_error_shape(&o, "extend"), 0, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("extending the run from 1 to 2 epochs"),
        "{}",
        stderr(&o)
    );
    let run_dir = scratch().join(dir);
    assert!(run_dir.join("checkpoints/epoch-0002/meta.json").is_file());
    // The evaluation of the run, and its option checks.
    let o = run(&[
        "eval",
        "--run-dir",
        dir,
        "--probe-epochs",
        "1",
        "--data",
        data().to_str().unwrap(),
    ]);
    assert_eq!(check_error_shape(&o, "eval"), 0, "{}", stderr(&o));
    let printed = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(printed.contains("linear probe"));
    // Its results are kept in the run directory, a row per evaluation.
    let o = run(&["eval", "--run-dir", dir, "--probe-epochs", "0"]);
    assert_eq!(
        check_error_shape(&o, "eval without probe"),
        0,
        "{}",
        stderr(&o)
    );
    let evals = std::fs::read_to_string(run_dir.join("evals.csv")).unwrap();
    let rows: Vec<Vec<&str>> = evals.lines().map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 3, "{evals}");
    assert_eq!(
        rows[0],
        [
            "checkpoint",
            "protocol",
            "knn_k20_top1",
            "knn_k20_top5",
            // k = 200 meets a bank of 64 training images: the column names the k used.
            "knn_k64_top1",
            "knn_k64_top5",
            "probe_epochs",
            "probe_top1",
            "probe_top5"
        ],
        "{evals}"
    );
    let knn20 = printed
        .lines()
        .find_map(|l| l.strip_prefix("kNN (k = 20, T = 0.07): top-1 "))
        .and_then(|rest| rest.split('%').next())
        .unwrap_or_else(|| panic!("{printed}"));
    assert_eq!(rows[1][2], knn20, "{evals}\n{printed}");
    assert!(rows[1][0].ends_with("epoch-0002"), "{evals}");
    assert_eq!((rows[1][1], rows[1][6]), ("sgd", "1"), "{evals}");
    assert!(rows[1][7].parse::<f64>().is_ok(), "{evals}");
    assert_eq!(
        (rows[2][2], rows[2][6], rows[2][7]),
        (knn20, "0", ""),
        "{evals}"
    );
    for value in ["0", "-1", "NaN", "1e400"] {
        let o = run(&["eval", "--run-dir", dir, "--probe-lr", value]);
        let code = check_error_shape(&o, value);
        assert_eq!(code, 2, "--probe-lr {value}\n{}", stderr(&o));
    }
}

/// A data directory the user may not read is reported as "permission denied", not as missing
/// files. As root (CI) the binary runs as `nobody` through `setpriv`, since root reads anything.
#[test]
fn an_unreadable_data_directory_is_reported_as_permission_denied() {
    use std::os::unix::fs::PermissionsExt;
    let locked = scratch().join("locked");
    std::fs::create_dir_all(&locked).unwrap();
    for f in std::fs::read_dir(data()).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, locked.join(f.file_name().unwrap())).unwrap();
    }
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
    let uid = Command::new("id").arg("-u").output().unwrap();
    let root = String::from_utf8_lossy(&uid.stdout).trim() == "0";
    let args = [
        "light_moco",
        "--data",
        locked.to_str().unwrap(),
        "--run-dir",
        "locked-run",
    ];
    let o = if root {
        // A copy of the binary under the scratch directory in /tmp, which `nobody` can reach
        // wherever the checkout lives.
        let binary = scratch().join("recipe-as-nobody");
        std::fs::copy(env!("CARGO_BIN_EXE_recipe"), &binary).unwrap();
        std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755)).unwrap();
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&binary)
            .args(args)
            .current_dir("/")
            .output()
            .expect("setpriv (util-linux) runs the binary as nobody")
    } else {
        run(&args)
    };
    // The copy is as large as the binary: CI's disk is small.
    let _ = std::fs::remove_file(scratch().join("recipe-as-nobody"));
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();
    let code = check_error_shape(&o, "locked");
    assert_eq!(code, 2, "{}", stderr(&o));
    assert!(
        stderr(&o).to_lowercase().contains("permission denied"),
        "{}",
        stderr(&o)
    );
}

/// `--augment-ahead false` (each batch augmented between steps, on the training thread) and
/// `--view-threads false` (Light-MoCo's two query passes back-propagated one after the other, on
/// the training thread) give the same steps.csv, number for number, as the CPU's defaults (the
/// batch augmented on its own thread while the step before runs; the two backward passes on two
/// threads): only the speed differs.
#[test]
fn augmenting_ahead_and_view_threads_give_the_same_run() {
    let settings = [
        ("default", vec![]),
        ("between-steps", vec!["--augment-ahead", "false"]),
        ("one-backward", vec!["--view-threads", "false"]),
    ];
    let runs = settings.map(|(name, extra)| {
        let dir = scratch().join(format!("smoke-threads-{name}"));
        let args = tiny(dir.to_str().unwrap(), &extra);
        let o = run(&as_strs(&args));
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        let steps = std::fs::read_to_string(dir.join("steps.csv")).unwrap();
        let header: Vec<&str> = steps.lines().next().unwrap().split(',').collect();
        let timing = header.iter().position(|c| *c == "images_per_s").unwrap();
        let rows: Vec<Vec<String>> = steps
            .lines()
            .skip(1)
            .map(|l| {
                l.split(',')
                    .enumerate()
                    .filter(|(i, _)| *i != timing)
                    .map(|(_, v)| v.to_string())
                    .collect()
            })
            .collect();
        assert!(rows.len() >= 2, "two steps at least:\n{steps}");
        rows
    });
    assert_eq!(
        runs[0], runs[1],
        "steps.csv with and without augmenting ahead"
    );
    assert_eq!(
        runs[0], runs[2],
        "steps.csv with the views back-propagated on two threads or on one"
    );
}

/// Every MICO recipe (and MoCo v1) runs on the tiny data (two steps) and writes its run
/// directory, with the λ of each step in steps.csv.
/// The recipes whose curricula watch the batch run on two replicas as on one device: the first
/// step's loss (the same views, object boxes, sub-policy and curation) is the one-device run's.
#[test]
fn curricula_on_two_replicas_start_as_one_device() {
    for (name, extra) in [
        ("crop_rotate", &["--stem", "cifar"][..]),
        ("auto_augment_self_paced", &[][..]),
        ("bad_batches", &[][..]),
    ] {
        let first_loss = |devices: &str| -> f64 {
            let dir_name = format!("replicas-{name}-{devices}");
            let mut args = tiny(&dir_name, &["--devices", devices]);
            args[0] = name.to_string();
            args.extend(extra.iter().map(|s| s.to_string()));
            let o = run(&as_strs(&args));
            assert_eq!(check_error_shape(&o, name), 0, "{name}\n{}", stderr(&o));
            let steps =
                std::fs::read_to_string(scratch().join(&dir_name).join("steps.csv")).unwrap();
            steps
                .lines()
                .nth(1)
                .unwrap()
                .split(',')
                .nth(2)
                .unwrap()
                .parse()
                .unwrap()
        };
        let (one, two) = (first_loss("1"), first_loss("2"));
        assert!(
            (one - two).abs() <= 1e-5 * one.abs(),
            "{name}: {one} vs {two}"
        );
    }
}

/// `--shuffle-bn` trains a MoCo recipe on two replicas with shuffling batch norm; another
/// recipe refuses it by name.
#[test]
fn shuffle_bn_is_a_moco_option() {
    let mut args = tiny("shuffle-bn-moco", &["--devices", "2", "--shuffle-bn"]);
    args[0] = "moco_v2".into();
    let o = run(&as_strs(&args));
    assert_eq!(check_error_shape(&o, "moco_v2"), 0, "{}", stderr(&o));
    let config =
        std::fs::read_to_string(scratch().join("shuffle-bn-moco").join("config.json")).unwrap();
    assert!(config.contains("\"shuffle_bn\": true"), "{config}");
    let mut args = tiny("shuffle-bn-simclr", &["--shuffle-bn"]);
    args[0] = "simclr".into();
    let o = run(&as_strs(&args));
    assert_eq!(check_error_shape(&o, "simclr"), 2);
    assert!(
        stderr(&o).contains("error: --shuffle-bn: only the MoCo recipes"),
        "{}",
        stderr(&o)
    );
}

/// The method table's recipes: Barlow Twins and VICReg (VICReg's three terms logged), SimCLR with
/// DCL and DCLW, SwAV and DINO with their multi-crop (6, 2 and no local crops), NNCLR, TiCo, MoCo
/// v3 on the small ResNet and on ViT-Tiny; two steps each, a checkpoint, and the kNN monitor on.
#[test]
fn the_method_table_recipes_run_two_steps() {
    for (name, extra) in [
        ("barlow_twins", &[][..]),
        ("vicreg", &[][..]),
        ("simclr", &["--loss", "dcl"][..]),
        ("simclr", &["--loss", "dclw"][..]),
        ("swav", &[][..]),
        ("swav", &["--local-crops", "0"][..]),
        ("dino", &["--local-crops", "2"][..]),
        ("nnclr", &[][..]),
        ("tico", &[][..]),
        ("moco_v3", &[][..]),
        ("moco_v3", &["--backbone", "vit-tiny"][..]),
    ] {
        let label = format!("{name}{}", extra.join(""));
        let dir_name = format!("table-{label}");
        let mut args = tiny(&dir_name, &["--knn-every", "1"]);
        args[0] = name.to_string();
        args.extend(extra.iter().map(|s| s.to_string()));
        let o = run(&as_strs(&args));
        assert_eq!(check_error_shape(&o, &label), 0, "{label}\n{}", stderr(&o));
        let dir = scratch().join(&dir_name);
        let steps = std::fs::read_to_string(dir.join("steps.csv")).unwrap();
        assert_eq!(steps.lines().count(), 3, "{label}: two steps\n{steps}");
        assert!(dir.join("checkpoints/epoch-0001/meta.json").is_file());
        let header = steps.lines().next().unwrap();
        if name == "vicreg" {
            assert!(
                header.ends_with("vicreg_invariance,vicreg_variance,vicreg_covariance"),
                "{header}"
            );
        }
        if name == "swav" {
            assert!(header.ends_with("prototypes_frozen,swav_queue"), "{header}");
        }
        if name == "dino" {
            assert!(header.ends_with("teacher_temp,momentum"), "{header}");
        }
        if name == "swav" || name == "dino" {
            // The run records how many local crops it drew.
            let config = std::fs::read_to_string(dir.join("config.json")).unwrap();
            let expected = match extra {
                [] => "\"count\": 6",
                [_, n] => &format!("\"count\": {n}"),
                _ => unreachable!(),
            };
            if extra == ["--local-crops", "0"] {
                assert!(config.contains("\"local_crops\": null"), "{config}");
            } else {
                assert!(config.contains(expected), "{label}: {config}");
            }
        }
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains("kNN (k = 20"), "{label}: {out}");
    }
}

/// `--local-crops` belongs to the multi-crop recipes: a two-view recipe refuses it by name.
#[test]
fn local_crops_are_a_multi_crop_option() {
    let mut args = tiny("local-crops-simclr", &["--local-crops", "4"]);
    args[0] = "simclr".into();
    let o = run(&as_strs(&args));
    assert_eq!(check_error_shape(&o, "simclr"), 2);
    assert!(
        stderr(&o).contains("error: --local-crops: recipe `simclr` trains on two views"),
        "{}",
        stderr(&o)
    );
    let mut args = tiny("local-crops-many", &["--local-crops", "100"]);
    args[0] = "dino".into();
    let o = run(&as_strs(&args));
    assert_eq!(check_error_shape(&o, "dino"), 2);
    assert!(stderr(&o).contains("at most 32"), "{}", stderr(&o));
}

#[test]
fn the_mico_recipes_run_two_steps_and_log_their_lambda() {
    for name in [
        "moco_v1",
        "moco_strength_curriculum",
        "auto_augment_self_paced",
        "hcl",
        "hcl_curriculum",
        "curricular_weighting",
        "huber_nt_xent",
        "bad_batches",
        "simclr_pgd",
        "hcl_pgd",
        "rotnet",
        "rotnet_curriculum",
        "rotate_mix",
        "crop_rotate",
        "mixup_simsiam",
        "mico_simsiam",
        "mixup_byol",
        "mico_byol",
        "mixup_simclr",
        "mico_simclr",
        "mixup_moco",
        "mico_moco",
    ] {
        let mut args = tiny(&format!("smoke-{name}"), &[]);
        args[0] = name.to_string();
        let o = run(&as_strs(&args));
        assert_eq!(check_error_shape(&o, name), 0, "{name}\n{}", stderr(&o));
        let dir = scratch().join(format!("smoke-{name}"));
        let steps = std::fs::read_to_string(dir.join("steps.csv")).unwrap();
        assert_eq!(steps.lines().count(), 3, "{name}: two steps\n{steps}");
        assert!(
            dir.join("checkpoints/epoch-0001/meta.json").is_file(),
            "{name}"
        );
        let header = steps.lines().next().unwrap();
        if name == "moco_strength_curriculum" {
            // One epoch of the 4-step schedule at double strength: 0.2 × 2.
            assert!(header.ends_with("strength"), "{header}");
            assert!(steps.lines().nth(1).unwrap().ends_with(",0.4"), "{steps}");
        }
        if name == "auto_augment_self_paced" {
            // The sub-policy and its magnitude under the ceiling (0.2 at the start, the
            // initial magnitude 0.1 below it).
            assert!(header.ends_with("aa_policy,aa_magnitude"), "{header}");
            assert!(steps.lines().nth(1).unwrap().ends_with(",0.1"), "{steps}");
            assert!(dir.join("checkpoints/epoch-0001/curricula.json").is_file());
        }
        if name == "bad_batches" {
            // Curation measures every step (no redraw during the warm-up); epochs.csv counts.
            assert!(header.ends_with("frd,redraws"), "{header}");
            assert!(steps.lines().nth(1).unwrap().ends_with(",0"), "{steps}");
            let epochs = std::fs::read_to_string(dir.join("epochs.csv")).unwrap();
            assert!(
                epochs.starts_with(
                    "epoch,mean_loss,lr,images_per_s,seconds,curation_rejections,\
                     curation_accepted_after_retries"
                ),
                "{epochs}"
            );
        }
        if name.starts_with("rot") || name == "crop_rotate" {
            // The angles in play: all four for RotNet, one in the first quarter of a curriculum.
            assert!(header.ends_with("rotation_angles"), "{header}");
            let expected = if name == "rotnet" { ",4" } else { ",1" };
            assert!(
                steps.lines().nth(1).unwrap().ends_with(expected),
                "{name}: {steps}"
            );
        }
        if name == "crop_rotate" {
            // The boxes are computed once (a one-epoch run), timed in epochs.csv and kept in the
            // checkpoint: one per training image.
            let epochs = std::fs::read_to_string(dir.join("epochs.csv")).unwrap();
            let header = epochs.lines().next().unwrap();
            assert!(header.contains(",box_seconds"), "{epochs}");
            let curricula =
                std::fs::read_to_string(dir.join("checkpoints/epoch-0001/curricula.json")).unwrap();
            let curricula: serde_json::Value = serde_json::from_str(&curricula).unwrap();
            let boxes = &curricula["object_boxes"];
            assert_eq!(boxes["epoch"], 0, "{boxes}");
            assert_eq!(boxes["boxes"].as_array().unwrap().len(), 64, "{boxes}");
            assert!(
                stderr(&o).contains("object boxes of 64 training images"),
                "{}",
                stderr(&o)
            );
        } else {
            let epochs = std::fs::read_to_string(dir.join("epochs.csv")).unwrap();
            assert!(!epochs.contains("box_seconds"), "{name}: {epochs}");
        }
        if name.ends_with("_pgd") {
            // The attack is off in the first quarter of the run.
            assert!(header.ends_with("pgd_strength"), "{header}");
            assert!(steps.lines().nth(1).unwrap().ends_with(",0"), "{steps}");
        }
        if name == "curricular_weighting" {
            // The adaptive t starts at 0 (the loss's EMA of the positive similarities).
            assert!(header.ends_with("curricular_t"), "{header}");
        }
        if name == "hcl_curriculum" {
            // β rises linearly from 0: the first epoch of one reads 0.
            assert!(header.ends_with("hcl_beta"), "{header}");
            assert!(steps.lines().nth(1).unwrap().ends_with(",0"), "{steps}");
        }
        if name.starts_with("mi") {
            assert!(header.ends_with("mixup_lambda"), "{name}: {header}");
            let lambda = steps.lines().nth(1).unwrap().rsplit(',').next().unwrap();
            let expected = if name.starts_with("mico") {
                "0.2"
            } else {
                "0.5"
            };
            assert_eq!(lambda, expected, "{name}");
        }
    }
    // The easy-to-hard order starts at 0.8; a recipe without mixup refuses the option.
    let mut args = tiny("smoke-reverse", &["--easy-to-hard"]);
    args[0] = "mico_simclr".into();
    let o = run(&as_strs(&args));
    assert_eq!(check_error_shape(&o, "reverse"), 0, "{}", stderr(&o));
    let steps = std::fs::read_to_string(scratch().join("smoke-reverse/steps.csv")).unwrap();
    assert!(steps.lines().nth(1).unwrap().ends_with(",0.8"), "{steps}");
    let o = run(&as_strs(&tiny("smoke-no-mixup", &["--easy-to-hard"])));
    assert_eq!(check_error_shape(&o, "no mixup"), 2);
    assert!(stderr(&o).contains("schedules no mixup"), "{}", stderr(&o));
    // The strength options belong to the strength curriculum; their values are checked.
    let o = run(&as_strs(&tiny("smoke-no-strength", &["--strength", "2"])));
    assert_eq!(check_error_shape(&o, "no strength"), 2);
    let mut args = tiny(
        "smoke-bad-strength",
        &["--strength", "9", "--schedule", "linear"],
    );
    args[0] = "moco_strength_curriculum".into();
    let o = run(&as_strs(&args));
    assert_eq!(check_error_shape(&o, "bad strength"), 2);
    assert!(stderr(&o).contains("--strength 9"), "{}", stderr(&o));
    // MICO eq. 3 on the HCL recipes: k − β is a column (β = 0 in the first epoch); the option
    // belongs to the HCL recipes and its value is checked.
    let mut args = tiny("smoke-hard-positive", &["--hard-positive-k", "2"]);
    args[0] = "hcl_curriculum".into();
    let o = run(&as_strs(&args));
    assert_eq!(check_error_shape(&o, "hard positive"), 0, "{}", stderr(&o));
    let steps = std::fs::read_to_string(scratch().join("smoke-hard-positive/steps.csv")).unwrap();
    assert!(
        steps
            .lines()
            .next()
            .unwrap()
            .ends_with("hcl_beta,hcl_k_minus_beta"),
        "{steps}"
    );
    assert!(steps.lines().nth(1).unwrap().ends_with(",0,2"), "{steps}");
    // --loss picks SimCLR's two-view loss; other families refuse it; --hard-positive-k goes
    // with --loss hcl.
    let mut args = tiny(
        "smoke-loss-hcl",
        &["--loss", "hcl", "--hard-positive-k", "1.5"],
    );
    args[0] = "simclr".into();
    let o = run(&as_strs(&args));
    assert_eq!(check_error_shape(&o, "loss hcl"), 0, "{}", stderr(&o));
    let steps = std::fs::read_to_string(scratch().join("smoke-loss-hcl/steps.csv")).unwrap();
    assert!(
        steps.lines().nth(1).unwrap().ends_with(",0.5"),
        "k - beta = 1.5 - 1\n{steps}"
    );
    let config = std::fs::read_to_string(scratch().join("smoke-loss-hcl/config.json")).unwrap();
    assert!(config.contains("\"Hcl\""), "{config}");
    let o = run(&as_strs(&tiny("smoke-loss-moco", &["--loss", "huber"])));
    assert_eq!(check_error_shape(&o, "loss moco"), 2);
    assert!(
        stderr(&o).contains("not of the SimCLR family"),
        "{}",
        stderr(&o)
    );
    let o = run(&as_strs(&tiny("smoke-no-hcl", &["--hard-positive-k", "2"])));
    assert_eq!(check_error_shape(&o, "no hcl"), 2);
    assert!(
        stderr(&o).contains("does not train with HCL"),
        "{}",
        stderr(&o)
    );
    let mut args = tiny("smoke-bad-k", &["--hard-positive-k", "-1"]);
    args[0] = "hcl".into();
    let o = run(&as_strs(&args));
    assert_eq!(check_error_shape(&o, "bad k"), 2);
    assert!(
        stderr(&o).contains("--hard-positive-k -1"),
        "{}",
        stderr(&o)
    );
    // Batch curation's options: a 1-epoch warm-up curates the second epoch with at most one
    // redraw a batch; the counts and the curation's time are columns of epochs.csv. Other
    // recipes refuse the options, and a warm-up of 0 is refused.
    let mut args = tiny(
        "smoke-curation",
        &[
            "--epochs",
            "2",
            "--curation-warmup",
            "1",
            "--curation-retries",
            "1",
        ],
    );
    args[0] = "bad_batches".into();
    let o = run(&as_strs(&args));
    assert_eq!(check_error_shape(&o, "curation"), 0, "{}", stderr(&o));
    let epochs = std::fs::read_to_string(scratch().join("smoke-curation/epochs.csv")).unwrap();
    let header: Vec<&str> = epochs.lines().next().unwrap().split(',').collect();
    for name in [
        "curation_rejections",
        "curation_accepted_after_retries",
        "curation_seconds",
    ] {
        assert!(header.contains(&name), "{epochs}");
    }
    let steps = std::fs::read_to_string(scratch().join("smoke-curation/steps.csv")).unwrap();
    let redraws = steps
        .lines()
        .next()
        .unwrap()
        .split(',')
        .position(|c| c == "redraws")
        .unwrap();
    for row in steps.lines().skip(1) {
        let r: usize = row.split(',').nth(redraws).unwrap().parse().unwrap();
        assert!(r <= 1, "{steps}");
    }
    // PGD: on in the last quarter of a 4-epoch run, with the steps asked for; other recipes
    // refuse --pgd-steps, and the PGD recipes refuse a loss they do not harden.
    let mut args = tiny("smoke-pgd-on", &["--epochs", "4", "--pgd-steps", "2"]);
    args[0] = "hcl_pgd".into();
    let o = run(&as_strs(&args));
    assert_eq!(check_error_shape(&o, "pgd on"), 0, "{}", stderr(&o));
    let steps = std::fs::read_to_string(scratch().join("smoke-pgd-on/steps.csv")).unwrap();
    assert_eq!(steps.lines().count(), 9, "{steps}");
    assert!(steps.lines().last().unwrap().ends_with(",1"), "{steps}");
    let config = std::fs::read_to_string(scratch().join("smoke-pgd-on/config.json")).unwrap();
    assert!(config.contains("\"steps\": 2"), "{config}");
    let o = run(&as_strs(&tiny("smoke-no-pgd", &["--pgd-steps", "2"])));
    assert_eq!(check_error_shape(&o, "no pgd"), 2);
    assert!(
        stderr(&o).contains("does not harden its negatives"),
        "{}",
        stderr(&o)
    );
    let mut args = tiny("smoke-pgd-curricular", &["--loss", "curricular"]);
    args[0] = "simclr_pgd".into();
    let o = run(&as_strs(&args));
    assert_eq!(check_error_shape(&o, "pgd curricular"), 2);
    assert!(
        stderr(&o).contains("NT-Xent and HCL only"),
        "{}",
        stderr(&o)
    );
    let o = run(&as_strs(&tiny(
        "smoke-no-curation",
        &["--curation-warmup", "2"],
    )));
    assert_eq!(check_error_shape(&o, "no curation"), 2);
    assert!(
        stderr(&o).contains("does not curate its batches"),
        "{}",
        stderr(&o)
    );
    let mut args = tiny("smoke-curation-0", &["--curation-warmup", "0"]);
    args[0] = "bad_batches".into();
    let o = run(&as_strs(&args));
    assert_eq!(check_error_shape(&o, "curation 0"), 2);
    assert!(stderr(&o).contains("--curation-warmup 0"), "{}", stderr(&o));
}

/// A pixel value that differs by image, row, column and channel.
fn pixel(n: usize, r: usize, c: usize, ch: usize) -> u8 {
    ((n * 37 + r * 5 + c * 3 + ch * 71) % 256) as u8
}

/// `n` CIFAR records (label bytes, then 32×32 planes), labels cycling over 10 classes.
fn cifar_records(n: usize, label_bytes: usize) -> Vec<u8> {
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

/// `n` STL-10 images (96×96, planar, column-major) and their labels (1 to 10).
fn stl_images(n: usize) -> (Vec<u8>, Vec<u8>) {
    let mut x = Vec::new();
    for i in 0..n {
        for ch in 0..3 {
            for c in 0..96 {
                for r in 0..96 {
                    x.push(pixel(i, r, c, ch));
                }
            }
        }
    }
    (x, (0..n).map(|i| (i % 10) as u8 + 1).collect())
}

/// Every --dataset runs two steps on small files written here (64 images to train on, 40 to
/// test), and its run directory records the dataset; wrong combinations exit 2.
#[test]
fn every_dataset_option_runs_two_steps() {
    let root = scratch().join("datasets");
    let _ = std::fs::remove_dir_all(&root);
    // CIFAR-10: five training batches and the test batch.
    let cifar10 = root.join("cifar10");
    std::fs::create_dir_all(&cifar10).unwrap();
    for k in 1..=5 {
        let n = if k < 5 { 13 } else { 12 };
        std::fs::write(
            cifar10.join(format!("data_batch_{k}.bin")),
            cifar_records(n, 1),
        )
        .unwrap();
    }
    std::fs::write(cifar10.join("test_batch.bin"), cifar_records(40, 1)).unwrap();
    // CIFAR-100: coarse and fine label bytes.
    let cifar100 = root.join("cifar100");
    std::fs::create_dir_all(&cifar100).unwrap();
    std::fs::write(cifar100.join("train.bin"), cifar_records(64, 2)).unwrap();
    std::fs::write(cifar100.join("test.bin"), cifar_records(40, 2)).unwrap();
    // STL-10: pre-training on the unlabeled split, the kNN monitor on train/test.
    let stl = root.join("stl10");
    std::fs::create_dir_all(&stl).unwrap();
    let (x, _) = stl_images(64);
    std::fs::write(stl.join("unlabeled_X.bin"), x).unwrap();
    for split in ["train", "test"] {
        let (x, y) = stl_images(20);
        std::fs::write(stl.join(format!("{split}_X.bin")), x).unwrap();
        std::fs::write(stl.join(format!("{split}_y.bin")), y).unwrap();
    }
    // An image folder of 20×20 PNGs, resized to 16.
    let folder = root.join("folder");
    for (split, n) in [("train", 32), ("val", 20)] {
        for class in ["cat", "dog"] {
            let dir = folder.join(split).join(class);
            std::fs::create_dir_all(&dir).unwrap();
            for i in 0..n {
                let img = image::RgbImage::from_fn(20, 20, |c, r| {
                    image::Rgb([0, 1, 2].map(|ch| pixel(i, r as usize, c as usize, ch)))
                });
                img.save(dir.join(format!("{i:02}.png"))).unwrap();
            }
        }
    }
    let cases: [(&str, &Path, &[&str]); 4] = [
        ("cifar10", &cifar10, &[]),
        ("cifar100", &cifar100, &[]),
        ("stl10", &stl, &[]),
        ("image-folder", &folder, &["--image-size", "16"]),
    ];
    for (dataset, dir, extra) in cases {
        let name = format!("dataset-{dataset}");
        let mut args = tiny(
            &name,
            &["--dataset", dataset, "--data-dir", dir.to_str().unwrap()],
        );
        args.extend(extra.iter().map(|s| s.to_string()));
        let o = run(&as_strs(&args));
        assert_eq!(
            check_error_shape(&o, dataset),
            0,
            "{dataset}\n{}",
            stderr(&o)
        );
        let run_dir = scratch().join(&name);
        let steps = std::fs::read_to_string(run_dir.join("steps.csv")).unwrap();
        assert_eq!(steps.lines().count(), 3, "{dataset}: two steps\n{steps}");
        // The summary compares the trained backbone with itself at initialisation.
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(
            stdout.contains("top-1")
                && stdout.contains("at initialisation")
                && stdout.contains("images/s"),
            "{dataset}: {stdout}"
        );
        assert!(run_dir.join("knn_at_init.json").is_file(), "{dataset}");
        assert!(stdout.contains("raw pixels"), "{dataset}: {stdout}");
        // TensorBoard's event file beside the CSVs.
        let events = std::fs::read_dir(run_dir.join("tensorboard"))
            .unwrap()
            .count();
        assert_eq!(events, 1, "{dataset}");
        // Plots of every logged quantity, and the summary that shows them.
        let summary = std::fs::read_to_string(run_dir.join("summary.md")).unwrap();
        for plot in ["loss", "lr", "knn_top1", "epoch_mean_loss"] {
            let path = run_dir.join("plots").join(format!("{plot}.png"));
            let img = image::open(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
                .to_rgb8();
            assert_eq!(img.dimensions(), (800, 480), "{plot}");
            let first = *img.get_pixel(0, 0);
            let distinct = img.pixels().filter(|p| **p != first).count();
            assert!(
                distinct > 2_000,
                "{plot}: nearly blank ({distinct} pixels drawn)"
            );
            assert!(summary.contains(&format!("plots/{plot}.png")), "{summary}");
        }
        let config = std::fs::read_to_string(run_dir.join("config.json")).unwrap();
        let recorded = format!("\"dataset\": \"{}\"", dataset_variant(dataset));
        assert!(config.contains(&recorded), "{dataset}: {config}");
        // eval reads the same dataset back from the run's record.
        let o = run(&[
            "eval",
            "--run-dir",
            run_dir.to_str().unwrap(),
            "--probe-epochs",
            "0",
        ]);
        assert_eq!(
            check_error_shape(&o, dataset),
            0,
            "{dataset} eval\n{}",
            stderr(&o)
        );
    }
    // Light-MoCo's linear protocol: LARS, the batch is the 64 training images, the learning rate
    // scaled from 0.1 at 4096: 0.1 · 64 / 4096 = 0.0015625.
    let o = run(&[
        "eval",
        "--run-dir",
        scratch().join("dataset-cifar10").to_str().unwrap(),
        "--protocol",
        "light-moco",
        "--probe-epochs",
        "1",
    ]);
    assert_eq!(
        check_error_shape(&o, "light-moco probe"),
        0,
        "{}",
        stderr(&o)
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("linear probe (LightMoco, 1 epochs, batch 64, lr 0.0015625)"),
        "{out}"
    );
    // A dataset without its directory, --image-size elsewhere, a directory missing its files.
    let o = run(&["light_moco", "--dataset", "cifar10", "--run-dir", "no-dir"]);
    assert_eq!(check_error_shape(&o, "no dir"), 2);
    assert!(
        stderr(&o).contains("--dataset cifar10: needs --data-dir"),
        "{}",
        stderr(&o)
    );
    let o = run(&as_strs(&tiny("size", &["--image-size", "16"])));
    assert_eq!(check_error_shape(&o, "size"), 2);
    assert!(
        stderr(&o).contains("only for --dataset image-folder"),
        "{}",
        stderr(&o)
    );
    let o = run(&as_strs(&tiny(
        "missing-files",
        &[
            "--dataset",
            "stl10",
            "--data-dir",
            cifar10.to_str().unwrap(),
        ],
    )));
    assert_eq!(check_error_shape(&o, "missing files"), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("unlabeled_X.bin"), "{}", stderr(&o));
}

fn dataset_variant(dataset: &str) -> &'static str {
    match dataset {
        "cifar10" => "Cifar10",
        "cifar100" => "Cifar100",
        "stl10" => "Stl10",
        _ => "ImageFolder",
    }
}

/// `recipe help NAME` prints the recipe's options under its own name and exits 0; the top-level
/// help lists the recipes; an unknown name exits 2 naming the known ones.
#[test]
fn help_names_the_recipes_and_their_options() {
    let o = run(&["help", "light_moco"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("Usage: recipe light_moco [OPTIONS]"), "{out}");
    assert!(out.contains("--dataset") && out.contains("--loss"), "{out}");
    let o = run(&["--help"]);
    assert_eq!(o.status.code(), Some(0));
    let out = String::from_utf8_lossy(&o.stdout);
    for name in [
        "light_moco",
        "bad_batches",
        "rotnet_curriculum",
        "auto_augment_self_paced",
    ] {
        assert!(out.contains(name), "{name}: {out}");
    }
    let o = run(&["help", "worked_values"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // The commands' own help (it said "unknown recipe `resume`").
    for (command, expected) in [
        ("resume", "Usage: recipe resume <RUN_DIR>"),
        ("orchestrator", "Usage: recipe orchestrator"),
    ] {
        let o = run(&["help", command]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains(expected), "{out}");
    }
    let o = run(&["help", "nope"]);
    assert_eq!(check_error_shape(&o, "help nope"), 2);
    assert!(
        stderr(&o).contains("unknown recipe `nope`"),
        "{}",
        stderr(&o)
    );
}

/// `--device`: the CPU backend has one device, 0; another number is a usage error that says so
/// (exit 2, one line) for the training recipes, the supervised ones and `worked_values`, which
/// runs on device 0.
#[test]
fn a_device_number_the_backend_lacks_is_refused() {
    let data = data();
    let data = data.to_str().unwrap();
    for args in [
        &["simclr", "--data", data, "--epochs", "1", "--device", "1"][..],
        &[
            "spl_advise",
            "--data",
            data,
            "--epochs",
            "1",
            "--device",
            "3",
        ],
        &["worked_values", "--device", "2"],
    ] {
        let o = run(args);
        assert_eq!(check_error_shape(&o, &args.join(" ")), 2, "{args:?}");
        assert!(
            stderr(&o).contains("the CPU backend has one device (--device 0)"),
            "{args:?}: {}",
            stderr(&o)
        );
    }
    let o = run(&["worked_values", "--device", "0"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = run(&["worked_values", "--device", "x"]);
    assert_eq!(check_error_shape(&o, "worked_values --device x"), 2);
}

/// Every --backbone runs two steps of SimCLR on 32×32 RGB images (VGG-16's smallest input), and
/// the run records it; --stem belongs to the ResNets.
#[test]
fn every_backbone_option_runs_two_steps() {
    let dir = scratch().join("backbone-data");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // Five training images (two steps of two), two test images: the heavy models (WRN-28-10,
    // ResNet-50, VGG-16) stay at a few seconds each.
    for k in 1..=5 {
        std::fs::write(dir.join(format!("data_batch_{k}.bin")), cifar_records(1, 1)).unwrap();
    }
    std::fs::write(dir.join("test_batch.bin"), cifar_records(2, 1)).unwrap();
    for backbone in [
        "resnet18",
        "resnet34",
        "resnet50",
        "wrn-16-8",
        "wrn-28-10",
        "efficientnet-b0",
        "efficientnet-b1",
        "mobilenet-v3-large",
        "mobilenet-v3-small",
        "vgg16-bn",
        "lenet5",
        "small",
    ] {
        let name = format!("backbone-{backbone}");
        let mut args = tiny(
            &name,
            &[
                "--dataset",
                "cifar10",
                "--data-dir",
                dir.to_str().unwrap(),
                "--backbone",
                backbone,
                "--batch-size",
                "2",
            ],
        );
        args[0] = "simclr".into();
        let o = run(&as_strs(&args));
        assert_eq!(
            check_error_shape(&o, backbone),
            0,
            "{backbone}\n{}",
            stderr(&o)
        );
        let steps = std::fs::read_to_string(scratch().join(&name).join("steps.csv")).unwrap();
        assert_eq!(steps.lines().count(), 3, "{backbone}: two steps\n{steps}");
        // A checkpoint of VGG-16 or WRN-28-10 with its optimiser state is over a gigabyte, and
        // CI's disk is small: each run directory goes once it has been checked.
        std::fs::remove_dir_all(scratch().join(&name)).unwrap();
    }
    let mut args = tiny(
        "stem-resnet",
        &["--backbone", "resnet18", "--stem", "imagenet"],
    );
    args[0] = "simclr".into();
    let o = run(&as_strs(&args));
    assert_eq!(check_error_shape(&o, "stem"), 0, "{}", stderr(&o));
    let config = std::fs::read_to_string(scratch().join("stem-resnet/config.json")).unwrap();
    assert!(config.contains("\"stem\": \"Imagenet\""), "{config}");
    let o = run(&as_strs(&tiny(
        "stem-lenet",
        &["--backbone", "lenet5", "--stem", "cifar"],
    )));
    assert_eq!(check_error_shape(&o, "stem lenet"), 2);
    assert!(
        stderr(&o).contains("--stem: only for the ResNets"),
        "{}",
        stderr(&o)
    );
}

/// The supervised recipes (SPL-ADVisE and its baselines) train two epochs of two steps on the
/// tiny data — the second epoch selects by SPLD in `spl_advise` and `spld` — and write a
/// supervised run directory; the self-supervised options and a self-supervised resume of it are
/// refused by name.
#[test]
fn the_supervised_recipes_run_two_epochs() {
    for name in ["spl_advise", "spld", "random_sampling"] {
        let dir_name = format!("supervised-{name}");
        let mut args = tiny(&dir_name, &["--epochs", "2"]);
        args[0] = name.to_string();
        let o = run(&as_strs(&args));
        assert_eq!(check_error_shape(&o, name), 0, "{name}\n{}", stderr(&o));
        let dir = scratch().join(&dir_name);
        let steps = std::fs::read_to_string(dir.join("steps.csv")).unwrap();
        assert_eq!(steps.lines().count(), 5, "{name}: four steps\n{steps}");
        let epochs = std::fs::read_to_string(dir.join("epochs.csv")).unwrap();
        let header: Vec<&str> = epochs.lines().next().unwrap().split(',').collect();
        let column = |c: &str| header.iter().position(|h| *h == c).unwrap();
        let last: Vec<&str> = epochs.lines().nth(2).unwrap().split(',').collect();
        let top1: f64 = last[column("test_top1")].parse().unwrap();
        assert!((0.0..=1.0).contains(&top1), "{epochs}");
        let meta = std::fs::read_to_string(dir.join("checkpoints/epoch-0002/meta.json")).unwrap();
        assert!(meta.contains("\"kind\": \"supervised\""), "{meta}");
        assert_eq!(
            dir.join("checkpoints/epoch-0002/embedding.mpk").is_file(),
            name == "spl_advise"
        );
        // One record format for every run: the supervised step's settings and the selection
        // hook's.
        let config: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap())
                .unwrap();
        assert_eq!(config["format"], "curriculum-ssl run", "{config}");
        assert!(config["supervised"]["batch_size"].is_u64(), "{config}");
        assert!(
            config["hooks"]["selection"]["method"].is_string(),
            "{config}"
        );
        // A resume with the same settings and a longer --extend continue the run.
        let mut more = tiny(&dir_name, &["--epochs", "3", "--extend"]);
        more[0] = name.to_string();
        let o = run(&as_strs(&more));
        assert_eq!(check_error_shape(&o, name), 0, "{name}\n{}", stderr(&o));
        let steps = std::fs::read_to_string(dir.join("steps.csv")).unwrap();
        assert_eq!(steps.lines().count(), 7, "{name}: two more steps\n{steps}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
    for (args, message) in [
        (
            vec!["spld", "--loss", "hcl"],
            "--loss: recipe `spld` is supervised",
        ),
        (
            vec!["random_sampling", "--augment-ahead", "true"],
            "--augment-ahead: recipe `random_sampling` is supervised",
        ),
        (
            vec!["spld", "--view-threads", "false"],
            "--view-threads: recipe `spld` is supervised",
        ),
        (
            vec!["random_sampling", "--embedding-backbone", "lenet5"],
            "--embedding-backbone: recipe `random_sampling` has no embedding network",
        ),
        (
            vec!["random_sampling", "--clusters", "4"],
            "--clusters: recipe `random_sampling` clusters nothing",
        ),
        (
            vec!["spld", "--clusters", "0"],
            "--clusters 0: must lie in [1, 1000]",
        ),
        // VGG-16 needs 32×32 images: 28×28 garments are refused before any work.
        (
            vec!["spl_advise", "--embedding-backbone", "vgg16-bn"],
            "--embedding-backbone: VGG: images of 28x28 are too small",
        ),
        (
            vec!["random_sampling", "--backbone", "vgg16-bn"],
            "--backbone: VGG: images of 28x28 are too small",
        ),
    ] {
        let mut full = tiny("supervised-refused", &args[1..]);
        full[0] = args[0].to_string();
        let o = run(&as_strs(&full));
        assert_eq!(check_error_shape(&o, args[0]), 2, "{}", stderr(&o));
        assert!(stderr(&o).contains(message), "{}", stderr(&o));
    }
    // A self-supervised recipe does not resume a supervised run.
    let mut args = tiny("supervised-then-ssl", &["--epochs", "1"]);
    args[0] = "random_sampling".into();
    assert_eq!(run(&as_strs(&args)).status.code(), Some(0));
    // Nor do eval, export and embed read it: they say what it is (it was "missing field
    // `method`").
    let supervised = scratch().join("supervised-then-ssl");
    let run_dir = supervised.to_str().unwrap();
    let out = scratch().join("supervised.npy");
    for command in [
        vec!["eval", "--run-dir", run_dir],
        vec!["export", "--run-dir", run_dir],
        vec![
            "embed",
            "--run-dir",
            run_dir,
            "--out",
            out.to_str().unwrap(),
        ],
    ] {
        let o = run(&command);
        assert_eq!(check_error_shape(&o, command[0]), 2, "{}", stderr(&o));
        let err = stderr(&o);
        assert!(
            err.contains("a supervised run (random_sampling)") && !err.contains("missing field"),
            "{err}"
        );
    }
    let mut ssl = tiny("supervised-then-ssl", &["--resume"]);
    ssl[0] = "light_moco".into();
    let o = run(&as_strs(&ssl));
    assert_eq!(check_error_shape(&o, "ssl resume"), 2, "{}", stderr(&o));
    std::fs::remove_dir_all(scratch().join("supervised-then-ssl")).unwrap();
}

/// The colour of uniform image `i` of the unlabelled-folder test.
fn flat_colour(i: usize) -> [u8; 3] {
    [(i * 7) % 256, (i * 13 + 50) % 256, (i * 29 + 100) % 256].map(|v| v as u8)
}

/// The views' normalisation a run recorded in its config.json.
fn recorded_normalisation(run_dir: &Path) -> (Vec<f64>, Vec<f64>) {
    let text = std::fs::read_to_string(run_dir.join("config.json")).unwrap();
    let config: serde_json::Value = serde_json::from_str(&text).unwrap();
    let n = &config["augmentation"]["view1"]["normalize"];
    let list = |v: &serde_json::Value| -> Vec<f64> {
        v.as_array()
            .unwrap_or_else(|| panic!("no normalisation in {text}"))
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    (list(&n["mean"]), list(&n["std"]))
}

/// Pre-training on one's own images: a folder of any sizes, flat and nested, with a text file
/// among them, resized and centre-cropped; the normalisation is computed from the images; the
/// kNN monitor is off without labels and on with a labelled --knn-data tree, which `recipe eval`
/// then reads back.
#[test]
fn a_folder_of_unlabelled_images_of_any_size_trains_with_its_own_statistics() {
    let root = scratch().join("own-images");
    let _ = std::fs::remove_dir_all(&root);
    // 32 uniform images: 12 of 16×16 at the top, 10 of 24×16 in a/, 10 of 40×40 in b/c/.
    let sizes = [
        (0..12, "", 16, 16),
        (12..22, "a", 24, 16),
        (22..32, "b/c", 40, 40),
    ];
    for (range, sub, w, h) in sizes {
        let dir = root.join(sub);
        std::fs::create_dir_all(&dir).unwrap();
        for i in range {
            image::RgbImage::from_pixel(w, h, image::Rgb(flat_colour(i)))
                .save(dir.join(format!("img{i:02}.png")))
                .unwrap();
        }
    }
    std::fs::write(root.join("README.txt"), "my photos").unwrap();
    // Every image is one colour, so resizing and cropping keep it: the statistics are those of
    // the 32 colours, each image weighing the same.
    let (mut mean, mut std) = (vec![0.0; 3], vec![0.0; 3]);
    for ch in 0..3 {
        let values: Vec<f64> = (0..32).map(|i| flat_colour(i)[ch] as f64 / 255.0).collect();
        mean[ch] = values.iter().sum::<f64>() / 32.0;
        std[ch] = (values.iter().map(|v| (v - mean[ch]).powi(2)).sum::<f64>() / 32.0).sqrt();
    }
    let base = |name: &str| -> Vec<String> {
        tiny(
            name,
            &[
                "--dataset",
                "folder",
                "--data-dir",
                root.to_str().unwrap(),
                "--batch-size",
                "16",
            ],
        )
    };

    // Several sizes without --image-size: the error names the option that resizes.
    let o = run(&as_strs(&base("own-nosize")));
    assert_eq!(check_error_shape(&o, "no size"), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("--image-size"), "{}", stderr(&o));

    let mut args = base("own-run");
    args.extend(["--image-size", "16"].map(String::from));
    let o = run(&as_strs(&args));
    assert_eq!(check_error_shape(&o, "own"), 0, "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("kNN monitor off"), "{out}");
    assert!(
        stderr(&o).contains("1 files that are not"),
        "{}",
        stderr(&o)
    );
    let run_dir = scratch().join("own-run");
    let steps = std::fs::read_to_string(run_dir.join("steps.csv")).unwrap();
    assert_eq!(steps.lines().count(), 3, "two steps of 16\n{steps}");
    assert!(!run_dir.join("knn_at_init.json").exists());
    let (got_mean, got_std) = recorded_normalisation(&run_dir);
    for ch in 0..3 {
        assert!(
            (got_mean[ch] - mean[ch]).abs() < 1e-9,
            "{got_mean:?} {mean:?}"
        );
        assert!((got_std[ch] - std[ch]).abs() < 1e-6, "{got_std:?} {std:?}");
    }
    // Without labels there is nothing to evaluate on: the error says what to give.
    let o = run(&["eval", "--run-dir", run_dir.to_str().unwrap()]);
    assert_eq!(
        check_error_shape(&o, "eval unlabelled"),
        2,
        "{}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("--knn-data"), "{}", stderr(&o));

    // Given statistics replace the computed ones; their count must match the channels.
    let mut args = base("own-given");
    args.extend(
        [
            "--image-size",
            "16",
            "--mean",
            "0.5,0.4,0.3",
            "--std",
            "0.2,0.2,0.25",
        ]
        .map(String::from),
    );
    let o = run(&as_strs(&args));
    assert_eq!(check_error_shape(&o, "given stats"), 0, "{}", stderr(&o));
    let (got_mean, got_std) = recorded_normalisation(&scratch().join("own-given"));
    assert_eq!(
        (got_mean, got_std),
        (vec![0.5, 0.4, 0.3], vec![0.2, 0.2, 0.25])
    );
    let mut args = base("own-badstats");
    args.extend(["--image-size", "16", "--mean", "0.5", "--std", "0.2"].map(String::from));
    let o = run(&as_strs(&args));
    assert_eq!(check_error_shape(&o, "one mean"), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--mean / --std for images of 3 channels")
            && stderr(&o).contains("needs 3 means and stds, got 1 and 1"),
        "{}",
        stderr(&o)
    );

    // A labelled tree of other sizes turns the monitor on; eval reads it from the run.
    let knn = scratch().join("own-knn");
    let _ = std::fs::remove_dir_all(&knn);
    for (split, n) in [("train", 12), ("val", 6)] {
        for (class, base_value) in [("dark", 20u8), ("bright", 220u8)] {
            let dir = knn.join(split).join(class);
            std::fs::create_dir_all(&dir).unwrap();
            for i in 0..n {
                let v = base_value.wrapping_add(i as u8);
                image::RgbImage::from_pixel(20 + i as u32, 18, image::Rgb([v, v / 2, 255 - v]))
                    .save(dir.join(format!("{i}.png")))
                    .unwrap();
            }
        }
    }
    let mut args = base("own-knn-run");
    args.extend(["--image-size", "16", "--knn-data", knn.to_str().unwrap()].map(String::from));
    let o = run(&as_strs(&args));
    assert_eq!(check_error_shape(&o, "knn data"), 0, "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("kNN (k = ") && out.contains("at initialisation"),
        "{out}"
    );
    let run_dir = scratch().join("own-knn-run");
    let o = run(&[
        "eval",
        "--run-dir",
        run_dir.to_str().unwrap(),
        "--probe-epochs",
        "0",
    ]);
    assert_eq!(check_error_shape(&o, "eval knn data"), 0, "{}", stderr(&o));
    assert!(run_dir.join("evals.csv").is_file());
    // A --knn-data without val/ is refused before anything is read.
    let mut args = base("own-knn-bad");
    args.extend(["--image-size", "16", "--knn-data", root.to_str().unwrap()].map(String::from));
    let o = run(&as_strs(&args));
    assert_eq!(check_error_shape(&o, "knn no split"), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("no train/ folder"), "{}", stderr(&o));
}

/// The losses of a run's steps.csv, as written.
fn losses(run_dir: &Path) -> Vec<String> {
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

/// Settings without recompiling: KEY=VALUE overrides reach the method, the optimiser and the
/// augmentation; every run writes recipe.toml; the file run again reproduces the run to the
/// last digit of its losses; --resume and `recipe resume` need only the run directory.
#[test]
fn settings_come_from_key_value_overrides_and_the_runs_own_recipe_toml() {
    let first = scratch().join("settings-first");
    let o = run(&as_strs(&tiny(
        "settings-first",
        &[
            "--epochs",
            "2",
            "method.queue_size=2048",
            "method.soft_nce.temperature=0.2",
            "optimizer.weight_decay=1e-5",
            "augmentation.view1.blur=none",
            "warmup_epochs=1",
        ],
    )));
    assert_eq!(check_error_shape(&o, "overrides"), 0, "{}", stderr(&o));
    // The overrides reached what trained: config.json records the method, optimiser-free
    // trainer settings and the augmentation as the trainer saw them.
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(first.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["run"]["method"]["queue_size"], 2048);
    assert_eq!(config["run"]["method"]["soft_nce"]["temperature"], 0.2);
    assert!(config["augmentation"]["view1"]["blur"].is_null());
    assert!(!config["augmentation"]["view2"]["blur"].is_null());
    assert_eq!(config["train"]["warmup_epochs"], 1);
    let file: toml::Table = std::fs::read_to_string(first.join("recipe.toml"))
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(file["recipe"].as_str(), Some("light_moco"));
    assert_eq!(file["optimizer"]["weight_decay"].as_float(), Some(1e-5));
    assert_eq!(file["method"]["queue_size"].as_integer(), Some(2048));
    assert_eq!(file["options"]["epochs"].as_integer(), Some(2));
    assert_eq!(file["options"]["lr"].as_float(), Some(0.0125));
    assert_eq!(file["augmentation"]["view1"]["blur"].as_str(), Some("none"));

    // The file alone, in a new directory, is the same run.
    let again = scratch().join("settings-again");
    let o = run(&[
        "light_moco",
        "--config",
        first.join("recipe.toml").to_str().unwrap(),
        "--run-dir",
        again.to_str().unwrap(),
    ]);
    assert_eq!(check_error_shape(&o, "from file"), 0, "{}", stderr(&o));
    assert_eq!(losses(&first), losses(&again));
    assert_eq!(losses(&first).len(), 4);
    // The command line wins over the file.
    let o = run(&[
        "light_moco",
        "--config",
        first.join("recipe.toml").to_str().unwrap(),
        "--run-dir",
        scratch().join("settings-other").to_str().unwrap(),
        "method.queue_size=1024",
        "--epochs",
        "1",
    ]);
    assert_eq!(
        check_error_shape(&o, "file and overrides"),
        0,
        "{}",
        stderr(&o)
    );
    let other: toml::Table =
        std::fs::read_to_string(scratch().join("settings-other").join("recipe.toml"))
            .unwrap()
            .parse()
            .unwrap();
    assert_eq!(other["method"]["queue_size"].as_integer(), Some(1024));
    assert_eq!(other["options"]["epochs"].as_integer(), Some(1));

    // Resume and extend with the run directory alone.
    let o = run(&[
        "light_moco",
        "--run-dir",
        first.to_str().unwrap(),
        "--resume",
    ]);
    assert_eq!(check_error_shape(&o, "resume"), 0, "{}", stderr(&o));
    let o = run(&[
        "resume",
        first.to_str().unwrap(),
        "--extend",
        "--epochs",
        "3",
    ]);
    assert_eq!(check_error_shape(&o, "recipe resume"), 0, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("extending the run from 2 to 3 epochs"),
        "{}",
        stderr(&o)
    );
    assert_eq!(losses(&first).len(), 6);
    let o = run(&["resume", scratch().to_str().unwrap()]);
    assert_eq!(check_error_shape(&o, "resume no file"), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("no recipe.toml"), "{}", stderr(&o));

    // Bad settings name what is wrong.
    for (extra, expected) in [
        (
            "method.queue_sise=1",
            "has no setting `queue_sise` (it has: ",
        ),
        ("model.depth=3", "`model` is not a section"),
        ("queue_size", "settings are given as KEY=VALUE"),
        ("epoch=3", "`epoch` is not an option"),
        (
            "optimizer.weight_decay=heavy",
            "optimizer: the settings given do not make",
        ),
        (
            "augmentation.view1.solarize.p=0.2",
            "augmentation.view1.solarize is off",
        ),
        (
            "curation.max_retries=1",
            "recipe `light_moco` has no curation settings",
        ),
        ("method.queue_size=0", "must hold at least one step's keys"),
        (
            "method.momentum=1e400",
            "`method.momentum=1e400`: 1e400 is not a finite number",
        ),
    ] {
        let o = run(&as_strs(&tiny("settings-bad", &[extra])));
        assert_eq!(check_error_shape(&o, extra), 2, "{extra}\n{}", stderr(&o));
        assert!(stderr(&o).contains(expected), "{extra}\n{}", stderr(&o));
    }
    // The recipe that curates its batches takes the curation's settings.
    let mut args = tiny("settings-curation", &["curation.max_retries=1"]);
    args[0] = "bad_batches".into();
    let o = run(&as_strs(&args));
    assert_eq!(check_error_shape(&o, "curation"), 0, "{}", stderr(&o));
    let file: toml::Table =
        std::fs::read_to_string(scratch().join("settings-curation").join("recipe.toml"))
            .unwrap()
            .parse()
            .unwrap();
    assert_eq!(file["curation"]["max_retries"].as_integer(), Some(1));
    let o = run(&[
        "simclr",
        "--config",
        first.join("recipe.toml").to_str().unwrap(),
        "--run-dir",
        "settings-wrong-recipe",
    ]);
    assert_eq!(check_error_shape(&o, "other recipe"), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("written for recipe `light_moco`"),
        "{}",
        stderr(&o)
    );
}

/// The header of a safetensors file: its tensors' shapes and its metadata.
fn safetensors_header(path: &Path) -> serde_json::Value {
    let bytes = std::fs::read(path).unwrap();
    let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    serde_json::from_slice(&bytes[8..8 + len]).unwrap()
}

/// A `.npy` file's shape and float32 values.
fn read_npy(path: &Path) -> (Vec<u64>, Vec<f32>) {
    let bytes = std::fs::read(path).unwrap();
    let npy = npyz::NpyFile::new(&bytes[..]).unwrap();
    let shape = npy.shape().to_vec();
    (shape, npy.into_vec::<f32>().unwrap())
}

/// The example binary that `cargo test` builds beside the test binaries.
fn example(name: &str) -> PathBuf {
    let recipe = PathBuf::from(env!("CARGO_BIN_EXE_recipe"));
    let path = recipe.parent().unwrap().join("examples").join(name);
    assert!(
        path.is_file(),
        "{} is not built: `cargo test --workspace` builds the examples",
        path.display()
    );
    path
}

/// A model comes out: `recipe export` writes the backbone under torchvision's ResNet names with
/// the run's input and normalisation in the header; `recipe embed` writes the features of a
/// folder (any sizes, with file names) or of a split (with labels) as .npy + .csv; and the
/// example reads the same run and gives the same numbers.
#[test]
fn a_run_exports_its_backbone_and_embeds_a_folder_as_the_example_does() {
    let run_dir = scratch().join("export-run");
    let o = run(&as_strs(&tiny("export-run", &[])));
    assert_eq!(check_error_shape(&o, "run"), 0, "{}", stderr(&o));
    let dir = run_dir.to_str().unwrap();

    let o = run(&["export", "--run-dir", dir]);
    assert_eq!(check_error_shape(&o, "export"), 0, "{}", stderr(&o));
    let header = safetensors_header(&run_dir.join("backbone.safetensors"));
    let meta = &header["__metadata__"];
    assert_eq!(meta["recipe"], "light_moco");
    assert_eq!(meta["backbone"], "small");
    assert_eq!(meta["in_chans"], "1");
    assert_eq!(meta["input_size"], "28x28");
    assert_eq!(meta["stem"], "imagenet");
    assert_eq!(meta["key_names"], "torchvision-resnet");
    assert_eq!(meta["mean"], "[0.286]");
    // torchvision's names and layout: the 7×7 stem of 8 channels, batch norm as weight / bias.
    assert_eq!(
        header["conv1.weight"]["shape"],
        serde_json::json!([8, 1, 7, 7])
    );
    for key in [
        "bn1.weight",
        "bn1.bias",
        "bn1.running_mean",
        "layer1.0.conv2.weight",
    ] {
        assert!(header.get(key).is_some(), "{key} missing: {header}");
    }
    assert!(!header.to_string().contains("gamma"), "{header}");

    // A folder: two copies of one image under two names, and one of another size.
    let images = scratch().join("embed-images");
    let _ = std::fs::remove_dir_all(&images);
    std::fs::create_dir_all(images.join("sub")).unwrap();
    let garment =
        image::GrayImage::from_fn(28, 28, |x, y| image::Luma([((x * 9 + y * 5) % 256) as u8]));
    garment.save(images.join("a.png")).unwrap();
    garment.save(images.join("sub/b.png")).unwrap();
    image::GrayImage::from_fn(40, 30, |x, y| image::Luma([((x * y) % 200) as u8]))
        .save(images.join("c.png"))
        .unwrap();
    let out = scratch().join("embed-out.npy");
    let o = run(&[
        "embed",
        "--run-dir",
        dir,
        "--images",
        images.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(check_error_shape(&o, "embed"), 0, "{}", stderr(&o));
    let (shape, values) = read_npy(&out);
    assert_eq!(shape.len(), 2);
    assert_eq!(shape[0], 3);
    let d = shape[1] as usize;
    let rows: Vec<&[f32]> = values.chunks(d).collect();
    let table = std::fs::read_to_string(out.with_extension("csv")).unwrap();
    assert_eq!(
        table,
        "index,file,label\n0,a.png,\n1,c.png,\n2,sub/b.png,\n"
    );
    assert_eq!(rows[0], rows[2], "one image under two names");
    assert_ne!(rows[0], rows[1]);

    // The example on the same run and folder: the same features.
    let csv_out = scratch().join("example-features.csv");
    let o = Command::new(example("extract_features"))
        .args([dir, images.to_str().unwrap(), csv_out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(&csv_out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3);
    for (line, (name, row)) in lines
        .iter()
        .zip(["a.png", "c.png", "sub/b.png"].iter().zip(&rows))
    {
        let mut cells = line.split(',');
        assert_eq!(cells.next(), Some(*name));
        let got: Vec<f32> = cells.map(|c| c.parse().unwrap()).collect();
        assert_eq!(&got[..], *row, "{name}");
    }

    // The run's test split, with its labels (the test data's are i mod 10).
    let out = scratch().join("embed-test.npy");
    let o = run(&[
        "embed",
        "--run-dir",
        dir,
        "--split",
        "test",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(check_error_shape(&o, "embed test"), 0, "{}", stderr(&o));
    assert_eq!(read_npy(&out).0, vec![40, d as u64]);
    let table = std::fs::read_to_string(out.with_extension("csv")).unwrap();
    for (i, line) in table.lines().skip(1).enumerate() {
        assert_eq!(line, format!("{i},test/{i},{}", i % 10));
    }

    for (args, expected) in [
        (
            vec!["embed", "--run-dir", dir, "--out", "x.txt"],
            "must end in .npy",
        ),
        (
            vec!["export", "--run-dir", "no-such-run"],
            "not a directory",
        ),
        (
            vec!["embed", "--run-dir", dir, "--images", "no-such-folder"],
            "--images no-such-folder: not a directory",
        ),
    ] {
        let o = run(&args);
        assert_eq!(check_error_shape(&o, expected), 2, "{}", stderr(&o));
        assert!(stderr(&o).contains(expected), "{}", stderr(&o));
    }
}

/// Weights in, as timm would take them: a three-channel torchvision-named ResNet-18 (exported
/// from a run on RGB images with the ImageNet stem) starts a run on one-channel images — its
/// first convolution summed over the colours — and the CIFAR-stem default names --stem in its
/// error.
#[test]
fn three_channel_weights_start_a_one_channel_run_and_a_stem_mismatch_names_the_option() {
    let cifar = scratch().join("weights-cifar10");
    std::fs::create_dir_all(&cifar).unwrap();
    for k in 1..=5 {
        std::fs::write(
            cifar.join(format!("data_batch_{k}.bin")),
            cifar_records(8, 1),
        )
        .unwrap();
    }
    std::fs::write(cifar.join("test_batch.bin"), cifar_records(20, 1)).unwrap();
    let rgb_run = scratch().join("weights-rgb");
    let mut args = tiny(
        rgb_run.to_str().unwrap(),
        &[
            "--dataset",
            "cifar10",
            "--data-dir",
            cifar.to_str().unwrap(),
        ],
    );
    args.extend(
        [
            "--backbone",
            "resnet18",
            "--stem",
            "imagenet",
            "--batch-size",
            "16",
        ]
        .map(String::from),
    );
    let o = run(&as_strs(&args));
    assert_eq!(check_error_shape(&o, "rgb run"), 0, "{}", stderr(&o));
    let weights = scratch().join("weights-rgb.safetensors");
    let o = run(&[
        "export",
        "--run-dir",
        rgb_run.to_str().unwrap(),
        "--out",
        weights.to_str().unwrap(),
    ]);
    assert_eq!(check_error_shape(&o, "export"), 0, "{}", stderr(&o));
    let header = safetensors_header(&weights);
    assert_eq!(
        header["conv1.weight"]["shape"],
        serde_json::json!([64, 3, 7, 7])
    );

    let w = weights.to_str().unwrap();
    let o = run(&as_strs(&tiny(
        "weights-grey-cifar-stem",
        &["--backbone", "resnet18", "--weights", w],
    )));
    assert_eq!(check_error_shape(&o, "stem"), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("add --stem imagenet"), "{}", stderr(&o));

    let grey = scratch().join("weights-grey");
    let o = run(&as_strs(&tiny(
        grey.to_str().unwrap(),
        &[
            "--backbone",
            "resnet18",
            "--stem",
            "imagenet",
            "--weights",
            w,
        ],
    )));
    assert_eq!(check_error_shape(&o, "adapted"), 0, "{}", stderr(&o));
    // It started from the file, not from a random initialisation (the models crate's test checks
    // the adapted filters themselves).
    let scratch_run = scratch().join("weights-none");
    let o = run(&as_strs(&tiny(
        scratch_run.to_str().unwrap(),
        &["--backbone", "resnet18", "--stem", "imagenet"],
    )));
    assert_eq!(check_error_shape(&o, "from scratch"), 0, "{}", stderr(&o));
    assert_ne!(losses(&grey)[0], losses(&scratch_run)[0]);
}

/// The raw-pixel baseline is the data's, not the network's: two seeds give two networks at
/// initialisation and one baseline, printed beside the trained kNN.
#[test]
fn the_raw_pixel_baseline_depends_on_the_data_alone() {
    let mut at_init = Vec::new();
    let mut raw = Vec::new();
    for seed in ["0", "1"] {
        let name = format!("raw-pixels-{seed}");
        let o = run(&as_strs(&tiny(&name, &["--seed", seed])));
        assert_eq!(check_error_shape(&o, seed), 0, "{}", stderr(&o));
        assert!(String::from_utf8_lossy(&o.stdout).contains("; raw pixels "));
        let dir = scratch().join(&name);
        at_init.push(std::fs::read_to_string(dir.join("knn_at_init.json")).unwrap());
        raw.push(std::fs::read_to_string(dir.join("knn_raw_pixels.json")).unwrap());
    }
    assert_eq!(raw[0], raw[1]);
    assert_ne!(at_init[0], at_init[1]);
}

/// Runs compared: `recipe compare` draws the runs on shared axes and tabulates their final
/// numbers with each run's initialisation and raw-pixel kNN; a run's own summary folds the
/// quantities that never changed instead of plotting them.
#[test]
fn runs_are_compared_on_shared_axes_and_constants_are_folded_into_the_summary() {
    let first = scratch().join("compare-a");
    let second = scratch().join("compare-b");
    for (dir, recipe_name) in [(&first, "light_moco"), (&second, "simclr")] {
        let mut args = tiny(
            dir.to_str().unwrap(),
            &["--epochs", "2", "--knn-every", "1"],
        );
        args[0] = recipe_name.to_string();
        let o = run(&as_strs(&args));
        assert_eq!(check_error_shape(&o, recipe_name), 0, "{}", stderr(&o));
    }
    // Light-MoCo on the small backbone: the key encoder's momentum and SoftNCE's α never move.
    let summary = std::fs::read_to_string(first.join("summary.md")).unwrap();
    assert!(summary.contains("- momentum: 0.99"), "{summary}");
    assert!(summary.contains("- softnce_alpha: 0.8"), "{summary}");
    assert!(!first.join("plots/momentum.png").exists());
    assert!(first.join("plots/loss.png").is_file());

    let out = scratch().join("compare-out");
    let o = run(&[
        "compare",
        first.to_str().unwrap(),
        second.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(check_error_shape(&o, "compare"), 0, "{}", stderr(&o));
    for plot in ["loss.png", "knn20_top1.png", "compare.md"] {
        assert!(out.join(plot).is_file(), "{plot}");
    }
    let table = String::from_utf8_lossy(&o.stdout).into_owned();
    // Each run's row holds its own initialisation's and raw pixels' k = 20 top-1.
    for (dir, recipe_name) in [(&first, "light_moco"), (&second, "simclr")] {
        let of = |file: &str| -> f64 {
            let v: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(dir.join(file)).unwrap()).unwrap();
            v.as_array().unwrap().iter().find(|r| r["k"] == 20).unwrap()["accuracy"]["top1"]
                .as_f64()
                .unwrap()
        };
        let row = table
            .lines()
            .find(|l| l.contains(recipe_name))
            .unwrap_or_else(|| panic!("{table}"));
        let cell = format!(
            "({:.2}; {:.2})",
            100.0 * of("knn_at_init.json"),
            100.0 * of("knn_raw_pixels.json")
        );
        assert!(row.contains(&cell), "{row} lacks {cell}");
        assert!(row.contains("| 2/2 |"), "{row}");
    }
    let o = run(&["compare", "no-such-run"]);
    assert_eq!(
        check_error_shape(&o, "compare missing"),
        2,
        "{}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains("no-such-run: not a directory"),
        "{}",
        stderr(&o)
    );
}

/// Redirected output still shows a run inside its epoch: steps.csv reaches the disk every few
/// seconds, long before the epoch's end (an epoch of 250 steps on the embedded subset).
#[test]
fn steps_reach_the_disk_before_the_epoch_ends() {
    let run_dir = scratch().join("flush-run");
    let _ = std::fs::remove_dir_all(&run_dir);
    let mut child = recipe(&[
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
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let started = Instant::now();
    let mut seen = None;
    while started.elapsed() < Duration::from_secs(120) {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the run ended ({status}) before steps.csv was seen mid-epoch");
        }
        let rows = std::fs::read_to_string(run_dir.join("steps.csv"))
            .map(|t| t.lines().count().saturating_sub(1))
            .unwrap_or(0);
        if rows > 0 && !run_dir.join("epochs.csv").exists() {
            seen = Some(rows);
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    let rows = seen.expect("steps.csv had rows before the epoch ended");
    assert!(rows < 250, "{rows} rows: the epoch had not ended");
}

/// A run of `tiny` in `name`, finished.
fn finished_tiny(name: &str) -> PathBuf {
    let dir = scratch().join(name);
    let _ = std::fs::remove_dir_all(&dir);
    let o = run(&as_strs(&tiny(name, &[])));
    assert_eq!(check_error_shape(&o, name), 0, "{}", stderr(&o));
    dir
}

/// `recipe embed --out RUN/steps.npy` would write its table to RUN/steps.csv, the run's step
/// log: refused before anything is computed, the log intact; an export to a place that cannot
/// be written says so (it said "cannot read weights").
#[test]
fn exports_do_not_write_over_the_runs_files_and_say_where_they_cannot_write() {
    let dir = finished_tiny("export-guard");
    let steps = std::fs::read(dir.join("steps.csv")).unwrap();
    let run_dir = dir.to_str().unwrap();
    for (command, expected) in [
        (
            vec![
                "embed",
                "--run-dir",
                run_dir,
                "--out",
                &format!("{run_dir}/steps.npy"),
            ],
            "its table",
        ),
        (
            vec![
                "export",
                "--run-dir",
                run_dir,
                "--out",
                &format!("{run_dir}/checkpoints/b.safetensors"),
            ],
            "the run's own checkpoints",
        ),
        (
            vec![
                "export",
                "--run-dir",
                run_dir,
                "--out",
                "/proc/backbone.safetensors",
            ],
            "--out /proc/backbone.safetensors: cannot write in /proc",
        ),
    ] {
        let o = run(&command);
        assert_eq!(check_error_shape(&o, expected), 2, "{}", stderr(&o));
        let err = stderr(&o);
        assert!(
            err.contains(expected) && !err.contains("cannot read"),
            "{err}"
        );
    }
    assert_eq!(std::fs::read(dir.join("steps.csv")).unwrap(), steps);
    // The run still extends.
    let o = run(&["resume", run_dir, "--extend", "--epochs", "2"]);
    assert_eq!(check_error_shape(&o, "extend"), 0, "{}", stderr(&o));
}

/// A plot that cannot be drawn after a complete run is a warning, not a failed run (it was exit
/// 1 with plotters' Debug text).
#[test]
fn a_plot_that_cannot_be_drawn_does_not_fail_a_complete_run() {
    let dir = finished_tiny("plot-fails");
    let loss = dir.join("plots/loss.png");
    std::fs::remove_file(&loss).unwrap();
    std::fs::create_dir_all(loss.join("in-the-way")).unwrap();
    let o = run(&["resume", dir.to_str().unwrap(), "--extend", "--epochs", "2"]);
    let err = stderr(&o);
    assert_eq!(check_error_shape(&o, "plot"), 0, "{err}");
    assert!(
        err.contains("the run is complete, but its plots could not be drawn")
            && !err.contains("Os {"),
        "{err}"
    );
}

/// A run directory inside a folder of images is refused: its plots would become training
/// images of the next run (and change the data of its own resume).
#[test]
fn a_run_directory_inside_the_image_folder_is_refused() {
    let images = scratch().join("folder-with-run");
    std::fs::create_dir_all(&images).unwrap();
    for i in 0..4u8 {
        image::GrayImage::from_pixel(8, 8, image::Luma([i * 50]))
            .save(images.join(format!("{i}.png")))
            .unwrap();
    }
    let inside = images.join("runs/simclr");
    let o = run(&[
        "simclr",
        "--dataset",
        "folder",
        "--data-dir",
        images.to_str().unwrap(),
        "--run-dir",
        inside.to_str().unwrap(),
        "--epochs",
        "1",
    ]);
    assert_eq!(check_error_shape(&o, "inside"), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("inside --data-dir")
            && stderr(&o).contains("choose a run directory outside it"),
        "{}",
        stderr(&o)
    );
    assert!(!images.join("runs").exists());
}

/// Spawns a light_moco run of one epoch on the embedded subset (250 steps) in `run_dir` and
/// waits until its first steps are on disk.
fn spawn_long_run(run_dir: &Path) -> std::process::Child {
    let _ = std::fs::remove_dir_all(run_dir);
    let child = recipe(&[
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
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let mut child = child;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(120) {
        let rows = std::fs::read_to_string(run_dir.join("steps.csv"))
            .map(|t| t.lines().count().saturating_sub(1))
            .unwrap_or(0);
        if rows > 0 {
            return child;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("no step reached {}", run_dir.display());
}

/// Two processes on one run directory: the second (a resume, an extension) is refused while the
/// first trains, naming its process id, before it writes anything (both used to run, the
/// second overwriting the first's checkpoints).
#[test]
fn a_second_process_on_a_run_directory_is_refused_naming_the_first() {
    let dir = scratch().join("two-writers");
    let mut first = spawn_long_run(&dir);
    let config = std::fs::read(dir.join("config.json")).unwrap();
    let o = run(&["resume", dir.to_str().unwrap(), "--extend", "--epochs", "9"]);
    let _ = first.kill();
    let _ = first.wait();
    let err = stderr(&o);
    assert_eq!(check_error_shape(&o, "second"), 2, "{err}");
    assert!(
        err.contains(&format!("is in use by process {}", first.id())),
        "{err}"
    );
    assert_eq!(std::fs::read(dir.join("config.json")).unwrap(), config);
}

/// Ctrl-C stops a run after its step with the resume command and exit code 130 (it printed
/// nothing); the resume finishes the run.
#[cfg(unix)]
#[test]
fn ctrl_c_stops_a_run_with_the_command_that_resumes_it() {
    let dir = scratch().join("interrupted");
    let child = spawn_long_run(&dir);
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    assert_eq!(check_error_shape(&o, "interrupted"), 130, "{err}");
    assert!(
        err.contains("stopping after this step")
            && err.contains("error: interrupted at step")
            && err.contains(&format!("resume with `recipe resume {}`", dir.display())),
        "{err}"
    );
}

/// `recipe orchestrator` binds the address it is given (port 0: a free one, printed) and says
/// when it cannot (it printed "listening", then an error, and exited 0).
#[test]
fn the_orchestrator_binds_the_address_given_and_refuses_a_taken_port() {
    let mut child = recipe(&["orchestrator", "--port", "0", "--address", "127.0.0.1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    {
        use std::io::BufRead;
        let mut out = std::io::BufReader::new(child.stdout.as_mut().unwrap());
        out.read_line(&mut line).unwrap();
    }
    let port: u16 = line
        .split("ws://127.0.0.1:")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no loopback address and port in {line:?}"));
    assert_ne!(port, 0);
    // It holds 127.0.0.1:PORT only: the same port on another loopback address is free (bound
    // to every interface, as before, it was taken there too).
    std::net::TcpListener::bind(("127.0.0.2", port)).unwrap_or_else(|e| {
        panic!("127.0.0.2:{port} is taken ({e}): not bound to 127.0.0.1 alone")
    });
    // The same port again: taken.
    let o = run(&[
        "orchestrator",
        "--port",
        &port.to_string(),
        "--address",
        "127.0.0.1",
    ]);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(check_error_shape(&o, "taken"), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!(
            "--address 127.0.0.1 --port {port}: cannot listen there"
        )),
        "{}",
        stderr(&o)
    );
    assert!(!String::from_utf8_lossy(&o.stdout).contains("listening"));
}

/// A port nothing listens on, on the loopback address.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A run on two machines whose second was started with another --seed: both are refused,
/// naming the setting and both values, before anything is trained (the writer used to report
/// success for replicas that trained different runs). And a machine whose orchestrator is
/// absent stops after --timeout.
#[test]
fn machines_started_with_other_settings_are_refused_and_an_absent_orchestrator_ends_the_wait() {
    let mut orchestrator = recipe(&["orchestrator", "--port", "0", "--address", "127.0.0.1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    {
        use std::io::BufRead;
        let mut out = std::io::BufReader::new(orchestrator.stdout.as_mut().unwrap());
        out.read_line(&mut line).unwrap();
    }
    let address = line
        .split_whitespace()
        .find(|w| w.starts_with("ws://"))
        .unwrap()
        .to_string();
    let node = |rank: &str, seed: &str| {
        let dir = scratch().join(format!("seeds-{rank}"));
        let _ = std::fs::remove_dir_all(&dir);
        let mut args = tiny(dir.to_str().unwrap(), &["--seed", seed, "--timeout", "60"]);
        args.extend([
            "--nodes".to_string(),
            "2".into(),
            "--node-rank".into(),
            rank.into(),
            "--orchestrator".into(),
            address.clone(),
            "--node-address".into(),
            format!("ws://127.0.0.1:{}", free_port()),
        ]);
        recipe(&as_strs(&args))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let machines = [node("0", "0"), node("1", "1")];
    let outputs: Vec<Output> = machines
        .into_iter()
        .map(|m| m.wait_with_output().unwrap())
        .collect();
    let _ = orchestrator.kill();
    let _ = orchestrator.wait();
    for o in &outputs {
        let err = stderr(o);
        assert_eq!(check_error_shape(o, "seeds"), 2, "{err}");
        assert!(
            err.contains("replica 1 was started with other settings than replica 0")
                && err.contains("train.seed: replica 0 0, replica 1 1"),
            "{err}"
        );
    }
    assert!(!scratch().join("seeds-0/checkpoints").exists());
    // No orchestrator at all: the machine tries for --timeout seconds, then says so.
    let started = Instant::now();
    let mut args = tiny("no-orchestrator", &["--timeout", "2"]);
    args.extend([
        "--nodes".to_string(),
        "2".into(),
        "--node-rank".into(),
        "0".into(),
        "--orchestrator".into(),
        format!("ws://127.0.0.1:{}", free_port()),
        "--node-address".into(),
        format!("ws://127.0.0.1:{}", free_port()),
    ]);
    let o = run(&as_strs(&args));
    let err = stderr(&o);
    assert_eq!(check_error_shape(&o, "no orchestrator"), 1, "{err}");
    assert!(err.contains("could not be reached within 2 s"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(60));
}
