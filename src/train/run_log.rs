//! The run log: everything a run reports — `steps.csv`, `epochs.csv`, the progress bar and the
//! log lines — written in one place, the way burn-train sends its events to a log sink.
//!
//! Records are typed ([`StepRecord`], [`EpochRecord`]) and each names its columns together with
//! their values ([`Cell`]), so a header cannot disagree with its rows. The files are written and
//! read back with the `csv` crate. Numbers are plain decimals in Rust's shortest round-trip form
//! (`0.0123`, never `1.23e-2`): a value read back is bit-identical to the one logged. Steps and
//! epochs count from 1 in the files as on the progress line: the row `epoch = 3` is what the
//! screen calls "epoch 3/8", the row `step = 10` the tenth optimiser step. On resume the rows
//! written after the checkpoint are dropped, so the files always describe one consistent run.
//!
//! The progress bar is `indicatif`'s, drawn on standard error only when it is a terminal (logs and
//! CI get one `log` line per epoch instead); log lines written during a run suspend the bar so
//! that the two never tangle.

use std::borrow::Cow;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::{Deserialize, Serialize};

use super::checkpoint::{files, write_atomic};
use super::TrainError;

/// One optimiser step, as written to `steps.csv`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// 0-based step (written 1-based).
    pub step: usize,
    /// 0-based epoch (written 1-based).
    pub epoch: usize,
    /// The loss.
    pub loss: f64,
    /// Learning rate used.
    pub lr: f64,
    /// Source images per second of this step: its images over the wall time since the step
    /// before ended (waiting for the batch, the augmentation when it is not done ahead, forward,
    /// backward, update, logging).
    pub images_per_s: f64,
    /// The method's statistics (e.g. momentum) and the scheduled knobs (e.g. `mixup_lambda`).
    pub stats: Vec<(String, f64)>,
}

/// One epoch, as written to `epochs.csv`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpochRecord {
    /// 0-based epoch (written 1-based).
    pub epoch: usize,
    /// Mean loss over its steps.
    pub mean_loss: f64,
    /// Learning rate of its last step.
    pub lr: f64,
    /// Source images per second over the epoch.
    pub images_per_s: f64,
    /// Wall time of the epoch, in seconds (kNN and checkpoint excluded).
    pub seconds: f64,
    /// The trainer's own statistics of the epoch (e.g. the supervised trainer's test
    /// accuracy), as columns after the fixed ones.
    pub stats: Vec<(String, f64)>,
    /// The hooks' columns (e.g. batch curation's rejections, the kNN monitor's accuracies),
    /// after the statistics; an empty cell where a hook measured nothing this epoch.
    pub columns: Vec<Column>,
    /// The hooks' notes for the epoch's log line.
    pub notes: Vec<String>,
    /// The checkpoint written after this epoch.
    pub checkpoint: Option<PathBuf>,
}

/// One cell of a CSV row.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Cell {
    /// A count (step, epoch).
    Count(usize),
    /// A value, written exactly: the shortest decimal that reads back to it. A value that an
    /// `f32` holds exactly (a loss or a statistic read from an `f32` tensor) is written in
    /// `f32`'s shortest form (`0.99`, not `0.9900000095367432`) and reads back exactly as `f32`.
    Value(f64),
    /// A measurement, rounded to the given decimals (speeds, seconds, accuracies).
    Rounded(f64, usize),
    /// Nothing measured (e.g. no kNN after this epoch).
    Empty,
}

impl Cell {
    /// The cell as written: plain decimals, never exponent notation.
    pub fn text(&self) -> String {
        match *self {
            Cell::Count(n) => n.to_string(),
            Cell::Value(v) if f64::from(v as f32) == v => format!("{}", v as f32),
            Cell::Value(v) => format!("{v}"),
            Cell::Rounded(v, digits) => format!("{v:.digits$}"),
            Cell::Empty => String::new(),
        }
    }
}

/// A named column and its value.
pub type Column = (Cow<'static, str>, Cell);

impl StepRecord {
    /// The row of `steps.csv`: step, epoch, loss, lr, images/s, then every statistic and knob.
    pub fn columns(&self) -> Vec<Column> {
        let mut columns: Vec<Column> = vec![
            ("step".into(), Cell::Count(self.step + 1)),
            ("epoch".into(), Cell::Count(self.epoch + 1)),
            ("loss".into(), Cell::Value(self.loss)),
            ("lr".into(), Cell::Value(self.lr)),
            ("images_per_s".into(), Cell::Rounded(self.images_per_s, 3)),
        ];
        columns.extend(
            self.stats
                .iter()
                .map(|(name, v)| (Cow::Owned(name.clone()), Cell::Value(*v))),
        );
        columns
    }
}

impl EpochRecord {
    /// The row of `epochs.csv`: epoch, mean loss, lr, images/s, seconds, the statistics, then
    /// the hooks' columns.
    pub fn columns(&self) -> Vec<Column> {
        let mut columns: Vec<Column> = vec![
            ("epoch".into(), Cell::Count(self.epoch + 1)),
            ("mean_loss".into(), Cell::Value(self.mean_loss)),
            ("lr".into(), Cell::Value(self.lr)),
            ("images_per_s".into(), Cell::Rounded(self.images_per_s, 3)),
            ("seconds".into(), Cell::Rounded(self.seconds, 3)),
        ];
        columns.extend(
            self.stats
                .iter()
                .map(|(name, v)| (Cow::Owned(name.clone()), Cell::Value(*v))),
        );
        columns.extend(self.columns.iter().cloned());
        columns
    }
}

/// Formats a duration as `1h02m03s`, `2m03s` or `3s`.
pub fn format_duration(d: Duration) -> String {
    let s = d.as_secs();
    let (h, m, s) = (s / 3600, (s / 60) % 60, s % 60);
    if h > 0 {
        format!("{h}h{m:02}m{s:02}s")
    } else if m > 0 {
        format!("{m}m{s:02}s")
    } else {
        format!("{s}s")
    }
}

fn io_error(path: &Path, reason: impl ToString) -> TrainError {
    TrainError::Io {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}

/// An append-only CSV file whose first column counts rows (a 1-based step or epoch).
#[derive(Debug)]
pub struct CsvFile {
    path: PathBuf,
    header: Option<Vec<String>>,
    out: Option<csv::Writer<File>>,
}

impl CsvFile {
    /// A file at `path`; nothing is written until the first row.
    pub fn new(path: PathBuf) -> Self {
        Self {
            path,
            header: None,
            out: None,
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Keeps the rows whose first column is at most `count` and drops the rest: what a resumed
    /// run does with the rows written after its checkpoint (`count` steps or epochs done).
    ///
    /// # Errors
    /// If the file cannot be read or rewritten, or is not CSV.
    pub fn truncate_to(&mut self, count: usize) -> Result<(), TrainError> {
        self.out = None;
        if !self.path.exists() {
            return Ok(());
        }
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(true)
            .from_path(&self.path)
            .map_err(|e| io_error(&self.path, e))?;
        let header: Vec<String> = reader
            .headers()
            .map_err(|e| io_error(&self.path, e))?
            .iter()
            .map(str::to_string)
            .collect();
        let mut kept = csv::Writer::from_writer(Vec::new());
        kept.write_record(&header)
            .map_err(|e| io_error(&self.path, e))?;
        for row in reader.records() {
            let row = row.map_err(|e| io_error(&self.path, e))?;
            let first = row.get(0).and_then(|v| v.parse::<usize>().ok());
            if first.is_some_and(|v| v <= count) {
                kept.write_record(&row)
                    .map_err(|e| io_error(&self.path, e))?;
            }
        }
        let bytes = kept.into_inner().map_err(|e| io_error(&self.path, e))?;
        self.header = Some(header);
        write_atomic(&self.path, &bytes)
    }

    /// Appends a row; the first row of a new file writes the column names first.
    ///
    /// # Errors
    /// On I/O errors, or if the columns differ from the file's.
    pub fn append(&mut self, columns: &[Column]) -> Result<(), TrainError> {
        let names: Vec<&str> = columns.iter().map(|(n, _)| n.as_ref()).collect();
        if self.out.is_none() {
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)
                .map_err(|e| io_error(&self.path, e))?;
            let mut out = csv::Writer::from_writer(file);
            if self.header.is_none() {
                out.write_record(&names)
                    .map_err(|e| io_error(&self.path, e))?;
                self.header = Some(names.iter().map(|n| n.to_string()).collect());
            }
            self.out = Some(out);
        }
        let header = self.header.as_deref().unwrap_or_default();
        if header != names.as_slice() {
            return Err(io_error(
                &self.path,
                format!(
                    "columns {names:?} differ from the file's {header:?} (a resumed run with \
                     another method?)"
                ),
            ));
        }
        let out = self.out.as_mut().expect("opened above");
        out.write_record(columns.iter().map(|(_, c)| c.text()))
            .map_err(|e| io_error(&self.path, e))
    }

    /// Flushes buffered rows to disk.
    ///
    /// # Errors
    /// On I/O errors.
    pub fn flush(&mut self) -> Result<(), TrainError> {
        if let Some(out) = self.out.as_mut() {
            out.flush().map_err(|e| io_error(&self.path, e))?;
        }
        Ok(())
    }
}

/// What a run reports: its two CSV files, its progress bar and its log lines.
#[derive(Debug)]
pub struct RunLog {
    steps: CsvFile,
    epochs: CsvFile,
    progress_bar: bool,
    bar: ProgressBar,
}

impl RunLog {
    /// The log of the run in `run_dir`; the bar is drawn if `progress_bar` and standard error is
    /// a terminal.
    pub fn new(run_dir: &Path, progress_bar: bool) -> Self {
        Self {
            steps: CsvFile::new(run_dir.join(files::STEPS)),
            epochs: CsvFile::new(run_dir.join(files::EPOCHS)),
            progress_bar,
            bar: ProgressBar::hidden(),
        }
    }

    /// Drops the rows written after a checkpoint taken at `steps` steps and `epochs` epochs.
    ///
    /// # Errors
    /// If a file cannot be read or rewritten.
    pub fn resume_at(&mut self, steps: usize, epochs: usize) -> Result<(), TrainError> {
        self.steps.truncate_to(steps)?;
        self.epochs.truncate_to(epochs)
    }

    /// Starts the bar of a run of `total_steps` steps, `first_step` of them already done.
    pub fn start(&mut self, total_steps: usize, first_step: usize) {
        let target = if self.progress_bar {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let style =
            ProgressStyle::with_template("epoch {prefix} {bar:24} {pos}/{len} {msg} ETA {eta}")
                .expect("a valid template")
                .progress_chars("█▓░");
        let bar = ProgressBar::with_draw_target(Some(total_steps as u64), target).with_style(style);
        bar.set_position(first_step as u64);
        bar.reset_eta();
        self.bar = bar;
    }

    /// Writes a step's row and moves the bar.
    ///
    /// # Errors
    /// On I/O errors, or if the columns differ from the file's.
    pub fn step(&mut self, record: &StepRecord, total_epochs: usize) -> Result<(), TrainError> {
        self.steps.append(&record.columns())?;
        let knobs: String = record
            .stats
            .iter()
            .map(|(name, v)| format!(" {name} {v:.4}"))
            .collect();
        self.bar
            .set_prefix(format!("{}/{total_epochs}", record.epoch + 1));
        self.bar.set_message(format!(
            "loss {:.4} lr {:.3e}{knobs} {:.1} img/s",
            record.loss, record.lr, record.images_per_s
        ));
        self.bar.set_position(record.step as u64 + 1);
        Ok(())
    }

    /// Writes an epoch's row, flushes both files and logs the epoch's line.
    ///
    /// # Errors
    /// On I/O errors, or if the columns differ from the file's.
    pub fn epoch(&mut self, record: &EpochRecord, total_epochs: usize) -> Result<(), TrainError> {
        self.epochs.append(&record.columns())?;
        self.flush()?;
        let notes: String = record.notes.concat();
        let checkpoint = record
            .checkpoint
            .as_ref()
            .map_or(String::new(), |p| format!(", checkpoint {}", p.display()));
        let line = format!(
            "epoch {}/{total_epochs}: loss {:.4}, lr {:.3e}, {:.1} images/s, {}{notes}{checkpoint}",
            record.epoch + 1,
            record.mean_loss,
            record.lr,
            record.images_per_s,
            format_duration(Duration::from_secs_f64(record.seconds)),
        );
        self.info(&line);
        Ok(())
    }

    /// A log line that does not tangle with the bar.
    pub fn info(&self, line: &str) {
        self.bar.suspend(|| log::info!("{line}"));
    }

    /// Flushes both files.
    ///
    /// # Errors
    /// On I/O errors.
    pub fn flush(&mut self) -> Result<(), TrainError> {
        self.steps.flush()?;
        self.epochs.flush()
    }

    /// Ends the bar (at the end of a call of `fit`, or when it fails) and flushes the files.
    ///
    /// # Errors
    /// On I/O errors.
    pub fn finish(&mut self) -> Result<(), TrainError> {
        self.bar.abandon();
        self.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("run-log-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn step(step: usize, loss: f64) -> StepRecord {
        StepRecord {
            step,
            epoch: step / 2,
            loss,
            lr: 0.0125,
            images_per_s: 100.0,
            stats: vec![("mixup_lambda".into(), 0.2)],
        }
    }

    #[test]
    fn durations_read_as_hours_minutes_seconds() {
        assert_eq!(format_duration(Duration::from_secs(3)), "3s");
        assert_eq!(format_duration(Duration::from_secs(123)), "2m03s");
        assert_eq!(format_duration(Duration::from_secs(3723)), "1h02m03s");
    }

    #[test]
    fn numbers_are_plain_decimals_that_read_back_exactly() {
        for v in [1.23e-2, 1e-7, 0.1 + 0.2, 12345.678, 0.0, -2.5e-5] {
            let text = Cell::Value(v).text();
            assert!(!text.contains('e'), "{text}");
            assert_eq!(text.parse::<f64>().unwrap(), v, "{text}");
        }
        assert_eq!(Cell::Value(0.0123).text(), "0.0123");
        // Values from f32 tensors: f32's shortest form, exact as f32.
        let from_f32 = f64::from(0.99f32);
        assert_eq!(Cell::Value(from_f32).text(), "0.99");
        assert_eq!("0.99".parse::<f32>().unwrap(), 0.99f32);
        assert_eq!(Cell::Value(f64::from(3.0e-8f32)).text(), "0.00000003");
        assert_eq!(Cell::Rounded(312.45678, 3).text(), "312.457");
        assert_eq!(Cell::Count(7).text(), "7");
        assert_eq!(Cell::Empty.text(), "");
    }

    #[test]
    fn steps_and_epochs_count_from_one_as_on_screen() {
        let dir = scratch("one-based");
        let mut log = RunLog::new(&dir, false);
        log.start(4, 0);
        log.step(&step(0, 1.5), 2).unwrap();
        let epoch = EpochRecord {
            epoch: 0,
            mean_loss: 1.5,
            lr: 0.0125,
            images_per_s: 50.0,
            seconds: 2.0,
            stats: Vec::new(),
            // The kNN monitor's columns in an epoch it did not run.
            columns: vec![
                ("knn20_top1".into(), Cell::Empty),
                ("knn20_top5".into(), Cell::Empty),
            ],
            notes: Vec::new(),
            checkpoint: None,
        };
        log.epoch(&epoch, 2).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join(files::STEPS)).unwrap(),
            "step,epoch,loss,lr,images_per_s,mixup_lambda\n1,1,1.5,0.0125,100.000,0.2\n"
        );
        assert_eq!(
            std::fs::read_to_string(dir.join(files::EPOCHS)).unwrap(),
            "epoch,mean_loss,lr,images_per_s,seconds,knn20_top1,knn20_top5\n\
             1,1.5,0.0125,50.000,2.000,,\n"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_resumed_log_drops_the_rows_after_the_checkpoint() {
        let dir = scratch("resume");
        let mut log = RunLog::new(&dir, false);
        for s in 0..4 {
            log.step(&step(s, s as f64), 2).unwrap();
        }
        log.finish().unwrap();
        let mut resumed = RunLog::new(&dir, false);
        resumed.resume_at(2, 1).unwrap();
        resumed.step(&step(2, 99.0), 2).unwrap();
        resumed.finish().unwrap();
        let text = std::fs::read_to_string(dir.join(files::STEPS)).unwrap();
        let losses: Vec<&str> = text
            .lines()
            .skip(1)
            .map(|l| l.split(',').nth(2).unwrap())
            .collect();
        assert_eq!(losses, ["0", "1", "99"], "{text}");
        // Other columns are refused rather than mixed into the file.
        let mut other = step(3, 1.0);
        other.stats = vec![("other".into(), 1.0)];
        let err = resumed.step(&other, 2).unwrap_err();
        assert!(err.to_string().contains("columns"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
