//! The settings' backbone fitted to the data: its configuration for the images' size and
//! channels (the ResNet's pooled grid, a ViT's pooling) and its check against them. Apart from
//! [`super::backbone`], which the options and the settings use, because it needs both the
//! settings and the data.

use super::backbone::{with_vit_pool, BackboneSpec};
use super::data::TrainData;
use super::settings::Settings;
use crate::backend::Device;
use crate::usage::usage;
use anyhow::Result;

/// The settings' backbone for images of a given size.
impl Settings {
    /// The grid the backbone's features are pooled to on images of `side` pixels:
    /// `--pooled-grid`, else the backbone's
    /// [`default_pooled_grid`](super::backbone::BackboneChoice::default_pooled_grid) (resolved
    /// here, not when the command line is read, because a recipe may replace the default
    /// backbone with its own and the images' size is known once they are read).
    pub fn pooled_grid(&self, side: usize) -> usize {
        self.given_pooled_grid
            .unwrap_or(self.backbone.default_pooled_grid(self.stem, side))
    }

    /// The grid as a run on images of `side` pixels records it: `None` for 1 (global average
    /// pooling), which is also what every run recorded before `--pooled-grid` existed did.
    pub fn recorded_pooled_grid(&self, side: usize) -> Option<usize> {
        Some(self.pooled_grid(side)).filter(|&g| g != 1)
    }

    /// The backbone for images of `(side, _, channels)`: its configuration with the stem and
    /// the pooled grid, and its weights.
    pub fn backbone_spec(&self, (side, _, channels): (usize, usize, usize)) -> BackboneSpec {
        BackboneSpec {
            config: with_vit_pool(
                self.backbone
                    .config(channels, side, self.stem, self.pooled_grid(side)),
                self.vit_pool,
            ),
            weights: self.weights.clone(),
        }
    }
}

/// The backbone checked against the data: a ViT's patches tile the image, the network fits.
pub(super) fn check_backbone(settings: &Settings, data: &TrainData, device: &Device) -> Result<()> {
    let spec = settings.backbone_spec(data.shape());
    if let curriculum_ssl_models::AnyBackboneConfig::Vit(vit) = &spec.config {
        // A ViT whose patches do not tile the image (it dropped the edge pixels silently).
        vit.check().map_err(|e| {
            let p = vit.patch_size;
            let hint = if settings.source.dataset.is_files() {
                let below = vit.image_size / p * p;
                format!(
                    "; give --image-size a multiple of {p} (e.g. {} or {})",
                    below.max(p),
                    below + p
                )
            } else {
                String::new()
            };
            usage(format!("--backbone {}: {e}{hint}", settings.backbone))
        })?;
    }
    spec.check(data.shape(), "--backbone", device)?;
    Ok(())
}
