//! `recipe study`: arms over seeds, finished runs skipped, an interrupted one resumed, a changed
//! arm refused, bad study files refused with exit 2, and a report whose numbers are the runs'.

use std::path::Path;
use std::process::Command;

use crate::common::{check_error_shape, data, run, scratch, stderr};

/// A study of two light_moco arms (SoftNCE's α at the recipe's 0.8 and at 0.5) over two seeds,
/// on the tiny data: two epochs of two steps per run, a one-epoch probe and a 10 % label probe.
fn study_file(name: &str, alpha_b: &str) -> std::path::PathBuf {
    let text = format!(
        r#"
title = "alpha"
seeds = [0, 1]
baseline = "a"

[options]
data_dir = "{}"
epochs = 2
batch_size = 32
knn_every = 1
workers = 1

[evaluation]
probe_epochs = 1
label_fraction = 0.1

[[arm]]
name = "a"
recipe = "light_moco"

[[arm]]
name = "b"
recipe = "light_moco"
set = ["method.soft_nce.alpha={alpha_b}"]
"#,
        data().display()
    );
    let path = scratch().join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

fn record(dir: &Path, arm: &str, seed: u64) -> serde_json::Value {
    let path = dir.join(format!("runs/{arm}/seed-{seed}.json"));
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
}

/// The last row's `knn20_top1` of a run's epochs.csv, in percent.
fn final_knn(dir: &Path, arm: &str, seed: u64) -> f64 {
    let text =
        std::fs::read_to_string(dir.join(format!("runs/{arm}/seed-{seed}/epochs.csv"))).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let column = header.iter().position(|h| *h == "knn20_top1").unwrap();
    let last: Vec<&str> = lines.last().unwrap().split(',').collect();
    100.0 * last[column].parse::<f64>().unwrap()
}

#[test]
fn a_study_runs_every_arm_and_seed_once_resumes_and_reports_paired_differences() {
    let file = study_file("study", "0.5");
    let dir = scratch().join("study");
    the_study_runs_seed_by_seed_and_records_every_run(&file, &dir);
    the_report_has_the_runs_numbers_and_their_build(&dir);

    // Again: every run finished, nothing runs.
    let before = std::fs::read(dir.join("runs/a/seed-0.json")).unwrap();
    let o = run(&["study", file.to_str().unwrap()]);
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(check_error_shape(&o, "again"), 0, "{}", stderr(&o));
    assert!(!out.contains("study: run "), "{out}");
    assert_eq!(
        std::fs::read(dir.join("runs/a/seed-0.json")).unwrap(),
        before
    );

    // A run stopped after its first epoch (its record unfinished, the second epoch's
    // checkpoint not written): the study resumes it from the first.
    let path = dir.join("runs/b/seed-1.json");
    let mut r = record(&dir, "b", 1);
    r["result"] = serde_json::Value::Null;
    std::fs::write(&path, serde_json::to_vec(&r).unwrap()).unwrap();
    std::fs::remove_dir_all(dir.join("runs/b/seed-1/checkpoints/epoch-0002")).unwrap();
    let o = run(&["study", file.to_str().unwrap()]);
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(check_error_shape(&o, "resume"), 0, "{}", stderr(&o));
    assert!(
        out.contains("run 4 of 4: arm `b`, seed 1") && out.contains("resuming from"),
        "{out}"
    );
    assert!(out.contains("epoch-0001"), "{out}");
    assert!(dir.join("runs/b/seed-1/checkpoints/epoch-0002").is_dir());
    assert!(record(&dir, "b", 1)["result"]["metrics"]["knn20_top1"].is_number());

    // Arm b changed: refused, naming it; with --rerun-changed its runs move aside and run again.
    let changed = study_file("study", "0.6");
    let o = run(&["study", changed.to_str().unwrap()]);
    let err = stderr(&o);
    assert_eq!(check_error_shape(&o, "changed"), 2, "{err}");
    assert!(
        err.contains("arm `b`, seed 0; arm `b`, seed 1") && err.contains("--rerun-changed"),
        "{err}"
    );
    let o = run(&["study", changed.to_str().unwrap(), "--rerun-changed"]);
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(check_error_shape(&o, "rerun"), 0, "{}", stderr(&o));
    assert_eq!(out.matches("study: run ").count(), 2, "{out}");
    assert!(dir.join("replaced/b/seed-0-1/run/epochs.csv").is_file());
    assert!(dir.join("replaced/b/seed-1-1/record.json").is_file());

    // A run whose settings are not what its unchanged arm resolves to now — as after a change
    // of a recipe's default (here its recipe.toml says another learning rate) — is refused as
    // changed too, naming the setting; the per-run seed is not a difference.
    let recorded = dir.join("runs/a/seed-1/recipe.toml");
    let text = std::fs::read_to_string(&recorded).unwrap();
    let lr_line = text
        .lines()
        .find(|l| l.starts_with("lr = "))
        .unwrap()
        .to_string();
    std::fs::write(&recorded, text.replace(&lr_line, "lr = 0.5")).unwrap();
    let o = run(&["study", changed.to_str().unwrap()]);
    let err = stderr(&o);
    assert_eq!(check_error_shape(&o, "drifted"), 2, "{err}");
    assert!(
        err.contains(
            "arm `a`, seed 1 (its run's settings are not the arm's now: options.lr: run 0.5, now "
        ) && !err.contains("seed 0"),
        "{err}"
    );
}

/// The study `file` runs seed by seed, every arm of a seed first, and records each run's
/// metrics in `dir` (the kNN the run's last, the raw pixels' as the run measured them).
fn the_study_runs_seed_by_seed_and_records_every_run(file: &Path, dir: &Path) {
    let o = run(&["study", file.to_str().unwrap()]);
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(check_error_shape(&o, "study"), 0, "{out}\n{}", stderr(&o));
    // Seed by seed, every arm of a seed first.
    let order: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("study: run "))
        .collect();
    assert_eq!(order.len(), 4, "{out}");
    for (line, want) in order.iter().zip([
        "run 1 of 4: arm `a`, seed 0",
        "run 2 of 4: arm `b`, seed 0",
        "run 3 of 4: arm `a`, seed 1",
        "run 4 of 4: arm `b`, seed 1",
    ]) {
        assert!(line.contains(want), "{line} / {want}");
    }
    assert!(order[3].contains("1 left with it; ETA"), "{}", order[3]);
    for arm in ["a", "b"] {
        for seed in [0, 1] {
            let r = record(dir, arm, seed);
            let m = &r["result"]["metrics"];
            // k = 200 is capped at the 64 training images of the tiny data.
            for metric in ["knn20_top1", "knn64_top1", "probe_top1", "few_label_top1"] {
                assert!(m[metric].as_f64().is_some(), "{arm} {seed} {metric}: {r}");
            }
            assert_eq!(m["knn20_top1"].as_f64().unwrap(), final_knn(dir, arm, seed));
        }
        let raw = record(dir, "raw-pixels", 0);
        assert!(raw["result"]["metrics"]["probe_top1"].is_number(), "{raw}");
        // Its definition holds the study's options that choose the data: a study whose data
        // changed measures the pixels again (it kept the old data's rows beside new runs).
        assert_eq!(
            raw["definition"]["data"]["data_dir"].as_str(),
            Some(data().to_str().unwrap()),
            "{raw}"
        );
        // `recipe eval --raw-pixels` measures what the run measured of the pixels at its start.
        let at_start: serde_json::Value = serde_json::from_slice(
            &std::fs::read(dir.join("runs/a/seed-0/knn_raw_pixels.json")).unwrap(),
        )
        .unwrap();
        let knn = raw["result"]["metrics"]["knn20_top1"].as_f64().unwrap();
        let want = 100.0 * at_start[0]["accuracy"]["top1"].as_f64().unwrap();
        assert!((knn - want).abs() < 0.006, "{knn} vs {want} (two decimals)");
    }
}

/// The report in `dir`: its numbers are the runs' (arm a's kNN mean and the paired difference
/// b − a), each record names the build that trained its run, and the report says so.
fn the_report_has_the_runs_numbers_and_their_build(dir: &Path) {
    // The report's numbers are the runs': arm a's kNN mean and the paired difference b − a.
    let summary = std::fs::read_to_string(dir.join("summary.csv")).unwrap();
    let row = |arm: &str| -> Vec<String> {
        summary
            .lines()
            .find(|l| l.starts_with(&format!("{arm},knn20_top1,")))
            .unwrap_or_else(|| panic!("{arm}\n{summary}"))
            .split(',')
            .map(str::to_string)
            .collect()
    };
    let (a0, a1) = (final_knn(dir, "a", 0), final_knn(dir, "a", 1));
    let (b0, b1) = (final_knn(dir, "b", 0), final_knn(dir, "b", 1));
    let a = row("a");
    assert_eq!(a[2], "2");
    assert!(
        (a[3].parse::<f64>().unwrap() - (a0 + a1) / 2.0).abs() < 1e-9,
        "{a:?}"
    );
    let b = row("b");
    let difference = ((b0 - a0) + (b1 - a1)) / 2.0;
    assert!(
        (b[8].parse::<f64>().unwrap() - difference).abs() < 1e-9,
        "{b:?}"
    );
    // Each record names the build that trained its run: this test's `recipe`, by the SHA-256
    // of its file (computed here), and the report says one build trained all four.
    let sha256 = {
        use sha2::Digest;
        let bytes = std::fs::read(env!("CARGO_BIN_EXE_recipe")).unwrap();
        format!("{:x}", sha2::Sha256::digest(&bytes))
    };
    for (arm, seed) in [("a", 0), ("a", 1), ("b", 0), ("b", 1)] {
        let binaries = &record(dir, arm, seed)["binaries"];
        assert_eq!(binaries.as_array().map(Vec::len), Some(1), "{binaries}");
        assert_eq!(binaries[0]["sha256"], sha256.as_str(), "{arm} {seed}");
        assert_eq!(binaries[0]["version"], env!("CARGO_PKG_VERSION"));
    }
    let report = std::fs::read_to_string(dir.join("study.md")).unwrap();
    assert!(
        report.contains(&format!(
            "Builds: 4 of the finished runs were trained by one build of `recipe` (SHA-256 of \
             the program, its version: {} ({}))",
            &sha256[..12],
            env!("CARGO_PKG_VERSION")
        )),
        "{report}"
    );
    for want in [
        "# alpha",
        "4 of 4 runs finished",
        "| a | light_moco | 2 |",
        "| *raw pixels* |",
        "| b | kNN k=20 | 2 |",
        "![curve-knn20_top1.png](curve-knn20_top1.png)",
    ] {
        assert!(report.contains(want), "{want}\n{report}");
    }
    assert!(dir.join("curve-knn20_top1.png").is_file());
    assert_eq!(
        std::fs::read_to_string(dir.join("study.csv"))
            .unwrap()
            .lines()
            .count(),
        1 + 4 + 2,
        "a row per run and per seed of the raw pixels"
    );
}

#[test]
fn bad_study_files_exit_2_naming_the_problem() {
    let good = std::fs::read_to_string(study_file("bad-base", "0.5")).unwrap();
    for (name, text, expected) in [
        (
            "unknown-key",
            good.replace("alpha=0.5", "alhpa=0.5"),
            "arm `b`: ",
        ),
        (
            "no-seeds",
            good.replace("seeds = [0, 1]", "seeds = []"),
            "`seeds` is empty",
        ),
        (
            "two-names",
            good.replace("name = \"b\"", "name = \"a\""),
            "two arms are called `a`",
        ),
        (
            "baseline",
            good.replace("baseline = \"a\"", "baseline = \"c\""),
            "baseline `c` is not an arm",
        ),
        (
            "recipe",
            good.replace(
                "recipe = \"light_moco\"\n\n[[arm]]",
                "recipe = \"nope\"\n\n[[arm]]",
            ),
            "unknown recipe `nope`",
        ),
        (
            "option",
            good.replace("workers = 1", "workers = 1\nlearning_rate = 3"),
            "arm `a`: ",
        ),
    ] {
        let path = scratch().join(format!("{name}.toml"));
        std::fs::write(&path, &text).unwrap();
        let o = run(&["study", path.to_str().unwrap()]);
        let err = stderr(&o);
        assert_eq!(check_error_shape(&o, name), 2, "{name}\n{err}");
        assert!(err.contains(expected), "{name}: {expected}\n{err}");
        assert!(
            !scratch().join(name).join("runs").exists(),
            "{name}: nothing ran"
        );
    }
    // --check: the file and every arm valid, nothing run.
    let path = scratch().join("checked.toml");
    std::fs::write(&path, &good).unwrap();
    let o = run(&["study", path.to_str().unwrap(), "--check"]);
    assert_eq!(check_error_shape(&o, "check"), 0, "{}", stderr(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("2 arms over 2 seeds, every arm valid"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(!scratch().join("checked").exists(), "nothing ran");
    let o = run(&["study", scratch().join("missing.toml").to_str().unwrap()]);
    assert_eq!(check_error_shape(&o, "missing"), 2, "{}", stderr(&o));
}

/// Ctrl-C during a study stops its run with a checkpoint-free exit and the study with exit code
/// 130 and the command that continues it; nothing is recorded as finished.
#[cfg(unix)]
#[test]
fn ctrl_c_stops_a_study_with_the_command_that_continues_it() {
    use std::os::unix::process::CommandExt;
    // One arm, one seed, one epoch on the embedded subset: long enough to be interrupted.
    let text = "seeds = [0]\nbaseline = \"a\"\n[options]\nepochs = 1\nbatch_size = 32\n\
                knn_every = 0\nworkers = 1\n[evaluation]\nlinear_probe = false\n\
                raw_pixels = false\n[[arm]]\nname = \"a\"\nrecipe = \"light_moco\"\n";
    let file = scratch().join("interrupted-study.toml");
    std::fs::write(&file, text).unwrap();
    let dir = scratch().join("interrupted-study");
    let child = Command::new(env!("CARGO_BIN_EXE_recipe"))
        .args(["study", file.to_str().unwrap()])
        .current_dir(scratch())
        .process_group(0)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the run has taken a step, then Ctrl-C the whole process group as a terminal
    // would.
    let steps = dir.join("runs/a/seed-0/steps.csv");
    let start = std::time::Instant::now();
    while std::fs::read_to_string(&steps).map_or(true, |s| s.lines().count() < 3) {
        assert!(start.elapsed().as_secs() < 300, "the run never stepped");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let killed = Command::new("kill")
        .args(["-INT", "--", &format!("-{}", child.id())])
        .status()
        .unwrap();
    assert!(killed.success());
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(
        err.contains(&format!(
            "the study stopped during arm `a`, seed 0; `recipe study {}` continues it",
            file.display()
        )),
        "{err}"
    );
    assert!(record(&dir, "a", 0)["result"].is_null());
}

/// SIGTERM to a study (`kill`, a service manager; not a terminal's Ctrl-C, which reaches the
/// whole process group) stops the run it waits for after the run's step, with exit code 130 and
/// nothing recorded: the study passes the signal on. (It used to wait while the run went on to
/// its end, and a second signal left the run training on its own.)
#[cfg(unix)]
#[test]
fn sigterm_to_a_study_stops_its_run_after_the_step() {
    use std::time::{Duration, Instant};
    let name = "terminated";
    // The embedded Fashion-MNIST subset (no data_dir): one epoch of 250 steps.
    let text = r#"
title = "terminated"
seeds = [0]
baseline = "a"

[options]
epochs = 1
batch_size = 32
knn_every = 0
workers = 1

[evaluation]
probe_epochs = 1

[[arm]]
name = "a"
recipe = "light_moco"
"#;
    let file = scratch().join(format!("{name}.toml"));
    std::fs::write(&file, text).unwrap();
    let dir = scratch().join(name);
    let _ = std::fs::remove_dir_all(&dir);
    let mut study = crate::common::recipe(&["study", file.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let steps = dir.join("runs/a/seed-0/steps.csv");
    let rows = || {
        std::fs::read_to_string(&steps)
            .map(|t| t.lines().count().saturating_sub(1))
            .unwrap_or(0)
    };
    let started = Instant::now();
    while rows() == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no step reached {}",
            steps.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let killed = Command::new("kill")
        .args(["-TERM", &study.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let waited = Instant::now();
    while study.try_wait().unwrap().is_none() {
        if waited.elapsed() > Duration::from_secs(60) {
            let _ = study.kill();
            panic!("the study did not stop within 60 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let o = study.wait_with_output().unwrap();
    let err = stderr(&o);
    // The run's own message (it shares the study's stderr), then the study's.
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(
        err.contains("error: interrupted at step")
            && err.contains("the study stopped during arm `a`, seed 0"),
        "{err}"
    );
    // The run stopped within its one epoch (250 steps of the 8,000 images), not at its end.
    assert!(rows() < 250, "{} steps", rows());
    assert!(record(&dir, "a", 0)["result"].is_null());
}

/// A study of one light_moco arm and one seed, with these `[options]` and `[evaluation]`
/// lines (batches of 32, one loader worker).
fn one_arm_study(name: &str, options: &str, evaluation: &str) -> std::path::PathBuf {
    let text = format!(
        "title = \"{name}\"\nseeds = [0]\nbaseline = \"a\"\n\n[options]\n{options}\n\
         batch_size = 32\nworkers = 1\n\n[evaluation]\n{evaluation}\n\n\
         [[arm]]\nname = \"a\"\nrecipe = \"light_moco\"\n"
    );
    let path = scratch().join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

/// A process that is gone or a zombie (ended, not yet reaped by its new parent).
#[cfg(target_os = "linux")]
fn ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command's closing parenthesis.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

/// The process id written into a run directory's `.lock` by the process holding it.
fn lock_holder(run: &Path) -> Option<u32> {
    std::fs::read_to_string(run.join(".lock"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Waits up to `limit` for `done`, sleeping 50 ms between tries; panics with `what` after.
fn wait_for(limit: std::time::Duration, what: &str, mut done: impl FnMut() -> bool) {
    let started = std::time::Instant::now();
    while !done() {
        assert!(started.elapsed() < limit, "{what} within {limit:?}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A study killed with SIGKILL takes its run with it: the run gets SIGTERM and stops after its
/// step (it went on training as an orphan, and the study run again was refused: "in use by
/// process N"). Run again while a process still holds the run directory, the study waits for
/// it, saying so, and goes on once it is released.
#[cfg(target_os = "linux")]
#[test]
fn a_study_killed_with_sigkill_ends_its_run_and_continues_when_run_again() {
    use std::time::Duration;
    let name = "killed-study";
    // The embedded Fashion-MNIST subset (no data_dir): one epoch of 250 steps, long enough to
    // be killed during.
    let file = one_arm_study(
        name,
        "epochs = 1\nknn_every = 0",
        "linear_probe = false\nraw_pixels = false",
    );
    let dir = scratch().join(name);
    let run_dir = dir.join("runs/a/seed-0");
    let _ = std::fs::remove_dir_all(&dir);
    let (out, err) = (
        scratch().join(format!("{name}.out")),
        scratch().join(format!("{name}.err")),
    );
    let mut study = spawn_study(&file, &out, &err);
    let rows = || {
        std::fs::read_to_string(run_dir.join("steps.csv"))
            .map(|t| t.lines().count().saturating_sub(1))
            .unwrap_or(0)
    };
    wait_for(
        Duration::from_secs(300),
        "a step of the study's run",
        || rows() > 0 || study.try_wait().unwrap().is_some(),
    );
    assert!(
        study.try_wait().unwrap().is_none(),
        "{}",
        std::fs::read_to_string(&err).unwrap()
    );
    let child = lock_holder(&run_dir).expect("the run holds its directory");
    assert_ne!(child, study.id());
    study.kill().unwrap();
    study.wait().unwrap();
    wait_for(
        Duration::from_secs(120),
        "the run ends after its study was killed",
        || ended(child),
    );
    let logged = std::fs::read_to_string(&err).unwrap();
    // It stopped after its step, as on SIGTERM, within its epoch, and not at once (the study's
    // threads ending one after another send it the signal more than once).
    assert!(
        logged.contains("the process that started this one ended")
            && logged.contains("error: interrupted at step")
            && !logged.contains("stopped at once"),
        "{logged}"
    );
    assert!(rows() < 250, "{} steps", rows());
    assert!(record(&dir, "a", 0)["result"].is_null());

    a_study_run_again_waits_for_the_process_holding_its_run(name, &file, &run_dir, child);
}

/// `recipe study FILE` started with its standard output and error into `out` and `err`.
#[cfg(target_os = "linux")]
fn spawn_study(file: &Path, out: &Path, err: &Path) -> std::process::Child {
    use std::process::Stdio;
    crate::common::recipe(&["study", file.to_str().unwrap()])
        .stdout(Stdio::from(std::fs::File::create(out).unwrap()))
        .stderr(Stdio::from(std::fs::File::create(err).unwrap()))
        .spawn()
        .unwrap()
}

/// A process still holding the run directory `run_dir` (as a run finishing its step would):
/// the study `file` (of the test `name`) run again waits for it, saying so, and runs once it is
/// released; its run (another than the killed study's `child`) stops with it on SIGTERM.
#[cfg(target_os = "linux")]
fn a_study_run_again_waits_for_the_process_holding_its_run(
    name: &str,
    file: &Path,
    run_dir: &Path,
    child: u32,
) {
    use std::time::Duration;
    let lock = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(run_dir.join(".lock"))
        .unwrap();
    lock.lock().unwrap();
    std::fs::write(run_dir.join(".lock"), std::process::id().to_string()).unwrap();
    let (out2, err2) = (
        scratch().join(format!("{name}-2.out")),
        scratch().join(format!("{name}-2.err")),
    );
    let mut again = spawn_study(file, &out2, &err2);
    let said = format!(
        "study: {} is in use by process {}",
        run_dir.display(),
        std::process::id()
    );
    wait_for(
        Duration::from_secs(300),
        "the study saying it waits",
        || {
            std::fs::read_to_string(&out2).is_ok_and(|t| t.contains(&said))
                || again.try_wait().unwrap().is_some()
        },
    );
    let printed = std::fs::read_to_string(&out2).unwrap();
    assert!(
        printed.contains(&said) && printed.contains("waiting up to 30 s for it to end"),
        "{printed}\n{}",
        std::fs::read_to_string(&err2).unwrap()
    );
    drop(lock);
    // Its run starts (the new run holds the directory), and stops with the study on SIGTERM.
    wait_for(
        Duration::from_secs(120),
        "the run of the study run again",
        || {
            lock_holder(run_dir).is_some_and(|p| p != child && p != std::process::id())
                || again.try_wait().unwrap().is_some()
        },
    );
    assert!(
        again.try_wait().unwrap().is_none(),
        "{}",
        std::fs::read_to_string(&err2).unwrap()
    );
    let second = lock_holder(run_dir).unwrap();
    let killed = Command::new("kill")
        .args(["-TERM", &again.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = again.wait().unwrap();
    let logged = std::fs::read_to_string(&err2).unwrap();
    assert_eq!(status.code(), Some(130), "{logged}");
    assert!(
        logged.contains("the study stopped during arm `a`, seed 0") && !logged.contains("in use"),
        "{logged}"
    );
    assert!(ended(second) || !std::path::Path::new(&format!("/proc/{second}")).exists());
}

/// A study's record damaged (truncated) or lost: named with a warning and rebuilt from its
/// complete run, with the same numbers and nothing trained or evaluated again (it was exit 1
/// with a JSON error; a lost one refused the finished run). A run directory that is not the
/// arm's own by its settings is refused, never adopted; a damaged record of a run with other
/// settings is a changed run; an unfinished run behind a damaged record resumes.
#[test]
fn a_damaged_or_lost_record_is_rebuilt_from_its_run() {
    let name = "records";
    // Two epochs of two steps on the tiny data, a one-epoch probe and a 10 % label probe.
    let options = format!(
        "data_dir = \"{}\"\nepochs = 2\nknn_every = 1",
        data().display()
    );
    let file = one_arm_study(name, &options, "probe_epochs = 1\nlabel_fraction = 0.1");
    let file = file.to_str().unwrap();
    let dir = scratch().join(name);
    let _ = std::fs::remove_dir_all(&dir);
    let o = run(&["study", file]);
    assert_eq!(check_error_shape(&o, "first"), 0, "{}", stderr(&o));
    let path = dir.join("runs/a/seed-0.json");
    let raw = dir.join("runs/raw-pixels/seed-0.json");
    let whole = std::fs::read(&path).unwrap();
    // A rebuilt record is the whole one but for the build that trained the run, which only
    // the record knew.
    let rebuilt = {
        let mut r: serde_json::Value = serde_json::from_slice(&whole).unwrap();
        assert!(r["binaries"][0]["sha256"].is_string(), "{r}");
        r.as_object_mut().unwrap().remove("binaries");
        r
    };
    let read = |path: &Path| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    };
    assert!(record(&dir, "a", 0)["result"]["metrics"]["few_label_top1"].is_number());
    let again = |case: &str| study_again(file, case);

    // Truncated: named, rebuilt from the run's files; nothing runs again.
    std::fs::write(&path, &whole[..whole.len() / 2]).unwrap();
    let (code, out, err) = again("truncated");
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(&format!("{}: damaged or truncated (", path.display()))
            && err.contains("rebuilt from the complete run in"),
        "{err}"
    );
    assert!(
        !out.contains("study: run ") && !out.contains("recipe eval"),
        "{out}"
    );
    assert_eq!(read(&path), rebuilt);

    // Lost: the run is the arm's by its own recipe.toml, so it is adopted and rebuilt.
    std::fs::remove_file(&path).unwrap();
    let (code, out, err) = again("lost");
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(&format!("{}: missing, but", path.display())) && err.contains("rebuilt"),
        "{err}"
    );
    assert!(
        !out.contains("study: run ") && !out.contains("recipe eval"),
        "{out}"
    );
    assert_eq!(read(&path), rebuilt);

    // The raw pixels' record damaged: measured again.
    let raw_whole = std::fs::read(&raw).unwrap();
    std::fs::write(&raw, &raw_whole[..10]).unwrap();
    let (code, _, err) = again("raw");
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(&format!("{}: damaged or truncated (", raw.display()))
            && err.contains("measured again"),
        "{err}"
    );
    assert!(record(&dir, "raw-pixels", 0)["result"]["metrics"]["probe_top1"].is_number());

    a_run_of_other_settings_is_not_adopted_and_an_unfinished_one_resumes(file, &dir, &whole);
    crate::common::checked(&[&dir]);
}

/// The study `file` run again as `case`: its exit code, standard output and error.
fn study_again(file: &str, case: &str) -> (i32, String, String) {
    let o = run(&["study", file]);
    let (out, err) = (String::from_utf8_lossy(&o.stdout).to_string(), stderr(&o));
    (check_error_shape(&o, case), out, err)
}

/// The record of the study `file`'s one run in `dir` (`whole`, as written) lost beside a run of
/// other settings: refused, never adopted; damaged beside it: a changed run; damaged, and its
/// run stopped before its last epoch: the run resumes and is recorded.
fn a_run_of_other_settings_is_not_adopted_and_an_unfinished_one_resumes(
    file: &str,
    dir: &Path,
    whole: &[u8],
) {
    let path = dir.join("runs/a/seed-0.json");
    let again = |case: &str| study_again(file, case);
    // Lost beside a run of other settings (its recipe.toml says another learning rate): not
    // the arm's run, refused and left as it is.
    let toml_path = dir.join("runs/a/seed-0/recipe.toml");
    let settings = std::fs::read_to_string(&toml_path).unwrap();
    let lr_line = settings.lines().find(|l| l.starts_with("lr = ")).unwrap();
    std::fs::write(&toml_path, settings.replace(lr_line, "lr = 0.5")).unwrap();
    std::fs::remove_file(&path).unwrap();
    let (code, _, err) = again("foreign");
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("a run the study did not record (no ")
            && err.contains("options.lr: run 0.5, now ")
            && err.contains("move it away"),
        "{err}"
    );
    assert!(!path.exists());
    // Damaged beside it: a changed run, refused naming the record, with the way out.
    std::fs::write(&path, &whole[..whole.len() / 3]).unwrap();
    let (code, _, err) = again("damaged and changed");
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("damaged or truncated")
            && err.contains("its run's settings are not the arm's now: options.lr: run 0.5")
            && err.contains("--rerun-changed"),
        "{err}"
    );
    std::fs::write(&toml_path, &settings).unwrap();

    // Damaged, and its run stopped before its last epoch: the run resumes and is recorded.
    std::fs::remove_dir_all(dir.join("runs/a/seed-0/checkpoints/epoch-0002")).unwrap();
    let (code, out, err) = again("unfinished");
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("damaged or truncated") && err.contains("resumes"),
        "{err}"
    );
    assert!(
        out.contains("run 1 of 1: arm `a`, seed 0") && out.contains("resuming from"),
        "{out}"
    );
    assert!(dir.join("runs/a/seed-0/checkpoints/epoch-0002").is_dir());
    assert!(record(dir, "a", 0)["result"]["metrics"]["knn20_top1"].is_number());
}

/// `--dir` on a file, through a file, on a training run's directory or inside one: exit 2
/// naming it, before anything is written (a file was exit 1 "File exists"; a run directory
/// received the study's report and runs).
#[test]
fn a_study_directory_that_is_a_file_or_a_run_is_refused() {
    let file = study_file("dir-checks", "0.5");
    let file = file.to_str().unwrap();
    let afile = scratch().join("dir-checks-file");
    std::fs::write(&afile, "x").unwrap();
    let run_dir = scratch().join("dir-checks-run");
    let o = run(&crate::common::as_strs(&crate::common::tiny(
        run_dir.to_str().unwrap(),
        &[],
    )));
    assert_eq!(check_error_shape(&o, "the run"), 0, "{}", stderr(&o));
    let holds = |dir: &Path| {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let before = holds(&run_dir);
    let inside = run_dir.join("study");
    let through = std::path::PathBuf::from("dir-checks-file/study");
    // A folder of the user's own files (no runs/): its study.md was written over, exit 0.
    let notes = scratch().join("dir-checks-notes");
    let _ = std::fs::remove_dir_all(&notes);
    std::fs::create_dir_all(&notes).unwrap();
    std::fs::write(notes.join("study.md"), "my notes").unwrap();
    for (case, dir, expected) in [
        (
            "file",
            &afile,
            format!("--dir {}: not a directory", afile.display()),
        ),
        (
            "through a file",
            &through,
            "--dir dir-checks-file/study: dir-checks-file is not a directory".to_string(),
        ),
        (
            "run",
            &run_dir,
            format!("--dir {}: a training run's directory", run_dir.display()),
        ),
        (
            "inside a run",
            &inside,
            format!(
                "--dir {}: inside the training run directory {}",
                inside.display(),
                std::fs::canonicalize(&run_dir).unwrap().display()
            ),
        ),
        (
            "a folder of other files",
            &notes,
            format!(
                "--dir {}: holds study.md and no runs/, so it is not a study's directory",
                notes.display()
            ),
        ),
    ] {
        let o = run(&["study", file, "--dir", dir.to_str().unwrap()]);
        let err = stderr(&o);
        assert_eq!(check_error_shape(&o, case), 2, "{case}\n{err}");
        assert!(err.contains(&expected), "{case}: {expected}\n{err}");
    }
    assert_eq!(std::fs::read_to_string(&afile).unwrap(), "x");
    assert_eq!(holds(&run_dir), before, "nothing written into the run");
    assert_eq!(holds(&notes), ["study.md"]);
    assert_eq!(
        std::fs::read_to_string(notes.join("study.md")).unwrap(),
        "my notes"
    );
    // With --report-only too (it wrote the report over them the same way).
    let o = run(&[
        "study",
        file,
        "--dir",
        notes.to_str().unwrap(),
        "--report-only",
    ]);
    assert_eq!(check_error_shape(&o, "report only"), 2, "{}", stderr(&o));
    // A directory another study process holds (here this one, as a second `recipe study`
    // would find the first): refused naming it, before anything runs (the second planned the
    // same runs and failed on the first's, exit 1).
    let locked = scratch().join("dir-checks-locked");
    let _ = std::fs::remove_dir_all(&locked);
    std::fs::create_dir_all(&locked).unwrap();
    let lock = std::fs::File::create(locked.join(".lock")).unwrap();
    lock.lock().unwrap();
    std::fs::write(locked.join(".lock"), std::process::id().to_string()).unwrap();
    let o = run(&["study", file, "--dir", locked.to_str().unwrap()]);
    assert_eq!(check_error_shape(&o, "locked"), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!(
            "another `recipe study` of this directory is running, or it cannot be locked: run \
             directory {}: is in use by process {}",
            locked.display(),
            std::process::id()
        )),
        "{}",
        stderr(&o)
    );
    assert!(!locked.join("runs").exists());
    drop(lock);
    // --report-only before any run: nothing to report, and nothing written (a report alone
    // made the directory one of other files for the study's first run).
    let fresh = scratch().join("dir-checks-fresh");
    let o = run(&[
        "study",
        file,
        "--dir",
        fresh.to_str().unwrap(),
        "--report-only",
    ]);
    assert_eq!(check_error_shape(&o, "report first"), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no runs/ yet, so nothing to report"),
        "{}",
        stderr(&o)
    );
    assert!(!fresh.exists());
    crate::common::checked(&[&run_dir, &afile, &notes, &locked]);
}

/// Every committed study still resolves to its runs: `recipe study FILE --check` refuses (exit
/// 2, naming the setting) runs whose settings are not what their arms resolve to now, so a
/// change of a recipe's default that a committed study relied on fails here (the studies with
/// `light_moco` arms did, twice, before they named their settings: `studies/pin.py`). The
/// full-set studies read the full Fashion-MNIST: skipped where it is not installed.
#[test]
fn every_committed_study_resolves_to_its_runs() {
    let fashion = Path::new("/usr/share/datasets/fashion-mnist");
    if !fashion.is_dir() {
        eprintln!(
            "skipped: {} absent (apt-get install -y dataset-fashion-mnist)",
            fashion.display()
        );
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../studies");
    let mut files = Vec::new();
    for dir in [root.clone(), root.join("small")] {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                files.push(path);
            }
        }
    }
    files.sort();
    assert!(files.len() >= 10, "{files:?}");
    for file in &files {
        let o = run(&["study", file.to_str().unwrap(), "--check"]);
        assert_eq!(
            check_error_shape(&o, &file.display().to_string()),
            0,
            "{}: {}",
            file.display(),
            stderr(&o)
        );
    }
    // And a changed default is caught: a copy of a study whose arm asks for another batch than
    // its runs used is refused by --check, naming the setting.
    let study = root.join("light_moco_cpu.toml");
    let dir = scratch().join("changed-default");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let text = std::fs::read_to_string(&study)
        .unwrap()
        .replace("batch_size = 128", "batch_size = 256");
    assert!(text.contains("batch_size = 256"), "{text}");
    let copy = dir.join("study.toml");
    std::fs::write(&copy, text).unwrap();
    // Its runs' records are enough for the check (their definitions name batch 128).
    let runs = dir.join("study/runs/cpu_default");
    std::fs::create_dir_all(&runs).unwrap();
    for seed in 0..3 {
        let name = format!("seed-{seed}.json");
        std::fs::copy(
            root.join("light_moco_cpu/runs/cpu_default").join(&name),
            runs.join(&name),
        )
        .unwrap();
    }
    let o = run(&["study", copy.to_str().unwrap(), "--check"]);
    let err = stderr(&o);
    assert_eq!(check_error_shape(&o, "changed"), 2, "{err}");
    assert!(err.contains("arm `cpu_default`, seed 0"), "{err}");
}
