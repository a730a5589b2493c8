pub(crate) mod node;
pub(crate) mod shared;
// curriculum-ssl patch: the error inside `CollectiveError::Global`, nameable by callers.
pub use shared::GlobalCollectiveError;

#[cfg(feature = "orchestrator")]
pub mod orchestrator;
#[cfg(feature = "orchestrator")]
pub use orchestrator::*;

mod base;
pub use base::*;
