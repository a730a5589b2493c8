use super::{NodeId, NodeRef};
use crate::{checkpoint::base::Checkpointer, grads::Gradients, graph::Parent};
use alloc::boxed::Box;

#[cfg(feature = "distributed")]
use burn_backend::distributed::DistributedParams;

/// Backward step for reverse mode autodiff.
pub trait Step: Send + core::fmt::Debug {
    /// Executes the step and consumes it.
    fn step(self: Box<Self>, grads: &mut Gradients, checkpointer: &mut Checkpointer);
    /// Depth of the operation relative to the first node added to a graph.
    fn depth(&self) -> usize;
    /// The node associated to the step.
    fn node(&self) -> NodeId;
    /// The parents of the node associated to the step.
    fn parents(&self) -> &[Parent];
    /// The shared reference to the node associated to the step, if the step holds one.
    ///
    /// curriculum-ssl patch: the cleanup compares its strong count with the references the
    /// graph's own steps hold, to see the node held by an operation under construction
    /// (`AutodiffServer::held_outside`). A step that returns `None` is taken as held.
    fn node_ref(&self) -> Option<&NodeRef> {
        None
    }

    #[cfg(feature = "distributed")]
    /// Returns the [`DistributedParams`] of the node's tensor associated to the step.
    fn distributed_params(&self) -> Option<DistributedParams>;
}

pub type StepBoxed = Box<dyn Step>;
