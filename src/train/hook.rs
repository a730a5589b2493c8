//! The training loop's one extension point: a [`Hook`] watches or steers training.
//!
//! A hook is called at fixed points of the loop (the order of a run of `E` epochs):
//!
//! ```text
//! build:        check(run)                          # before any work (e.g. the backbone fits)
//!               load_state(run, saved)              # on resume: what the checkpoint kept
//! each epoch:   epoch_start(run, epoch)             # e.g. recompute crop-and-rotate's boxes
//!   each step:  attempt_start()                     # an attempt at the step: views drawn next
//!               before_forward(run, batch)          # e.g. hand the batch's boxes to the method
//!               after_forward(output, progress)     # Apply, or Redraw the batch (e.g. curation)
//!               after_step(progress, loss)          # the hook's columns of steps.csv
//!               epoch_end(run, epoch, last)         # its columns of epochs.csv (e.g. kNN)
//!               state()                             # kept in every checkpoint (curricula.json)
//! ```
//!
//! The loop knows no hook by name: Fréchet batch curation, crop-and-rotate's object boxes and the
//! kNN monitor are hooks (`crate::hooks`), and so can be a user's own curriculum
//! (`examples/custom_hook.rs`). Each hook owns its state: [`Hook::state`] is written under the
//! hook's [`Hook::name`] in every checkpoint's `curricula.json`, and a resumed run gives it back
//! with [`Hook::load_state`]; [`Hook::describe`] is its settings, saved in the run's record and
//! compared on resume like the trainer's own.

use std::any::Any;

use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;

use super::run_log::Column;
use super::TrainError;
use crate::base::geometry::ViewGeometry;
use crate::base::Progress;
use crate::data::{Dataset, HostBatch, ImageItem};
use crate::method::{MethodOutput, SslMethod};
use crate::pipeline::Augmenter;

/// What a hook decides about an attempt at a step, once the forward pass has run and before
/// anything is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Train on this attempt.
    Apply,
    /// Drop this attempt (its graph, without an optimiser step) and draw the batch's views
    /// again: the next attempt draws from its own stream keyed by `(step, attempt)`.
    Redraw,
}

/// A hook's report at the end of an epoch: its columns of `epochs.csv` (an empty cell where it
/// measured nothing this epoch) and an optional note for the epoch's log line.
#[derive(Debug, Clone, Default)]
pub struct EpochReport {
    /// Named cells, appended to the epoch's row in the order of the hooks.
    pub columns: Vec<Column>,
    /// Text appended to the epoch's log line (e.g. `, kNN(k=20, T=0.07) top-1 81.75%`).
    pub note: Option<String>,
}

/// The run as a hook sees it: the method (its networks and states), the augmentation, the
/// training images and where training stands.
pub struct RunView<'a, B: AutodiffBackend, S> {
    /// The method.
    pub method: &'a mut S,
    /// The augmentation (its view-1 normalisation is what an unaugmented image gets).
    pub augmenter: &'a Augmenter,
    /// The device the run trains on.
    pub device: &'a B::Device,
    /// Epochs of the whole run.
    pub epochs: usize,
    /// Images per batch.
    pub batch_size: usize,
    pub(crate) dataset: &'a dyn Dataset<ImageItem>,
}

impl<B: AutodiffBackend, S: SslMethod<B>> RunView<'_, B, S> {
    /// Images in the training set.
    pub fn num_training_images(&self) -> usize {
        self.dataset.len()
    }

    /// The training images `start..end` (dataset order) as the network sees `view1`
    /// unaugmented: scaled to `[0, 1]` and normalised as `view1` is; on the inner backend.
    ///
    /// # Errors
    /// If the dataset cannot give an image of the range.
    pub fn training_images(
        &self,
        start: usize,
        end: usize,
    ) -> Result<Tensor<B::InnerBackend, 4>, TrainError> {
        let source = std::path::Path::new("training images");
        let indices: Vec<usize> = (start..end).collect();
        let items = indices
            .iter()
            .map(|&i| {
                self.dataset
                    .get(i)
                    .ok_or_else(|| crate::data::DataError::Request {
                        path: source.to_path_buf(),
                        reason: format!(
                            "the dataset has no item {i} although its length is {}",
                            self.dataset.len()
                        ),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let batch = HostBatch::from_items(source, &items, indices)?;
        let mut images = batch.to_device::<B::InnerBackend>(self.device).images;
        if let Some(normalize) = &self.augmenter.config().view1.normalize {
            images = normalize.apply(images);
        }
        Ok(images)
    }
}

/// The batch of an attempt at a step, as the forward pass will see it.
#[derive(Debug, Clone, Copy)]
pub struct BatchView<'a> {
    /// Where training stands.
    pub progress: Progress,
    /// The batch's training images, by dataset index.
    pub indices: &'a [usize],
    /// Where each image of each view came from (`geometry[v][n]`: view `v + 1`, image `n`).
    pub geometry: &'a [Vec<ViewGeometry>; 2],
}

/// Something that watches or steers training (see the module docs). Every method has a default
/// that does nothing, so a hook implements only the points it needs.
pub trait Hook<B: AutodiffBackend, S: SslMethod<B> + 'static>: Any {
    /// The hook's name: its key in `curricula.json` and in the run record's hooks, unique in a
    /// run.
    fn name(&self) -> &'static str;

    /// What the hook hands to the method that a method may need (the capabilities a method asks
    /// for, e.g. [`OBJECT_BOXES`](crate::method::OBJECT_BOXES)): the loop refuses a method that
    /// needs one no hook provides.
    fn provides(&self) -> &'static [&'static str] {
        &[]
    }

    /// The hook's settings, saved in the run's record and compared on resume (`Null`: nothing to
    /// record).
    fn describe(&self) -> serde_json::Value {
        serde_json::Value::Null
    }

    /// Checks, before any work, that the hook can run with this method and data.
    ///
    /// # Errors
    /// Naming what does not fit.
    fn check(&mut self, run: &mut RunView<'_, B, S>) -> Result<(), TrainError> {
        let _ = run;
        Ok(())
    }

    /// At the start of every epoch (0-based), before its first step.
    ///
    /// # Errors
    /// If the hook cannot do its work.
    fn epoch_start(&mut self, run: &mut RunView<'_, B, S>, epoch: usize) -> Result<(), TrainError> {
        let _ = (run, epoch);
        Ok(())
    }

    /// At the start of every attempt at a step, before its views are drawn.
    fn attempt_start(&mut self) {}

    /// After the attempt's views are drawn, before the forward pass.
    fn before_forward(&mut self, run: &mut RunView<'_, B, S>, batch: &BatchView<'_>) {
        let _ = (run, batch);
    }

    /// After the attempt's forward pass, before anything is applied: [`Verdict::Redraw`] drops
    /// the attempt and draws the batch's views again.
    ///
    /// # Errors
    /// If the hook cannot judge the attempt (e.g. the method gives no embeddings).
    fn after_forward(
        &mut self,
        output: &MethodOutput<B>,
        progress: Progress,
    ) -> Result<Verdict, TrainError> {
        let _ = (output, progress);
        Ok(Verdict::Apply)
    }

    /// After the optimiser step and the method's own update: the hook's columns of the step's
    /// row of `steps.csv` (the same names at every step).
    fn after_step(&mut self, progress: Progress, loss: f64) -> Vec<(String, f64)> {
        let _ = (progress, loss);
        Vec::new()
    }

    /// At the end of every epoch (`last`: the run's last), before its checkpoint.
    ///
    /// # Errors
    /// If the hook cannot do its work.
    fn epoch_end(
        &mut self,
        run: &mut RunView<'_, B, S>,
        epoch: usize,
        last: bool,
    ) -> Result<EpochReport, TrainError> {
        let _ = (run, epoch, last);
        Ok(EpochReport::default())
    }

    /// What a checkpoint keeps of the hook (`None`: nothing).
    fn state(&self) -> Option<serde_json::Value> {
        None
    }

    /// Takes back what a checkpoint kept (`None`: the checkpoint holds nothing of this hook).
    ///
    /// # Errors
    /// Saying why the state does not fit this hook or this run.
    fn load_state(
        &mut self,
        run: &mut RunView<'_, B, S>,
        state: Option<serde_json::Value>,
    ) -> Result<(), String> {
        let _ = run;
        match state {
            None => Ok(()),
            Some(_) => Err(format!(
                "the checkpoint holds a state of hook `{}`, which keeps none",
                self.name()
            )),
        }
    }
}
