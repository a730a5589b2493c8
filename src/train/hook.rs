//! The training loop's one extension point (documented on `Hook`).

use std::any::Any;
use std::path::Path;

use burn::tensor::backend::AutodiffBackend;

use super::error::TrainError;
use super::run_log::Column;
use super::task::Task;
use crate::base::Progress;

/// A run's hooks, in the order they are called.
pub type Hooks<B, K> = Vec<Box<dyn Hook<B, K>>>;

/// What a hook decides about an attempt at a step, once the forward pass has run and before
/// anything is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Train on this attempt.
    Apply,
    /// Drop this attempt (its graph, without an optimiser step) and draw the batch's inputs
    /// again: the next attempt draws from its own stream keyed by `(step, attempt)`.
    Redraw,
}

/// A hook's report at the end of an epoch: its columns of `epochs.csv` (an empty cell where it
/// measured nothing this epoch), an optional note for the epoch's log line, and whether it asks
/// for a checkpoint after this epoch.
#[derive(Debug, Clone, Default)]
pub struct EpochReport {
    /// Named cells, appended to the epoch's row in the order of the hooks.
    pub columns: Vec<Column>,
    /// Text appended to the epoch's log line (e.g. `, kNN(k=20, T=0.07) top-1 81.75%`).
    pub note: Option<String>,
    /// Write a checkpoint after this epoch even when `checkpoint_every` does not (e.g. a hook
    /// that keeps the checkpoint of the best kNN accuracy); the loop writes one, with every
    /// hook's state, however many hooks ask.
    pub checkpoint: bool,
}

/// The run as a hook sees it: the step (its networks, data and augmentation, through the
/// step's own methods), the device, the plan, and the epoch's selection of examples.
pub struct RunView<'a, B: AutodiffBackend, K> {
    /// The step: for a self-supervised run a
    /// [`SelfSupervisedTask`](super::SelfSupervisedTask) (the method, the augmenter, the
    /// training images); for a supervised one a
    /// [`SupervisedTask`](super::SupervisedTask) (the classifier, the per-example
    /// losses).
    pub task: &'a mut K,
    /// The device the run trains on.
    pub device: &'a B::Device,
    /// Epochs of the whole run.
    pub epochs: usize,
    /// Examples per batch.
    pub batch_size: usize,
    pub(crate) pool: &'a mut Option<(&'static str, Vec<usize>)>,
    pub(crate) hook: &'static str,
    pub(crate) at_step: usize,
}

impl<B: AutodiffBackend, K: Task<B>> RunView<'_, B, K> {
    /// Selects the examples this epoch draws its batches from (indices into the training set),
    /// in [`Hook::epoch_start`]; without a selection an epoch draws from every example. Every
    /// epoch still takes its planned number of steps: the pool is reshuffled when used up.
    ///
    /// # Errors
    /// If the pool is empty, names an example the data lack, or another hook selected already.
    pub fn select(&mut self, pool: Vec<usize>) -> Result<(), TrainError> {
        let fail = |reason: String| TrainError::Hook {
            hook: self.hook,
            step: self.at_step,
            reason,
        };
        if let Some((other, _)) = self.pool.as_ref() {
            return Err(fail(format!(
                "hook `{other}` selected this epoch's examples already; one hook selects"
            )));
        }
        let n = self.task.num_examples();
        if pool.is_empty() || pool.iter().any(|&i| i >= n) {
            return Err(fail(format!(
                "the selection chose {} examples, some outside the {n} training examples",
                pool.len()
            )));
        }
        *self.pool = Some((self.hook, pool));
        Ok(())
    }

    /// The examples this epoch draws from, if a hook selected them.
    pub fn selected(&self) -> Option<&[usize]> {
        self.pool.as_ref().map(|(_, p)| p.as_slice())
    }
}

/// The batch of an attempt at a step, as the forward pass will see it.
#[derive(Debug)]
pub struct BatchView<'a, I> {
    /// Where training stands.
    pub progress: Progress,
    /// The batch's training examples, by dataset index.
    pub indices: &'a [usize],
    /// The attempt's inputs (for a self-supervised run, the two views and where each image of
    /// each came from). A hook may change them (e.g. blend or mask the views): the forward pass
    /// sees what the hooks leave, in the order they were added.
    pub inputs: &'a mut I,
}

/// Something that watches or steers training: the training loop's one extension point, for
/// every kind of training (self-supervised or supervised: a hook is written for the [`Task`]s it
/// can serve). Every method has a default that does nothing, so a hook implements only the
/// points it needs.
///
/// A hook is called at fixed points of the loop (the order of a run of `E` epochs):
///
/// ```text
/// build:        check(run)                          # before any work (e.g. the backbone fits)
///               load_files(run, dir), load_state(run, saved)   # on resume
/// each epoch:   epoch_start(run, epoch)             # e.g. select the epoch's examples (SPLD)
///   each step:  attempt_start()                     # an attempt at the step: inputs drawn next
///               before_forward(run, batch)          # e.g. hand the batch's boxes to the method;
///                                                   #   a hook may change the inputs
///               after_forward(output, progress)     # Apply, or Redraw the batch (e.g. curation)
///               after_step(run, progress, loss)     # the hook's columns of steps.csv
///               epoch_end(run, epoch, last)         # its columns of epochs.csv (e.g. kNN); it
///                                                   #   may ask for a checkpoint
///               state(), files()                    # kept in every checkpoint
/// ```
///
/// The loop knows no hook by name: Fréchet batch curation, crop-and-rotate's object boxes, the
/// kNN monitor (`crate::hooks`) and SPLD / SPL-ADVisE's example selection
/// (`crate::spl_advise`) are hooks, and so can be a user's own curriculum
/// (`examples/custom_hook.rs`). A hook that watches self-supervised training is written for
/// every [`SelfSupervisedTask`](super::SelfSupervisedTask), one that selects a classifier's
/// examples for every [`SupervisedTask`](super::SupervisedTask). Each hook owns its
/// state: [`Hook::state`] is written under the hook's [`Hook::name`] in every checkpoint's
/// `curricula.json` (and [`Hook::files`] beside it), and a resumed run gives it back with
/// [`Hook::load_state`]; [`Hook::describe`] is its settings, saved in the run's record and
/// compared on resume like the trainer's own.
pub trait Hook<B: AutodiffBackend, K: Task<B>>: Any {
    /// The hook's name: its key in `curricula.json` and in the run record's hooks, unique in a
    /// run.
    fn name(&self) -> &'static str;

    /// What the hook hands to the method that a method may need (the capabilities a method asks
    /// for, e.g. [`OBJECT_BOXES`](crate::method::OBJECT_BOXES)): the loop refuses a method that
    /// needs one no hook provides.
    fn provides(&self) -> &'static [&'static str] {
        &[]
    }

    /// Whether the hook may run in every replica of a data-parallel run
    /// ([`crate::data_parallel`]): each replica has its own copy of the hook, sees its own shard
    /// of every batch, the gathered embeddings of the whole batch in `after_forward` (when it
    /// [reads them](Hook::reads_embeddings)), and the same (averaged) losses and networks; only replica 0 writes the hook's files and columns.
    /// A hook that decides from its shard's images or per-image losses (an example selection)
    /// would decide differently on each replica, so the default is `false`, and the trainer
    /// refuses such a hook in a data-parallel run. The kNN monitor, Fréchet batch curation, the
    /// object boxes and the self-paced AutoAugment's feedback say `true`.
    fn runs_on_replicas(&self) -> bool {
        false
    }

    /// Whether [`Hook::after_forward`] reads the output's per-image values (the method's
    /// embeddings). In a data-parallel run the step then gathers them from every replica before
    /// the hooks judge the attempt (two all-reduces a step, paid only when a hook asks).
    /// Default: `false`.
    fn reads_embeddings(&self) -> bool {
        false
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
    fn check(&mut self, run: &mut RunView<'_, B, K>) -> Result<(), TrainError> {
        let _ = run;
        Ok(())
    }

    /// At the start of every epoch (0-based), before its first step.
    ///
    /// # Errors
    /// If the hook cannot do its work.
    fn epoch_start(&mut self, run: &mut RunView<'_, B, K>, epoch: usize) -> Result<(), TrainError> {
        let _ = (run, epoch);
        Ok(())
    }

    /// Whether a checkpoint written in the middle of an epoch resumes this hook exactly: its
    /// [`Hook::state`] holds everything it computed since the epoch started, so that the
    /// resume, which does not call [`Hook::epoch_start`] again for that epoch, continues as the
    /// run would have. A run with a hook that says no refuses
    /// [`TrainConfig::checkpoint_every_steps`](super::TrainConfig::checkpoint_every_steps).
    fn resumes_mid_epoch(&self) -> bool {
        true
    }

    /// At the start of every attempt at a step, before its views are drawn.
    fn attempt_start(&mut self) {}

    /// After the attempt's inputs are drawn, before the forward pass: the hook may read them
    /// (e.g. where each view came from) or change them.
    fn before_forward(
        &mut self,
        run: &mut RunView<'_, B, K>,
        batch: &mut BatchView<'_, K::Inputs>,
    ) {
        let _ = (run, batch);
    }

    /// After the attempt's forward pass, before anything is applied: [`Verdict::Redraw`] drops
    /// the attempt and draws the batch's views again (at most
    /// [`TrainerBuilder::max_attempts`](super::TrainerBuilder::max_attempts) attempts of a step
    /// in all, [`MAX_ATTEMPTS`](super::MAX_ATTEMPTS) by default: the run then stops with
    /// [`TrainError::Hook`](super::TrainError::Hook) naming the first hook that redrew the
    /// last).
    ///
    /// # Errors
    /// If the hook cannot judge the attempt (e.g. the method gives no embeddings).
    fn after_forward(
        &mut self,
        output: &K::Output,
        progress: Progress,
    ) -> Result<Verdict, TrainError> {
        let _ = (output, progress);
        Ok(Verdict::Apply)
    }

    /// After the optimiser step and the method's own update: the hook's columns of the step's
    /// row of `steps.csv` (the same names at every step).
    ///
    /// # Errors
    /// If the hook's own work fails (e.g. a network it trains beside the run).
    fn after_step(
        &mut self,
        run: &mut RunView<'_, B, K>,
        progress: Progress,
        loss: f64,
    ) -> Result<Vec<(String, f64)>, TrainError> {
        let _ = (run, progress, loss);
        Ok(Vec::new())
    }

    /// At the end of every epoch (`last`: the run's last), before its checkpoint.
    ///
    /// # Errors
    /// If the hook cannot do its work.
    fn epoch_end(
        &mut self,
        run: &mut RunView<'_, B, K>,
        epoch: usize,
        last: bool,
    ) -> Result<EpochReport, TrainError> {
        let _ = (run, epoch, last);
        Ok(EpochReport::default())
    }

    /// Binary files the hook keeps in every checkpoint besides its state (e.g. a network it
    /// trains beside the run), by file name; checksummed with the checkpoint's own.
    ///
    /// # Errors
    /// If a record cannot be serialised.
    fn files(&self) -> Result<Vec<(&'static str, Vec<u8>)>, TrainError> {
        Ok(Vec::new())
    }

    /// Reads back the files [`Hook::files`] wrote, from the verified checkpoint `dir`, before
    /// [`Hook::load_state`].
    ///
    /// # Errors
    /// If a file is missing or does not fit this hook.
    fn load_files(&mut self, run: &mut RunView<'_, B, K>, dir: &Path) -> Result<(), TrainError> {
        let _ = (run, dir);
        Ok(())
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
        run: &mut RunView<'_, B, K>,
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
