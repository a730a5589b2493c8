//! MICO (H. Fang, "Curriculum SSL: An Efficient And Effective Data Augmentation For Contrastive
//! Learning", Table 1 and Algorithm 1): the four frameworks with the second view of every
//! positive pair replaced by `λ·x1 + (1 − λ)·x2`.
//!
//! - `mixup_<framework>`: plain Mixup, λ = 0.5 throughout (the paper's baseline).
//! - `mico_<framework>`: C-Mixup, λ on the 4-step schedule (0.2, 0.4, 0.6, 0.8) per epoch, the
//!   paper's numbers. By its own definition (a larger λ is an easier pair) this runs from hard to
//!   easy; `--easy-to-hard` runs it the other way.
//!
//! Everything else (method, optimiser, augmentation, epochs) is the framework's own recipe;
//! `mixup_moco` / `mico_moco` use MoCo v2.
//!
//! ```text
//! for epoch in epochs:
//!     λ = S(epoch, total_epochs)                      # 4-step, or 0.5 for plain Mixup
//!     for x in loader:
//!         x1, x2 = aug(x), aug(x)
//!         loss = method(x1, λ·x1 + (1 − λ)·x2)
//!         update
//! ```

use super::RecipeEntry;
use anyhow::Result;
use curriculum_ssl::curriculum::MixupCurriculumConfig;

use super::common::{self, Defaults, Prepared};
use super::{byol, moco_v2, simclr, simsiam};

fn run_variant(
    args: &[String],
    base: Defaults,
    name: &'static str,
    mixup: MixupCurriculumConfig,
    train: fn(Prepared) -> Result<()>,
) -> Result<()> {
    train(common::prepare(args, base.with_mixup(name, mixup))?)
}

macro_rules! variants {
    ($($plain:ident, $curriculum:ident, $base:ident;)*) => {$(
        #[doc = concat!("`", stringify!($plain), "`: ", stringify!($base), " with plain Mixup (λ = 0.5).")]
        pub fn $plain(args: &[String]) -> Result<()> {
            run_variant(args, $base::defaults(), stringify!($plain), MixupCurriculumConfig::plain(), $base::train)
        }

        #[doc = concat!("`", stringify!($curriculum), "`: ", stringify!($base), " with MICO's curriculum Mixup (4-step λ).")]
        pub fn $curriculum(args: &[String]) -> Result<()> {
            run_variant(args, $base::defaults(), stringify!($curriculum), MixupCurriculumConfig::mico(), $base::train)
        }
    )*};
}

variants! {
    mixup_simsiam, mico_simsiam, simsiam;
    mixup_byol, mico_byol, byol;
    mixup_simclr, mico_simclr, simclr;
    mixup_moco, mico_moco, moco_v2;
}

/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[
    RecipeEntry {
        name: "mixup_simsiam",
        summary: "MICO Table 1 baseline: SimSiam with plain Mixup of the positive pair (lambda 0.5)",
        run: mixup_simsiam,
    },
    RecipeEntry {
        name: "mico_simsiam",
        summary: "MICO Table 1: SimSiam with curriculum Mixup (4-step lambda 0.2-0.8 per epoch)",
        run: mico_simsiam,
    },
    RecipeEntry {
        name: "mixup_byol",
        summary: "MICO Table 1 baseline: BYOL with plain Mixup of the positive pair (lambda 0.5)",
        run: mixup_byol,
    },
    RecipeEntry {
        name: "mico_byol",
        summary: "MICO Table 1: BYOL with curriculum Mixup (4-step lambda 0.2-0.8 per epoch)",
        run: mico_byol,
    },
    RecipeEntry {
        name: "mixup_simclr",
        summary: "MICO Table 1 baseline: SimCLR with plain Mixup of the positive pair (lambda 0.5)",
        run: mixup_simclr,
    },
    RecipeEntry {
        name: "mico_simclr",
        summary: "MICO Table 1: SimCLR with curriculum Mixup (4-step lambda 0.2-0.8 per epoch)",
        run: mico_simclr,
    },
    RecipeEntry {
        name: "mixup_moco",
        summary: "MICO Table 1 baseline: MoCo v2 with plain Mixup of the positive pair (lambda 0.5)",
        run: mixup_moco,
    },
    RecipeEntry {
        name: "mico_moco",
        summary: "MICO Table 1: MoCo v2 with curriculum Mixup (4-step lambda 0.2-0.8 per epoch)",
        run: mico_moco,
    },
];
