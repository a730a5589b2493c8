//! What a run writes and what is made from it: exports, embeddings, comparisons, plots, logs.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{
    as_strs, check_error_shape, checked, cifar_records, example, long_run, losses, run, scratch,
    stderr, tiny,
};

/// The header of a safetensors file: its tensors' shapes and its metadata.
pub(crate) fn safetensors_header(path: &Path) -> serde_json::Value {
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

/// A run of `tiny` in `name`, finished.
fn finished_tiny(name: &str) -> PathBuf {
    finished("light_moco", name)
}

/// A one-epoch run of `recipe` on the test images (`tiny`'s options) in `name`, finished.
fn finished(recipe: &str, name: &str) -> PathBuf {
    let dir = scratch().join(name);
    let _ = std::fs::remove_dir_all(&dir);
    let mut args = tiny(name, &[]);
    args[0] = recipe.into();
    let o = run(&as_strs(&args));
    assert_eq!(check_error_shape(&o, name), 0, "{}", stderr(&o));
    dir
}

/// [`finished`], then exported: the run's directory and the header of its
/// `backbone.safetensors`.
fn exported(recipe: &str, name: &str) -> (PathBuf, serde_json::Value) {
    let run_dir = finished(recipe, name);
    let o = run(&["export", "--run-dir", run_dir.to_str().unwrap()]);
    assert_eq!(check_error_shape(&o, "export"), 0, "{}", stderr(&o));
    let header = safetensors_header(&run_dir.join("backbone.safetensors"));
    (run_dir, header)
}

/// `recipe embed` of a run's test split into `out` (under the scratch directory): the `.npy`
/// file's path, shape and values.
fn embedded_test_split(run_dir: &Path, out: &str) -> (PathBuf, Vec<u64>, Vec<f32>) {
    let out = scratch().join(out);
    let o = run(&[
        "embed",
        "--run-dir",
        run_dir.to_str().unwrap(),
        "--split",
        "test",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(check_error_shape(&o, "embed test"), 0, "{}", stderr(&o));
    let (shape, values) = read_npy(&out);
    (out, shape, values)
}

/// A model comes out: `recipe export` writes the backbone under torchvision's ResNet names with
/// the run's input and normalisation in the header; `recipe embed` writes the features of a
/// folder (any sizes, with file names) or of a split (with labels) as .npy + .csv; and the
/// example reads the same run and gives the same numbers.
#[test]
fn a_run_exports_its_backbone_and_embeds_a_folder_as_the_example_does() {
    let (run_dir, header) = exported("light_moco", "export-run");
    let dir = run_dir.to_str().unwrap();
    the_export_has_torchvisions_names_and_the_runs_input(&header);
    let d = a_folder_embeds_as_the_example_reads_it(dir);

    // The run's test split, with its labels (the test data's are i mod 10).
    let (out, shape, _) = embedded_test_split(&run_dir, "embed-test.npy");
    assert_eq!(shape, vec![40, d as u64]);
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

/// The exported `header`: the run's input and normalisation in its metadata, the backbone
/// under torchvision's ResNet names and layout.
fn the_export_has_torchvisions_names_and_the_runs_input(header: &serde_json::Value) {
    let meta = &header["__metadata__"];
    assert_eq!(meta["recipe"], "light_moco");
    assert_eq!(meta["backbone"], "small-2x");
    assert_eq!(meta["in_chans"], "1");
    assert_eq!(meta["input_size"], "28x28");
    assert_eq!(meta["stem"], "stride2");
    // The last 2×2 map of 128 channels, flattened.
    assert_eq!(meta["pooled_grid"], "2");
    assert_eq!(meta["feature_dim"], "512");
    assert_eq!(meta["key_names"], "torchvision-resnet");
    assert_eq!(meta["mean"], "[0.286]");
    // torchvision's names and layout: the 3×3 stem of 16 channels, batch norm as weight / bias.
    assert_eq!(
        header["conv1.weight"]["shape"],
        serde_json::json!([16, 1, 3, 3])
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
}

/// `recipe embed` of a folder (two copies of one image under two names, and one of another
/// size) in the run `dir`, and the example on the same run and folder: the same features. The
/// features' width.
fn a_folder_embeds_as_the_example_reads_it(dir: &str) -> usize {
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
    d
}

/// A masked-image-modelling run exports its encoder alone, under timm's `VisionTransformer`
/// names, and embeds with it: MAE's default ViT-Tiny on the 28-pixel test images (patches of 4,
/// a 7 × 7 grid and the class token: 50 positions, 192-d features). The names are checked
/// against the keys timm itself wrote (tests/fixtures/vit_timm.safetensors, from
/// tests/pytorch/export_vit.py: one block there, twelve here), so neither MAE's decoder nor its
/// mask token leaks into the file.
#[test]
fn a_mae_run_exports_its_encoder_under_timms_names_and_embeds() {
    let (run_dir, header) = exported("mae", "export-mae");
    let meta = &header["__metadata__"];
    assert_eq!(meta["recipe"], "mae");
    assert_eq!(meta["key_names"], "timm-vit");
    assert_eq!(meta["in_chans"], "1");
    assert_eq!(meta["input_size"], "28x28");
    // ViT-Tiny's 3 heads (not readable from the shapes), and the class token's features: no
    // `vit_pool` (an AIM run's file says `PatchMean`).
    assert_eq!(meta["num_heads"], "3");
    assert!(meta.get("vit_pool").is_none(), "{meta}");
    for (key, shape) in [
        ("patch_embed.proj.weight", serde_json::json!([192, 1, 4, 4])),
        ("cls_token", serde_json::json!([1, 1, 192])),
        ("pos_embed", serde_json::json!([1, 50, 192])),
        ("blocks.11.attn.qkv.weight", serde_json::json!([576, 192])),
        ("blocks.11.mlp.fc2.weight", serde_json::json!([192, 768])),
        ("norm.weight", serde_json::json!([192])),
    ] {
        assert_eq!(header[key]["shape"], shape, "{key}: {header}");
    }
    // Every name with its block index taken out, against timm's own.
    let general = |name: &str| -> String {
        match name.strip_prefix("blocks.") {
            Some(rest) => format!("blocks.N.{}", rest.split_once('.').unwrap().1),
            None => name.to_string(),
        }
    };
    let names = |header: &serde_json::Value| -> std::collections::BTreeSet<String> {
        header
            .as_object()
            .unwrap()
            .keys()
            .filter(|k| {
                *k != "__metadata__" && !k.starts_with("expected.") && !k.starts_with("input")
            })
            .map(|k| general(k))
            .collect()
    };
    let timm = safetensors_header(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/vit_timm.safetensors"),
    );
    assert_eq!(names(&header), names(&timm));
    let tensors = header.as_object().unwrap().len() - 1;
    assert_eq!(
        tensors,
        12 * 12 + 6,
        "twelve blocks of 12 tensors, and 6 outside them"
    );

    let (_, shape, values) = embedded_test_split(&run_dir, "embed-mae.npy");
    assert_eq!(shape, vec![40, 192]);
    assert!(values.iter().all(|v| v.is_finite()));
    assert_ne!(values[..192], values[192..384], "two images, one feature");
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
    checked(&[&rgb_run, &weights, &grey, &scratch_run]);
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
    let mut child = long_run(&run_dir)
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

/// The binary run as a user whom permissions bind: as `nobody` through `setpriv` when the tests
/// run as root (root writes anywhere; as `an_unreadable_data_directory_is_reported_as_permission_denied`
/// does), else as this user; `None`, said on standard error, where root has no `setpriv`. The
/// copy of the binary that `nobody` runs lives in the scratch directory, removed on drop.
struct Unprivileged {
    /// The copy of the binary for `nobody` (root only).
    binary: Option<PathBuf>,
}

impl Unprivileged {
    fn new(name: &str) -> Option<Self> {
        use std::os::unix::fs::PermissionsExt;
        let uid = Command::new("id").arg("-u").output().unwrap();
        if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
            return Some(Self { binary: None });
        }
        if Command::new("setpriv").arg("--version").output().is_err() {
            eprintln!(
                "skipped: the permission cases need setpriv (util-linux) to run the binary as \
                 nobody (the tests run as root, whom permission bits do not bind)"
            );
            return None;
        }
        // Under the scratch directory in /tmp, which `nobody` can reach wherever the checkout
        // lives.
        let binary = scratch().join(name);
        std::fs::copy(env!("CARGO_BIN_EXE_recipe"), &binary).unwrap();
        std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755)).unwrap();
        Some(Self {
            binary: Some(binary),
        })
    }

    fn run(&self, args: &[&str]) -> std::process::Output {
        match &self.binary {
            Some(binary) => Command::new("setpriv")
                .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(binary)
                .args(args)
                .current_dir("/")
                .env("RUST_LOG", "info")
                .output()
                .expect("setpriv runs the binary as nobody"),
            None => run(args),
        }
    }
}

impl Drop for Unprivileged {
    fn drop(&mut self) {
        // The copy is as large as the binary: CI's disk is small.
        if let Some(binary) = &self.binary {
            let _ = std::fs::remove_file(binary);
        }
    }
}

/// The words of a command, owned.
fn owned(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| w.to_string()).collect()
}

/// Sets the mode of `path`.
fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The bytes of a run's own files, to compare after what should not have touched them.
fn run_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    ["steps.csv", "epochs.csv", "recipe.toml", "config.json"]
        .iter()
        .map(|f| (f.to_string(), std::fs::read(dir.join(f)).unwrap()))
        .collect()
}

/// Every output of `embed`, `export` and `compare` stays off a run's own files, whatever the
/// path: `recipe embed --out RUN/steps.npy` would write its table to RUN/steps.csv, the run's
/// step log; an `--out` that is a link into a run (this one or another run directory) would have
/// written through the link (exit 0, the run's steps.csv, epochs.csv or recipe.toml gone); and
/// `compare --out` onto a run's plots/ or top level mixed with its files. Each is refused before
/// anything is computed, naming the file and the run directory (exit 2), the runs intact. An
/// output is written beside its target and renamed over it, so a link elsewhere is replaced,
/// not written through. A place that cannot be written is said so with exit 2 before anything
/// is computed (an export to /proc, onto a folder; as a user whom permissions bind: a read-only
/// run for eval, export and embed, a read-only folder for compare and for a new run's
/// --run-dir; they were exit 1, eval's after the whole evaluation). The run's directory holds a
/// space, a `$` and a quote: the command the run prints to evaluate it, pasted into a shell,
/// gives the binary that directory.
#[test]
fn exports_do_not_write_over_the_runs_files_and_say_where_they_cannot_write() {
    let dir = finished_tiny("export-guard $HOME it's");
    let dir = dir.canonicalize().unwrap();
    let steps = std::fs::read(dir.join("steps.csv")).unwrap();
    let run_dir = dir.to_str().unwrap();
    // Another run directory (its record and logs copied: what the library takes for a run).
    let other = scratch().join("export-guard-other");
    let _ = std::fs::remove_dir_all(&other);
    std::fs::create_dir_all(other.join("plots")).unwrap();
    let other = other.canonicalize().unwrap();
    for file in ["config.json", "steps.csv", "epochs.csv", "recipe.toml"] {
        std::fs::copy(dir.join(file), other.join(file)).unwrap();
    }
    std::fs::copy(dir.join("plots/loss.png"), other.join("plots/loss.png")).unwrap();
    let (ours, theirs) = (run_files(&dir), run_files(&other));
    let loss_png = std::fs::read(dir.join("plots/loss.png")).unwrap();
    // Links to the runs' files, as a user's own output names.
    let links = scratch().join("export-guard-links");
    let _ = std::fs::remove_dir_all(&links);
    std::fs::create_dir_all(&links).unwrap();
    let (cases, folder) = outputs_onto_the_runs_files(&dir, &other, &links);
    for (command, expected) in &cases {
        let o = run(&as_strs(command));
        let err = stderr(&o);
        assert_eq!(check_error_shape(&o, &expected[0]), 2, "{command:?}\n{err}");
        for part in expected {
            assert!(
                err.contains(part.as_str()) && !err.contains("cannot read"),
                "{part}\n{err}"
            );
        }
    }
    assert_eq!(std::fs::read(dir.join("steps.csv")).unwrap(), steps);
    assert_eq!(run_files(&dir), ours, "the run's files are as they were");
    assert_eq!(
        run_files(&other),
        theirs,
        "the other run's files are as they were"
    );
    assert_eq!(std::fs::read(dir.join("plots/loss.png")).unwrap(), loss_png);
    assert_eq!(
        std::fs::read(other.join("plots/loss.png")).unwrap(),
        loss_png
    );
    assert!(!dir.join("plots/new.npy").exists());
    assert!(!dir.join("compare.md").exists() && !other.join("compare.md").exists());

    let (kept, exported) = outputs_over_links_elsewhere(run_dir, &links);
    unwritable_places_are_said_before_anything_is_computed(&dir);
    assert_eq!(run_files(&dir), ours);
    the_printed_eval_command_gives_the_directory_as_one_word(run_dir);
    checked(&[&links, &other, &folder, &kept, &exported]);
}

/// A command line and what its refusal says.
type Refusal = (Vec<String>, Vec<String>);

/// A link named `name` in `links` to `to`, as a user's own output name.
fn link(links: &Path, name: &str, to: &Path) -> String {
    std::os::unix::fs::symlink(to, links.join(name)).unwrap();
    links.join(name).to_str().unwrap().to_string()
}

/// The commands whose outputs land on the files of the run `dir` or of the `other` run
/// (directly or through links made in `links`), each with what its refusal says; and a folder
/// named as an export's output.
fn outputs_onto_the_runs_files(dir: &Path, other: &Path, links: &Path) -> (Vec<Refusal>, PathBuf) {
    let (run_dir, other_dir) = (dir.to_str().unwrap(), other.to_str().unwrap());
    let link = |name: &str, to: &Path| link(links, name, to);
    link("a.csv", &dir.join("steps.csv"));
    let npy_to_other_epochs = link("b.npy", &other.join("epochs.csv"));
    let npy_to_recipe = link("c.npy", &dir.join("recipe.toml"));
    let export_to_other_recipe = link("d.safetensors", &other.join("recipe.toml"));
    // A link whose target does not exist yet, inside the run's plots/.
    let dangling_into_plots = link("e.npy", &dir.join("plots/new.npy"));
    let folder = scratch().join("export-guard-folder.safetensors");
    std::fs::create_dir_all(&folder).unwrap();
    let a_npy = links.join("a.npy");
    let in_run = |f: &str| format!("{run_dir}/{f}");
    let cases: Vec<(Vec<String>, Vec<String>)> = vec![
        (
            owned(&["embed", "--run-dir", run_dir, "--out", &in_run("steps.npy")]),
            vec![
                "its table".into(),
                format!("the run's own steps.csv in the run directory {run_dir}"),
            ],
        ),
        (
            owned(&["export", "--run-dir", run_dir, "--out", &in_run("checkpoints/b.safetensors")]),
            vec!["the run's own checkpoints".into()],
        ),
        (
            owned(&["export", "--run-dir", run_dir, "--out", "/proc/backbone.safetensors"]),
            vec!["--out /proc/backbone.safetensors: cannot write in /proc".into()],
        ),
        (
            owned(&["embed", "--run-dir", run_dir, "--out", a_npy.to_str().unwrap()]),
            vec![
                format!("its table {}", links.join("a.csv").display()),
                format!("a link to {run_dir}/steps.csv, the run's own steps.csv in the run directory {run_dir}"),
            ],
        ),
        (
            owned(&["embed", "--run-dir", run_dir, "--out", &npy_to_other_epochs]),
            vec![format!(
                "a link to {other_dir}/epochs.csv, the run's own epochs.csv in the run directory \
                 {other_dir}"
            )],
        ),
        (
            owned(&["embed", "--run-dir", run_dir, "--out", &npy_to_recipe]),
            vec![format!("the run's own recipe.toml in the run directory {run_dir}")],
        ),
        (
            owned(&["export", "--run-dir", run_dir, "--out", &export_to_other_recipe]),
            vec![format!("the run's own recipe.toml in the run directory {other_dir}")],
        ),
        (
            owned(&["embed", "--run-dir", run_dir, "--out", &dangling_into_plots]),
            vec![format!("the run's own plots in the run directory {run_dir}")],
        ),
        (
            owned(&["export", "--run-dir", run_dir, "--out", folder.to_str().unwrap()]),
            vec![format!("--out {}: is a directory", folder.display())],
        ),
        (
            owned(&["compare", run_dir, "--out", &in_run("plots")]),
            vec![format!("the run's own plots in the run directory {run_dir}")],
        ),
        (
            owned(&["compare", run_dir, "--out", &format!("{other_dir}/plots")]),
            vec![format!("the run's own plots in the run directory {other_dir}")],
        ),
        (
            owned(&["compare", run_dir, "--out", run_dir]),
            vec![format!("--out {run_dir}: the run directory {run_dir}")],
        ),
        (
            owned(&["compare", run_dir, "--out", other_dir]),
            vec![format!("--out {other_dir}: the run directory {other_dir}")],
        ),
    ];
    (cases, folder)
}

/// Outputs over links to a file elsewhere (made in `links`) replace the links, not the file,
/// and no temporary file stays; an export replaces an older one. The file and the export.
fn outputs_over_links_elsewhere(run_dir: &str, links: &Path) -> (PathBuf, PathBuf) {
    let link = |name: &str, to: &Path| link(links, name, to);
    // Links elsewhere are replaced by the outputs, not written through; no temporary file stays.
    let kept = scratch().join("export-guard-kept.txt");
    std::fs::write(&kept, "a file of the user's").unwrap();
    let out = link("f.npy", &kept);
    link("f.csv", &kept);
    let o = run(&[
        "embed",
        "--run-dir",
        run_dir,
        "--split",
        "test",
        "--out",
        &out,
    ]);
    assert_eq!(
        check_error_shape(&o, "embed over links"),
        0,
        "{}",
        stderr(&o)
    );
    assert_eq!(
        std::fs::read_to_string(&kept).unwrap(),
        "a file of the user's"
    );
    for file in ["f.npy", "f.csv"] {
        let meta = std::fs::symlink_metadata(links.join(file)).unwrap();
        assert!(
            meta.file_type().is_file(),
            "{file} is a file of its own now"
        );
    }
    assert_eq!(read_npy(Path::new(&out)).0[0], 40);
    let exported = scratch().join("export-guard.safetensors");
    std::fs::write(&exported, "an older export").unwrap();
    let o = run(&[
        "export",
        "--run-dir",
        run_dir,
        "--out",
        exported.to_str().unwrap(),
    ]);
    assert_eq!(
        check_error_shape(&o, "export over a file"),
        0,
        "{}",
        stderr(&o)
    );
    assert!(safetensors_header(&exported).get("conv1.weight").is_some());
    // (In the scratch directory, only this test's names: other tests write there meanwhile.)
    for (place, prefix) in [(links, "."), (scratch().as_path(), ".export-guard")] {
        let left: Vec<String> = std::fs::read_dir(place)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(prefix))
            .collect();
        assert!(left.is_empty(), "left behind: {left:?}");
    }

    (kept, exported)
}

/// Places that cannot be written, as a user whom permissions bind: the run `dir` read-only
/// (eval, export, embed) and a read-only folder (compare, a new run's --run-dir) are said so
/// with exit 2 before anything is computed.
fn unwritable_places_are_said_before_anything_is_computed(dir: &Path) {
    let run_dir = dir.to_str().unwrap();
    let in_run = |f: &str| format!("{run_dir}/{f}");
    if let Some(user) = Unprivileged::new("recipe-as-nobody-outputs") {
        let locked = scratch().join("export-guard-locked");
        std::fs::create_dir_all(&locked).unwrap();
        let locked = locked.canonicalize().unwrap();
        let locked_dir = locked.to_str().unwrap().to_string();
        chmod(&locked, 0o555);
        chmod(dir, 0o555);
        let new_run = locked.join("new-run");
        let data_dir = crate::common::data().to_str().unwrap().to_string();
        let cases: Vec<(Vec<String>, String)> = vec![
            (
                owned(&["eval", "--run-dir", run_dir, "--probe-epochs", "1"]),
                format!("--run-dir {run_dir}: cannot write in {run_dir}: permission denied"),
            ),
            (
                owned(&["export", "--run-dir", run_dir]),
                format!("cannot write in {run_dir}: permission denied"),
            ),
            (
                owned(&["embed", "--run-dir", run_dir, "--out", &in_run("x.npy")]),
                format!("cannot write in {run_dir}: permission denied"),
            ),
            (
                owned(&[
                    "compare",
                    run_dir,
                    "--out",
                    &format!("{locked_dir}/compared"),
                ]),
                format!("cannot write in {locked_dir}: permission denied"),
            ),
            (
                owned(&[
                    "light_moco",
                    "--data",
                    &data_dir,
                    "--run-dir",
                    new_run.to_str().unwrap(),
                    "--epochs",
                    "1",
                    "--batch-size",
                    "32",
                    "--workers",
                    "1",
                ]),
                format!(
                    "--run-dir {}: cannot write in {locked_dir}: permission denied",
                    new_run.display()
                ),
            ),
        ];
        let outcomes: Vec<_> = cases
            .iter()
            .map(|(command, _)| user.run(&as_strs(command)))
            .collect();
        chmod(dir, 0o755);
        chmod(&locked, 0o755);
        for ((command, expected), o) in cases.iter().zip(outcomes) {
            let err = stderr(&o);
            assert_eq!(check_error_shape(&o, expected), 2, "{command:?}\n{err}");
            assert!(err.contains(expected.as_str()), "{expected}\n{err}");
            // Said before anything was computed.
            let out = String::from_utf8_lossy(&o.stdout);
            assert!(!out.contains("kNN") && !out.contains("checkpoint"), "{out}");
        }
        assert!(!new_run.exists());
        assert!(!dir.join("evals.csv").exists());
    }
}

/// The run still extends; the command it prints to evaluate it, pasted into a shell, gives the
/// binary the run's directory as one word.
fn the_printed_eval_command_gives_the_directory_as_one_word(run_dir: &str) {
    // The run still extends; the command it prints to evaluate it, pasted into a shell (where
    // `recipe` prints the words it is given), gives the binary its directory as one word.
    let o = run(&["resume", run_dir, "--extend", "--epochs", "2"]);
    assert_eq!(check_error_shape(&o, "extend"), 0, "{}", stderr(&o));
    let printed = String::from_utf8_lossy(&o.stdout).into_owned();
    let command = printed
        .split("evaluate with `")
        .nth(1)
        .and_then(|rest| rest.split('`').next())
        .unwrap_or_else(|| panic!("no eval command: {printed}"));
    assert!(command.starts_with("recipe eval --run-dir '"), "{command}");
    let shell = Command::new("sh")
        .arg("-c")
        .arg(format!("recipe() {{ printf '%s\\0' \"$@\"; }}; {command}"))
        .output()
        .unwrap();
    assert!(shell.status.success(), "{command}: {}", stderr(&shell));
    let words: Vec<String> = String::from_utf8(shell.stdout)
        .unwrap()
        .split_terminator('\0')
        .map(str::to_string)
        .collect();
    assert_eq!(words, ["eval", "--run-dir", run_dir], "{command}");
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

/// `--no-baselines`: no kNN before the first step (no files of it, no comparison in the
/// report), the kNN after training as always.
#[test]
fn no_baselines_skips_the_knn_at_initialisation_and_of_the_pixels() {
    let name = "no-baselines";
    let dir = scratch().join(name);
    let _ = std::fs::remove_dir_all(&dir);
    let o = run(&as_strs(&tiny(name, &["--no-baselines"])));
    assert_eq!(check_error_shape(&o, name), 0, "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("top-1"), "the kNN after training: {stdout}");
    assert!(
        !stdout.contains("at initialisation") && !stdout.contains("raw pixels"),
        "{stdout}"
    );
    for file in ["knn_at_init.json", "knn_raw_pixels.json"] {
        assert!(!dir.join(file).exists(), "{file}");
    }
    assert!(dir.join("summary.md").is_file());
}
