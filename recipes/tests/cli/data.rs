//! Every dataset format, a folder of images of any size, and what a run reads from its data.

use std::path::Path;

use crate::common::{as_strs, check_error_shape, cifar_records, pixel, run, scratch, stderr, tiny};

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

fn dataset_variant(dataset: &str) -> &'static str {
    match dataset {
        "cifar10" => "Cifar10",
        "cifar100" => "Cifar100",
        "stl10" => "Stl10",
        _ => "ImageFolder",
    }
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

/// Every --dataset runs two steps on small files written here (64 images to train on, 40 to
/// test), and its run directory records the dataset; wrong combinations exit 2.
#[test]
fn every_dataset_option_runs_two_steps() {
    let root = scratch().join("datasets");
    let _ = std::fs::remove_dir_all(&root);
    let [cifar10, cifar100, stl, folder] = write_datasets(&root);
    let cases: [(&str, &Path, &[&str]); 4] = [
        ("cifar10", &cifar10, &[]),
        ("cifar100", &cifar100, &[]),
        ("stl10", &stl, &[]),
        ("image-folder", &folder, &["--image-size", "16"]),
    ];
    let mut stl_stdout = String::new();
    for (dataset, dir, extra) in cases {
        let stdout = a_dataset_runs_two_steps(dataset, dir, extra);
        if dataset == "stl10" {
            stl_stdout = stdout;
        }
    }
    stl10_streams_and_scores_its_raw_pixels_as_in_memory(&stl, &stl_stdout);
    // `recipe embed` of the image folder decoded into memory names its rows by their files, in
    // the listing's order, as a streamed run's are (they were `test/0`, `test/1`…).
    let out = scratch().join("folder-embed.npy");
    let o = run(&[
        "embed",
        "--run-dir",
        scratch().join("dataset-image-folder").to_str().unwrap(),
        "--split",
        "test",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(check_error_shape(&o, "embed folder"), 0, "{}", stderr(&o));
    let table = std::fs::read_to_string(out.with_extension("csv")).unwrap();
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 1 + 40, "{table}");
    assert_eq!(lines[1], "0,cat/00.png,0", "{table}");
    assert_eq!(lines[40], "39,dog/19.png,1", "{table}");
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

/// Small files of every dataset format in `root` (64 images to train on, 40 to test): CIFAR-10,
/// CIFAR-100, STL-10 and an image folder.
fn write_datasets(root: &Path) -> [std::path::PathBuf; 4] {
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
    [cifar10, cifar100, stl, folder]
}

/// A run of two steps on `dataset` in `dir` (with the options `extra`): its logs, plots,
/// summary and record, and `recipe eval` reading the dataset back from the record. The run's
/// standard output.
fn a_dataset_runs_two_steps(dataset: &str, dir: &Path, extra: &[&str]) -> String {
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
    stdout.to_string()
}

/// STL-10 streamed from its binaries (`stl`): the unlabeled images read one by one each epoch,
/// the kNN monitor's splits whole as in memory, so the raw pixels score as they did there (in
/// the run that printed `stl_stdout`).
fn stl10_streams_and_scores_its_raw_pixels_as_in_memory(stl: &Path, stl_stdout: &str) {
    let mut args = tiny(
        "dataset-stl10-streamed",
        &["--dataset", "stl10", "--data-dir", stl.to_str().unwrap()],
    );
    args.push("--stream".into());
    let o = run(&as_strs(&args));
    assert_eq!(check_error_shape(&o, "stl10 streamed"), 0, "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let raw = |text: &str| -> Vec<String> {
        text.lines()
            .filter_map(|l| l.split("raw pixels").nth(1).map(str::to_string))
            .collect()
    };
    assert!(!raw(stl_stdout).is_empty(), "{stl_stdout}");
    assert_eq!(raw(&stdout), raw(stl_stdout), "{stdout}\n{stl_stdout}");
    assert!(
        stderr(&o).contains("streaming STL-10's 64 unlabeled images"),
        "{}",
        stderr(&o)
    );
    let run_dir = scratch().join("dataset-stl10-streamed");
    let config = std::fs::read_to_string(run_dir.join("config.json")).unwrap();
    let config: serde_json::Value = serde_json::from_str(&config).unwrap();
    assert_eq!(config["run"]["stream"], true, "{config}");
    assert_eq!(config["data"]["examples"], 64, "{config}");
    let o = run(&[
        "eval",
        "--run-dir",
        run_dir.to_str().unwrap(),
        "--probe-epochs",
        "0",
    ]);
    assert_eq!(
        check_error_shape(&o, "stl10 streamed eval"),
        0,
        "{}",
        stderr(&o)
    );
}

/// Pre-training on one's own images: a folder of any sizes, flat and nested, with a text file
/// among them, resized and centre-cropped; the normalisation is computed from the images; the
/// kNN monitor is off without labels and on with a labelled --knn-data tree, which `recipe eval`
/// then reads back.
#[test]
fn a_folder_of_unlabelled_images_of_any_size_trains_with_its_own_statistics() {
    let root = scratch().join("own-images");
    let _ = std::fs::remove_dir_all(&root);
    let (mean, std) = write_own_images(&root);
    let base = |name: &str| own_images_run(&root, name);

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

    given_statistics_replace_the_computed_ones(&root);
    a_labelled_knn_tree_turns_the_monitor_on(&root);
}

/// SupCon's loss reads the labels: a folder of unlabelled images is refused with exit code 2
/// and a message naming the missing labels, before the run directory is made.
#[test]
fn supcon_refuses_images_without_labels() {
    let root = scratch().join("supcon-unlabelled");
    let _ = std::fs::remove_dir_all(&root);
    write_own_images(&root);
    let mut args = own_images_run(&root, "supcon-unlabelled-run");
    args[0] = "supcon".to_string();
    args.extend(["--image-size", "16"].map(String::from));
    let o = run(&as_strs(&args));
    assert_eq!(
        check_error_shape(&o, "supcon unlabelled"),
        2,
        "{}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("have no labels"), "{}", stderr(&o));
    assert!(!scratch().join("supcon-unlabelled-run").exists());
}

/// 32 uniform images in `root`: 12 of 16×16 at the top, 10 of 24×16 in a/, 10 of 40×40 in
/// b/c/, and a text file. Their channels' mean and standard deviation.
fn write_own_images(root: &Path) -> (Vec<f64>, Vec<f64>) {
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
    (mean, std)
}

/// `tiny`'s options for a run `name` on the folder `root` in batches of 16.
fn own_images_run(root: &Path, name: &str) -> Vec<String> {
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
}

/// Given statistics replace the ones computed from the images in `root`; their count must
/// match the channels.
fn given_statistics_replace_the_computed_ones(root: &Path) {
    let base = |name: &str| own_images_run(root, name);
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
}

/// A labelled tree of other sizes turns the monitor on for a run on the images in `root`;
/// eval reads it from the run. A --knn-data without val/ is refused before anything is read.
fn a_labelled_knn_tree_turns_the_monitor_on(root: &Path) {
    let base = |name: &str| own_images_run(root, name);
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

/// A labelled image folder of JPEGs of several sizes (`train/` and `val/`, three classes, `n`
/// per class in train/), and `bad` unreadable files in train/owl/ (half truncated JPEGs, half
/// text named .jpg).
fn jpeg_folder(name: &str, n: usize, bad: usize) -> std::path::PathBuf {
    let root = scratch().join(name);
    let _ = std::fs::remove_dir_all(&root);
    for (split, count) in [("train", n), ("val", 6)] {
        for class in ["cat", "dog", "owl"] {
            let dir = root.join(split).join(class);
            std::fs::create_dir_all(&dir).unwrap();
            for i in 0..count {
                let (w, h) = (24 + 3 * i as u32, 20 + 2 * i as u32);
                let img = image::RgbImage::from_fn(w, h, |c, r| {
                    image::Rgb([0, 1, 2].map(|ch| pixel(i + 7 * ch, r as usize, c as usize, ch)))
                });
                img.save(dir.join(format!("{i:02}.jpg"))).unwrap();
            }
        }
    }
    let good = std::fs::read(root.join("train/cat/00.jpg")).unwrap();
    for i in 0..bad {
        let bytes: &[u8] = if i % 2 == 0 {
            &good[..good.len() / 2]
        } else {
            b"not an image at all"
        };
        std::fs::write(root.join(format!("train/owl/bad{i}.jpg")), bytes).unwrap();
    }
    root
}

/// A folder streamed (`--stream`): the views cut from JPEGs of several sizes every epoch, the
/// unreadable files skipped, each named in the log and counted in steps.csv and the summary,
/// the kNN monitor on val/ (streamed too), the run recorded as streamed; a resume that would
/// decode the same folder into memory is refused naming both; `--stream` on data that is not
/// image files exits 2.
#[test]
fn a_streamed_image_folder_trains_counts_its_bad_files_and_resumes_only_streamed() {
    // 24 readable files and 8 unreadable ones: two batches of 16 visit every file; a text file
    // among them is left out when listed.
    let folder = jpeg_folder("streamed-folder", 8, 8);
    std::fs::write(folder.join("train/cat/notes.txt"), "not an image").unwrap();
    let data = [
        "--dataset",
        "image-folder",
        "--data-dir",
        folder.to_str().unwrap(),
    ];
    let mut args = tiny("streamed", &data);
    args.extend(
        [
            "--image-size",
            "16",
            "--batch-size",
            "16",
            "--stream",
            "--knn-every",
            "1",
        ]
        .map(String::from),
    );
    let o = run(&as_strs(&args));
    assert_eq!(check_error_shape(&o, "streamed"), 0, "{}", stderr(&o));
    let run_dir = scratch().join("streamed");
    let steps = std::fs::read_to_string(run_dir.join("steps.csv")).unwrap();
    let header: Vec<&str> = steps.lines().next().unwrap().split(',').collect();
    let column = header
        .iter()
        .position(|h| *h == "skipped_files")
        .expect("a skipped_files column");
    let skipped: f64 = steps
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(column).unwrap().parse::<f64>().unwrap())
        .sum();
    assert_eq!(steps.lines().count(), 3, "two steps\n{steps}");
    // Every unreadable file was met once; a substitute drawn at random may be one again.
    assert!(skipped >= 8.0, "{steps}");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains(&format!("skipped {skipped} unreadable image files")),
        "{stdout}"
    );
    assert!(
        stdout.contains("1 files that are not .png, .jpg or .jpeg left out when"),
        "{stdout}"
    );
    let log = stderr(&o);
    for i in 0..8 {
        assert!(
            log.contains(&format!("bad{i}.jpg")),
            "bad{i}.jpg not named\n{log}"
        );
    }
    assert!(stdout.contains("kNN (k = 20"), "{stdout}");
    let config = std::fs::read_to_string(run_dir.join("config.json")).unwrap();
    let config: serde_json::Value = serde_json::from_str(&config).unwrap();
    assert_eq!(config["run"]["stream"], true, "{config}");
    assert_eq!(config["data"]["files"], true, "{config}");
    let toml = std::fs::read_to_string(run_dir.join("recipe.toml")).unwrap();
    assert!(toml.contains("stream = true"), "{toml}");
    eval_and_embed_read_the_streamed_run_as_it_trained(&run_dir, &stdout);
    a_streamed_run_does_not_resume_decoded_into_memory();

    let o = run(&as_strs(&tiny("stream-idx", &["--stream"])));
    assert_eq!(check_error_shape(&o, "stream idx"), 2);
    assert!(
        stderr(&o).contains("--stream: only for --dataset image-folder, folder, shards or stl10"),
        "{}",
        stderr(&o)
    );
}

/// `recipe eval` reads the splits of the streamed run in `run_dir` as the run did (streamed,
/// centre-cut): the same kNN as the run's last evaluation of the same weights (in its output
/// `stdout`), and a probe on streamed features; `recipe embed` of the streamed split: a row per
/// readable file, named by its path.
fn eval_and_embed_read_the_streamed_run_as_it_trained(run_dir: &Path, stdout: &str) {
    let o = run(&[
        "eval",
        "--run-dir",
        run_dir.to_str().unwrap(),
        "--probe-epochs",
        "1",
    ]);
    assert_eq!(check_error_shape(&o, "eval streamed"), 0, "{}", stderr(&o));
    let eval = String::from_utf8_lossy(&o.stdout);
    let knn_line = |text: &str| {
        text.lines()
            .find(|l| l.starts_with("kNN (k = 20"))
            .map(|l| {
                l.split(" (at")
                    .next()
                    .unwrap()
                    .split(", top-5")
                    .next()
                    .unwrap()
                    .to_string()
            })
    };
    assert_eq!(knn_line(&eval), knn_line(stdout), "{eval}\n{stdout}");
    assert!(eval.contains("linear probe"), "{eval}");
    // Another folder given as the run's data: refused (it was evaluated, exit 0).
    let other = jpeg_folder("eval-other-data", 8, 0);
    let o = run(&[
        "eval",
        "--run-dir",
        run_dir.to_str().unwrap(),
        "--data-dir",
        other.to_str().unwrap(),
    ]);
    assert_eq!(
        check_error_shape(&o, "eval other data"),
        2,
        "{}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains("not the data the run trained on (32 labelled image files"),
        "{}",
        stderr(&o)
    );
    // `recipe embed` of the streamed split: a row per readable file, named by its path.
    let out = scratch().join("streamed-embed.npy");
    let o = run(&[
        "embed",
        "--run-dir",
        run_dir.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(check_error_shape(&o, "embed streamed"), 0, "{}", stderr(&o));
    let table = std::fs::read_to_string(out.with_extension("csv")).unwrap();
    assert_eq!(table.lines().count(), 1 + 24, "{table}");
    assert!(
        table.contains(",cat/00.jpg,0") && !table.contains("bad"),
        "{table}"
    );
    // `recipe compare --out` inside the run's data: its PNG plots would be images of a class.
    let folder = run_dir.parent().unwrap().join("streamed-folder/train/cat");
    let o = run(&[
        "compare",
        run_dir.to_str().unwrap(),
        "--out",
        folder.to_str().unwrap(),
    ]);
    assert_eq!(
        check_error_shape(&o, "compare in data"),
        2,
        "{}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains("the plots would be read as images there"),
        "{}",
        stderr(&o)
    );
    assert!(!folder.join("compare.md").exists());
}

/// A clean folder streamed, then resumed decoded into memory: other views of the same files,
/// refused naming both.
fn a_streamed_run_does_not_resume_decoded_into_memory() {
    let clean = jpeg_folder("clean-jpegs", 8, 0);
    let data = [
        "--dataset",
        "image-folder",
        "--data-dir",
        clean.to_str().unwrap(),
    ];
    let mut args = tiny("streamed-clean", &data);
    args.extend(["--image-size", "16", "--batch-size", "16", "--stream"].map(String::from));
    let o = run(&as_strs(&args));
    assert_eq!(check_error_shape(&o, "streamed clean"), 0, "{}", stderr(&o));
    let mut args = tiny("streamed-clean", &data);
    args.extend(
        [
            "--image-size",
            "16",
            "--batch-size",
            "16",
            "--stream",
            "false",
            "--resume",
            "--epochs",
            "2",
        ]
        .map(String::from),
    );
    let o = run(&as_strs(&args));
    assert_eq!(
        check_error_shape(&o, "resumed in memory"),
        2,
        "{}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains("24 labelled image files streamed at 16x16x3")
            && stderr(&o).contains("24 labelled images 16x16x3"),
        "{}",
        stderr(&o)
    );
}

/// A val/ whose class folders are not train/'s (`owl` renamed `emu`: as many classes, so the
/// counts agree) is refused in memory and streamed, naming the folders on each side only: the
/// kNN monitor scores a query by its neighbours' labels, positions in train/'s list, so in
/// memory every `emu` was scored as an `owl` without a word. A truncated JPEG in train/ is
/// refused in memory naming it (it was loaded with its missing rows grey), as streamed it is
/// skipped (`a_streamed_image_folder_trains_counts_its_bad_files_and_resumes_only_streamed`).
#[test]
fn val_classes_that_are_not_trains_and_a_truncated_jpeg_are_refused_naming_them() {
    let root = jpeg_folder("val-classes", 8, 0);
    std::fs::rename(root.join("val/owl"), root.join("val/emu")).unwrap();
    let data = [
        "--dataset",
        "image-folder",
        "--data-dir",
        root.to_str().unwrap(),
    ];
    for stream in ["false", "true"] {
        let dir = format!("val-classes-{stream}");
        let mut args = tiny(&dir, &data);
        args.extend(
            [
                "--image-size",
                "16",
                "--batch-size",
                "16",
                "--stream",
                stream,
            ]
            .map(String::from),
        );
        let o = run(&as_strs(&args));
        assert_eq!(check_error_shape(&o, &dir), 2, "{}", stderr(&o));
        assert!(
            stderr(&o).contains("val: its classes (3) are not those of")
                && stderr(&o).contains("only in the first: emu; only in the second: owl"),
            "{}",
            stderr(&o)
        );
        assert!(!scratch().join(&dir).exists());
    }
    std::fs::rename(root.join("val/emu"), root.join("val/owl")).unwrap();
    let good = std::fs::read(root.join("train/cat/07.jpg")).unwrap();
    std::fs::write(root.join("train/cat/07.jpg"), &good[..good.len() * 3 / 4]).unwrap();
    let mut args = tiny("truncated-in-memory", &data);
    args.extend(["--image-size", "16", "--batch-size", "16"].map(String::from));
    let o = run(&as_strs(&args));
    assert_eq!(check_error_shape(&o, "truncated"), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("cat/07.jpg") && stderr(&o).contains("a truncated JPEG"),
        "{}",
        stderr(&o)
    );
}

/// ImageNet's layouts: a class list (ImageNet-100's kind) reads its class folders alone, and a
/// `val/` without class folders is labelled by a labels file (lines of `FILE SYNSET`); in memory
/// and streamed alike, the run trains on the listed classes only and records both files; a
/// listed class without a folder and the devkit's numbered labels exit 2 naming them.
#[test]
fn an_imagenet_layout_with_a_class_list_and_a_flat_val_trains_in_memory_and_streamed() {
    let root = jpeg_folder("imagenet-layout", 8, 0);
    // val/ flattened: its files beside each other, their classes in a labels file.
    let mut lines = String::new();
    for class in ["cat", "dog", "owl"] {
        let dir = root.join("val").join(class);
        for i in 0..6 {
            let name = format!("val_{class}_{i}.jpg");
            std::fs::rename(
                dir.join(format!("{i:02}.jpg")),
                root.join("val").join(&name),
            )
            .unwrap();
            lines.push_str(&format!("{name} {class}\n"));
        }
        std::fs::remove_dir(&dir).unwrap();
    }
    let labels = scratch().join("imagenet-layout-val.txt");
    std::fs::write(&labels, lines).unwrap();
    let list = scratch().join("imagenet-layout-classes.txt");
    std::fs::write(&list, "# two of the three\nowl\ncat\n").unwrap();
    let data = [
        "--dataset",
        "image-folder",
        "--data-dir",
        root.to_str().unwrap(),
        "--classes",
        list.to_str().unwrap(),
        "--val-labels",
        labels.to_str().unwrap(),
        "--image-size",
        "16",
        "--batch-size",
        "8",
    ];
    for (name, extra) in [("layout-memory", "false"), ("layout-streamed", "true")] {
        let mut args = tiny(name, &data);
        args.extend(["--stream".to_string(), extra.to_string()]);
        let o = run(&as_strs(&args));
        assert_eq!(check_error_shape(&o, name), 0, "{}", stderr(&o));
        let stdout = String::from_utf8_lossy(&o.stdout);
        // k capped at the bank: the 16 training images of the two classes.
        assert!(
            stdout.contains("kNN (k = 16, T = 0.07)"),
            "{name}: {stdout}"
        );
        let config = std::fs::read_to_string(scratch().join(name).join("config.json")).unwrap();
        let config: serde_json::Value = serde_json::from_str(&config).unwrap();
        // cat and owl: 16 training images, two steps of 8.
        assert_eq!(config["data"]["examples"], 16, "{name}: {config}");
        assert_eq!(config["run"]["classes"], list.to_str().unwrap(), "{name}");
        assert_eq!(
            config["run"]["val_labels"],
            labels.to_str().unwrap(),
            "{name}"
        );
        let steps = std::fs::read_to_string(scratch().join(name).join("steps.csv")).unwrap();
        assert_eq!(steps.lines().count(), 3, "{name}: two steps\n{steps}");
    }

    let missing = scratch().join("imagenet-layout-missing.txt");
    std::fs::write(&missing, "owl\neel\n").unwrap();
    let mut args = tiny("layout-missing", &data);
    let at = args.iter().position(|a| a == "--classes").unwrap();
    args[at + 1] = missing.to_str().unwrap().to_string();
    let o = run(&as_strs(&args));
    assert_eq!(check_error_shape(&o, "missing class"), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("class `eel` of the class list"),
        "{}",
        stderr(&o)
    );

    let devkit = scratch().join("ILSVRC2012_validation_ground_truth.txt");
    std::fs::write(&devkit, "490\n361\n").unwrap();
    let mut args = tiny("layout-devkit", &data);
    let at = args.iter().position(|a| a == "--val-labels").unwrap();
    args[at + 1] = devkit.to_str().unwrap().to_string();
    let o = run(&as_strs(&args));
    assert_eq!(check_error_shape(&o, "devkit labels"), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("meta.mat"), "{}", stderr(&o));
}

/// `recipe pack` writes an image folder's train/ and val/ as WebDataset shards (the unreadable
/// files left out and counted); `--dataset shards` trains on them streamed, with the kNN monitor
/// on val/'s shards and the run recorded as streamed files; `recipe eval` reads them as the run
/// did; packing into shards again, and `--stream false` on shards, exit 2.
#[test]
fn a_packed_folder_trains_from_its_shards() {
    let folder = jpeg_folder("pack-folder", 8, 2);
    let shards = scratch().join("pack-shards");
    let _ = std::fs::remove_dir_all(&shards);
    let pack = [
        "pack",
        "--data-dir",
        folder.to_str().unwrap(),
        "--out",
        shards.to_str().unwrap(),
        "--samples-per-shard",
        "5",
    ];
    let o = run(&pack);
    assert_eq!(check_error_shape(&o, "pack"), 0, "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    // 24 readable of 26 in train/: five shards of 5 and one of 4; val/ 18 in four shards.
    assert!(
        stdout.contains("24 samples in 5 shards") && stdout.contains("2 files left out"),
        "{stdout}"
    );
    assert!(stdout.contains("18 samples in 4 shards"), "{stdout}");
    let index = std::fs::read_to_string(shards.join("train/index.json")).unwrap();
    let index: serde_json::Value = serde_json::from_str(&index).unwrap();
    assert_eq!(index["classes"], serde_json::json!(["cat", "dog", "owl"]));
    assert_eq!(index["skipped"].as_array().unwrap().len(), 2, "{index}");
    assert!(shards.join("train/shard-000004.tar").is_file());

    let data = [
        "--dataset",
        "shards",
        "--data-dir",
        shards.to_str().unwrap(),
    ];
    let mut args = tiny("from-shards", &data);
    args.extend(
        [
            "--image-size",
            "16",
            "--batch-size",
            "8",
            "--knn-every",
            "1",
        ]
        .map(String::from),
    );
    let o = run(&as_strs(&args));
    assert_eq!(check_error_shape(&o, "from shards"), 0, "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("kNN (k = 20"), "{stdout}");
    assert!(stderr(&o).contains("streaming 24 images"), "{}", stderr(&o));
    let run_dir = scratch().join("from-shards");
    let config = std::fs::read_to_string(run_dir.join("config.json")).unwrap();
    let config: serde_json::Value = serde_json::from_str(&config).unwrap();
    assert_eq!(config["run"]["stream"], true, "{config}");
    assert_eq!(config["data"]["files"], true, "{config}");
    assert_eq!(config["data"]["examples"], 24, "{config}");
    let o = run(&[
        "eval",
        "--run-dir",
        run_dir.to_str().unwrap(),
        "--probe-epochs",
        "1",
    ]);
    assert_eq!(check_error_shape(&o, "eval shards"), 0, "{}", stderr(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("linear probe"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );

    let o = run(&pack);
    assert_eq!(check_error_shape(&o, "pack again"), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("holds shards"), "{}", stderr(&o));
    // A folder of other files (an image folder, a run): the shards went in beside them.
    let other = scratch().join("pack-into-other");
    let _ = std::fs::remove_dir_all(&other);
    std::fs::create_dir_all(other.join("cat")).unwrap();
    let mut into_other = pack;
    into_other[4] = other.to_str().unwrap();
    let o = run(&into_other);
    assert_eq!(
        check_error_shape(&o, "pack into other"),
        2,
        "{}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains("holds cat; pack into a new or empty folder"),
        "{}",
        stderr(&o)
    );
    assert!(!other.join("train").exists());
    let mut args = tiny("shards-in-memory", &data);
    args.extend(["--stream", "false"].map(String::from));
    let o = run(&as_strs(&args));
    assert_eq!(
        check_error_shape(&o, "shards in memory"),
        2,
        "{}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("always streams"), "{}", stderr(&o));

    // One split's index deleted: named, not a mismatch of classes "0, 1, 2" against names.
    std::fs::remove_file(shards.join("val/index.json")).unwrap();
    let o = run(&as_strs(&tiny("shards-no-index", &data)));
    assert_eq!(check_error_shape(&o, "no index"), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("val/index.json: missing, while"),
        "{}",
        stderr(&o)
    );
}
