//! `recipe`: runs the recipes of curriculum-ssl.
//!
//! ```text
//! cargo run --release --bin recipe -- list
//! cargo run --release --features cuda --bin recipe -- <name>
//! ```

mod backend;
mod recipes;
mod registry;

use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};

/// Runs a recipe of curriculum-ssl on the backend chosen at build time (`--features cuda`,
/// `--features wgpu`, or the CPU by default).
#[derive(Parser, Debug)]
#[command(name = "recipe", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// List the known recipes.
    List,
    /// Run the recipe with this name.
    #[command(external_subcommand)]
    Run(Vec<String>),
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::List => {
            println!("recipes (backend: {}):", backend::NAME);
            for recipe in registry::registry() {
                println!("  {:<16} {}", recipe.name, recipe.summary);
            }
            Ok(())
        }
        Command::Run(args) => {
            let recipe = registry::find(&args[0])?;
            if args.len() > 1 {
                anyhow::bail!(
                    "recipe `{}` takes no arguments, got: {}",
                    recipe.name,
                    args[1..].join(" ")
                );
            }
            (recipe.run)()
        }
    }
}
