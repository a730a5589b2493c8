//! Building blocks of the SSL methods (frameworks) that hold training state.

pub mod queue;

pub use queue::{KeyQueue, KeyQueueConfig};
