//! `recipe`: runs the recipes of curriculum-ssl.
//!
//! ```text
//! cargo run --release --bin recipe -- list
//! cargo run --release --features cuda --bin recipe -- <name> [--epochs N] [--run-dir DIR] [--resume] ...
//! cargo run --release --bin recipe -- <name> --help
//! ```
// Unsafe code only where a system call or mimalloc's C API needs it, each site allowed by name
// (`keep_freed_pages`, `signals`, the CUDA driver's presence check) with its SAFETY comment.
#![deny(unsafe_code)]

mod backend;
#[cfg(test)]
mod docs_lists;
mod plots;
mod recipes;
mod run_files;
#[allow(unsafe_code)]
mod signals;
mod usage;

use std::process::ExitCode;

/// The process's allocator. burn's CPU backend allocates a fresh buffer for every op's output,
/// hundreds of megabytes a step; glibc's allocator serves the larger ones with `mmap` and
/// returns them on free, so each step page-faults its buffers in again (its threshold adapts,
/// but to whatever the largest freed block happened to be: a full-data Light-MoCo epoch ran at
/// 760 or 1,130 images/s depending on it). mimalloc keeps freed pages for reuse.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (the 16th option of `mi_option_e` in its v2 and v3 headers,
/// which libmimalloc-sys does not name): how long freed memory stays mapped before mimalloc
/// returns it to the system. At the default of the v3 mimalloc built here (1,000 ms) a
/// training step's freed buffers are still returned and faulted back in (zeroed by the kernel):
/// MAE on ViT-Tiny spent 18 % of its step in the kernel's page clearing (benches/README.md). Never purging keeps
/// the process at its peak footprint, which a training run reaches every step anyway.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Keeps freed memory mapped for reuse (purge delay −1), unless `MIMALLOC_PURGE_DELAY` in the
/// environment already says otherwise (mimalloc read it at start-up).
#[allow(unsafe_code)]
fn keep_freed_pages() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets one of mimalloc's options by its index; no pointer is involved.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    }
}

use anyhow::Result;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use usage::{chain_text, usage, Usage};

/// Runs a recipe of curriculum-ssl on the backend chosen at build time (`--features cuda`,
/// `--features wgpu`, or the CPU by default).
#[derive(Parser, Debug)]
#[command(name = "recipe", version, about, disable_help_subcommand = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// List the known recipes.
    List,
    /// Print this help, or a recipe's options (`recipe help light_moco`).
    Help {
        /// The recipe.
        name: Option<String>,
    },
    /// Run burn-collective's orchestrator for a data-parallel run on several machines (the
    /// nodes' --orchestrator ws://THIS_HOST:PORT); it serves until interrupted. A registration
    /// that does not complete within the nodes' --timeout is answered with the machines that
    /// arrived.
    Orchestrator {
        /// The port to listen on (0: a free one, printed).
        #[arg(long)]
        port: u16,
        /// The address to listen on: 0.0.0.0 (every interface: other machines reach it), or
        /// this machine's address on one network, or 127.0.0.1 (this machine only).
        #[arg(long, default_value = "0.0.0.0")]
        address: String,
    },
    /// Continue a run from its directory alone: the recipe and its settings come from the
    /// run's recipe.toml (`recipe resume runs/light_moco`; options after it may change what a
    /// resume allows, e.g. --knn-every, or lengthen it with --extend --epochs N).
    Resume {
        /// The run directory.
        run_dir: std::path::PathBuf,
        /// Options for the recipe.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        options: Vec<String>,
    },
    /// Run the recipe with this name.
    #[command(external_subcommand)]
    Run(Vec<String>),
}

/// The command-line option behind a setting of a run record, where there is one.
fn option_of(setting: &str) -> Option<&'static str> {
    Some(match setting {
        "train.epochs" => "--epochs",
        "train.lr" => "--lr",
        "train.seed" | "loader.seed" | "augmentation.seed" => "--seed",
        "loader.batch_size" => "--batch-size",
        "run.backbone" => "--backbone",
        "run.data" => "--data-dir",
        "run.dataset" => "--dataset",
        "run.image_size" => "--image-size",
        "run.stem" => "--stem",
        "run.pooled_grid" => "--pooled-grid",
        "run.precision" => "--precision",
        "run.recipe" => "the recipe",
        _ => return None,
    })
}

/// The message of an error, with the settings of a resume mismatch named by their options
/// (each once).
fn message(error: &anyhow::Error) -> String {
    use curriculum_ssl::train::TrainError;
    if let Some(TrainError::Mismatch { path, differences }) = error.downcast_ref::<TrainError>() {
        let mut named: Vec<String> = Vec::new();
        for d in differences {
            // A setting a run record leaves out at its default reads "absent": said as the
            // default the option had (an f32 run records no precision).
            let shown = |value: &str| match (d.setting.as_str(), value) {
                ("run.precision", "absent") => "\"f32\"".to_string(),
                _ => value.to_string(),
            };
            let line = match option_of(&d.setting) {
                Some(option) => {
                    format!("{option}: run {}, given {}", shown(&d.run), shown(&d.given))
                }
                None => d.to_string(),
            };
            if !named.contains(&line) {
                named.push(line);
            }
        }
        return format!(
            "{} was written by a run with other settings: {}. Resume with the run's settings \
             (--checkpoint-every, --checkpoint-every-steps, --knn-every, --workers and --device may \
             change; --extend with a larger --epochs makes it longer), or start a new --run-dir",
            path.display(),
            named.join("; ")
        );
    }
    if let Some(TrainError::Interrupted { run_dir, .. }) =
        error.chain().find_map(|c| c.downcast_ref::<TrainError>())
    {
        return format!(
            "{}; resume with `{}`",
            chain_text(error),
            recipes::common::shell_command([
                std::path::Path::new("recipe"),
                std::path::Path::new("resume"),
                run_dir
            ])
        );
    }
    chain_text(error)
}

/// 2 for an error in what the user gave, 1 for a failure during the run, 130 for a run stopped
/// by Ctrl-C or SIGTERM.
fn exit_code(error: &anyhow::Error) -> u8 {
    use curriculum_ssl::data::DataError;
    use curriculum_ssl::train::TrainError;
    // A file that could not be written (a full disk) failed during the work: 1, though the
    // library reports it as a data error (`recipe pack`'s shards).
    let write_failure = |cause: &(dyn std::error::Error + 'static)| {
        matches!(
            cause.downcast_ref::<DataError>(),
            Some(DataError::Write { .. })
        ) || matches!(
            cause.downcast_ref::<curriculum_ssl::Error>(),
            Some(curriculum_ssl::Error::Data(DataError::Write { .. }))
        )
    };
    if error.chain().any(write_failure) {
        return 1;
    }
    for cause in error.chain() {
        if cause.is::<signals::Interrupted>() {
            return signals::INTERRUPTED;
        }
        if let Some(TrainError::Interrupted { .. }) = cause.downcast_ref::<TrainError>() {
            return signals::INTERRUPTED;
        }
        if cause.is::<Usage>()
            || cause.is::<curriculum_ssl::ConfigError>()
            || cause.is::<DataError>()
            || cause.is::<curriculum_ssl::Error>()
        {
            return 2;
        }
        if let Some(e) = cause.downcast_ref::<TrainError>() {
            return if e.is_input_error() { 2 } else { 1 };
        }
    }
    1
}

/// `log` messages to standard error through env_logger: the crates' info lines by default,
/// `RUST_LOG` for more or less (`RUST_LOG=debug`, `RUST_LOG=curriculum_ssl=warn`).
fn init_logging() {
    use std::io::Write;
    let default = "warn,curriculum_ssl=info,curriculum_ssl_recipes=info,recipe=info";
    let _ = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(default))
        .format(|out, record| writeln!(out, "[{}] {}", record.level(), record.args()))
        .try_init();
}

/// The recipes, one line each, after the top-level help.
fn recipe_list() -> String {
    let mut text = String::from("Recipes (`recipe help NAME` for a recipe's options):\n");
    for recipe in recipes::all() {
        text.push_str(&format!("  {:<26} {}\n", recipe.name, recipe.summary));
    }
    text
}

/// The command line, with the recipes listed in its help.
fn command() -> clap::Command {
    Cli::command().after_help(recipe_list())
}

fn main() -> ExitCode {
    keep_freed_pages();
    init_logging();
    backend::configure_burn();
    let parsed = command()
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {}", message(&error));
            ExitCode::from(exit_code(&error))
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::List => {
            use std::io::Write;
            let mut text = format!("recipes (backend: {}):\n", backend::NAME);
            for recipe in recipes::all() {
                text.push_str(&format!("  {:<26} {}\n", recipe.name, recipe.summary));
            }
            // A closed pipe (`recipe list | head`) is not an error worth a panic.
            let _ = std::io::stdout().write_all(text.as_bytes());
            Ok(())
        }
        Command::Help { name: None } => {
            command().print_long_help()?;
            Ok(())
        }
        Command::Help { name: Some(name) } => {
            // A command of its own (`recipe help resume`), else a recipe.
            let mut cli = command();
            cli.build();
            if let Some(sub) = cli
                .get_subcommands_mut()
                .find(|s| s.get_name() == name && s.get_name() != "help")
            {
                sub.print_long_help()?;
                return Ok(());
            }
            let recipe = recipes::find(&name).map_err(|e| usage(e.to_string()))?;
            // Every recipe prints its options for --help and exits 0.
            (recipe.run)(&["--help".to_string()])
        }
        Command::Orchestrator { port, address } => {
            use curriculum_ssl::data_parallel::Orchestrator;
            let host = match address.contains(':') {
                true => format!("[{address}]"),
                false => address.clone(),
            };
            let orchestrator = Orchestrator::bind(&format!("{host}:{port}")).map_err(|e| {
                usage(format!(
                    "--address {address} --port {port}: cannot listen there: {e}"
                ))
            })?;
            let bound = orchestrator.address()?;
            println!(
                "orchestrator listening on ws://{bound} (nodes: --orchestrator ws://HOST:{}; \
                 Ctrl-C to stop)",
                bound.port()
            );
            use std::io::Write;
            let _ = std::io::stdout().flush();
            orchestrator.serve().map_err(anyhow::Error::msg)
        }
        Command::Resume { run_dir, options } => {
            let file = run_dir.join(recipes::common::RECIPE_TOML);
            if std::fs::symlink_metadata(&file).is_err() {
                return Err(usage(format!(
                    "{}: no {} (a run directory written by `recipe NAME --run-dir DIR`)",
                    run_dir.display(),
                    recipes::common::RECIPE_TOML
                )));
            }
            let own = format!("{} (the run's own settings)", file.display());
            let name = recipes::common::config_file::ConfigFile::read_named(&file, &own)?
                .recipe
                .ok_or_else(|| usage(format!("{}: names no recipe", file.display())))?;
            let recipe = recipes::find(&name).map_err(|e| usage(e.to_string()))?;
            // A recipe.toml naming another recipe than the one that trained the run (edited, or
            // copied from another run) was refused by the other recipe's settings ("method has
            // no setting `loss`"), not for what it is. A record that cannot be read is left to
            // the resume, which names the damage.
            if let Ok(record) = curriculum_ssl::train::RunRecord::<
                serde_json::Value,
                serde_json::Value,
            >::read(&run_dir)
            {
                if let Some(trained) = record.run.get("recipe").and_then(|r| r.as_str()) {
                    if trained != name {
                        return Err(usage(format!(
                            "{}: names recipe `{name}`, but the run was trained by `{trained}` \
                             (its config.json); a run resumes with its own recipe",
                            file.display()
                        )));
                    }
                }
            }
            // The run is the directory given; a --run-dir among the options would win over it
            // (the last of an option counts) and start another run there on the defaults.
            if let Some(other) = options
                .iter()
                .find(|o| *o == "--run-dir" || o.starts_with("--run-dir="))
            {
                return Err(usage(format!(
                    "`recipe resume {}`: {other} is not an option of a resume (the run \
                     directory is its first argument; to train the run's settings in another \
                     directory, `recipe {name} --config {} --run-dir NEW_DIR`)",
                    run_dir.display(),
                    file.display()
                )));
            }
            let mut args = vec!["--run-dir".to_string(), run_dir.display().to_string()];
            if !options.iter().any(|o| o == "--extend") {
                args.push("--resume".into());
            }
            args.extend(options);
            (recipe.run)(&args)
        }
        Command::Run(args) => {
            let recipe = recipes::find(&args[0]).map_err(|e| usage(e.to_string()))?;
            (recipe.run)(&args[1..])
        }
    }
}

#[cfg(test)]
#[allow(unsafe_code)]
mod allocator_tests {
    use super::MI_OPTION_PURGE_DELAY;

    /// The index names the purge delay: it reads v3's default of 1,000 ms (`src/options.c`), which
    /// no neighbouring option has (NUMA nodes 0 after it), and a value set reads back. (This test binary does not run `main`, so the option is at its default
    /// unless the environment sets it.)
    #[test]
    fn the_purge_delay_option_is_the_one_set() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
            return;
        }
        // SAFETY: reads and sets one of mimalloc's options by its index.
        unsafe {
            assert_eq!(libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY), 1000);
            assert_eq!(libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY + 1), 0);
            libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1);
            assert_eq!(libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY), -1);
            libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 1000);
        }
    }
}
