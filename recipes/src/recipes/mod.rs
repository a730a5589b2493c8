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
    ijepa,
    simclr,
    rotnet,
    byol,
    simsiam,
    redundancy,
    multi_crop,
    ibot,
    msn,
    nnclr,
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

#[cfg(test)]
mod tests {
    /// The README's table of recipes (`| recipe | what it does |`) names every recipe `recipe
    /// list` knows, and nothing else besides `resume` (a command of the binary, not a recipe):
    /// the hand-kept list cannot go stale unseen.
    #[test]
    fn the_readme_lists_every_recipe_and_no_other() {
        let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
            .expect("the workspace's README");
        let table = readme
            .split("| recipe | what it does |")
            .nth(1)
            .expect("the README's table of recipes");
        let mut listed = std::collections::BTreeSet::new();
        for row in table.lines().skip(2).take_while(|l| l.starts_with('|')) {
            let first = row.split(" | ").next().unwrap_or_default();
            for name in first.split('`').skip(1).step_by(2) {
                listed.insert(name.to_string());
            }
        }
        let known: std::collections::BTreeSet<String> = super::all()
            .iter()
            .map(|r| r.name.to_string())
            .chain(["resume".to_string()])
            .collect();
        let missing: Vec<_> = known.difference(&listed).collect();
        let stale: Vec<_> = listed.difference(&known).collect();
        assert!(
            missing.is_empty() && stale.is_empty(),
            "README's recipe table misses {missing:?} and names unknown {stale:?}"
        );
    }
}
