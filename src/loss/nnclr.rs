//! The NNCLR loss (documented on `NnClrLoss`).

use burn::prelude::*;

use super::shape_checks::assert_same_shape;
use super::similarity::{l2_normalize, stop_gradient};
use crate::base::error::{positive, ConfigError};

/// Configuration of [`NnClrLoss`].
#[derive(Config, Debug)]
pub struct NnClrLossConfig {
    /// Temperature `τ` (the paper's 0.1).
    #[config(default = 0.1)]
    pub temperature: f64,
}

impl NnClrLossConfig {
    /// Validates the temperature and builds the loss.
    ///
    /// # Errors
    /// A temperature that is not positive.
    pub fn init(&self) -> Result<NnClrLoss, ConfigError> {
        positive("temperature", self.temperature)?;
        Ok(NnClrLoss {
            temperature: self.temperature,
        })
    }
}

/// The NNCLR loss. Build it with [`NnClrLossConfig::init`].
///
/// The NNCLR loss (Dwibedi, Aytar, Tompson, Sermanet & Zisserman, "With a Little Help from My
/// Friends: Nearest-Neighbor Contrastive Learning of Visual Representations", ICCV 2021,
/// <https://arxiv.org/abs/2104.14548>, eq. 2; see `docs/methods.md#nnclr-loss`): the nearest
/// neighbour of each image's projection in a support set is the positive of the other view's
/// prediction, the other images' predictions its negatives.
///
/// With `nn` the neighbours (`[N, D]`, no gradient) and `p` the other view's predictions
/// (`[N, D]`), both L2-normalised:
///
/// ```text
/// L = −(1/N) Σ_i log [ exp(⟨nn_i, p_i⟩/τ) / Σ_k exp(⟨nn_i, p_k⟩/τ) ]
/// ```
///
/// `τ = 0.1` (the paper's). The method averages the two directions (`L(nn1, p2) + L(nn2, p1)`)/2,
/// as the paper's symmetrised loss and solo-learn's `nnclr_loss_func`. (lightly trains NNCLR with
/// NT-Xent between `nn` and `p`, whose denominator also holds the other `nn_k`; the paper's
/// denominator holds only the predictions.)
#[derive(Debug, Clone)]
pub struct NnClrLoss {
    temperature: f64,
}

impl NnClrLoss {
    /// The loss of the neighbours `nn` (no gradient flows into them) against the predictions `p`.
    ///
    /// # Shapes
    /// - `nn`, `p`: `[N, D]` → `[1]`
    ///
    /// # Panics
    /// If the shapes differ.
    pub fn forward<B: Backend>(&self, nn: Tensor<B, 2>, p: Tensor<B, 2>) -> Tensor<B, 1> {
        self.contrast(stop_gradient(nn), p)
    }

    /// The same loss with the gradient flowing into both arguments: row `i` of `a` must pick
    /// out row `i` of `b` among `b`'s rows (solo-learn's `nnclr_loss_func`, which stops no
    /// gradient itself; All4One's centroid term contrasts two transformer outputs so, both
    /// trained).
    ///
    /// # Shapes
    /// - `a`, `b`: `[N, D]` → `[1]`
    ///
    /// # Panics
    /// If the shapes differ.
    pub fn contrast<B: Backend>(&self, a: Tensor<B, 2>, b: Tensor<B, 2>) -> Tensor<B, 1> {
        assert_same_shape("NnClrLoss", ("nn", a.dims()), ("p", b.dims()));
        let [n, _] = a.dims();
        let nn = l2_normalize(a);
        let p = l2_normalize(b);
        let logits = nn.matmul(p.transpose()).mul_scalar(1.0 / self.temperature);
        let log_p = curriculum_ssl_models::kernels::log_softmax(logits, 1);
        let eye = Tensor::<B, 2>::eye(n, &log_p.device());
        (log_p * eye).sum().neg().mul_scalar(1.0 / (n as f64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_temperature_that_is_not_positive_is_named() {
        let e = NnClrLossConfig::new()
            .with_temperature(0.0)
            .init()
            .unwrap_err();
        assert_eq!(e.field, "temperature");
    }
}
