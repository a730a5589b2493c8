//! The run's augmentation: the recipe's preset at the data's size, the views' normalisation
//! (given, or measured on the user's own images) and `--local-crops`.

use super::args::{MethodArgs, SourceArgs};
use super::data::{DataSource, TrainData};
use crate::usage::usage;
use anyhow::Result;
use curriculum_ssl::augment::normalize::Normalize;
use curriculum_ssl::pipeline::PipelineConfig;

/// The pipeline for the data: the preset at the images' size, crops of at least half the image
/// on images smaller than 32 pixels (28×28 garments lose what tells them apart below that), and
/// the views normalised with `normalize` when given.
pub(super) fn pipeline(
    preset: fn(usize, usize) -> PipelineConfig,
    data: &TrainData,
    seed: u64,
    normalize: Option<Normalize>,
) -> PipelineConfig {
    let (h, _, c) = data.shape();
    let mut p = preset(h, c);
    if h < 32 {
        for v in [&mut p.view1, &mut p.view2] {
            if let Some(crop) = v.crop.as_mut() {
                // (Not above the preset's largest: EMP-SSL's fixed quarter-size patches stay
                // as they are.)
                crop.scale = (crop.scale.0.max(0.5).min(crop.scale.1), crop.scale.1);
            }
        }
    }
    if let Some(n) = normalize {
        for v in [&mut p.view1, &mut p.view2] {
            v.normalize = Some(n.clone());
        }
        if let Some(local) = p.local_crops.as_mut() {
            local.view.normalize = Some(n);
        }
    }
    p.seed = seed;
    p
}

/// The views' normalisation: `--mean` / `--std` when given (checked against the channels),
/// else the statistics of the images themselves for the user's own files (image-folder,
/// folder; of an evenly spread sample of [`STATS_SAMPLE`] files, centre-cut, when streamed),
/// else `None` (the preset's statistics of the known dataset).
pub(super) fn normalization(
    args: &SourceArgs,
    source: &DataSource,
    data: &TrainData,
) -> Result<Option<Normalize>> {
    let channels = data.shape().2;
    if let (Some(mean), Some(std)) = (&args.mean, &args.std) {
        let given = Normalize::new(mean, std);
        given.validate_for(channels).map_err(|e| {
            usage(format!(
                "--mean / --std for images of {channels} channels: {e}"
            ))
        })?;
        return Ok(Some(given));
    }
    if !source.dataset.is_files() {
        return Ok(None);
    }
    let (mean, std) = match data {
        TrainData::Memory(data) => data.trained_on().channel_stats(),
        TrainData::Stream(s) => {
            let n = curriculum_ssl::data::stream::ImageSource::len(&s.files);
            let m = n.min(STATS_SAMPLE);
            let sample: Vec<usize> = (0..m).map(|i| i * n / m).collect();
            let set = s.eval_set(&s.files.subset(&sample))?;
            curriculum_ssl::data::channel_stats(&set, 64)?
        }
    };
    // A channel that never varies (a blank folder) would divide by zero.
    let std: Vec<f64> = std.into_iter().map(|s| s.max(1e-3)).collect();
    log::info!("normalisation computed from the images: mean {mean:.4?}, std {std:.4?}");
    Ok(Some(Normalize::new(&mean, &std)))
}

/// Files whose statistics a streamed run normalises its views with (a few seconds of decoding).
const STATS_SAMPLE: usize = 1000;

/// `--local-crops` applied to a multi-crop recipe's pipeline (refused by another).
pub(super) fn local_crops(
    args: &MethodArgs,
    pipeline: &mut PipelineConfig,
    recipe: &str,
) -> Result<()> {
    if let Some(count) = args.local_crops {
        match &mut pipeline.local_crops {
            None => {
                return Err(usage(format!(
                    "--local-crops: recipe `{}` trains on two views (multi-crop: swav, dino)",
                    recipe
                )))
            }
            Some(_) if count == 0 => pipeline.local_crops = None,
            Some(_) if count > curriculum_ssl::pipeline::MAX_LOCAL_CROPS => {
                return Err(usage(format!(
                    "--local-crops {count}: at most {} local crops per image",
                    curriculum_ssl::pipeline::MAX_LOCAL_CROPS
                )))
            }
            Some(local) => local.count = count,
        }
    }
    Ok(())
}
