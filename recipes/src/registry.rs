//! The list of recipes the binary knows.

use anyhow::{bail, Result};

/// One recipe: a name on the command line, a one-line summary, and the function that runs it.
pub struct RecipeEntry {
    /// Name given on the command line.
    pub name: &'static str,
    /// What it does, in one line.
    pub summary: &'static str,
    /// Runs it on the selected backend with its command-line arguments.
    pub run: fn(&[String]) -> Result<()>,
}

/// Every recipe, in the order `recipe list` prints them.
pub fn registry() -> Vec<RecipeEntry> {
    use crate::recipes::*;
    vec![
        RecipeEntry {
            name: "light_moco",
            summary: "Light-MoCo (Lin et al. 2022, sec. 4.1): [2048, 128] head, symmetric SoftNCE (K 20, alpha 0.8, tau 0.1), lr 0.2 x B/512",
            run: light_moco::run,
        },
        RecipeEntry {
            name: "moco_v2",
            summary: "MoCo v2 (Chen et al. 2020; Light-MoCo Table 3 baseline): feature-width MLP head, InfoNCE (tau 0.2), queue",
            run: moco_v2::run,
        },
        RecipeEntry {
            name: "moco_v1",
            summary: "MoCo v1 (He et al. 2020; MICO Tables 2-3 baseline): linear head, InfoNCE (tau 0.07), queue",
            run: moco_v1::run,
        },
        RecipeEntry {
            name: "moco_strength_curriculum",
            summary: "MICO Tables 2-3: MoCo v1 with colour strength x2 reached on 4 steps (--strength, --schedule)",
            run: moco_v1::strength_curriculum,
        },
        RecipeEntry {
            name: "auto_augment_self_paced",
            summary: "MICO 3.4: MoCo v1 with normalised AutoAugment (5x2 sub-policies, self-paced magnitudes)",
            run: moco_v1::auto_augment_self_paced,
        },
        RecipeEntry {
            name: "simclr",
            summary: "SimCLR (Chen et al. 2020; MICO Table 1 baseline): BN projector, NT-Xent (tau 0.2); --loss",
            run: simclr::run,
        },
        RecipeEntry {
            name: "hcl",
            summary: "HCL (Robinson et al. 2021): SimCLR with hard negative sampling (beta 1, tau+ 0.1, tau 0.5)",
            run: simclr::hcl,
        },
        RecipeEntry {
            name: "hcl_curriculum",
            summary: "MICO sec. 3.3: HCL with beta rising linearly from 0 to 1 (--hard-positive-k: eq. 3)",
            run: simclr::hcl_curriculum,
        },
        RecipeEntry {
            name: "curricular_weighting",
            summary: "Curricular weighting (Zhuang et al. 2024): SimCLR, hard negatives weighted by an adaptive t",
            run: simclr::curricular_weighting,
        },
        RecipeEntry {
            name: "huber_nt_xent",
            summary: "The Bad Batches (Goksu and Pugeault 2024) eq. 3-5: SimCLR with Huber NT-Xent, no curation",
            run: simclr::huber_nt_xent,
        },
        RecipeEntry {
            name: "bad_batches",
            summary: "The Bad Batches sec. II-C (STL-10 87.74): Huber NT-Xent, batches above epoch 5's mean FRD redrawn",
            run: simclr::bad_batches,
        },
        RecipeEntry {
            name: "simclr_pgd",
            summary: "MICO 3.3 eq. 4: SimCLR whose negatives are hardened by PGD (S 7, a 2/255, eps 8/255), on after a quarter",
            run: simclr::simclr_pgd,
        },
        RecipeEntry {
            name: "hcl_pgd",
            summary: "MICO 3.3: HCL (beta 1), then its negatives hardened by PGD as in simclr_pgd",
            run: simclr::hcl_pgd,
        },
        RecipeEntry {
            name: "rotnet",
            summary: "RotNet (Gidaris et al. 2018): 4-way rotation prediction (0/90/180/270), linear head",
            run: rotnet::rotnet,
        },
        RecipeEntry {
            name: "rotnet_curriculum",
            summary: "MICO 3.2: RotNet with the angles in play growing on a 4-step schedule",
            run: rotnet::rotnet_curriculum,
        },
        RecipeEntry {
            name: "rotate_mix",
            summary: "MICO 3.2: rotate-and-mix (0.5 rot(x) + 0.5 x) under the angle curriculum",
            run: rotnet::rotate_mix,
        },
        RecipeEntry {
            name: "crop_rotate",
            summary: "MICO 3.2 / Fig. 1: crop-and-rotate (only the object's box, from the backbone's heat map recomputed 4 times, is rotated) under the angle curriculum",
            run: rotnet::crop_rotate,
        },
        RecipeEntry {
            name: "byol",
            summary: "BYOL (Grill et al. 2020; MICO Table 1 baseline): predictor, EMA target 0.99 -> 1, summed loss",
            run: byol::run,
        },
        RecipeEntry {
            name: "simsiam",
            summary: "SimSiam (Chen and He 2021; MICO Table 1 baseline): predictor, stop-gradient",
            run: simsiam::run,
        },
        RecipeEntry {
            name: "mixup_simsiam",
            summary: "MICO Table 1 baseline: SimSiam with plain Mixup of the positive pair (lambda 0.5)",
            run: mico::mixup_simsiam,
        },
        RecipeEntry {
            name: "mico_simsiam",
            summary: "MICO Table 1: SimSiam with curriculum Mixup (4-step lambda 0.2-0.8 per epoch)",
            run: mico::mico_simsiam,
        },
        RecipeEntry {
            name: "mixup_byol",
            summary: "MICO Table 1 baseline: BYOL with plain Mixup of the positive pair (lambda 0.5)",
            run: mico::mixup_byol,
        },
        RecipeEntry {
            name: "mico_byol",
            summary: "MICO Table 1: BYOL with curriculum Mixup (4-step lambda 0.2-0.8 per epoch)",
            run: mico::mico_byol,
        },
        RecipeEntry {
            name: "mixup_simclr",
            summary: "MICO Table 1 baseline: SimCLR with plain Mixup of the positive pair (lambda 0.5)",
            run: mico::mixup_simclr,
        },
        RecipeEntry {
            name: "mico_simclr",
            summary: "MICO Table 1: SimCLR with curriculum Mixup (4-step lambda 0.2-0.8 per epoch)",
            run: mico::mico_simclr,
        },
        RecipeEntry {
            name: "mixup_moco",
            summary: "MICO Table 1 baseline: MoCo v2 with plain Mixup of the positive pair (lambda 0.5)",
            run: mico::mixup_moco,
        },
        RecipeEntry {
            name: "mico_moco",
            summary: "MICO Table 1: MoCo v2 with curriculum Mixup (4-step lambda 0.2-0.8 per epoch)",
            run: mico::mico_moco,
        },
        RecipeEntry {
            name: "spl_advise",
            summary: "SPL-ADVisE (Thangarasa and Taylor 2018; FMNIST 94.12): supervised, SPLD over the clusters of a magnet-loss embedding",
            run: spl_advise::spl_advise,
        },
        RecipeEntry {
            name: "spld",
            summary: "SPL-ADVisE Table 1 baseline (FMNIST 93.17): supervised, SPLD over fixed k-means clusters of the raw pixels",
            run: spl_advise::spld,
        },
        RecipeEntry {
            name: "random_sampling",
            summary: "SPL-ADVisE Table 1 baseline (FMNIST 92.77): supervised, every training image every epoch",
            run: spl_advise::random_sampling,
        },
        RecipeEntry {
            name: "eval",
            summary: "kNN and linear evaluation of a saved checkpoint (--run-dir DIR)",
            run: eval::run,
        },
        RecipeEntry {
            name: "worked_values",
            summary: "evaluate every loss on its worked example (docs/methods.md) on the selected backend \
                      and compare with the reference values (a backend self-check)",
            run: |args| {
                if matches!(args, [flag] if flag == "--help" || flag == "-h") {
                    println!(
                        "Usage: recipe worked_values [--device N]\n\nEvaluates every loss on \
                         its worked example on the selected backend and compares it with the \
                         float64 reference (1e-4 in f32); exits 1 if one differs.\n\nOptions:\n  \
                         --device N  the device to check (as the training recipes' --device)"
                    );
                    return Ok(());
                }
                let device = match args {
                    [] => None,
                    [flag, n] if flag == "--device" => Some(n.parse::<usize>().map_err(|_| {
                        crate::usage(format!("--device {n}: not a device number"))
                    })?),
                    _ => {
                        return Err(crate::usage(format!(
                            "recipe `worked_values` takes only --device N, got: {}",
                            args.join(" ")
                        )))
                    }
                };
                worked_values::run(device)
            },
        },
    ]
}

/// The recipe called `name`, or an error that lists the known ones.
pub fn find(name: &str) -> Result<RecipeEntry> {
    let recipes = registry();
    let names: Vec<&str> = recipes.iter().map(|r| r.name).collect();
    match recipes.into_iter().find(|r| r.name == name) {
        Some(recipe) => Ok(recipe),
        None => bail!(
            "unknown recipe `{name}`; known recipes: {} (see `recipe list`)",
            names.join(", ")
        ),
    }
}
