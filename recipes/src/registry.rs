//! The list of recipes the binary knows.

use anyhow::{bail, Result};

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

/// Every recipe, in the order `recipe list` prints them: each recipe module's
/// [`RECIPES`](crate::recipes::light_moco::RECIPES), in the order of `crate::recipes`.
pub fn registry() -> Vec<RecipeEntry> {
    crate::recipes::all()
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
