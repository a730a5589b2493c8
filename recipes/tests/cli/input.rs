//! Bad input and the help: exit code 2 with one line naming the problem, no panic.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{as_strs, check_error_shape, data, recipe, run, scratch, simclr, stderr, tiny};

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
    // The run of the largest seed resumes: its augmentation's seed, above TOML's integers, is
    // recorded as its digits and read back (it was written as a float, and every resume of the
    // run was refused).
    let seeded = scratch().join("large--seed");
    let toml = std::fs::read_to_string(seeded.join("recipe.toml")).unwrap();
    assert!(toml.contains("seed = \"18446744073709551615\""), "{toml}");
    let o = run(&[
        "resume",
        seeded.to_str().unwrap(),
        "--extend",
        "--epochs",
        "2",
    ]);
    assert_eq!(
        check_error_shape(&o, "resume the largest seed"),
        0,
        "{}",
        stderr(&o)
    );
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
    // light_moco's 2 warm-up epochs (the CPU's default) capped at the run's 1: all warm-up.
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
    let cases = bad_inputs();
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

/// Command lines that are refused, each with what its refusal says.
fn bad_inputs() -> Vec<(Vec<String>, &'static str)> {
    let data_file = data().join("train-images-idx3-ubyte");
    vec![
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
            "--batch-size 24: the queue of 1024 keys",
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
            // (The small backbone's 64 features: the count below is for its head's shapes.)
            simclr(
                "huge-head",
                &["--backbone", "small", "method.hidden_dim=100000000"],
            ),
            "parameters: at least 292.1 GiB with their gradients and optimiser state",
        ),
        // Counts that overflowed: the queue's keys a step (a panic in MoCo's config), SMoG's
        // memory bank of 300 batches (a panic in its recipe), options recipe.toml cannot hold
        // (refused after the run directory was made, which then could not be used or resumed).
        (
            tiny("bs-huge", &["--batch-size", "18446744073709551615"]),
            "--batch-size 18446744073709551615: at most 16777216 images a step",
        ),
        (
            tiny_as("smog", "smog-bs-huge", &["--batch-size", "9223372036854775808"]),
            "--batch-size 9223372036854775808: at most 16777216 images a step",
        ),
        (
            tiny("knn-huge", &["--knn-every", "9223372036854775808"]),
            "--knn-every 9223372036854775808: above 9223372036854775807, the largest integer",
        ),
        (
            tiny("ckpt-steps-huge", &["--checkpoint-every-steps", "18446744073709551615"]),
            "--checkpoint-every-steps 18446744073709551615: above 9223372036854775807",
        ),
        // W-MSE's sub-batches larger than the batch (its recipe's 128 at the tests' 32).
        (
            tiny_as("wmse", "wmse-small-batch", &[]),
            "invalid `method.loss.w_size`: W-MSE whitens sub-batches of 128 images, more than the batch of 32",
        ),
    ]
}

/// `tiny`'s run with another recipe.
fn tiny_as(recipe: &str, run_dir: &str, extra: &[&str]) -> Vec<String> {
    let mut args = tiny(run_dir, extra);
    args[0] = recipe.into();
    args
}

/// Settings that hung, grew without bound, or made a run meaningless (round three of the
/// careless user's cases), each refused with exit 2 and one line naming the setting, the value
/// and what is accepted, before anything is written.
#[test]
fn settings_that_hang_fill_memory_or_make_a_run_meaningless_are_refused() {
    let cases = settings_that_hang_fill_memory_or_train_nothing();
    for (args, expected) in cases {
        let started = Instant::now();
        let o = run(&as_strs(&args));
        let code = check_error_shape(&o, expected);
        assert_eq!(code, 2, "{expected}\n{}", stderr(&o));
        assert!(stderr(&o).contains(expected), "{expected}\n{}", stderr(&o));
        assert!(
            !stderr(&o).contains("unexpected argument"),
            "{}",
            stderr(&o)
        );
        // Refused before anything is written.
        if let Some(i) = args.iter().position(|a| a == "--run-dir") {
            let dir = scratch().join(&args[i + 1]);
            assert!(!dir.exists(), "{expected}: {} was made", dir.display());
        }
        eprintln!("{expected}: refused in {:.1?}", started.elapsed());
    }
    assert!(!scratch().join("-x.safetensors").exists());
}

/// The command lines of [`settings_that_hang_fill_memory_or_make_a_run_meaningless_are_refused`]
/// with what each refusal says.
fn settings_that_hang_fill_memory_or_train_nothing() -> Vec<(Vec<String>, &'static str)> {
    let (fifo, fifo_run, png30) = fifos_and_30_pixel_images();
    let mut cases = settings_that_hang_or_fill_memory(&fifo, &fifo_run);
    cases.extend(settings_that_train_nothing_or_lose_their_values(&png30));
    cases
}

/// Settings files that are no files (a FIFO, an endless device, a run's recipe.toml that is a
/// FIFO), and networks too large for the machine.
fn settings_that_hang_or_fill_memory(
    fifo: &Path,
    fifo_run: &Path,
) -> Vec<(Vec<String>, &'static str)> {
    let fifo_text = fifo.to_str().unwrap();
    let huge = "method.hidden_dim=100000000";
    vec![
        (
            tiny("cfg-fifo", &["--config", fifo_text]),
            "settings.fifo: not a regular file (a pipe, socket or device)",
        ),
        (
            tiny("cfg-zero", &["--config", "/dev/zero"]),
            "--config /dev/zero: not a regular file",
        ),
        (
            vec!["resume".into(), fifo_run.to_str().unwrap().into()],
            "recipe.toml (the run's own settings): not a regular file",
        ),
        // The momentum recipes drew their networks before the size check (7.5-13.8 GB before
        // a refusal, or none); `--check` had no size check.
        (tiny("huge-light-moco", &[huge]), "parameters: at least"),
        (
            tiny_as("moco_v2", "huge-moco-v2", &[huge]),
            "parameters: at least",
        ),
        (
            tiny_as("byol", "huge-byol", &[huge]),
            "parameters: at least",
        ),
        (
            tiny_as("moco_v3", "huge-moco-v3", &[huge]),
            "parameters: at least",
        ),
        (
            tiny("huge-check", &["--check", huge]),
            "parameters: at least",
        ),
        (
            tiny("huge-queue", &["method.queue_size=1000000000000"]),
            "parameters: at least",
        ),
        // InfoNCE's temperature beside SoftNCE's (light_moco): it was silently unused.
        (
            tiny("moco-temperature", &["--check", "method.temperature=0.05"]),
            "method.temperature=0.05: InfoNCE's temperature, unused with SoftNCE, whose own is \
             method.soft_nce.temperature (0.1)",
        ),
        // SMoG's memory bank is sized by the batch: the refusal names --batch-size.
        (
            tiny_as("smog", "smog-bs-large", &["--batch-size", "1000000"]),
            "SMoG's memory bank of 300 × --batch-size rows",
        ),
        // A projection head's batch norm allocated its running statistics before the size
        // check (SimCLR: 7.5 GB before the refusal); a shape whose size overflows panicked in
        // the count (`attempt to multiply with overflow`); 2³² decoder blocks grew without
        // bound (third audit, 2026-12-08).
        (
            tiny_as(
                "simclr",
                "huge-simclr",
                &["--check", "method.hidden_dim=1000000000"],
            ),
            "parameters: at least",
        ),
        (
            tiny_as(
                "mae",
                "huge-mae-dim",
                &["--check", "method.decoder_dim=4294967296"],
            ),
            "parameters: at least",
        ),
        (
            tiny_as(
                "mae",
                "huge-mae-depth",
                &["--check", "method.decoder_depth=4294967296"],
            ),
            "parameters: at least",
        ),
        // The settings behind --pgd-steps and --local-crops skipped the options' bounds: 2³²
        // ascent steps or local crops held a run at its first step.
        (
            tiny_as(
                "simclr_pgd",
                "pgd-steps",
                &["--check", "method.pgd.steps=4294967296"],
            ),
            "at most 100 ascent steps",
        ),
        (
            tiny_as(
                "swav",
                "local-crops",
                &["--check", "augmentation.local_crops.count=4294967296"],
            ),
            "at most 32 local crops per image",
        ),
        // DetConS has no momentum target: any value trained alike.
        (
            tiny_as(
                "detcon_s",
                "detcon-s-momentum",
                &["--check", "method.base_momentum=0.5"],
            ),
            "method.base_momentum=0.5: DetConS has no momentum target",
        ),
        // SwAV's queue and prototypes, and LeJEPA's grid, are made when the method is: 2³² rows
        // filled the machine's memory.
        (
            tiny_as(
                "swav",
                "swav-queue",
                &["--check", "method.queue_size=4294967296"],
            ),
            "parameters: at least",
        ),
        (
            tiny_as(
                "lejepa",
                "lejepa-knots",
                &["--check", "method.loss.knots=4294967296"],
            ),
            "parameters: at least",
        ),
        // Adam's settings were not checked: a negative beta_1 trained to a NaN loss.
        (
            tiny_as("mae", "adam-beta", &["--check", "optimizer.beta_1=-1"]),
            "optimizer.beta_1=-1: must lie in [0, 1)",
        ),
    ]
}

/// Settings `--check` passed, runs that train nothing (one on the 30-pixel images in `png30`),
/// and option values that read as flags.
fn settings_that_train_nothing_or_lose_their_values(
    png30: &Path,
) -> Vec<(Vec<String>, &'static str)> {
    vec![
        // `--check` passed what the run then refused.
        (
            tiny(
                "check-crop",
                &["--check", "augmentation.view1.crop.scale=[0.9, 0.1]"],
            ),
            "invalid `crop.scale`: min 0.9 is greater than max 0.1",
        ),
        // A schedule given a number (serde's "invalid type: integer, expected string or map").
        (
            tiny_as("mae_hpm", "hpm-share", &["method.hard_share=2"]),
            "method.hard_share is a setting of several fields, not a single value; it is now \
             {\"Linear\":",
        ),
        // Runs that train nothing: a loss of exactly 0, a context that can never keep its
        // patches, a ViT that drops the edge pixels.
        (
            tiny_as("mae", "mae-ratio0", &["method.mask_ratio=0"]),
            "0 hides no patch",
        ),
        (
            tiny_as("ijepa", "ijepa-keep", &["method.min_keep=1000"]),
            "1000 is more than the 36 patches the largest context block holds on the image's \
             7x7 grid",
        ),
        (
            tiny_as(
                "mae",
                "mae-30px",
                &[
                    "--dataset",
                    "folder",
                    "--data",
                    png30.to_str().unwrap(),
                    "--image-size",
                    "30",
                ],
            ),
            "--backbone vit-tiny: image size 30 is not a multiple of the patch size 4: the last \
             2 rows and columns of pixels would reach no patch; give --image-size a multiple of \
             4 (e.g. 28 or 32)",
        ),
        // Negative values of the commands' options are their values (they read as unknown
        // flags with the parser's usage).
        (
            ["eval", "--run-dir", "missing-run", "--probe-lr", "-1"]
                .map(String::from)
                .to_vec(),
            "--probe-lr -1: must be a finite number > 0",
        ),
        (
            [
                "eval",
                "--run-dir",
                "missing-run",
                "--label-fraction",
                "-0.1",
            ]
            .map(String::from)
            .to_vec(),
            "--label-fraction -0.1: must lie in (0, 1]",
        ),
        (
            ["eval", "--run-dir", "missing-run", "--probe-epochs", "-3"]
                .map(String::from)
                .to_vec(),
            "invalid value '-3' for '--probe-epochs",
        ),
        // A path may start with a hyphen; a path option followed by an option lost its path.
        (
            [
                "export",
                "--run-dir",
                "missing-run",
                "--out",
                "-x.safetensors",
            ]
            .map(String::from)
            .to_vec(),
            "--run-dir missing-run: not a directory",
        ),
        (
            ["export", "--out", "--run-dir", "missing-run"]
                .map(String::from)
                .to_vec(),
            "--out --run-dir: --out needs a path; --run-dir is an option",
        ),
    ]
}

/// A FIFO as a settings file, a run directory whose recipe.toml is a FIFO, and a folder of
/// 30-pixel images.
fn fifos_and_30_pixel_images() -> (PathBuf, PathBuf, PathBuf) {
    // A FIFO as the settings file (it blocked forever in read) and an endless device (it grew
    // by some 400 MB/s); a run directory whose recipe.toml is a FIFO, read by `recipe resume`.
    let fifo = scratch().join("settings.fifo");
    let fifo_run = scratch().join("fifo-run");
    std::fs::create_dir_all(&fifo_run).unwrap();
    for path in [fifo.clone(), fifo_run.join("recipe.toml")] {
        let _ = std::fs::remove_file(&path);
        let made = Command::new("mkfifo").arg(&path).status().unwrap();
        assert!(made.success(), "mkfifo {}", path.display());
    }
    // 30-pixel images: a ViT's patches of 4 leave 2 rows and columns unseen.
    let png30 = scratch().join("png30");
    std::fs::create_dir_all(&png30).unwrap();
    for i in 0..8u8 {
        image::GrayImage::from_fn(30, 30, |c, r| image::Luma([(c * 7 + r * 3) as u8 ^ i]))
            .save(png30.join(format!("{i}.png")))
            .unwrap();
    }
    (fifo, fifo_run, png30)
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
