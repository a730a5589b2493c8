//! A state that a step computes and the optimiser step commits (documented on `Running`).

use burn::prelude::*;

use crate::base::error::ConfigError;

/// A running tensor and the value the step being computed will leave in it.
///
/// A state that a method's step computes and the optimiser step commits: DINO's centre, TiCo's
/// running covariance. The forward [proposes](Running::propose) the next value and
/// [`SslMethod::after_step`](super::SslMethod::after_step) [commits](Running::commit) it, so an
/// attempt that is redrawn (batch curation) or abandoned leaves the state as it was, and a
/// checkpoint's value is [taken back](Running::restore) only with this method's shape.
#[derive(Debug, Clone)]
pub(crate) struct Running<B: Backend, const D: usize> {
    value: Tensor<B, D>,
    next: Option<Tensor<B, D>>,
}

impl<B: Backend, const D: usize> Running<B, D> {
    /// Starts at `value` (without gradient).
    pub fn new(value: Tensor<B, D>) -> Self {
        Self {
            value: value.set_require_grad(false),
            next: None,
        }
    }

    /// The current value.
    pub fn value(&self) -> Tensor<B, D> {
        self.value.clone()
    }

    /// The value after the step being computed (detached; replaces an earlier proposal).
    pub fn propose(&mut self, next: Tensor<B, D>) {
        self.next = Some(next.detach().set_require_grad(false));
    }

    /// After the optimiser step: the proposed value, if any, becomes the current one.
    pub fn commit(&mut self) {
        if let Some(next) = self.next.take() {
            self.value = next;
        }
    }

    /// Takes back a checkpoint's value and drops any proposal.
    ///
    /// # Errors
    /// If `saved` has another shape than the current value; the error names `field` (the
    /// setting that fixes the shape) and says whose `what` it is (e.g. "DINO's centre").
    pub fn restore(
        &mut self,
        saved: Tensor<B, D>,
        field: &'static str,
        what: &str,
    ) -> Result<(), ConfigError> {
        if saved.dims() != self.value.dims() {
            return Err(ConfigError::new(
                field,
                format!(
                    "the checkpoint's {what} has shape {:?}, this one {:?}",
                    saved.dims(),
                    self.value.dims()
                ),
            ));
        }
        self.value = saved.set_require_grad(false);
        self.next = None;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    type B = NdArray<f64>;

    fn tensor(values: [f64; 2]) -> Tensor<B, 2> {
        Tensor::from_data(
            TensorData::new(values.to_vec(), [1, 2]),
            &Default::default(),
        )
    }

    #[test]
    fn a_proposal_counts_only_once_committed() {
        let mut r = Running::new(tensor([0.0, 0.0]));
        r.propose(tensor([1.0, 2.0]));
        assert_eq!(r.value().into_data().to_vec::<f64>().unwrap(), [0.0, 0.0]);
        r.propose(tensor([3.0, 4.0]));
        r.commit();
        assert_eq!(r.value().into_data().to_vec::<f64>().unwrap(), [3.0, 4.0]);
        r.commit();
        assert_eq!(r.value().into_data().to_vec::<f64>().unwrap(), [3.0, 4.0]);
    }

    #[test]
    fn a_restored_value_drops_the_proposal_and_another_shape_is_refused() {
        let mut r = Running::new(tensor([0.0, 0.0]));
        r.propose(tensor([1.0, 2.0]));
        r.restore(tensor([5.0, 6.0]), "output_dim", "DINO's centre")
            .unwrap();
        r.commit();
        assert_eq!(r.value().into_data().to_vec::<f64>().unwrap(), [5.0, 6.0]);
        let wide = Tensor::<B, 2>::zeros([1, 3], &Default::default());
        let e = r.restore(wide, "output_dim", "DINO's centre").unwrap_err();
        assert_eq!(e.field, "output_dim");
        assert!(
            e.reason
                .contains("DINO's centre has shape [1, 3], this one [1, 2]"),
            "{e}"
        );
    }
}
