//! The DirectCLR loss (documented on `DirectClrLoss`).

use burn::prelude::*;

use super::{NtXentLoss, NtXentLossConfig};
use crate::base::error::{positive, ConfigError};

/// Configuration of [`DirectClrLoss`].
#[derive(Config, Debug)]
pub struct DirectClrLossConfig {
    /// `d₀`: how many leading coordinates of the representation the loss reads (lightly: 64;
    /// the paper: 360 of 2048).
    #[config(default = 64)]
    pub loss_dim: usize,
    /// Temperature `τ` of the NT-Xent on the truncated rows (lightly: 0.5).
    #[config(default = 0.5)]
    pub temperature: f64,
}

impl DirectClrLossConfig {
    /// Validates the hyperparameters and builds the loss.
    ///
    /// # Errors
    /// A zero `loss_dim` or a temperature that is not a finite number > 0, named.
    pub fn init(&self) -> Result<DirectClrLoss, ConfigError> {
        if self.loss_dim == 0 {
            return Err(ConfigError::new("loss_dim", "must be at least 1, got 0"));
        }
        positive("temperature", self.temperature)?;
        Ok(DirectClrLoss {
            loss_dim: self.loss_dim,
            nt_xent: NtXentLossConfig::new()
                .with_temperature(self.temperature)
                .init()?,
        })
    }
}

/// The DirectCLR loss. Build it with [`DirectClrLossConfig::init`].
///
/// The DirectCLR loss (Jing, Vincent, LeCun & Tian, ICLR 2022, "Understanding Dimensional
/// Collapse in Contrastive Self-supervised Learning", <https://arxiv.org/abs/2110.09348>, §6):
/// NT-Xent on the first `d₀` coordinates of the backbone's representation, with no projector in
/// between. The paper's analysis is that a projector's weights align with the representation's
/// singular vectors and only its low-rank part trains the backbone; DirectCLR keeps that part by
/// construction (a fixed sub-vector) and drops the projector. The rest of the representation is
/// trained only through the convolution it shares with those coordinates.
///
/// For anchor `i` of the `2B` truncated rows `r̃ = r[:, :d₀]`, L2-normalised, the loss is
/// NT-Xent's: `−log softmax_{j(i)}(s_ik / τ)` over `k ≠ i`, averaged over the anchors
/// ([`NtXentLoss`](super::NtXentLoss)). lightly's `DirectCLRLoss` is the same (`loss_dim` 64,
/// τ 0.5 by default; the paper: `d₀ = 360` of ResNet-50's 2048). See `docs/methods.md#directclr`.
#[derive(Debug, Clone)]
pub struct DirectClrLoss {
    loss_dim: usize,
    nt_xent: NtXentLoss,
}

impl DirectClrLoss {
    /// `d₀`, the number of leading coordinates the loss reads.
    pub fn loss_dim(&self) -> usize {
        self.loss_dim
    }

    /// The leading `d₀` columns of `r`, all of them when `r` has fewer (as lightly slices).
    ///
    /// # Shapes
    /// - `r`: `[N, D]` → `[N, min(D, d₀)]`
    pub fn truncate<B: Backend>(&self, r: Tensor<B, 2>) -> Tensor<B, 2> {
        let width = r.dims()[1].min(self.loss_dim);
        r.narrow(1, 0, width)
    }

    /// NT-Xent on the two views' representations truncated to their first `d₀` coordinates.
    ///
    /// # Shapes
    /// - `r1`, `r2`: `[B, D]`, row `i` of each being the two views of image `i`; output `[1]`
    pub fn forward<B: Backend>(&self, r1: Tensor<B, 2>, r2: Tensor<B, 2>) -> Tensor<B, 1> {
        self.nt_xent.forward(self.truncate(r1), self.truncate(r2))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    type B = NdArray<f64>;

    /// The coordinates past `d₀` change nothing: the loss of rows with arbitrary tails equals
    /// NT-Xent on their heads, whose value is the worked NT-Xent example (two pairs of unit
    /// vectors at 0°/50° and 90°/125°, τ 0.5: 0.596607, docs/methods.md#curricular-weighting).
    #[test]
    fn reads_only_the_first_loss_dim_coordinates() {
        let device = Default::default();
        let unit = |deg: f64, tail: [f64; 2]| {
            let a = deg.to_radians();
            [a.cos(), a.sin(), tail[0], tail[1]]
        };
        let r1 =
            Tensor::<B, 2>::from_data([unit(0.0, [3.0, -1.0]), unit(90.0, [0.5, 7.0])], &device);
        let r2 =
            Tensor::<B, 2>::from_data([unit(50.0, [-2.0, 4.0]), unit(125.0, [9.0, 0.1])], &device);
        let loss = DirectClrLossConfig::new()
            .with_loss_dim(2)
            .init()
            .unwrap()
            .forward(r1, r2);
        assert!((loss.into_scalar() - 0.596607).abs() < 1e-6);
    }

    #[test]
    fn rejects_a_zero_loss_dim_and_a_non_positive_temperature() {
        let err = DirectClrLossConfig::new()
            .with_loss_dim(0)
            .init()
            .unwrap_err();
        assert_eq!(err.field, "loss_dim");
        let err = DirectClrLossConfig::new()
            .with_temperature(-1.0)
            .init()
            .unwrap_err();
        assert_eq!(err.field, "temperature");
    }
}
