//! One module per recipe (or per family of recipes), each with its typed defaults, the short
//! function that builds its method and extensions, and its `RECIPES` entries; `common` holds
//! what the training recipes share (arguments, data, backbones, the run).
//!
//! A new recipe module is registered by one name in the list below: it becomes a module, and
//! its `RECIPES` join `recipe list` in this order.

use anyhow::{bail, Result};

pub mod common;

/// One recipe: a name on the command line, a one-line summary, and the function that runs it.
#[derive(Clone, Copy)]
pub struct RecipeEntry {
    /// Name given on the command line.
    pub name: &'static str,
    /// What it does, in one line.
    pub summary: &'static str,
    /// Runs it on the selected backend with its command-line arguments.
    pub run: fn(&[String]) -> Result<()>,
}

/// The recipe called `name`, or an error that lists the known ones.
pub fn find(name: &str) -> Result<RecipeEntry> {
    let recipes = all();
    let names: Vec<&str> = recipes.iter().map(|r| r.name).collect();
    match recipes.into_iter().find(|r| r.name == name) {
        Some(recipe) => Ok(recipe),
        None => bail!(
            "unknown recipe `{name}`; known recipes: {} (see `recipe list`)",
            names.join(", ")
        ),
    }
}

macro_rules! recipe_modules {
    ($($module:ident),* $(,)?) => {
        $(pub mod $module;)*

        /// Every recipe of every module, in the order of the list (`recipe list`'s order).
        pub fn all() -> Vec<RecipeEntry> {
            [$($module::RECIPES),*].concat()
        }
    };
}

recipe_modules!(
    light_moco,
    moco_v2,
    moco_v1,
    moco_v3,
    mae,
    simmim,
    aim,
    ijepa,
    capi,
    simclr,
    supcon,
    directclr,
    rotnet,
    byol,
    simsiam,
    redundancy,
    vicregl,
    detcon,
    smog,
    deepcluster_v2,
    multi_crop,
    lejepa,
    visreg,
    emp_ssl,
    mmcr,
    ibot,
    msn,
    nnclr,
    nnsiam,
    nnbyol,
    all4one,
    ressl,
    tico,
    mico,
    spl_advise,
    eval,
    export,
    pack,
    compare,
    study,
    worked_values,
    bench_step,
);
