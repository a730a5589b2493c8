//! `simclr`: SimCLR (Chen et al. 2020) — `[2048, 128]` BN projector, NT-Xent with τ = 0.2 (the
//! common small-image setting), SGD lr 0.3 for batch 128 with weight decay 5e-4 (LARS is the
//! large-batch choice: `curriculum_ssl::optim::LarsConfig`), the SimCLR augmentations.
//!
//! ```text
//! for each batch x:
//!     z1, z2 = g(f(aug(x))), g(f(aug(x)))
//!     loss = NT-Xent(z1, z2)
//!     SGD step on f, g
//! ```

use super::RecipeEntry;
use anyhow::Result;
use curriculum_ssl::curation::FrechetCurationConfig;
use curriculum_ssl::curriculum::{Pace, SchedulerConfig};
use curriculum_ssl::loss::HclLossConfig;
use curriculum_ssl::method::PgdConfig;
use curriculum_ssl::method::{PairLossConfig, SimClrConfig};
use curriculum_ssl::optim::SgdConfig;
use curriculum_ssl::pipeline::PipelineConfig;

use super::common::{self, Defaults, LossChoice, Prepared};

/// The recipe's defaults.
pub fn defaults() -> Defaults {
    Defaults::new("simclr", 20, 128, 0.3, PipelineConfig::simclr)
        .pair_loss(LossChoice::NtXent.config())
}

/// Runs the recipe.
pub fn run(args: &[String]) -> Result<()> {
    train(common::prepare(args, defaults())?)
}

/// Builds the method for a prepared recipe and trains it with the recipe's two-view loss (after
/// `--loss`; shared with the MICO variants and the loss recipes).
pub fn train(recipe: Prepared) -> Result<()> {
    let loss = recipe
        .pair_loss
        .clone()
        .expect("a SimCLR-family recipe's defaults carry its loss");
    let config = SimClrConfig::new()
        .with_loss(loss)
        .with_pgd(recipe.pgd.clone());
    let config = recipe.section("method", config)?;
    let optimizer = recipe.section("optimizer", SgdConfig::new())?;
    recipe.train_method(&config, &optimizer, |b, d| config.init(b, d))
}

/// `hcl`: SimCLR with hard negative sampling (Robinson et al. 2021,
/// <https://arxiv.org/abs/2010.04592>): HCL with `β = 1`, `τ⁺ = 0.1`, `τ = 0.5` (its CIFAR-10
/// settings).
pub fn hcl(args: &[String]) -> Result<()> {
    let defaults = defaults()
        .named("hcl")
        .pair_loss(LossChoice::Hcl.config());
    train(common::prepare(args, defaults)?)
}

/// `hcl_curriculum`: as `hcl`, with MICO's hardness curriculum (§3.3): `β` rises linearly from
/// 0 (uniform weights: the debiased loss) to 1 over the epochs, so the negatives get harder as
/// training goes. `--hard-positive-k K` adds eq. 3's hard-positive weighting on the same `β`.
pub fn hcl_curriculum(args: &[String]) -> Result<()> {
    let schedule = SchedulerConfig::Linear {
        start: 0.0,
        end: 1.0,
        pace: Pace::Epoch,
    };
    let defaults = defaults()
        .named("hcl_curriculum")
        .pair_loss(PairLossConfig::Hcl( HclLossConfig::new().with_beta_schedule(Some(schedule)), ));
    train(common::prepare(args, defaults)?)
}

/// `curricular_weighting`: SimCLR with the curricular weighting of hard negatives (Zhuang, Jing
/// and Jia, Information Sciences 2024, <https://doi.org/10.1016/j.ins.2024.120474>): the
/// adaptive `t` (a column of steps.csv, kept in checkpoints) and its defaults.
pub fn curricular_weighting(args: &[String]) -> Result<()> {
    let defaults = defaults()
        .named("curricular_weighting")
        .pair_loss(LossChoice::Curricular.config());
    train(common::prepare(args, defaults)?)
}

/// `huber_nt_xent`: SimCLR with the Huber-regularised NT-Xent of "The Bad Batches" (Göksu and
/// Pugeault 2024, <https://arxiv.org/abs/2403.19579>, eq. 3–5), without batch curation.
pub fn huber_nt_xent(args: &[String]) -> Result<()> {
    let defaults = defaults()
        .named("huber_nt_xent")
        .pair_loss(LossChoice::Huber.config());
    train(common::prepare(args, defaults)?)
}

/// `macl`: SimCLR with the model-aware contrastive loss (Huang et al., ICML 2023,
/// <https://arxiv.org/abs/2207.07874>): the temperature `τ(1 + α(A − A₀))` follows the batch's
/// alignment `A` (`macl_temperature`, a column of steps.csv) and each anchor's loss is weighted by
/// `1 / (1 − P)`; lightly's defaults, τ = 0.1, α = 0.5, A₀ = 0.
pub fn macl(args: &[String]) -> Result<()> {
    let defaults = defaults()
        .named("macl")
        .pair_loss(LossChoice::Macl.config());
    train(common::prepare(args, defaults)?)
}

/// `bad_batches`: SimCLR with the Huber-regularised NT-Xent and Fréchet batch curation (Göksu
/// and Pugeault 2024, <https://arxiv.org/abs/2403.19579>, §II-C): no curation for the first 5
/// epochs, the threshold is the mean FRD of the two views' projections over the batches of the
/// 5th, and afterwards a batch above it is re-augmented instead of trained on (at most 3 times,
/// then it trains with a warning; `--curation-warmup` and `--curation-retries` change both).
/// Each step's FRD and redraws are columns of steps.csv, each epoch's rejections and the
/// curation's wall time of epochs.csv.
pub fn bad_batches(args: &[String]) -> Result<()> {
    let defaults = defaults()
        .named("bad_batches")
        .pair_loss(LossChoice::Huber.config())
        .curation(FrechetCurationConfig::new());
    train(common::prepare(args, defaults)?)
}

/// `simclr_pgd`: SimCLR (NT-Xent) with PGD-hardened negatives (MICO, Fang 2023,
/// <https://arxiv.org/abs/2301.06916>, §3.3 eq. 4): before each step, S = 7 ascent steps of size
/// a = 2/255 within ε = 8/255 of the clean pixels (Madry et al. 2018's training attack; MICO gives
/// no values) make the other images' views harder negatives, each anchor keeping its clean
/// positive; the attack's strength follows `(0, 1/3, 2/3, 1)` over the quarters of the run (off
/// at first, as MICO suggests). `pgd_strength` is a column of steps.csv.
pub fn simclr_pgd(args: &[String]) -> Result<()> {
    let defaults = defaults()
        .named("simclr_pgd")
        .pgd(PgdConfig::new());
    train(common::prepare(args, defaults)?)
}

/// `hcl_pgd`: as `hcl` (β = 1, τ⁺ = 0.1, τ = 0.5), with the negatives hardened by PGD as in
/// `simclr_pgd`: MICO's "first hard negative sampling with a moderate β, then PGD".
pub fn hcl_pgd(args: &[String]) -> Result<()> {
    let defaults = defaults()
        .named("hcl_pgd")
        .pair_loss(LossChoice::Hcl.config())
        .pgd(PgdConfig::new());
    train(common::prepare(args, defaults)?)
}

/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[
    RecipeEntry {
        name: "simclr",
        summary: "SimCLR (Chen et al. 2020; MICO Table 1 baseline): BN projector, NT-Xent (tau 0.2); --loss",
        run,
    },
    RecipeEntry {
        name: "hcl",
        summary: "HCL (Robinson et al. 2021): SimCLR with hard negative sampling (beta 1, tau+ 0.1, tau 0.5)",
        run: hcl,
    },
    RecipeEntry {
        name: "hcl_curriculum",
        summary: "MICO sec. 3.3: HCL with beta rising linearly from 0 to 1 (--hard-positive-k: eq. 3)",
        run: hcl_curriculum,
    },
    RecipeEntry {
        name: "curricular_weighting",
        summary: "Curricular weighting (Zhuang et al. 2024): SimCLR, hard negatives weighted by an adaptive t",
        run: curricular_weighting,
    },
    RecipeEntry {
        name: "huber_nt_xent",
        summary: "The Bad Batches (Goksu and Pugeault 2024) eq. 3-5: SimCLR with Huber NT-Xent, no curation",
        run: huber_nt_xent,
    },
    RecipeEntry {
        name: "macl",
        summary: "MACL (Huang et al. 2023): SimCLR, temperature following the views' alignment (tau 0.1, alpha 0.5)",
        run: macl,
    },
    RecipeEntry {
        name: "bad_batches",
        summary: "The Bad Batches sec. II-C (STL-10 87.74): Huber NT-Xent, batches above epoch 5's mean FRD redrawn",
        run: bad_batches,
    },
    RecipeEntry {
        name: "simclr_pgd",
        summary: "MICO 3.3 eq. 4: SimCLR whose negatives are hardened by PGD (S 7, a 2/255, eps 8/255), on after a quarter",
        run: simclr_pgd,
    },
    RecipeEntry {
        name: "hcl_pgd",
        summary: "MICO 3.3: HCL (beta 1), then its negatives hardened by PGD as in simclr_pgd",
        run: hcl_pgd,
    },
];
