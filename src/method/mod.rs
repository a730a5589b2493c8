//! Building blocks of the SSL methods (frameworks) that hold training state: the MoCo key
//! queue and the EMA update of key / target networks.

pub mod ema;
pub mod queue;

pub use queue::{KeyQueue, KeyQueueConfig};
