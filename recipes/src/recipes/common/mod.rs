//! What every training recipe shares: its command-line options ([`args`]), the settings file
//! ([`config_file`]), the recipe's defaults and the run's settings ([`settings`]), the data
//! ([`data`]), the backbone ([`backbone`]; fitted to the data: [`backbone_fit`]), the augmentation ([`augmentation`]), and the run:
//! preparing it ([`prepare`]: the options parsed, the settings resolved, the data loaded, the
//! pipeline built, in that order), running it ([`run`]: the method's settings and its build,
//! one device or replicas, the trainer and its hooks, the baselines) and its report
//! ([`report`]).

mod args;
mod augmentation;
mod backbone;
mod backbone_fit;
pub mod config_file;
mod data;
mod prepare;
mod report;
mod run;
mod settings;

pub use args::*;
pub use backbone::*;
pub use config_file::RECIPE_TOML;
pub use data::*;
pub use prepare::*;
pub(crate) use report::{print_where, shell_command};
pub use settings::*;

pub use crate::backend::{Device, Train};
