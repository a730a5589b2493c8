//! Resuming and extending a run, and settings from KEY=VALUE overrides and recipe.toml.

use std::path::Path;

use crate::common::{as_strs, check_error_shape, data, losses, run, scratch, stderr, tiny};

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
            "--backbone: run \"Small2x\", given \"Resnet18\"",
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
    the_evaluations_of_the_run_are_kept_a_row_each(dir);
}

/// `recipe eval` of the run in `dir` (a probe, then none): its results kept in the run
/// directory, a row per evaluation; its option checks.
fn the_evaluations_of_the_run_are_kept_a_row_each(dir: &str) {
    let run_dir = scratch().join(dir);
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
            "probe_top5",
            // The few-label probe's, empty without --label-fraction.
            "label_fraction",
            "few_label_top1",
            "few_label_top5"
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
    // The overrides reached what trained: config.json records the method, the optimiser, the
    // trainer's settings and the augmentation as the trainer saw them.
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(first.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["run"]["method"]["queue_size"], 2048);
    assert_eq!(config["run"]["method"]["soft_nce"]["temperature"], 0.2);
    assert_eq!(config["run"]["optimizer"]["weight_decay"], 1e-5);
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

    the_file_alone_is_the_same_run_and_the_command_line_wins(&first);

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
    // The optimiser's settings are compared as the method's (a resume took another weight
    // decay, or the default where the run's recipe.toml had lost its [optimizer], unnoticed).
    let o = run(&[
        "resume",
        first.to_str().unwrap(),
        "--extend",
        "--epochs",
        "4",
        "optimizer.weight_decay=0.5",
    ]);
    assert_eq!(
        check_error_shape(&o, "optimizer changed"),
        2,
        "{}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains("run.optimizer.weight_decay: run 0.00001, given 0.5"),
        "{}",
        stderr(&o)
    );
    assert_eq!(losses(&first).len(), 6);
    // --mean / --std on a resume: the run's own normalisation (its recipe.toml's augmentation)
    // came after them, so they were accepted, unused, and recorded beside it.
    let o = run(&[
        "resume",
        first.to_str().unwrap(),
        "--mean",
        "0.5",
        "--std",
        "0.2",
    ]);
    assert_eq!(check_error_shape(&o, "mean on resume"), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--mean [0.5] / --std [0.2]: the views are normalised otherwise"),
        "{}",
        stderr(&o)
    );
    assert_eq!(losses(&first).len(), 6);
    a_run_recorded_before_the_optimiser_resumes_and_records_it(&first);
    let o = run(&["resume", scratch().to_str().unwrap()]);
    assert_eq!(check_error_shape(&o, "resume no file"), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("no recipe.toml"), "{}", stderr(&o));
    // Its recipe.toml edited to name another recipe: named as such (it was refused by the
    // other recipe's settings, "method has no setting …"), the run unchanged.
    let recipe_toml = first.join("recipe.toml");
    let text = std::fs::read_to_string(&recipe_toml).unwrap();
    std::fs::write(
        &recipe_toml,
        text.replace("recipe = \"light_moco\"", "recipe = \"byol\""),
    )
    .unwrap();
    let o = run(&["resume", first.to_str().unwrap()]);
    assert_eq!(check_error_shape(&o, "other recipe"), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("names recipe `byol`, but the run was trained by `light_moco`"),
        "{}",
        stderr(&o)
    );
    std::fs::write(&recipe_toml, text).unwrap();
    assert_eq!(losses(&first).len(), 6);

    bad_settings_name_what_is_wrong(&first);
}

/// A copy of the run in `first` as a run recorded before `run.optimizer` (the setting taken
/// out of config.json and of every checkpoint's run.json, their checksums written again) resumes
/// on the optimiser given and records it; from then on it is compared.
fn a_run_recorded_before_the_optimiser_resumes_and_records_it(first: &Path) {
    let old = scratch().join("settings-before-optimizer");
    let _ = std::fs::remove_dir_all(&old);
    let copy = std::process::Command::new("cp")
        .args(["-r", first.to_str().unwrap(), old.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(copy.success());
    let strip = |path: &Path| -> Vec<u8> {
        let mut record: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        assert!(record["run"]["optimizer"].is_object(), "{record}");
        record["run"].as_object_mut().unwrap().remove("optimizer");
        let bytes = serde_json::to_vec_pretty(&record).unwrap();
        std::fs::write(path, &bytes).unwrap();
        bytes
    };
    strip(&old.join("config.json"));
    for entry in std::fs::read_dir(old.join("checkpoints")).unwrap() {
        let checkpoint = entry.unwrap().path();
        if !checkpoint.is_dir() {
            continue;
        }
        let run_json = strip(&checkpoint.join("run.json"));
        let mut meta: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(checkpoint.join("meta.json")).unwrap())
                .unwrap();
        meta["checksums"]["run.json"] = curriculum_ssl::train::sha256_hex(&run_json).into();
        let meta = serde_json::to_vec_pretty(&meta).unwrap();
        std::fs::write(checkpoint.join("meta.json"), &meta).unwrap();
        std::fs::write(
            checkpoint.join("meta.sha256"),
            curriculum_ssl::train::sha256_hex(&meta),
        )
        .unwrap();
    }
    let o = run(&["resume", old.to_str().unwrap(), "--extend", "--epochs", "4"]);
    assert_eq!(
        check_error_shape(&o, "recorded before"),
        0,
        "{}",
        stderr(&o)
    );
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(old.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["run"]["optimizer"]["weight_decay"], 1e-5, "{config}");
    let o = run(&[
        "resume",
        old.to_str().unwrap(),
        "--extend",
        "--epochs",
        "5",
        "optimizer.weight_decay=0.5",
    ]);
    assert_eq!(check_error_shape(&o, "then compared"), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("run.optimizer.weight_decay"),
        "{}",
        stderr(&o)
    );
}

/// The recipe.toml of the run in `first` alone, in a new directory, is the same run; the
/// command line wins over the file.
fn the_file_alone_is_the_same_run_and_the_command_line_wins(first: &Path) {
    let again = scratch().join("settings-again");
    let o = run(&[
        "light_moco",
        "--config",
        first.join("recipe.toml").to_str().unwrap(),
        "--run-dir",
        again.to_str().unwrap(),
    ]);
    assert_eq!(check_error_shape(&o, "from file"), 0, "{}", stderr(&o));
    assert_eq!(losses(first), losses(&again));
    assert_eq!(losses(first).len(), 4);
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
}

/// Bad settings name what is wrong; the curation's settings are the recipe's that curates; the
/// recipe.toml of the run in `first` (light_moco's) is refused by another recipe.
fn bad_settings_name_what_is_wrong(first: &Path) {
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
            "augmentation.local_crops.count=2",
            "augmentation.local_crops is off",
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
    // The curation's settings its policy refuses are usage errors before the run starts.
    for (setting, expected) in [
        (
            "curation.threshold={ RecentQuantile = { q = 1.5, window = 50 } }",
            "curation.threshold: RecentQuantile's q must be in (0, 1], got 1.5",
        ),
        (
            "curation.threshold={ RecentQuantile = { q = 0.9, window = 0 } }",
            "curation.threshold: RecentQuantile's window must be at least 1 batch, got 0",
        ),
    ] {
        let mut args = tiny("settings-curation-bad", &[setting, "--check"]);
        args[0] = "bad_batches".into();
        let o = run(&as_strs(&args));
        assert_eq!(check_error_shape(&o, setting), 2, "{}", stderr(&o));
        assert!(stderr(&o).contains(expected), "{setting}\n{}", stderr(&o));
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
    // A resume's run is its first argument: a --run-dir among its options won (the last of an
    // option counts) and started another run there on the recipe's defaults.
    for option in [
        vec!["--run-dir", "resume-elsewhere"],
        vec!["--run-dir=resume-elsewhere"],
    ] {
        let mut args = vec!["resume", first.to_str().unwrap()];
        args.extend(option);
        let o = run(&args);
        assert_eq!(
            check_error_shape(&o, "resume --run-dir"),
            2,
            "{}",
            stderr(&o)
        );
        assert!(
            stderr(&o).contains("is not an option of a resume") && stderr(&o).contains("--config"),
            "{}",
            stderr(&o)
        );
        assert!(!scratch().join("resume-elsewhere").exists());
    }
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
