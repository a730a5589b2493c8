//! The list of recipes the binary knows.

use anyhow::{bail, Result};

/// One recipe: a name on the command line, a one-line summary, and the function that runs it.
pub struct RecipeEntry {
    /// Name given on the command line.
    pub name: &'static str,
    /// What it does, in one line.
    pub summary: &'static str,
    /// Runs it on the selected backend.
    pub run: fn() -> Result<()>,
}

/// Every recipe, in the order `recipe list` prints them.
pub fn registry() -> Vec<RecipeEntry> {
    vec![RecipeEntry {
        name: "worked_values",
        summary: "evaluate every loss of SPEC §1 on its worked example on the selected backend \
                  and compare with the reference values (a backend self-check)",
        run: crate::recipes::worked_values::run,
    }]
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
