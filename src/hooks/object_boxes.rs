//! Crop-and-rotate's object boxes as a training hook (documented on `ObjectBoxesHook`).

use std::time::Instant;

use burn::module::AutodiffModule;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::Backbone;

use crate::base::error::ConfigError;
use crate::base::geometry::CropBox;
use crate::curriculum::rotation::{
    box_epoch_for, box_in_view, box_update_epochs, object_boxes_of, ObjectBoxes,
    DEFAULT_BOX_THRESHOLD,
};
use crate::method::{SslMethod, OBJECT_BOXES};
use crate::train::{BatchView, Cell, EpochReport, Hook, RunView, SelfSupervisedTask, TrainError};

/// Crop-and-rotate's object boxes (MICO, §3.2) as a training hook.
///
/// A method whose [`SslMethod::uses_object_boxes`] is true (RotNet in crop-and-rotate mode) gets
/// one box per image around its object. The hook computes them at the start of each quarter of
/// the run ([`box_update_epochs`]: epochs `0, ⌊E/4⌋, ⌊E/2⌋, ⌊3E/4⌋`, at most 4 times) with the
/// current backbone in inference mode, on every training image (dataset order, unaugmented,
/// normalised as `view1` is, in batches of the loader's size): the channel mean of
/// [`Backbone::forward_feature_map`] thresholded at [`DEFAULT_BOX_THRESHOLD`]
/// ([`object_boxes_of`]). Before every forward it maps the batch's boxes through the two views'
/// crops and flips ([`box_in_view`]) and hands them to [`SslMethod::set_object_boxes`]. The boxes
/// and the epoch they were computed at are its state in every checkpoint (`curricula.json`), so
/// a resumed run uses the same boxes; the time each computation took is logged and is the
/// `box_seconds` column of `epochs.csv` (0 in the epochs that reuse the previous boxes).
#[derive(Debug, Clone, Default)]
pub struct ObjectBoxesHook {
    boxes: Option<ObjectBoxes>,
    seconds: f64,
}

impl ObjectBoxesHook {
    /// The hook, with no boxes yet (the first epoch computes them).
    pub fn new() -> Self {
        Self::default()
    }

    /// The boxes in use, one per training image in dataset order, with the epoch they were
    /// computed at (once computed or loaded).
    pub fn boxes(&self) -> Option<&ObjectBoxes> {
        self.boxes.as_ref()
    }

    /// The error of a method whose backbone has no feature map.
    fn no_feature_map() -> TrainError {
        ConfigError::new(
            "backbone",
            "the method rotates inside object boxes (crop-and-rotate), which come from the \
             backbone's spatial feature map, and this backbone has none \
             (Backbone::forward_feature_map returns None): implement it, or use another \
             rotation mode",
        )
        .into()
    }

    /// The object boxes of every training image from the current backbone (inference mode, no
    /// gradient), in dataset order, computed in batches of the loader's size.
    fn compute<B: AutodiffBackend, K: SelfSupervisedTask<B>>(
        run: &RunView<'_, B, K>,
        epoch: usize,
    ) -> Result<ObjectBoxes, TrainError> {
        let backbone = run.method().backbone().valid();
        let n = run.num_training_images();
        let mut boxes = Vec::with_capacity(n);
        let mut image_size = [0, 0];
        for start in (0..n).step_by(run.batch_size) {
            let images = run.training_images(start, (start + run.batch_size).min(n))?;
            let [_, _, h, w] = images.dims();
            image_size = [h, w];
            let batch = object_boxes_of(&backbone, images, DEFAULT_BOX_THRESHOLD)
                .ok_or_else(Self::no_feature_map)?;
            boxes.extend(batch);
        }
        Ok(ObjectBoxes {
            epoch,
            image_size,
            boxes,
        })
    }
}

impl<B: AutodiffBackend, K: SelfSupervisedTask<B>> Hook<B, K> for ObjectBoxesHook {
    fn name(&self) -> &'static str {
        "object_boxes"
    }

    fn provides(&self) -> &'static [&'static str] {
        &[OBJECT_BOXES]
    }

    /// Data-parallel: every replica computes the boxes of every training image from the same
    /// backbone (inference mode: no batch statistics to synchronise; the work is repeated on
    /// each replica, four times per run) and hands the method those of its shard's images,
    /// mapped through its shard's views: the boxes of a one-device run.
    fn runs_on_replicas(&self) -> bool {
        true
    }

    fn check(&mut self, run: &mut RunView<'_, B, K>) -> Result<(), TrainError> {
        if !run.method().uses_object_boxes() {
            return Err(ConfigError::new(
                "hooks",
                "object boxes are for a method that rotates inside them (RotNet's \
                 crop-and-rotate); this method does not use them",
            )
            .into());
        }
        let backbone = run.method().backbone().valid();
        match backbone.forward_feature_map(run.training_images(0, 1)?) {
            Some(_) => Ok(()),
            None => Err(Self::no_feature_map()),
        }
    }

    fn epoch_start(&mut self, run: &mut RunView<'_, B, K>, epoch: usize) -> Result<(), TrainError> {
        self.seconds = 0.0;
        let due = box_epoch_for(epoch, run.epochs);
        if self.boxes.as_ref().is_some_and(|b| b.epoch >= due) {
            return Ok(());
        }
        let started = Instant::now();
        let boxes = Self::compute(run, epoch)?;
        self.seconds = started.elapsed().as_secs_f64();
        log::info!(
            "object boxes of {} training images computed at epoch {} in {:.3} s (recomputed \
             at the start of epochs {:?})",
            boxes.boxes.len(),
            epoch + 1,
            self.seconds,
            box_update_epochs(run.epochs)
                .iter()
                .map(|e| e + 1)
                .collect::<Vec<_>>()
        );
        let whole = CropBox::whole(boxes.image_size);
        if boxes.boxes.iter().all(|b| *b == whole) {
            log::warn!(
                "every object box is the whole image (the backbone's last feature map is too \
                 coarse, or its heat maps flat): crop-and-rotate rotates whole images until the \
                 next computation; a backbone that keeps more resolution (e.g. a ResNet with the \
                 CIFAR stem on small images) gives boxes around the objects"
            );
        }
        self.boxes = Some(boxes);
        Ok(())
    }

    fn before_forward(
        &mut self,
        run: &mut RunView<'_, B, K>,
        batch: &mut BatchView<'_, K::Inputs>,
    ) {
        let Some(boxes) = &self.boxes else {
            return;
        };
        // Each image's box in view1's coordinates, then in view2's.
        let mapped = batch
            .inputs
            .geometry
            .iter()
            .flat_map(|geometry| {
                batch
                    .indices
                    .iter()
                    .zip(geometry)
                    .map(|(&i, g)| box_in_view(&boxes.boxes[i], g))
            })
            .collect();
        run.method_mut().set_object_boxes(mapped);
    }

    fn epoch_end(
        &mut self,
        _: &mut RunView<'_, B, K>,
        _: usize,
        _: bool,
    ) -> Result<EpochReport, TrainError> {
        // To the microsecond: a small training set's boxes take well under a millisecond.
        Ok(EpochReport {
            columns: vec![(
                "box_seconds".into(),
                Cell::Value((self.seconds * 1e6).round() / 1e6),
            )],
            ..Default::default()
        })
    }

    fn state(&self) -> Option<serde_json::Value> {
        self.boxes
            .as_ref()
            .map(|b| serde_json::to_value(b).expect("JSON value"))
    }

    fn load_state(
        &mut self,
        run: &mut RunView<'_, B, K>,
        state: Option<serde_json::Value>,
    ) -> Result<(), String> {
        let state = state.ok_or(
            "the method uses object boxes (crop-and-rotate) but the checkpoint holds none",
        )?;
        let boxes: ObjectBoxes =
            serde_json::from_value(state).map_err(|e| format!("not object boxes: {e}"))?;
        let images = run.training_images(0, 1).map_err(|e| e.to_string())?;
        let [_, _, h, w] = images.dims();
        boxes.check(run.num_training_images(), [h, w])?;
        self.boxes = Some(boxes);
        Ok(())
    }
}
