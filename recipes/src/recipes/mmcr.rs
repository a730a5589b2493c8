//! `mmcr`: MMCR (Yerxa et al., NeurIPS 2023, <https://arxiv.org/abs/2303.03307>; see
//! docs/methods.md#mmcr) with lightly's MMCR example's settings: projector
//! `[512, 512] → 128` without biases, momentum network 0.996 → 1 along a cosine, `λ = 5e-3`,
//! plain SGD at lr 0.06 (no momentum, no weight decay), and `k = 8` views of every image, each
//! BYOL's first view without blur ([`views`]): the two global views and six more of the same kind
//! (`--local-crops` sets how many; each view costs a pass through both networks).
//!
//! ```text
//! for each batch x:
//!     Z_o = [g(f(aug_i(x)))]_i,  Z_m = [g_m(f_m(aug_i(x)))]_i      (i < k; momentum: no gradient)
//!     C = mean over the 2k views;  loss = −‖C‖_* + λ · mean_b ‖Z_b‖_*
//!     SGD step on f, g;  f_m, g_m ← EMA(f, g)
//! ```

use super::RecipeEntry;
use anyhow::Result;
use curriculum_ssl::method::MmcrConfig;
use curriculum_ssl::optim::SgdConfig;
use curriculum_ssl::pipeline::{LocalCrops, PipelineConfig};

use super::common::{self, Defaults};

/// Views besides the two global ones (lightly's example: `k = 8` in all).
pub const EXTRA_VIEWS: usize = 6;

/// lightly's `MMCRTransform(k=8, gaussian_blur=0.0)`: every view is BYOL's first view (random
/// resized crop (0.08, 1), flip, colour jitter (0.4, 0.4, 0.2, 0.1) at p 0.8, grayscale at p 0.2)
/// without its blur, at full size; the views after the first two are the pipeline's local crops.
pub fn views(side: usize, channels: usize) -> PipelineConfig {
    let mut p = PipelineConfig::byol(side, channels);
    p.view1.blur = None;
    p.view2 = p.view1.clone();
    p.local_crops = Some(LocalCrops {
        count: EXTRA_VIEWS,
        view: p.view1.clone(),
    });
    p
}

fn defaults() -> Defaults {
    Defaults::new("mmcr", 20, 128, 0.06, views)
}

/// Runs `mmcr`.
pub fn run(args: &[String]) -> Result<()> {
    let recipe = common::prepare(args, defaults())?;
    let config = recipe.section("method", MmcrConfig::new())?;
    let optimizer = recipe.section(
        "optimizer",
        SgdConfig::new().with_momentum(0.0).with_weight_decay(0.0),
    )?;
    recipe.train_method(&config, &optimizer, |b, d| config.init(b, d))
}

/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[RecipeEntry {
    name: "mmcr",
    summary: "MMCR (Yerxa et al. 2023): nuclear norms of 8 views per image, momentum network, SGD",
    run,
}];

#[cfg(test)]
mod tests {
    use super::*;

    /// Eight views of one kind: BYOL's first view without blur, at full size.
    #[test]
    fn every_view_is_byols_first_without_blur() {
        let p = views(28, 1);
        let locals = p.local_crops.as_ref().unwrap();
        assert_eq!(locals.count, 6);
        for v in [&p.view1, &p.view2, &locals.view] {
            assert!(v.blur.is_none());
            assert_eq!(v.crop.as_ref().unwrap().size, (28, 28));
            assert_eq!(v.crop.as_ref().unwrap().scale, (0.08, 1.0));
            assert_eq!(v.jitter.as_ref().unwrap().saturation, 0.2);
            assert_eq!(v.solarize.as_ref().unwrap().p, 0.0);
        }
    }
}
