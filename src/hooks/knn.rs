//! The kNN monitor as a training hook (documented on `KnnHook`).

use burn::module::AutodiffModule;
use burn::tensor::backend::AutodiffBackend;

use crate::eval::{KnnMonitor, KnnResult};
use crate::method::SslMethod;
use crate::train::{Cell, EpochReport, Hook, RunView, SelfSupervisedTask, TrainError};

/// The kNN monitor as a training hook: every `every` epochs and at the end, the frozen backbone
/// (inference mode) is scored by weighted kNN on a labeled bank and test set
/// ([`KnnMonitor`]). Its columns of `epochs.csv` are `knn{k}_top1` and `knn{k}_top5` for each
/// setting, empty in the epochs it does not run; the epoch's log line gets the top-1 accuracies.
#[derive(Debug, Clone)]
pub struct KnnHook {
    monitor: KnnMonitor,
    every: usize,
    last: Option<(usize, Vec<KnnResult>)>,
}

impl KnnHook {
    /// `monitor` every `every` epochs and at the end (`0`: only at the end). How often it runs
    /// does not change the training, so a resumed run may change it.
    pub fn new(monitor: KnnMonitor, every: usize) -> Self {
        Self {
            monitor,
            every,
            last: None,
        }
    }

    /// The monitor.
    pub fn monitor(&self) -> &KnnMonitor {
        &self.monitor
    }

    /// The latest results and the (0-based) epoch after which they were measured.
    pub fn last(&self) -> Option<(usize, &[KnnResult])> {
        self.last.as_ref().map(|(e, r)| (*e, r.as_slice()))
    }

    /// Scores a method's backbone now (inference mode), e.g. at initialisation.
    ///
    /// # Errors
    /// If a kNN setting does not fit the data.
    pub fn evaluate<B: AutodiffBackend, S: SslMethod<B>>(
        &self,
        method: &S,
        device: &B::Device,
    ) -> Result<Vec<KnnResult>, TrainError> {
        let backbone = method.backbone().valid();
        Ok(self.monitor.evaluate(&backbone, device)?)
    }
}

impl<B: AutodiffBackend, K: SelfSupervisedTask<B>> Hook<B, K> for KnnHook {
    fn name(&self) -> &'static str {
        "knn"
    }

    /// The monitor measures the backbone, which every replica holds identically; each replica
    /// measures it (in inference mode, without collective operations) and replica 0 writes it.
    fn runs_on_replicas(&self) -> bool {
        true
    }

    fn epoch_end(
        &mut self,
        run: &mut RunView<'_, B, K>,
        epoch: usize,
        last: bool,
    ) -> Result<EpochReport, TrainError> {
        let done = epoch + 1;
        let due = last || (self.every > 0 && done.is_multiple_of(self.every));
        let results = if due {
            let results = self.evaluate(run.method(), run.device)?;
            self.last = Some((epoch, results.clone()));
            Some(results)
        } else {
            None
        };
        let mut columns = Vec::new();
        for (i, setting) in self.monitor.settings().iter().enumerate() {
            let result = results.as_ref().and_then(|r| r.get(i));
            let cell =
                |f: fn(&KnnResult) -> f64| result.map_or(Cell::Empty, |r| Cell::Rounded(f(r), 4));
            columns.push((
                format!("knn{}_top1", setting.k).into(),
                cell(|r| r.accuracy.top1),
            ));
            columns.push((
                format!("knn{}_top5", setting.k).into(),
                cell(|r| r.accuracy.top5),
            ));
        }
        let note = results.map(|results| {
            results
                .iter()
                .map(|r| {
                    format!(
                        ", kNN(k={}, T={}) top-1 {:.2}%",
                        r.k,
                        r.temperature,
                        100.0 * r.accuracy.top1
                    )
                })
                .collect()
        });
        Ok(EpochReport {
            columns,
            note,
            checkpoint: false,
        })
    }
}
