//! `recipe`: runs the recipes of curriculum-ssl.
//!
//! ```text
//! cargo run --release --bin recipe -- list
//! cargo run --release --features cuda --bin recipe -- <name> [--epochs N] [--run-dir DIR] [--resume] ...
//! cargo run --release --bin recipe -- <name> --help
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

/// A clap error as an `anyhow` error, except `--help` / `--version`, which print and exit 0.
pub(crate) fn help_or_error(e: clap::Error) -> anyhow::Error {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        e.exit();
    }
    anyhow::anyhow!(e.render().to_string())
}

/// Prints `log` messages (info and above; `RUST_LOG=debug` for more) to standard error.
struct StderrLogger;

impl log::Log for StderrLogger {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record) {
        if self.enabled(record.metadata()) && record.target().starts_with("curriculum") {
            eprintln!("[{}] {}", record.level(), record.args());
        }
    }

    fn flush(&self) {}
}

static LOGGER: StderrLogger = StderrLogger;

fn main() -> ExitCode {
    let level = match std::env::var("RUST_LOG").as_deref() {
        Ok("debug") => log::LevelFilter::Debug,
        Ok("trace") => log::LevelFilter::Trace,
        Ok("warn") => log::LevelFilter::Warn,
        Ok("error") => log::LevelFilter::Error,
        _ => log::LevelFilter::Info,
    };
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(level);
    }
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
            (recipe.run)(&args[1..])
        }
    }
}
