//! Every recipe, backbone and recipe option runs two steps and logs its knobs.

use std::path::Path;

use crate::common::{
    as_strs, check_error_shape, checked, cifar_records, run, scratch, stderr, tiny,
};

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
/// The recipes whose curricula watch the batch, and DINOv2's objective (masks drawn for the
/// global batch, KoLeo over it), run on two replicas as on one device: the first step's loss (the
/// same views, object boxes, sub-policy, curation and masks) is the one-device run's.
#[test]
fn curricula_on_two_replicas_start_as_one_device() {
    for (name, extra) in [
        ("crop_rotate", &["--stem", "cifar"][..]),
        ("auto_augment_self_paced", &[][..]),
        ("bad_batches", &[][..]),
        // The global batch's masks, both centres and KoLeo over the gathered batch.
        ("dinov2", &LOCAL_CROPS_ON_VIT_MICRO[..]),
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
        let dirs = ["1", "2"].map(|d| scratch().join(format!("replicas-{name}-{d}")));
        checked(&[&dirs[0], &dirs[1]]);
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
/// v3 on the small ResNet and on ViT-Tiny, the masked-image methods (MAE, SimMIM, iBOT, DINOv2's
/// objective, I-JEPA); two steps each, a checkpoint, and the kNN monitor on.
/// The values of the first step's row of a `steps.csv`.
fn first_step(steps: &str) -> Vec<f64> {
    steps
        .lines()
        .nth(1)
        .unwrap()
        .split(',')
        .map(|v| v.parse().unwrap())
        .collect()
}

/// DetConS and DetConB on the default backbone's 2 × 2 map (a 2 × 2 grid) and DetConS with
/// `--stem cifar` (a 4 × 4 map and grid): two steps each, a checkpoint, the kNN monitor on.
#[test]
fn the_detcon_recipes_run_two_steps() {
    table_recipes_run_two_steps(&[
        ("detcon_s", &[][..]),
        ("detcon_b", &[][..]),
        ("detcon_s", &["--stem", "cifar"][..]),
    ]);
}

/// SMoG on the default backbone: two steps (the views swapped at the second), a checkpoint, the
/// kNN monitor on.
#[test]
fn the_smog_recipe_runs_two_steps() {
    table_recipes_run_two_steps(&[("smog", &[][..])]);
}

/// DeepCluster v2 on the default backbone for two epochs of two steps: the first epoch's loss is
/// 0 (no image has a cluster yet, as solo-learn's), the second's positive (the 64 images' bank
/// clustered into 3 prototypes per head, `prototypes_for(64)`), a checkpoint each epoch.
#[test]
fn the_deepcluster_v2_recipe_learns_its_clusters_from_the_second_epoch() {
    let dir_name = "table-deepcluster_v2";
    let mut args = tiny(dir_name, &["--epochs", "2"]);
    args[0] = "deepcluster_v2".to_string();
    let o = run(&as_strs(&args));
    assert_eq!(check_error_shape(&o, dir_name), 0, "{}", stderr(&o));
    let dir = scratch().join(dir_name);
    let steps = std::fs::read_to_string(dir.join("steps.csv")).unwrap();
    let rows: Vec<Vec<&str>> = steps.lines().map(|l| l.split(',').collect()).collect();
    let loss = rows[0].iter().position(|c| *c == "loss").unwrap();
    let losses: Vec<f64> = rows[1..].iter().map(|r| r[loss].parse().unwrap()).collect();
    assert_eq!(losses.len(), 4, "{steps}");
    assert_eq!(&losses[..2], &[0.0, 0.0], "{steps}");
    assert!(
        losses[2..].iter().all(|&l| l > 0.0 && l.is_finite()),
        "{steps}"
    );
    assert!(dir.join("checkpoints/epoch-0002/meta.json").is_file());
    checked(&[&dir]);
}

/// The CNN methods of the table, the redundancy-reduction and contrastive ones (the table's test
/// is split so that the test threads share its recipes: one test of 24 recipes took 99 s under
/// load, 2026-12-03).
#[test]
fn the_method_table_recipes_run_two_steps() {
    table_recipes_run_two_steps(&[
        ("barlow_twins", &[][..]),
        ("vicreg", &[][..]),
        // VICRegL on the default backbone's 2 × 2 map and with `--stem cifar` (4 × 4).
        ("vicregl", &[][..]),
        ("vicregl", &["--stem", "cifar"][..]),
        ("vibcreg", &[][..]),
        // Sub-batches of 16 of the 32 images, 8 features (the recipe's 128 and 64 need a batch
        // of 128).
        (
            "wmse",
            &["method.output_dim=8", "method.loss.w_size=16"][..],
        ),
        ("frossl", &[][..]),
        ("directclr", &[][..]),
        ("simclr", &["--loss", "dcl"][..]),
        ("simclr", &["--loss", "dclw"][..]),
        // SupCon on the labelled tiny data (its loss reads the labels).
        ("supcon", &[][..]),
    ]);
}

/// The CNN methods of the table with multi-crop, nearest neighbours or a momentum encoder.
#[test]
fn the_method_table_recipes_with_crops_neighbours_or_momentum_run_two_steps() {
    table_recipes_run_two_steps(&[
        ("swav", &[][..]),
        ("swav", &["--local-crops", "0"][..]),
        ("dino", &["--local-crops", "2"][..]),
        ("lejepa", &["--local-crops", "2"][..]),
        (
            "emp_ssl",
            &[
                "--local-crops",
                "1",
                "method.hidden_dim=64",
                "method.output_dim=16",
            ][..],
        ),
        ("mmcr", &["--local-crops", "1"][..]),
        ("nnclr", &[][..]),
        ("nnsiam", &[][..]),
        ("nnbyol", &[][..]),
        ("ressl", &[][..]),
        ("tico", &[][..]),
        ("moco_v3", &[][..]),
        ("moco_v3", &VIT_MICRO[..]),
    ]);
}

/// All4One: two steps, a checkpoint, the kNN monitor (support set, momentum encoder and
/// transformer; its three terms logged).
#[test]
fn the_all4one_recipe_runs_two_steps() {
    table_recipes_run_two_steps(&[("all4one", &[][..])]);
}

/// VISReg with two local crops: two steps, a checkpoint, the kNN monitor, its four terms logged.
#[test]
fn the_visreg_recipe_runs_two_steps() {
    table_recipes_run_two_steps(&[("visreg", &["--local-crops", "2"][..])]);
}

/// MAE and SimMIM, their masking curricula and hard patches mining.
#[test]
fn the_pixel_reconstruction_recipes_run_two_steps() {
    table_recipes_run_two_steps(&[
        // MAE on its default ViT-Tiny (its config is checked for it), the others on ViT-Micro.
        ("mae", &[][..]),
        ("simmim", &VIT_MICRO[..]),
        ("mae_ratio_curriculum", &VIT_MICRO[..]),
        ("simmim_ratio_curriculum", &VIT_MICRO[..]),
        ("mae_hpm", &VIT_MICRO[..]),
    ]);
}

/// AIM on ViT-Micro: two steps, a checkpoint, the kNN monitor on; the run records that its
/// ViT's features are the patch tokens' mean (what the monitor, `eval` and `export` then read:
/// AIM never trains the class token; the other recipes record no such key, their runs read as
/// before).
#[test]
fn the_aim_recipe_runs_two_steps() {
    table_recipes_run_two_steps(&[("aim", &VIT_MICRO[..])]);
}

/// The masked-image recipes draw their masks from `--seed`: the method's seed recorded in
/// config.json (what the method is built from) is the run's, so a study's seeds do not share
/// one sequence of masks.
#[test]
fn the_masked_recipes_seed_their_masks_with_the_runs_seed() {
    for (name, pointer) in [
        ("simmim", "/run/method/seed"),
        ("aim", "/run/method/seed"),
        ("capi", "/run/method/seed"),
        ("mae_hpm", "/run/method/mae/seed"),
    ] {
        let dir_name = format!("mask-seed-{name}");
        let mut args = tiny(&dir_name, &["--seed", "5", VIT_MICRO[0], VIT_MICRO[1]]);
        args[0] = name.to_string();
        let o = run(&as_strs(&args));
        assert_eq!(check_error_shape(&o, name), 0, "{name}\n{}", stderr(&o));
        let text = std::fs::read_to_string(scratch().join(&dir_name).join("config.json")).unwrap();
        let config: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            config.pointer(pointer),
            Some(&serde_json::json!(5)),
            "{name}: {text}"
        );
    }
}

// The ViT recipes' two-step runs are the cli binary's longest: three tests rather than one, so
// that the test threads share them (one test of six recipes was the binary's last minute), each
// on ViT-Micro (4 blocks of 96) rather than the recipes' ViT-Tiny (12 of 192): a run of two steps
// checks the recipe's wiring, not the width.

/// `--backbone vit-micro`: the smoke runs' ViT.
const VIT_MICRO: [&str; 2] = ["--backbone", "vit-micro"];

/// Two local crops on the smoke runs' ViT.
const LOCAL_CROPS_ON_VIT_MICRO: [&str; 4] = ["--local-crops", "2", "--backbone", "vit-micro"];

/// iBOT, iBOT++ and DINOv2's objective.
#[test]
fn the_token_distillation_recipes_run_two_steps() {
    table_recipes_run_two_steps(&[
        ("ibot", &LOCAL_CROPS_ON_VIT_MICRO[..]),
        ("ibot_plus_plus", &LOCAL_CROPS_ON_VIT_MICRO[..]),
        ("dinov2", &LOCAL_CROPS_ON_VIT_MICRO[..]),
    ]);
}

/// I-JEPA and its curriculum.
#[test]
fn the_jepa_recipes_run_two_steps() {
    table_recipes_run_two_steps(&[
        ("ijepa", &VIT_MICRO[..]),
        ("ijepa_scale_curriculum", &VIT_MICRO[..]),
    ]);
}

/// CAPI on ViT-Micro: two steps, a checkpoint, the kNN monitor on.
#[test]
fn the_capi_recipe_runs_two_steps() {
    table_recipes_run_two_steps(&[("capi", &VIT_MICRO[..])]);
}

/// MSN and PMSN.
#[test]
fn the_masked_siamese_recipes_run_two_steps() {
    table_recipes_run_two_steps(&[
        ("msn", &LOCAL_CROPS_ON_VIT_MICRO[..]),
        ("pmsn", &LOCAL_CROPS_ON_VIT_MICRO[..]),
    ]);
}

/// Runs each recipe for two steps on the tiny data and checks its files and logged columns.
fn table_recipes_run_two_steps(recipes: &[(&str, &[&str])]) {
    for &(name, extra) in recipes {
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
        the_recipes_own_columns_are_logged(name, &label, header, &steps, &dir);
        the_masked_recipes_log_their_masks(name, header, &steps);
        if name == "aim" {
            // Its ViT's features are the patch tokens' mean, recorded for eval and export.
            let text = std::fs::read_to_string(dir.join("config.json")).unwrap();
            let config: serde_json::Value = serde_json::from_str(&text).unwrap();
            let pool = config.pointer("/run/vit_pool");
            assert_eq!(pool, Some(&serde_json::json!("PatchMean")), "{text}");
            // So does its exported file (scripts/safetensors_to_torch.py builds timm's ViT
            // without a class token, averaging), with ViT-Micro's 3 heads.
            let o = run(&["export", "--run-dir", dir.to_str().unwrap()]);
            assert_eq!(check_error_shape(&o, "export"), 0, "{}", stderr(&o));
            let header = crate::outputs::safetensors_header(&dir.join("backbone.safetensors"));
            let meta = &header["__metadata__"];
            assert_eq!(meta["vit_pool"], "PatchMean", "{meta}");
            assert_eq!(meta["num_heads"], "3", "{meta}");
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
        checked(&[&dir]);
    }
}

/// The columns of recipe `name`'s own terms and knobs in its steps.csv (`steps`, whose first
/// line is `header`), in the run directory `dir` (the run `label`).
fn the_recipes_own_columns_are_logged(
    name: &str,
    label: &str,
    header: &str,
    steps: &str,
    dir: &Path,
) {
    if name == "vicreg" {
        assert!(
            header.ends_with("vicreg_invariance,vicreg_variance,vicreg_covariance"),
            "{header}"
        );
    }
    if name == "vicregl" {
        assert!(header.ends_with("vicregl_global,vicregl_local"), "{header}");
    }
    if name == "all4one" {
        assert!(
            header.contains("centroid_loss,neighbour_loss,feature_loss,momentum"),
            "{header}"
        );
    }
    if name == "frossl" {
        assert!(
            header.ends_with("frossl_regularisation,frossl_invariance"),
            "{header}"
        );
    }
    if name == "emp_ssl" {
        assert!(
            header.ends_with("emp_ssl_coding_rate,emp_ssl_similarity"),
            "{header}"
        );
    }
    if name == "lejepa" {
        assert!(
            header.ends_with("lejepa_sigreg,lejepa_invariance"),
            "{header}"
        );
    }
    if name == "visreg" {
        assert!(
            header.ends_with("visreg_invariance,visreg_scale,visreg_shape,visreg_center"),
            "{header}"
        );
    }
    if name == "directclr" {
        assert!(header.ends_with("directclr_norm"), "{header}");
    }
    if name == "swav" {
        assert!(header.ends_with("prototypes_frozen,swav_queue"), "{header}");
    }
    if name == "dino" {
        assert!(header.ends_with("teacher_temp,momentum"), "{header}");
    }
    if name == "mae" {
        // A ViT-Tiny by default, the ratio of hidden patches logged.
        assert!(header.ends_with("mask_ratio"), "{header}");
        assert!(steps.lines().nth(1).unwrap().ends_with(",0.75"), "{steps}");
        let config = std::fs::read_to_string(dir.join("config.json")).unwrap();
        assert!(config.contains("\"backbone\": \"VitTiny\""), "{config}");
    }
    if let Some((knob, start, end)) = match name {
        "mae_ratio_curriculum" => Some(("mask_ratio", 0.5, 0.75)),
        "simmim_ratio_curriculum" => Some(("mask_ratio", 0.3, 0.6)),
        "ijepa_scale_curriculum" => Some(("target_scale_factor", 0.5, 1.0)),
        _ => None,
    } {
        // The masking curriculum moves its knob along its line, step by step: steps 0 and
        // 1 of 2 read the start and the midpoint.
        let column = header.split(',').position(|c| c == knob).unwrap();
        let ratios: Vec<f64> = steps
            .lines()
            .skip(1)
            .map(|row| row.split(',').nth(column).unwrap().parse().unwrap())
            .collect();
        // (The log writes the shortest decimal of each f32-logged value: 1e-6 apart at most.)
        let want = [start, start + (end - start) / 2.0];
        assert!(
            ratios.iter().zip(want).all(|(r, w)| (r - w).abs() < 1e-6),
            "{label}: {ratios:?} vs {want:?}\n{steps}"
        );
    }
    if name == "simmim" {
        // The hidden fraction logged: a 7 × 7 grid in 4 × 4 units of 2 × 2 patches (the
        // last row and column one patch wide: nine units of 4 patches, six of 2, one of 1);
        // ⌈16 · 0.6⌉ = 10 hidden hide between 1 + 6·2 + 3·4 = 25 and 9·4 + 2 = 38 of 49.
        assert!(header.ends_with("mask_ratio,hidden_fraction"), "{header}");
        let row = steps.lines().nth(1).unwrap();
        let fraction: f64 = row.rsplit(',').next().unwrap().parse().unwrap();
        assert!((25.0 / 49.0..=38.0 / 49.0).contains(&fraction), "{steps}");
    }
}

/// What the masked-image recipe `name` (I-JEPA, iBOT, iBOT++, DINOv2, MAE-HPM, MSN) logs of its masks
/// in its steps.csv (`steps`, whose first line is `header`).
fn the_masked_recipes_log_their_masks(name: &str, header: &str, steps: &str) {
    if name.starts_with("ijepa") {
        // The shares of the 7 × 7 grid the context and each target block keep: a target
        // block of ⌊49 · [0.15, 0.2]⌋ = 7..9 patches, sides rounded and below 7, holds
        // 4..12 (under the curriculum's first step, half that scale: 2..6); the context at
        // least the 4 of min_keep.
        assert!(
            header.ends_with("target_scale_factor,context_fraction,target_fraction,momentum"),
            "{header}"
        );
        let row = first_step(steps);
        let n = row.len();
        let (context, target) = (row[n - 3] * 49.0, row[n - 2] * 49.0);
        let (least, most) = if name == "ijepa" {
            (4.0, 12.0)
        } else {
            (2.0, 6.0)
        };
        assert!((least - 1e-4..=most + 1e-4).contains(&target), "{steps}");
        assert!((4.0 - 1e-4..=49.0).contains(&context), "{steps}");
    }
    if name == "ibot" || name == "ibot_plus_plus" || name == "dinov2" {
        // Its terms logged (KoLeo for DINOv2's objective), and the hidden fraction of the
        // global views' patches: half the views hide ⌊49·u⌋ patches, u in [0.1, 0.5], so
        // between 4 and 24 of every two views' 98.
        let terms = "cls_loss,patch_loss,hidden_fraction,teacher_temp,momentum";
        let want = if name == "dinov2" {
            format!("koleo,{terms}")
        } else {
            terms.to_string()
        };
        assert!(header.ends_with(&want), "{header}");
        let column = header
            .split(',')
            .position(|c| c == "hidden_fraction")
            .unwrap();
        let row = steps.lines().nth(1).unwrap();
        let fraction: f64 = row.split(',').nth(column).unwrap().parse().unwrap();
        assert!(
            (4.0 / 98.0 - 1e-6..=24.0 / 98.0 + 1e-6).contains(&fraction),
            "{steps}"
        );
    }
    if name == "mae_hpm" {
        // Its two terms, the mask ratio and the share of hard patches logged: the share
        // starts at 0 (epoch 0 of 1), the ratio is MAE's 0.75.
        assert!(
            header.ends_with("reconstruction,ranking,mask_ratio,hard_share"),
            "{header}"
        );
        let row = first_step(steps);
        let n = row.len();
        assert_eq!((row[n - 2], row[n - 1]), (0.75, 0.0), "{steps}");
        assert!(row[n - 3] > 0.0 && row[n - 4] > 0.0, "{steps}");
    }
    if name == "msn" || name == "pmsn" {
        // Its two terms, the drop ratio (15 %) and the target's momentum logged; MSN's
        // regulariser KL(p̄ ‖ uniform) and PMSN's KL(prior ‖ p̄) are non-negative.
        assert!(
            header.ends_with("cross_entropy,regularization,mask_ratio,momentum"),
            "{header}"
        );
        let row = first_step(steps);
        let n = row.len();
        assert!((row[n - 2] - 0.15).abs() < 1e-6, "{steps}");
        assert!(row[n - 3] >= 0.0 && row[n - 4] > 0.0, "{steps}");
    }
}

/// MAE, SimMIM, iBOT, iBOT++, DINOv2's objective, I-JEPA, MSN and CAPI mask the patch tokens of a
/// ViT, AIM predicts them: another backbone is refused, naming the option.
#[test]
fn masked_image_modelling_refuses_a_backbone_that_is_not_a_vit() {
    for name in [
        "mae",
        "simmim",
        "ibot",
        "ibot_plus_plus",
        "dinov2",
        "ijepa",
        "msn",
        "mae_hpm",
        "aim",
        "capi",
    ] {
        let mut args = tiny(&format!("{name}-lenet"), &["--backbone", "lenet5"]);
        args[0] = name.into();
        let o = run(&as_strs(&args));
        assert_eq!(check_error_shape(&o, name), 2);
        assert!(
            stderr(&o).contains("ViT backbone"),
            "{name}: {}",
            stderr(&o)
        );
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

/// A recipe of the papers, the columns its `steps.csv` ends with, and the value its first step
/// logs in the last of them (`None`: not fixed by a schedule).
const PAPER_RECIPES: &[(&str, &str, Option<&str>)] = &[
    ("moco_v1", "", None),
    // One epoch of the 4-step schedule at double strength: 0.2 × 2.
    ("moco_strength_curriculum", "strength", Some("0.4")),
    // The sub-policy and its magnitude under the ceiling (0.2 at the start, the initial
    // magnitude 0.1 below it).
    (
        "auto_augment_self_paced",
        "aa_policy,aa_magnitude",
        Some("0.1"),
    ),
    ("hcl", "", None),
    // β rises linearly from 0: the first epoch of one reads 0.
    ("hcl_curriculum", "hcl_beta", Some("0")),
    // The adaptive t (the loss's EMA of the positive similarities).
    ("curricular_weighting", "curricular_t", None),
    ("huber_nt_xent", "", None),
    // The model-aware temperature, from the first batch's alignment.
    ("macl", "macl_temperature", None),
    // Curation measures every step, with no redraw during the warm-up.
    ("bad_batches", "frd,redraws", Some("0")),
    // The attack is off in the first quarter of the run.
    ("simclr_pgd", "pgd_strength", Some("0")),
    ("hcl_pgd", "pgd_strength", Some("0")),
    // The angles in play: all four for RotNet, one in the first quarter of a curriculum.
    ("rotnet", "rotation_angles", Some("4")),
    ("rotnet_curriculum", "rotation_angles", Some("1")),
    ("rotate_mix", "rotation_angles", Some("1")),
    ("crop_rotate", "rotation_angles", Some("1")),
    // Mixup's λ: 0.5 without a curriculum; MICO's curriculum starts at 0.2.
    ("mixup_simsiam", "mixup_lambda", Some("0.5")),
    ("mico_simsiam", "mixup_lambda", Some("0.2")),
    ("mixup_byol", "mixup_lambda", Some("0.5")),
    ("mico_byol", "mixup_lambda", Some("0.2")),
    ("mixup_simclr", "mixup_lambda", Some("0.5")),
    ("mico_simclr", "mixup_lambda", Some("0.2")),
    ("mixup_moco", "mixup_lambda", Some("0.5")),
    ("mico_moco", "mixup_lambda", Some("0.2")),
];

#[test]
fn the_paper_recipes_run_two_steps_and_log_their_knobs() {
    for &(name, columns, first) in PAPER_RECIPES {
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
        assert!(header.ends_with(columns), "{name}: {header}");
        if let Some(value) = first {
            let last = steps.lines().nth(1).unwrap().rsplit(',').next();
            assert_eq!(last, Some(value), "{name}: {steps}");
        }
        let epochs = std::fs::read_to_string(dir.join("epochs.csv")).unwrap();
        match name {
            "auto_augment_self_paced" => {
                assert!(dir.join("checkpoints/epoch-0001/curricula.json").is_file());
            }
            // epochs.csv counts the curation's decisions.
            "bad_batches" => assert!(
                epochs.starts_with(
                    "epoch,mean_loss,lr,images_per_s,seconds,curation_rejections,\
                     curation_accepted_after_retries"
                ),
                "{epochs}"
            ),
            // The boxes are computed once (a one-epoch run), timed in epochs.csv and kept in
            // the checkpoint: one per training image.
            "crop_rotate" => {
                let header = epochs.lines().next().unwrap();
                assert!(header.contains(",box_seconds"), "{epochs}");
                let curricula =
                    std::fs::read_to_string(dir.join("checkpoints/epoch-0001/curricula.json"))
                        .unwrap();
                let curricula: serde_json::Value = serde_json::from_str(&curricula).unwrap();
                let boxes = &curricula["object_boxes"];
                assert_eq!(boxes["epoch"], 0, "{boxes}");
                assert_eq!(boxes["boxes"].as_array().unwrap().len(), 64, "{boxes}");
                assert!(
                    stderr(&o).contains("object boxes of 64 training images"),
                    "{}",
                    stderr(&o)
                );
            }
            _ => {}
        }
        if name != "crop_rotate" {
            assert!(!epochs.contains("box_seconds"), "{name}: {epochs}");
        }
    }
}

#[test]
fn the_mixup_and_strength_options_are_checked() {
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
}

#[test]
fn the_hcl_options_are_checked() {
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
}

#[test]
fn the_batch_curation_options_are_checked() {
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

#[test]
fn the_pgd_options_are_checked() {
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
}

// Every --backbone runs two steps of SimCLR on 32×32 RGB images (VGG-16's smallest input), and
// the run records it; --stem belongs to the ResNets. Three tests rather than one (the one was the
// cli binary's longest, 138 s under load, 2026-12-03), so that the test threads share the
// backbones.

/// The ResNets and wide ResNets, and `--stem` / `--pooled-grid`.
#[test]
fn every_resnet_option_runs_two_steps() {
    backbones_run_two_steps("resnets", &["resnet18", "resnet34", "resnet50", "wrn-16-8"]);
    the_stem_and_the_pooled_grid_are_recorded_and_refused_off_the_resnets();
}

/// The heaviest (WRN-28-10, VGG-16) and the CPU-sized backbones.
#[test]
fn every_wide_and_small_backbone_option_runs_two_steps() {
    backbones_run_two_steps(
        "wide",
        &[
            "wrn-28-10",
            "vgg16-bn",
            "lenet5",
            "small",
            "small-wide",
            "small-2x",
        ],
    );
}

/// EfficientNet and MobileNet v3.
#[test]
fn every_mobile_backbone_option_runs_two_steps() {
    backbones_run_two_steps(
        "mobile",
        &[
            "efficientnet-b0",
            "efficientnet-b1",
            "mobilenet-v3-large",
            "mobilenet-v3-small",
        ],
    );
}

/// Two steps of SimCLR on each of `backbones`, the data in a folder of its own (`group`'s).
fn backbones_run_two_steps(group: &str, backbones: &[&str]) {
    let dir = scratch().join(format!("backbone-data-{group}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // Five training images (two steps of two), two test images: the heavy models (WRN-28-10,
    // ResNet-50, VGG-16) stay at a few seconds each.
    for k in 1..=5 {
        std::fs::write(dir.join(format!("data_batch_{k}.bin")), cifar_records(1, 1)).unwrap();
    }
    std::fs::write(dir.join("test_batch.bin"), cifar_records(2, 1)).unwrap();
    for &backbone in backbones {
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
                // SimCLR's 0.3 is for batches of 128: at two images the batch norms' statistics
                // come from two images, and EfficientNet-B1's depthwise filters (torchvision's
                // fan-out init, std sqrt(2 / (C·9)): BN-normalised, so their effective step
                // grows as 1/|w|²) left the finite range on the second step. At 0.03 its
                // second step still overflowed a batch norm's running variance on an AMD EPYC
                // (another summation order; it held on Intel): 0.01 and 0.003 held there, and
                // 0.003 keeps a tenfold margin to the last rate seen to diverge.
                "--lr",
                "0.003",
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
}

/// `--stem` and `--pooled-grid`: recorded by the run (the grid when it is not 1; small-2x's
/// default 2; runs recorded before the option pooled globally and record none), recipe.toml the
/// grid option when given; refused off the ResNets, and the grid outside 1..=16 and above the
/// last map's size (the small ResNet's ImageNet stem leaves 1×1 of a 28-pixel image).
fn the_stem_and_the_pooled_grid_are_recorded_and_refused_off_the_resnets() {
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
    // --pooled-grid: the run records the grid it pooled to when it is not 1 (small-2x's default
    // 2; runs recorded before the option pooled globally and record none), recipe.toml the
    // option when given; refused off the ResNets, outside 1..=16 and above the last map's size
    // (the small ResNet's ImageNet stem leaves 1×1 of a 28-pixel image).
    for (grid, recorded, in_toml) in [(None, true, false), (Some("1"), false, true)] {
        let name = format!("grid-{}", grid.unwrap_or("default"));
        let mut extra = vec!["--backbone", "small-2x"];
        extra.extend(grid.iter().flat_map(|g| ["--pooled-grid", *g]));
        let o = run(&as_strs(&tiny(&name, &extra)));
        assert_eq!(check_error_shape(&o, &name), 0, "{}", stderr(&o));
        let toml = std::fs::read_to_string(scratch().join(&name).join("recipe.toml")).unwrap();
        assert_eq!(toml.contains("pooled_grid = 1"), in_toml, "{toml}");
        let config = std::fs::read_to_string(scratch().join(&name).join("config.json")).unwrap();
        assert_eq!(config.contains("\"pooled_grid\": 2"), recorded, "{config}");
        assert!(!config.contains("\"pooled_grid\": 1"), "{config}");
        std::fs::remove_dir_all(scratch().join(&name)).unwrap();
    }
    for (extra, expected) in [
        (
            vec!["--backbone", "lenet5", "--pooled-grid", "2"],
            "--pooled-grid: only for the ResNets",
        ),
        (vec!["--pooled-grid", "0"], "--pooled-grid"),
        (
            vec!["--backbone", "small", "--pooled-grid", "2"],
            "leave a last map of 1x1, smaller than the pooled grid of 2x2",
        ),
    ] {
        let o = run(&as_strs(&tiny("grid-refused", &extra)));
        assert_eq!(check_error_shape(&o, expected), 2, "{}", stderr(&o));
        assert!(stderr(&o).contains(expected), "{}", stderr(&o));
    }
}

/// `--label-fraction F` trains a supervised recipe from scratch on a class-balanced fraction of
/// the training labels: ⌈F·n_c⌉ of each class's n_c images. Counted here from how the tiny data
/// is labelled (image i has class i % 10: 64 images, classes 0-3 with 7, 4-9 with 6), F = 0.5
/// keeps 4·4 + 6·3 = 34, so batches of 16 make 2 steps an epoch (the last partial batch
/// dropped) where the whole data makes 4. The run records the fraction and its seed; a fraction
/// outside (0, 1] and a --label-seed without a fraction exit 2.
#[test]
fn supervised_recipes_train_on_a_fraction_of_the_labels() {
    let chosen: usize = (0..10)
        .map(|c| {
            let n = (0..64).filter(|i| i % 10 == c).count();
            (n as f64 * 0.5).ceil() as usize
        })
        .sum();
    assert_eq!(chosen, 34);
    let dir_name = "supervised-few-labels";
    let mut args = tiny(dir_name, &["--batch-size", "16", "--label-fraction", "0.5"]);
    args[0] = "random_sampling".into();
    let o = run(&as_strs(&args));
    assert_eq!(check_error_shape(&o, "few labels"), 0, "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains(&format!("training on {chosen} of the 64 labelled images")),
        "{out}"
    );
    let dir = scratch().join(dir_name);
    let steps = std::fs::read_to_string(dir.join("steps.csv")).unwrap();
    assert_eq!(steps.lines().count(), 1 + chosen / 16, "{steps}");
    let config = std::fs::read_to_string(dir.join("config.json")).unwrap();
    let config: serde_json::Value = serde_json::from_str(&config).unwrap();
    let recorded = config
        .as_object()
        .unwrap()
        .values()
        .find_map(|v| v.get("label_fraction"))
        .unwrap_or_else(|| panic!("no label_fraction in {config}"));
    assert_eq!(recorded, &serde_json::json!([0.5, 0]), "{config}");
    std::fs::remove_dir_all(&dir).unwrap();

    for (extra, message) in [
        (
            vec!["--label-fraction", "0"],
            "--label-fraction 0: must lie in (0, 1]",
        ),
        (
            vec!["--label-fraction", "1.5"],
            "--label-fraction 1.5: must lie in (0, 1]",
        ),
        (
            vec!["--label-seed", "3"],
            "--label-seed: only with --label-fraction",
        ),
    ] {
        let mut args = tiny("supervised-few-labels-bad", &extra);
        args[0] = "random_sampling".into();
        let o = run(&as_strs(&args));
        assert_eq!(check_error_shape(&o, message), 2, "{}", stderr(&o));
        assert!(stderr(&o).contains(message), "{}", stderr(&o));
        assert!(!scratch().join("supervised-few-labels-bad").exists());
    }
}

/// `--seed` reaches every random choice of a supervised run: its config.json records the seed
/// of the batch order, of the augmentation and of the trainer's per-step draws (`train.seed`,
/// 0 in every run before, whatever `--seed`), and a run repeated with the same seed repeats its
/// steps' losses (the student's initial weights, drawn from the seed, included; that two seeds
/// draw different weights is `spl_advise::tests`'s).
#[test]
fn the_supervised_recipes_take_every_seed_from_seed() {
    for name in ["spl_advise", "spld", "random_sampling"] {
        let losses = |dir_name: &str| {
            let mut args = tiny(dir_name, &["--seed", "7"]);
            args[0] = name.to_string();
            let o = run(&as_strs(&args));
            assert_eq!(check_error_shape(&o, name), 0, "{name}\n{}", stderr(&o));
            let dir = scratch().join(dir_name);
            let config: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap())
                    .unwrap();
            for path in ["/train/seed", "/supervised/seed", "/augmentation/seed"] {
                assert_eq!(
                    config.pointer(path),
                    Some(&serde_json::json!(7)),
                    "{name} {path}: {config}"
                );
            }
            let steps = std::fs::read_to_string(dir.join("steps.csv")).unwrap();
            let header: Vec<&str> = steps.lines().next().unwrap().split(',').collect();
            let loss = header.iter().position(|c| *c == "loss").unwrap();
            let values: Vec<String> = steps
                .lines()
                .skip(1)
                .map(|l| l.split(',').nth(loss).unwrap().to_string())
                .collect();
            assert_eq!(values.len(), 2, "{name}: two steps\n{steps}");
            checked(&[&dir]);
            values
        };
        let first = losses(&format!("seeded-{name}-a"));
        assert_eq!(
            first,
            losses(&format!("seeded-{name}-b")),
            "{name}: seed 7 twice"
        );
    }
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
    a_supervised_run_is_read_by_no_self_supervised_command();
}

/// A self-supervised recipe does not resume a supervised run; nor do eval, export and embed
/// read it: they say what it is.
fn a_supervised_run_is_read_by_no_self_supervised_command() {
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

/// DINOv2's objective with nothing hidden (`method.mask_probability=0`): it trains on the [CLS]
/// loss and KoLeo, logging a patch loss of 0, instead of panicking on an empty gather. (A batch
/// of one image, where KoLeo has no neighbour, is refused by `--batch-size`; the method's unit
/// test covers it.)
#[test]
fn dinov2_trains_with_nothing_hidden() {
    let dir = scratch().join("dinov2-nothing-hidden");
    let mut args = tiny(
        dir.to_str().unwrap(),
        &[
            "--local-crops",
            "0",
            "method.mask_probability=0",
            VIT_MICRO[0],
            VIT_MICRO[1],
        ],
    );
    args[0] = "dinov2".into();
    let o = run(&as_strs(&args));
    assert_eq!(check_error_shape(&o, "dinov2"), 0, "{}", stderr(&o));
    let steps = std::fs::read_to_string(dir.join("steps.csv")).unwrap();
    let header: Vec<&str> = steps.lines().next().unwrap().split(',').collect();
    let column = |name: &str| header.iter().position(|c| *c == name).unwrap();
    let rows: Vec<Vec<f64>> = steps
        .lines()
        .skip(1)
        .map(|l| l.split(',').map(|v| v.parse().unwrap()).collect())
        .collect();
    assert_eq!(rows.len(), 2, "{steps}");
    for row in &rows {
        for name in ["patch_loss", "hidden_fraction"] {
            assert_eq!(row[column(name)], 0.0, "{name}\n{steps}");
        }
        assert!(row[column("koleo")] > 0.0, "{steps}");
        assert!(row[column("loss")].is_finite(), "{steps}");
    }
    checked(&[&dir]);
}
