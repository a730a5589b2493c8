//! `ressl`: ReSSL (Zheng et al., NeurIPS 2021, <https://arxiv.org/abs/2107.09282>; see
//! docs/methods.md#ressl) with solo-learn's CIFAR settings (`scripts/pretrain/cifar/ressl.yaml`):
//! projector `[4096, 256]` without BatchNorm, momentum encoder 0.99 → 1 along a cosine,
//! `τ_q = 0.1`, `τ_k = 0.04`, SGD at lr 0.05 · B/256 with weight decay 1e-4, and its augmentation
//! ([`preset`]): a strong first view and a weak second one. The queue holds [`QUEUE`] keys:
//! solo-learn's 65,536 is more than Fashion-MNIST's 60,000 images; 16,384 is a quarter of them,
//! as the `nnclr` recipe's support set.
//!
//! ```text
//! for each batch x:
//!     q = normalise(g(f(strong(x))));  k = normalise(g_m(f_m(weak(x))))   (no gradient)
//!     loss = −Σ_j softmax(k·Qᵀ/τ_k)_j · log softmax(q·Qᵀ/τ_q)_j            (mean over images)
//!     SGD step on f, g;  f_m, g_m ← EMA(f, g);  Q ← Q + k  (FIFO)
//! ```

use super::RecipeEntry;
use anyhow::Result;
use curriculum_ssl::method::ReSslConfig;
use curriculum_ssl::optim::SgdConfig;
use curriculum_ssl::pipeline::{PipelineConfig, ViewConfig};

use super::common::{self, Defaults};

/// Keys in the recipe's queue.
pub const QUEUE: usize = 16_384;

/// ReSSL's augmentation (solo-learn's `ressl.yaml` preset): the first, strong view is BYOL's
/// first view with blur at p 0.5 (random resized crop (0.08, 1), flip, colour jitter (0.4, 0.4,
/// 0.2, 0.1) at p 0.8, grayscale at p 0.2); the second, weak view is the crop and the flip only.
pub fn preset(side: usize, channels: usize) -> PipelineConfig {
    let mut p = PipelineConfig::byol(side, channels);
    if let Some(blur) = &mut p.view1.blur {
        blur.p = 0.5;
    }
    p.view1.solarize = None;
    p.view2 = ViewConfig {
        crop: p.view1.crop,
        hflip: p.view1.hflip,
        jitter: None,
        grayscale: None,
        blur: None,
        solarize: None,
        normalize: p.view1.normalize.clone(),
    };
    p
}

/// solo-learn's learning rate, 0.05 at batch 256, scaled linearly.
fn lr(batch: usize) -> f64 {
    0.05 * batch as f64 / 256.0
}

fn defaults() -> Defaults {
    Defaults::new("ressl", 20, 128, lr(128), preset).lr_rule(lr)
}

/// The recipe's method.
pub fn config() -> ReSslConfig {
    ReSslConfig::new().with_queue_size(QUEUE)
}

/// Runs `ressl`.
pub fn run(args: &[String]) -> Result<()> {
    let recipe = common::prepare(args, defaults())?;
    let config = recipe.section("method", config())?;
    let optimizer = recipe.section("optimizer", SgdConfig::new().with_weight_decay(1e-4))?;
    let batch = recipe.settings.schedule.batch_size;
    recipe.train_method(&config, &optimizer, |b, d| config.init(b, batch, d))
}

/// The recipes of this module, as `recipe list` prints them.
pub const RECIPES: &[RecipeEntry] = &[RecipeEntry {
    name: "ressl",
    summary: "ReSSL (Zheng et al. 2021): a strong view's relation to a queue of 16,384 learns a weak view's, momentum encoder",
    run,
}];

#[cfg(test)]
mod tests {
    use super::*;

    /// The weak view only crops and flips; the strong view is BYOL's first with blur at p 0.5
    /// and no solarisation.
    #[test]
    fn the_second_view_is_weak() {
        let p = preset(28, 1);
        let (strong, weak) = (&p.view1, &p.view2);
        assert_eq!(weak.crop.as_ref().unwrap().scale, (0.08, 1.0));
        assert_eq!(weak.hflip.as_ref().unwrap().p, 0.5);
        assert!(weak.jitter.is_none() && weak.grayscale.is_none());
        assert!(weak.blur.is_none() && weak.solarize.is_none());
        assert!(weak.normalize.is_some());
        assert_eq!(strong.blur.as_ref().unwrap().p, 0.5);
        assert_eq!(strong.jitter.as_ref().unwrap().saturation, 0.2);
        assert_eq!(strong.grayscale.as_ref().unwrap().p, 0.2);
        assert!(strong.solarize.is_none());
        assert_eq!(lr(256), 0.05);
    }
}
