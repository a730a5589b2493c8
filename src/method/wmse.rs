//! W-MSE (documented on `Wmse`).

use burn::prelude::*;
use curriculum_ssl_models::Backbone;

use super::projected_pair::{PairObjective, ProjectedPair};
use super::ssl_method::LossAndStats;
use crate::base::error::ConfigError;
use crate::base::Progress;
use crate::head::MlpHeadConfig;
use crate::loss::{WmseLoss, WmseLossConfig};

/// Configuration of [`Wmse`].
#[derive(Config, Debug)]
pub struct WmseConfig {
    /// Width of the projector's hidden layer (solo-learn's 1024).
    #[config(default = 1024)]
    pub hidden_dim: usize,
    /// Projection width `D`, the whitened features (solo-learn's 64).
    #[config(default = 64)]
    pub output_dim: usize,
    /// The loss (sub-batches of 256 rows, one order per step, no shrinkage: lightly's
    /// `WMSELoss` defaults).
    #[config(default = "WmseLossConfig::new()")]
    pub loss: WmseLossConfig,
}

/// W-MSE: a [`ProjectedPair`] with the W-MSE loss.
///
/// W-MSE (Ermolov, Siarohin, Sangineto & Sebe, ICML 2021, <https://arxiv.org/abs/2007.06346>):
/// backbone + a two-layer projector (`features → 1024 → 64`, BatchNorm and ReLU after the first,
/// solo-learn's) and the loss of [`WmseLoss`](crate::loss::WmseLoss): each view's projections
/// whitened in sub-batches of `w_size` images by a Cholesky factor of their covariance, then the
/// cosine distance between an image's whitened views. No negatives, no predictor, no momentum
/// network.
///
/// Whitening needs more images per sub-batch than features (lightly refuses `w_size < 2·D`, as
/// here). The math, the defaults and what was chosen where lightly and solo-learn differ are in
/// `docs/methods.md#w-mse`.
pub type Wmse<B, M> = ProjectedPair<B, M, WmseLoss>;

impl WmseConfig {
    /// Builds W-MSE around the backbone `backbone` makes (called once).
    ///
    /// # Errors
    /// A zero width, bad loss settings, or sub-batches of fewer than `2 · output_dim` rows
    /// (lightly's limit: whitening fewer images than twice the features is unstable), named.
    pub fn init<B: Backend, M: Backbone<B>>(
        &self,
        backbone: impl Fn(&B::Device) -> M,
        device: &B::Device,
    ) -> Result<Wmse<B, M>, ConfigError> {
        if self.loss.w_size < 2 * self.output_dim {
            return Err(ConfigError::new(
                "loss.w_size",
                format!(
                    "sub-batches of {} rows whiten {} features unstably: use w_size of at least \
                     2 × output_dim = {} (and batches at least as large), or a smaller output_dim",
                    self.loss.w_size,
                    self.output_dim,
                    2 * self.output_dim
                ),
            ));
        }
        let projector = |width| MlpHeadConfig::new(width, self.hidden_dim, self.output_dim);
        ProjectedPair::build(backbone, projector, self.loss.init()?, device)
    }
}

impl<B: Backend> PairObjective<B> for WmseLoss {
    fn loss(&self, z1: Tensor<B, 2>, z2: Tensor<B, 2>, progress: Progress) -> LossAndStats<B> {
        (self.forward(z1, z2, progress.step), Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::testing::{host, images, progress, Ad, TinyBackbone as Tiny};
    use crate::method::SslMethod;

    fn wmse(w_size: usize, output_dim: usize) -> Result<Wmse<Ad, Tiny<Ad>>, ConfigError> {
        crate::method::init_method::<Ad, _, ConfigError>(&Default::default(), 4, |d| {
            WmseConfig::new()
                .with_hidden_dim(8)
                .with_output_dim(output_dim)
                .with_loss(WmseLossConfig::new().with_w_size(w_size))
                .init(|d| Tiny::new(16, 6, d), d)
        })
    }

    /// The step's loss is the W-MSE loss of the two views' projections with the orders of the
    /// step (drawn from the loss's seed and the step), so two steps of the same batch differ
    /// where the sub-batches do.
    #[test]
    fn the_step_whitens_the_projections_with_the_steps_orders() {
        let mut method = wmse(6, 3).unwrap();
        let (v1, v2) = (images::<Ad>(12, 0.0), images::<Ad>(12, 1.0));
        let (z1, z2) = (
            method.online().forward(v1.clone()),
            method.online().forward(v2.clone()),
        );
        let loss = method.objective().clone();
        let orders = loss.orders(12, 7);
        let expected = host(loss.forward_with_orders(z1.clone(), z2.clone(), &orders))[0];
        let out = method.forward(v1.clone(), v2.clone(), progress(7, 10, 0, 1));
        assert!((host(out.loss)[0] - expected).abs() < 1e-12);
        let other = host(loss.forward_with_orders(z1, z2, &loss.orders(12, 8)))[0];
        let out = method.forward(v1, v2, progress(8, 10, 0, 1));
        assert!((host(out.loss)[0] - other).abs() < 1e-12);
        assert!(
            (other - expected).abs() > 1e-6,
            "the orders changed nothing"
        );
    }

    /// Sub-batches smaller than twice the projection width are refused by name.
    #[test]
    fn small_sub_batches_are_refused() {
        let error = wmse(5, 3).unwrap_err();
        assert!(error.to_string().contains("w_size"), "{error}");
        assert!(wmse(6, 3).is_ok());
    }
}
