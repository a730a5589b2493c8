//! What every training recipe shares: its command-line options ([`args`]), the data
//! ([`data`]), the backbone ([`backbone`]), the settings file ([`config_file`]), and the run:
//! preparing it ([`prepare`]: the recipe's defaults, settings, data, pipeline, the method),
//! running it ([`run`]: one device or replicas, the trainer and its hooks, the baselines) and
//! its report ([`report`]).

mod args;
mod backbone;
pub mod config_file;
mod data;
mod prepare;
mod report;
mod run;

pub use args::*;
pub use backbone::*;
pub use config_file::RECIPE_TOML;
pub use data::*;
pub use prepare::*;
pub(crate) use report::{print_where, shell_command};

pub use crate::backend::{Device, Train};
