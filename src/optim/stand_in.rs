//! One-entry tensors that stand in for parameters taken out of a module, so that the module
//! holds no handle of them while an optimiser steps them (burn's fusion then lets a step's
//! operations write its operands in place, and records no release of its own for each).
//!
//! Used by [`SgdOptimizer::step`](super::SgdOptimizer) (the parameters it steps as one list) and
//! by [`SslMethod::take_online`](crate::method::SslMethod::take_online) (the online networks
//! handed to the optimiser). Hand-written: burn's module mappers have no notion of an empty
//! parameter, and `Param::from_mapped_value` needs some tensor of the parameter's rank.

use burn::prelude::*;
use burn::tensor::ops::FloatTensor;
use burn::tensor::TensorPrimitive;

/// Makes the stand-ins: one `[1; D]` tensor for all the parameters of a rank and device,
/// made on that device when first asked for and shared (by handle) from then on. A loop that
/// keeps one from step to step makes each once: on a fusion backend (wgpu, CUDA) every tensor
/// made is an operation of the stream, and every one released another.
pub struct StandIns<B: Backend> {
    made: Vec<(usize, B::Device, FloatTensor<B>)>,
}

impl<B: Backend> Default for StandIns<B> {
    fn default() -> Self {
        Self { made: Vec::new() }
    }
}

impl<B: Backend> StandIns<B> {
    /// The stand-in for a parameter of rank `D` on `device`.
    ///
    /// # Shapes
    /// - output: `[1; D]` (its values are never read)
    pub(crate) fn get<const D: usize>(&mut self, device: &B::Device) -> Tensor<B, D> {
        let made = match self
            .made
            .iter()
            .find(|(rank, on, _)| *rank == D && on == device)
        {
            Some((_, _, made)) => made.clone(),
            None => {
                let made = Tensor::<B, D>::empty([1; D], device)
                    .into_primitive()
                    .tensor();
                self.made.push((D, device.clone(), made.clone()));
                made
            }
        };
        Tensor::from_primitive(TensorPrimitive::Float(made))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    /// One tensor a rank and device: the second ask of a rank is answered from the first, another
    /// rank gets its own, each of shape `[1; D]`.
    #[test]
    fn one_tensor_a_rank_and_device() {
        let device = Default::default();
        let mut stand_ins = StandIns::<NdArray>::default();
        let a: Tensor<NdArray, 2> = stand_ins.get(&device);
        let b: Tensor<NdArray, 2> = stand_ins.get(&device);
        let c: Tensor<NdArray, 4> = stand_ins.get(&device);
        assert_eq!(a.dims(), [1, 1]);
        assert_eq!(c.dims(), [1, 1, 1, 1]);
        assert_eq!(b.dims(), [1, 1]);
        assert_eq!(
            stand_ins.made.len(),
            2,
            "one made for rank 2, one for rank 4"
        );
    }
}
