//! The ReSSL loss (documented on `ReSslLoss`).

use burn::prelude::*;
use curriculum_ssl_models::kernels::{log_softmax, softmax};

use super::shape_checks::assert_same_shape;
use super::similarity::{l2_normalize, stop_gradient};
use crate::base::error::{positive, ConfigError};

/// Configuration of [`ReSslLoss`].
#[derive(Config, Debug)]
pub struct ReSslLossConfig {
    /// Temperature `τ_q` of the query's relation (the paper's 0.1).
    #[config(default = 0.1)]
    pub temperature_q: f64,
    /// Temperature `τ_k` of the key's relation, the target (the paper's 0.04).
    #[config(default = 0.04)]
    pub temperature_k: f64,
}

impl ReSslLossConfig {
    /// Validates the temperatures and builds the loss.
    ///
    /// # Errors
    /// A temperature that is not positive, named.
    pub fn init(&self) -> Result<ReSslLoss, ConfigError> {
        positive("temperature_q", self.temperature_q)?;
        positive("temperature_k", self.temperature_k)?;
        Ok(ReSslLoss {
            temperature_q: self.temperature_q,
            temperature_k: self.temperature_k,
        })
    }
}

/// The ReSSL loss. Build it with [`ReSslLossConfig::init`].
///
/// The ReSSL loss (Zheng, You, Wang, Qian, Zhang, Wang & Xu, "ReSSL: Relational Self-Supervised
/// Learning with Weak Augmentation", NeurIPS 2021, <https://arxiv.org/abs/2107.09282>, eq. 3; see
/// `docs/methods.md#ressl-loss`): the relation of a weakly augmented key to a queue of earlier
/// keys, sharpened, is the target of the relation of the strongly augmented query to the same
/// queue.
///
/// With `q`, `k` L2-normalised (`[N, D]`, `k` without gradient) and the queue `Q` (`[K, D]`, unit
/// rows, no gradient):
///
/// ```text
/// L = −(1/N) Σ_n Σ_j softmax(k_n Qᵀ / τ_k)_j · log softmax(q_n Qᵀ / τ_q)_j
/// ```
///
/// `τ_q = 0.1`, `τ_k = 0.04` (the paper's and solo-learn's `ressl_loss_func`; `τ_k < τ_q`
/// sharpens the target). The queue holds keys only: no positive logit, no in-batch negatives.
/// lightly has no ReSSL; the reference is solo-learn's function
/// (`tests/pytorch/method_zoo_losses.py`).
#[derive(Debug, Clone)]
pub struct ReSslLoss {
    temperature_q: f64,
    temperature_k: f64,
}

impl ReSslLoss {
    /// The loss of the queries `q` against the keys `k` (no gradient flows into them) over the
    /// queue `queue` (unit rows, no gradient).
    ///
    /// # Shapes
    /// - `q`, `k`: `[N, D]`; `queue`: `[K, D]` → `[1]`
    ///
    /// # Panics
    /// If `q` and `k` differ in shape, or the queue's width is not theirs.
    pub fn forward<B: Backend>(
        &self,
        q: Tensor<B, 2>,
        k: Tensor<B, 2>,
        queue: Tensor<B, 2>,
    ) -> Tensor<B, 1> {
        assert_same_shape("ReSslLoss", ("q", q.dims()), ("k", k.dims()));
        let [n, d] = q.dims();
        assert_eq!(
            queue.dims()[1],
            d,
            "ReSslLoss: the queue's rows have {} elements, the queries {d}",
            queue.dims()[1]
        );
        let queue = stop_gradient(queue).transpose();
        let target = softmax(
            l2_normalize(stop_gradient(k))
                .matmul(queue.clone())
                .mul_scalar(1.0 / self.temperature_k),
            1,
        );
        let log_p = log_softmax(
            l2_normalize(q)
                .matmul(queue)
                .mul_scalar(1.0 / self.temperature_q),
            1,
        );
        (target * log_p).sum().neg().mul_scalar(1.0 / n as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    type B = NdArray<f64>;

    #[test]
    fn a_temperature_that_is_not_positive_is_named() {
        for (config, field) in [
            (
                ReSslLossConfig::new().with_temperature_q(0.0),
                "temperature_q",
            ),
            (
                ReSslLossConfig::new().with_temperature_k(-1.0),
                "temperature_k",
            ),
        ] {
            assert_eq!(config.init().unwrap_err().field, field);
        }
    }

    /// One query, one key and a queue of two unit rows, by hand: `q = k = (1, 0)`, `Q = {(1, 0),
    /// (0, 1)}`: the key's relation is `softmax(1/τ_k, 0)`, the query's `log softmax(1/τ_q, 0)`;
    /// at `τ_q = 0.5`, `τ_k = 0.25`: `w = (e⁴, 1)/(e⁴ + 1)`, `L = −w·(2 − log(e² + 1), −log(e² + 1))`.
    #[test]
    fn one_query_by_hand() {
        let d = Default::default();
        let row = |v: [f64; 2]| Tensor::<B, 2>::from_data(TensorData::new(v.to_vec(), [1, 2]), &d);
        let queue =
            Tensor::<B, 2>::from_data(TensorData::new(vec![1.0, 0.0, 0.0, 1.0], [2, 2]), &d);
        let loss = ReSslLossConfig::new()
            .with_temperature_q(0.5)
            .with_temperature_k(0.25)
            .init()
            .unwrap()
            .forward(row([3.0, 0.0]), row([1.0, 0.0]), queue);
        let e4 = 4f64.exp();
        let (w0, w1) = (e4 / (e4 + 1.0), 1.0 / (e4 + 1.0));
        let z = (2f64.exp() + 1.0).ln();
        let expected = -(w0 * (2.0 - z) + w1 * (-z));
        let got: f64 = loss.into_scalar();
        assert!((got - expected).abs() < 1e-14, "{got} vs {expected}");
    }
}
