//! The KoLeo regulariser (documented on `KoLeoLoss`).

use burn::prelude::*;
use burn::tensor::Bool;

use crate::base::error::{positive, ConfigError};

/// Configuration of [`KoLeoLoss`].
#[derive(Config, Debug)]
pub struct KoLeoLossConfig {
    /// ε of the normalisation, of the difference and of the logarithm (1e-8).
    #[config(default = 1e-8)]
    pub eps: f64,
}

impl KoLeoLossConfig {
    /// Validates ε and builds the loss.
    ///
    /// # Errors
    /// An ε that is not positive.
    pub fn init(&self) -> Result<KoLeoLoss, ConfigError> {
        positive("eps", self.eps)?;
        Ok(KoLeoLoss { eps: self.eps })
    }
}

/// The KoLeo regulariser. Build it with [`KoLeoLossConfig::init`].
///
/// The KoLeo regulariser (Sablayrolles et al., "Spreading vectors for similarity search", ICLR
/// 2019, <https://arxiv.org/abs/1806.03198>), as DINOv2 adds it to the \[CLS\] outputs (Oquab et
/// al. 2023, <https://arxiv.org/abs/2304.07193>; see `docs/methods.md#koleo`): the
/// Kozachenko–Leonenko entropy estimate of the batch's L2-normalised features, which grows when
/// each feature's nearest neighbour in the batch moves away, so the features spread uniformly.
///
/// With `x̂_i = x_i / max(‖x_i‖, ε)` and `j(i)` the row of largest cosine with `x̂_i` (itself
/// excluded; no gradient through the choice):
///
/// ```text
/// L = −(1 / N) Σ_i log(‖x̂_i − x̂_{j(i)} + ε‖ + ε)
/// ```
///
/// with ε = 1e-8 added to the difference as PyTorch's `pairwise_distance` does (lightly's
/// `KoLeoLoss` and the DINOv2 authors'), so two equal rows give a large but finite loss.
#[derive(Debug, Clone)]
pub struct KoLeoLoss {
    eps: f64,
}

impl KoLeoLoss {
    /// The regulariser of a batch of features (the mean over its rows).
    ///
    /// # Shapes
    /// - `x`: `[N, D]`, `N ≥ 2` → `[1]`
    ///
    /// # Panics
    /// With fewer than two rows (no neighbour).
    pub fn forward<B: Backend>(&self, x: Tensor<B, 2>) -> Tensor<B, 1> {
        let [n, _] = x.dims();
        assert!(n >= 2, "KoLeoLoss: {n} rows have no nearest neighbour");
        let device = x.device();
        let unit = x.clone() / super::similarity::safe_norm(x, 1, self.eps);
        let diagonal = Tensor::<B, 2, Bool>::from_data(
            TensorData::new(
                (0..n * n).map(|e| e / n == e % n).collect::<Vec<bool>>(),
                [n, n],
            ),
            &device,
        );
        let cosine = unit
            .clone()
            .matmul(unit.clone().transpose())
            .detach()
            .mask_fill(diagonal, -2.0);
        let nearest = cosine.argmax(1).reshape([n]);
        let difference = unit.clone() - unit.select(0, nearest) + self.eps;
        let distance = difference.powi_scalar(2).sum_dim(1).sqrt();
        (distance + self.eps).log().mean().neg()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    /// Three unit vectors at 0°, 90° and 100°: the nearest neighbours are 2 → 3, 3 → 2 and
    /// 1 → 2, at chord lengths 2·sin(5°), 2·sin(5°) and 2·sin(45°) (ε too small to matter).
    #[test]
    fn the_nearest_neighbours_chords_by_hand() {
        let angles = [0.0f64, 90.0, 100.0].map(f64::to_radians);
        let values: Vec<f64> = angles
            .iter()
            .flat_map(|a| [3.0 * a.cos(), 3.0 * a.sin()])
            .collect();
        let x = Tensor::<NdArray<f64>, 2>::from_data(
            TensorData::new(values, [3, 2]),
            &Default::default(),
        );
        let value: f64 = KoLeoLossConfig::new()
            .init()
            .unwrap()
            .forward(x)
            .into_scalar();
        let chord = |deg: f64| 2.0 * (deg.to_radians() / 2.0).sin();
        let expected = -(2.0 * chord(10.0).ln() + chord(90.0).ln()) / 3.0;
        assert!((value - expected).abs() < 1e-7, "{value} vs {expected}");
    }

    #[test]
    fn eps_must_be_positive() {
        let e = KoLeoLossConfig::new().with_eps(0.0).init().unwrap_err();
        assert_eq!(e.field, "eps");
    }
}
