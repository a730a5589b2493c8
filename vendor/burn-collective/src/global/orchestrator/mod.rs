pub(crate) mod base;
pub(crate) mod state;

pub use base::{serve_global_orchestrator, start_global_orchestrator};
