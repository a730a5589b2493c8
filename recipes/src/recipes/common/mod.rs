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
pub use config_file::{Overrides, RECIPE_TOML};
pub use data::*;
pub use prepare::*;
pub(crate) use report::print_where;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use burn::optim::Optimizer;
use clap::{Parser, ValueEnum};
use curriculum_ssl::augment::normalize::Normalize;
use curriculum_ssl::base::seed::parameter_count;
use curriculum_ssl::curation::FrechetCurationConfig;
use curriculum_ssl::curriculum::{
    MixupCurriculumConfig, SchedulerConfig, StrengthCurriculumConfig,
};
use curriculum_ssl::data::embedded::load_or_embedded;
use curriculum_ssl::data::idx::Split;
use curriculum_ssl::data::{ImageArray, Loader, LoaderConfig};
use curriculum_ssl::data_parallel::{
    replicas, DataParallelConfig, DataParallelError, MultiNode, Replica,
};
use curriculum_ssl::eval::{KnnMonitor, KnnResult, RawPixels};
use curriculum_ssl::hooks::{
    FrechetCurationHook, KnnHook, ObjectBoxesHook, SelfPacedAutoAugmentHook,
};
use curriculum_ssl::loss::{
    CurricularLossConfig, DclLossConfig, HclLossConfig, HuberNtXentLossConfig, NtXentLossConfig,
};
use curriculum_ssl::method::pgd::PgdConfig;
use curriculum_ssl::method::{init_method, MoCoConfig, PairLossConfig, SslMethod};
use curriculum_ssl::pipeline::{Augmenter, PipelineConfig};
use curriculum_ssl::train::{DataFingerprint, SelfSupervised, StartMode, TrainConfig, Trainer};
use curriculum_ssl_models::{
    AnyBackbone, AnyBackboneConfig, BlockKind, EfficientNetConfig, LeNetConfig, MobileNetV3Config,
    ResNetConfig, Stem, VggConfig, VitConfig, WideResNetConfig,
};
use serde::{Deserialize, Serialize};

use crate::backend;
use crate::run_files::{read_knn_results, KNN_AT_INIT, KNN_RAW_PIXELS};
use crate::usage::usage;

/// Autodiff backend the recipes train on.
pub type Train = burn::backend::Autodiff<backend::Inner>;
/// Its device.
pub type Device = <Train as burn::tensor::backend::BackendTypes>::Device;
