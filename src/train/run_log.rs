//! The run log: `steps.csv`, `epochs.csv`, the progress bar and the log lines (documented on
//! the `train` module's page).

use std::borrow::Cow;
use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::{Deserialize, Serialize};

use super::checkpoint::{files, write_atomic};
use super::error::TrainError;

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

/// An error reading a log back: the disk's is the run's failure ([`TrainError::Io`]), a file
/// that is not the CSV the run wrote (a malformed row, written over, not UTF-8; a last line cut
/// by a kill is dropped before, in [`CsvFile::truncate_to`]) is damage to the run directory,
/// the user's to mend ([`TrainError::Run`]).
fn read_error(path: &Path, e: csv::Error) -> TrainError {
    if e.is_io_error() {
        return io_error(path, e);
    }
    TrainError::Run {
        path: path.to_path_buf(),
        reason: format!(
            "is not the log the run wrote ({e}): move it away to resume (its rows are rebuilt \
             from the checkpoint's step on)"
        ),
    }
}

/// An append-only CSV file whose first column counts rows (a 1-based step or epoch).
#[derive(Debug)]
pub(crate) struct CsvFile {
    path: PathBuf,
    header: Option<Vec<String>>,
    out: Option<csv::Writer<File>>,
}

impl CsvFile {
    /// A file at `path`; nothing is written until the first row.
    pub(crate) fn new(path: PathBuf) -> Self {
        Self {
            path,
            header: None,
            out: None,
        }
    }

    /// The file.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Keeps the rows whose first column is at most `count` and drops the rest: what a resumed
    /// run does with the rows written after its checkpoint (`count` steps or epochs done).
    /// Returns the highest first column kept (0 for none, or no file): below `count` when rows
    /// the checkpoint covers never reached the file.
    ///
    /// # Errors
    /// If the file cannot be read or rewritten ([`TrainError::Io`]), or is not the CSV the run
    /// wrote ([`TrainError::Run`]).
    pub(crate) fn truncate_to(&mut self, count: usize) -> Result<usize, TrainError> {
        self.out = None;
        if !self.path.exists() {
            return Ok(0);
        }
        let mut bytes = fs::read(&self.path).map_err(|e| io_error(&self.path, e))?;
        // A last line without its newline was cut by a kill while the writer's buffer reached
        // the file (rows are flushed whole and synced before each checkpoint, so it lies past
        // the checkpoint the run resumes from): dropped, as the rows after it would be.
        if !bytes.is_empty() && !bytes.ends_with(b"\n") {
            let kept = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            log::warn!(
                "{}: its last line was cut short ({} bytes without a newline, a run killed \
                 while writing it): dropped",
                self.path.display(),
                bytes.len() - kept
            );
            bytes.truncate(kept);
            if bytes.is_empty() {
                write_atomic(&self.path, &bytes)?;
            }
        }
        if bytes.is_empty() {
            // Not even the column names (a kill before or while writing them): the file starts
            // again.
            self.header = None;
            return Ok(0);
        }
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(true)
            .from_reader(bytes.as_slice());
        let names: Vec<String> = reader
            .headers()
            .map_err(|e| read_error(&self.path, e))?
            .iter()
            .map(str::to_string)
            .collect();
        // A column named twice is kept once, its first: on a bank of 16 images the kNN monitor
        // of runs written before its fix of 2026-12-07 capped both of its usual settings to
        // k = 16 and named both `knn16_top1` (and `_top5`); the first is T = 0.07's, the one
        // setting the monitor keeps now, so the resumed run's rows continue that column.
        let first_of_name: Vec<usize> = (0..names.len())
            .filter(|&i| !names[..i].contains(&names[i]))
            .collect();
        if first_of_name.len() < names.len() {
            log::warn!(
                "{}: a column named twice ({}) is kept once, its first",
                self.path.display(),
                (0..names.len())
                    .filter(|i| !first_of_name.contains(i))
                    .map(|i| names[i].as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        let header: Vec<String> = first_of_name.iter().map(|&i| names[i].clone()).collect();
        let mut kept = csv::Writer::from_writer(Vec::new());
        kept.write_record(&header)
            .map_err(|e| io_error(&self.path, e))?;
        let mut last = 0;
        for row in reader.records() {
            let row = row.map_err(|e| read_error(&self.path, e))?;
            let first = row.get(0).and_then(|v| v.parse::<usize>().ok());
            if let Some(v) = first.filter(|&v| v <= count) {
                last = last.max(v);
                kept.write_record(first_of_name.iter().map(|&i| row.get(i).unwrap_or("")))
                    .map_err(|e| io_error(&self.path, e))?;
            }
        }
        let bytes = kept.into_inner().map_err(|e| io_error(&self.path, e))?;
        self.header = Some(header);
        write_atomic(&self.path, &bytes)?;
        Ok(last)
    }

    /// Checks, before anything of the run is rewritten, that an existing file is a log whose
    /// first column is `first` (`step` or `epoch`): not, say, a table another command wrote over
    /// it.
    ///
    /// # Errors
    /// If the file cannot be read or its first column is another.
    pub(crate) fn check_first_column(&self, first: &str) -> Result<(), TrainError> {
        if !self.path.exists() {
            return Ok(());
        }
        // The column names themselves cut by a kill in the run's first moments (`ste`, or
        // nothing): the start of this log's, which `truncate_to` drops. (They were refused as
        // another file's.) Only the first bytes are read: a log is one line per step.
        let mut head = Vec::new();
        {
            use std::io::Read;
            File::open(&self.path)
                .and_then(|f| f.take(4096).read_to_end(&mut head))
                .map_err(|e| io_error(&self.path, e))?;
        }
        if !head.contains(&b'\n') && first.as_bytes().starts_with(&head) {
            return Ok(());
        }
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(true)
            .from_path(&self.path)
            .map_err(|e| read_error(&self.path, e))?;
        let header = reader.headers().map_err(|e| read_error(&self.path, e))?;
        if header.get(0) == Some(first) {
            return Ok(());
        }
        Err(TrainError::Run {
            path: self.path.clone(),
            reason: format!(
                "is not this run's log: its columns are {} where the log's first column is \
                 `{first}` (a file written over it, e.g. by `recipe embed --out` inside the run \
                 directory); move it away to resume (the rows are rebuilt from the next step on)",
                header.iter().take(4).collect::<Vec<_>>().join(",")
            ),
        })
    }

    /// Appends a row; the first row of a new file writes the column names first.
    ///
    /// # Errors
    /// On I/O errors, or if the columns differ from the file's.
    pub(crate) fn append(&mut self, columns: &[Column]) -> Result<(), TrainError> {
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
    pub(crate) fn flush(&mut self) -> Result<(), TrainError> {
        if let Some(out) = self.out.as_mut() {
            out.flush().map_err(|e| io_error(&self.path, e))?;
        }
        Ok(())
    }

    /// Makes the flushed rows durable (`fsync`): they survive a crash of the machine, not only
    /// of the process.
    ///
    /// # Errors
    /// On I/O errors.
    pub(crate) fn sync(&mut self) -> Result<(), TrainError> {
        if let Some(out) = self.out.as_mut() {
            out.get_ref()
                .sync_data()
                .map_err(|e| io_error(&self.path, e))?;
        }
        Ok(())
    }
}

/// The warning for a log whose rows end at `kept` where its run's checkpoint counts `count`
/// `what` (steps or epochs); none when nothing is missing.
fn missing_rows(path: &Path, kept: usize, count: usize, what: &str) -> Option<String> {
    (kept < count).then(|| {
        let lost = if kept + 1 == count {
            format!("{} {count}", &what[..what.len() - 1])
        } else {
            format!("{what} {}-{count}", kept + 1)
        };
        format!(
            "{}: the rows of {lost} are missing (the process stopped before they reached the \
             disk); the checkpoint holds them and the run continues after {what} {count}, but \
             those rows cannot be rebuilt",
            path.display()
        )
    })
}

/// The directory of a run that holds its TensorBoard event files.
pub(crate) const TENSORBOARD_DIR: &str = "tensorboard";

/// How often the step rows reach the disk (and, with no progress bar on a terminal, how often a
/// progress line is logged) within an epoch.
pub(crate) const FLUSH_EVERY: Duration = Duration::from_secs(2);

/// A plain progress line every this long when no bar is drawn (output to a file or a pipe).
pub(crate) const PROGRESS_EVERY: Duration = Duration::from_secs(30);

/// TensorBoard's event file of a run: every step's and epoch's numbers as scalars, through
/// `syntaxdot-summary` (a small writer of TensorBoard's record format; the records reach the
/// file as they are written, unbuffered).
struct Events {
    writer: syntaxdot_summary::SummaryWriter<File>,
    path: PathBuf,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events").field("path", &self.path).finish()
    }
}

impl Events {
    /// A new event file in `dir` (TensorBoard reads every `events.out.tfevents.*` file of a
    /// directory, so a resumed run adds one).
    fn create(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let micros = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros());
        let path = dir.join(format!(
            "events.out.tfevents.{micros}.curriculum-ssl.{}",
            std::process::id()
        ));
        let writer = syntaxdot_summary::SummaryWriter::new(File::create(&path)?)?;
        Ok(Self { writer, path })
    }

    fn scalars(
        &mut self,
        step: usize,
        values: impl IntoIterator<Item = (String, f64)>,
    ) -> std::io::Result<()> {
        for (tag, value) in values {
            self.writer.write_scalar(tag, step as i64, value as f32)?;
        }
        Ok(())
    }
}

/// What a run reports: its two CSV files, its TensorBoard events, its progress bar and its log
/// lines.
#[derive(Debug)]
pub(crate) struct RunLog {
    steps: CsvFile,
    epochs: CsvFile,
    progress_bar: bool,
    bar: ProgressBar,
    events: Option<Events>,
    events_dir: PathBuf,
    /// The 1-based global step of the last step written.
    last_step: usize,
    total_steps: usize,
    flushed: Instant,
    reported: Instant,
    flush_every: Duration,
}

impl RunLog {
    /// The log of the run in `run_dir`; the bar is drawn if `progress_bar` and standard error is
    /// a terminal.
    pub(crate) fn new(run_dir: &Path, progress_bar: bool) -> Self {
        Self {
            steps: CsvFile::new(run_dir.join(files::STEPS)),
            epochs: CsvFile::new(run_dir.join(files::EPOCHS)),
            progress_bar,
            bar: ProgressBar::hidden(),
            events: None,
            events_dir: run_dir.join(TENSORBOARD_DIR),
            last_step: 0,
            total_steps: 0,
            flushed: Instant::now(),
            reported: Instant::now(),
            flush_every: FLUSH_EVERY,
        }
    }

    /// How often step rows reach the disk within an epoch ([`FLUSH_EVERY`] by default).
    #[cfg(test)]
    pub(crate) fn with_flush_every(mut self, every: Duration) -> Self {
        self.flush_every = every;
        self
    }

    /// Writes scalars to the event file (opened on first use). A run does not stop for its
    /// TensorBoard file: an error is logged once and the events are off for the rest of it.
    fn events(&mut self, step: usize, values: Vec<(String, f64)>) {
        if self.events.is_none() {
            if self.events_dir.as_os_str().is_empty() {
                return;
            }
            match Events::create(&self.events_dir) {
                Ok(events) => self.events = Some(events),
                Err(e) => {
                    log::warn!("TensorBoard events off: {}: {e}", self.events_dir.display());
                    self.events_dir = PathBuf::new();
                    return;
                }
            }
        }
        let events = self.events.as_mut().expect("opened above");
        if let Err(e) = events.scalars(step, values) {
            log::warn!("TensorBoard events off: {}: {e}", events.path.display());
            self.events = None;
            self.events_dir = PathBuf::new();
        }
    }

    /// Checks that the run's logs are logs (their first columns), before a resume rewrites
    /// anything.
    ///
    /// # Errors
    /// Naming a file that is not.
    pub(crate) fn check(&self) -> Result<(), TrainError> {
        self.steps.check_first_column("step")?;
        self.epochs.check_first_column("epoch")
    }

    /// Drops the rows written after a checkpoint taken at `steps` steps and `epochs` epochs.
    ///
    /// # Errors
    /// If a file cannot be read or rewritten.
    /// A log that lacks rows the checkpoint covers (its process was killed before they
    /// reached the disk: runs written before the epoch's rows were synced ahead of its
    /// checkpoint) is named in a warning: those rows cannot be rebuilt (the losses are kept
    /// nowhere else), and the run goes on from the checkpoint.
    pub(crate) fn resume_at(&mut self, steps: usize, epochs: usize) -> Result<(), TrainError> {
        self.check()?;
        let kept_steps = self.steps.truncate_to(steps)?;
        let kept_epochs = self.epochs.truncate_to(epochs)?;
        for (file, kept, count, what) in [
            (&self.steps, kept_steps, steps, "steps"),
            (&self.epochs, kept_epochs, epochs, "epochs"),
        ] {
            if let Some(warning) = missing_rows(file.path(), kept, count, what) {
                log::warn!("{warning}");
            }
        }
        Ok(())
    }

    /// Starts the bar of a run of `total_steps` steps, `first_step` of them already done.
    pub(crate) fn start(&mut self, total_steps: usize, first_step: usize) {
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
        self.total_steps = total_steps;
        self.last_step = first_step;
        self.flushed = Instant::now();
        self.reported = Instant::now();
    }

    /// Writes a step's row and moves the bar.
    ///
    /// # Errors
    /// On I/O errors, or if the columns differ from the file's.
    pub(crate) fn step(
        &mut self,
        record: &StepRecord,
        total_epochs: usize,
    ) -> Result<(), TrainError> {
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
        self.last_step = record.step + 1;
        let mut scalars = vec![
            ("train/loss".to_string(), record.loss),
            ("train/lr".to_string(), record.lr),
            ("train/images_per_s".to_string(), record.images_per_s),
        ];
        scalars.extend(record.stats.iter().map(|(n, v)| (format!("train/{n}"), *v)));
        self.events(self.last_step, scalars);
        // Rows reach the disk every few seconds, not only at the end of an epoch; and where no
        // bar is drawn (output to a file), a progress line now and then.
        if self.flushed.elapsed() >= self.flush_every {
            self.steps.flush()?;
            self.flushed = Instant::now();
        }
        if self.bar.is_hidden() && self.reported.elapsed() >= PROGRESS_EVERY {
            self.reported = Instant::now();
            log::info!(
                "epoch {}/{total_epochs}, step {}/{}: loss {:.4}, lr {:.3e}{knobs}, {:.1} images/s",
                record.epoch + 1,
                record.step + 1,
                self.total_steps,
                record.loss,
                record.lr,
                record.images_per_s
            );
        }
        Ok(())
    }

    /// Writes an epoch's row, flushes both files to the disk and logs the epoch's line
    /// ([`RunLog::epoch_row`], then [`RunLog::epoch_line`]).
    ///
    /// # Errors
    /// On I/O errors, or if the columns differ from the file's.
    #[cfg(test)]
    pub(crate) fn epoch(
        &mut self,
        record: &EpochRecord,
        total_epochs: usize,
    ) -> Result<(), TrainError> {
        self.epoch_row(record)?;
        self.epoch_line(record, total_epochs);
        Ok(())
    }

    /// Writes an epoch's row and brings both files to the disk (flushed and synced). The trainer
    /// calls it before the epoch's checkpoint is committed, so that a checkpoint on disk is never
    /// ahead of its logs: a process killed in between leaves rows after the last checkpoint,
    /// which a resume drops.
    ///
    /// # Errors
    /// On I/O errors, or if the columns differ from the file's.
    pub(crate) fn epoch_row(&mut self, record: &EpochRecord) -> Result<(), TrainError> {
        self.epochs.append(&record.columns())?;
        self.flush()?;
        self.steps.sync()?;
        self.epochs.sync()
    }

    /// Makes the step rows written so far durable (flushed and `fsync`ed): before a checkpoint
    /// in the middle of an epoch, which must never be ahead of the logs.
    ///
    /// # Errors
    /// On I/O errors.
    pub(crate) fn sync_steps(&mut self) -> Result<(), TrainError> {
        self.steps.flush()?;
        self.steps.sync()
    }

    /// The epoch's TensorBoard scalars and its log line (with the checkpoint written, if any).
    pub(crate) fn epoch_line(&mut self, record: &EpochRecord, total_epochs: usize) {
        let mut scalars = vec![
            ("epoch/mean_loss".to_string(), record.mean_loss),
            ("epoch/images_per_s".to_string(), record.images_per_s),
        ];
        scalars.extend(record.stats.iter().map(|(n, v)| (format!("epoch/{n}"), *v)));
        for (name, cell) in &record.columns {
            if let Cell::Value(v) | Cell::Rounded(v, _) = cell {
                scalars.push((format!("epoch/{name}"), *v));
            }
        }
        self.events(self.last_step, scalars);
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
    }

    /// A log line that does not tangle with the bar.
    pub(crate) fn info(&self, line: &str) {
        self.bar.suspend(|| log::info!("{line}"));
    }

    /// Flushes both files.
    ///
    /// # Errors
    /// On I/O errors.
    pub(crate) fn flush(&mut self) -> Result<(), TrainError> {
        self.steps.flush()?;
        self.epochs.flush()
    }

    /// Ends the bar (at the end of a call of `fit`, or when it fails) and flushes the files.
    ///
    /// # Errors
    /// On I/O errors.
    pub(crate) fn finish(&mut self) -> Result<(), TrainError> {
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

    /// A log that ends before its checkpoint (a process killed between the two, before the
    /// rows were synced ahead of the checkpoint) is named with the rows it lacks.
    #[test]
    fn a_log_behind_its_checkpoint_is_named_with_the_rows_it_lacks() {
        let dir = scratch("behind");
        let mut log = RunLog::new(&dir, false);
        for s in 0..3 {
            log.step(&step(s, s as f64), 2).unwrap();
        }
        log.finish().unwrap();
        let mut steps = CsvFile::new(dir.join(files::STEPS));
        assert_eq!(steps.truncate_to(5).unwrap(), 3);
        let warning = missing_rows(steps.path(), 3, 5, "steps").unwrap();
        assert!(
            warning.contains("steps.csv: the rows of steps 4-5 are missing"),
            "{warning}"
        );
        let one = missing_rows(steps.path(), 4, 5, "steps").unwrap();
        assert!(one.contains("the rows of step 5 are missing"), "{one}");
        assert_eq!(missing_rows(steps.path(), 5, 5, "steps"), None);
        // Rows after the checkpoint are dropped, and the highest kept is what is reported.
        assert_eq!(steps.truncate_to(2).unwrap(), 2);
        // No file: nothing kept.
        assert_eq!(
            CsvFile::new(dir.join("none.csv")).truncate_to(3).unwrap(),
            0
        );
    }

    /// A log whose column names a kill cut short (or left empty) passes the check and starts
    /// again; another file's first line is still refused.
    #[test]
    fn column_names_cut_by_a_kill_start_the_log_again() {
        let dir = scratch("cut-header");
        let path = dir.join(files::STEPS);
        for cut in ["", "s", "ste"] {
            fs::write(&path, cut).unwrap();
            let mut steps = CsvFile::new(path.clone());
            steps.check_first_column("step").unwrap();
            assert_eq!(steps.truncate_to(3).unwrap(), 0);
            assert_eq!(fs::read(&path).unwrap(), b"");
        }
        for other in ["epo", "x,y", "step2"] {
            fs::write(&path, other).unwrap();
            let e = CsvFile::new(path.clone())
                .check_first_column("step")
                .unwrap_err();
            assert!(matches!(e, TrainError::Run { .. }), "{other}: {e}");
        }
    }

    /// An epochs.csv written before the kNN monitor named each setting once (`knn16_top1` twice
    /// on a bank of 16 images) resumes: the column is kept once, its first, and the resumed
    /// run's rows (which name it once) follow.
    #[test]
    fn a_column_named_twice_is_kept_once_on_resume() {
        let dir = scratch("twice");
        let path = dir.join(files::EPOCHS);
        fs::write(
            &path,
            "epoch,loss,knn16_top1,knn16_top1,lr\n1,2.5,0.25,0.25,0.1\n2,2.0,0.5,0.5,0.05\n\
             3,1.5,0.75,0.75,0.01\n",
        )
        .unwrap();
        let mut epochs = CsvFile::new(path.clone());
        assert_eq!(epochs.truncate_to(2).unwrap(), 2);
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            "epoch,loss,knn16_top1,lr\n1,2.5,0.25,0.1\n2,2.0,0.5,0.05\n"
        );
        let row = |epoch: usize| -> Vec<Column> {
            vec![
                ("epoch".into(), Cell::Count(epoch)),
                ("loss".into(), Cell::Value(1.25)),
                ("knn16_top1".into(), Cell::Value(0.875)),
                ("lr".into(), Cell::Value(0.01)),
            ]
        };
        epochs.append(&row(3)).unwrap();
        epochs.flush().unwrap();
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            "epoch,loss,knn16_top1,lr\n1,2.5,0.25,0.1\n2,2.0,0.5,0.05\n3,1.25,0.875,0.01\n"
        );
        fs::remove_dir_all(&dir).unwrap();
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

    /// The masked CRC-32C of TensorBoard's records, bit by bit (independent of the writer's
    /// table-driven one).
    fn masked_crc32c(data: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &byte in data {
            crc ^= u32::from(byte);
            for _ in 0..8 {
                crc = if crc & 1 == 1 {
                    (crc >> 1) ^ 0x82F6_3B78
                } else {
                    crc >> 1
                };
            }
        }
        let crc = !crc;
        (crc.rotate_right(15)).wrapping_add(0xA282_EAD8)
    }

    fn varint(bytes: &[u8], at: &mut usize) -> u64 {
        let mut value = 0u64;
        let mut shift = 0;
        loop {
            let b = bytes[*at];
            *at += 1;
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return value;
            }
            shift += 7;
        }
    }

    /// The `(step, tag, value)` scalars of an event file, read as TensorBoard reads it: framed
    /// records with checked CRCs, each an `Event` protobuf (step = field 2, summary = field 5
    /// holding `Value`s with tag = field 1 and simple_value = field 2).
    fn read_events(path: &Path) -> (usize, Vec<(i64, String, f32)>) {
        let bytes = std::fs::read(path).unwrap();
        let (mut at, mut records, mut scalars) = (0, 0, Vec::new());
        while at < bytes.len() {
            let len_bytes = &bytes[at..at + 8];
            let len = u64::from_le_bytes(len_bytes.try_into().unwrap()) as usize;
            let crc = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap());
            assert_eq!(crc, masked_crc32c(len_bytes), "length CRC");
            let data = &bytes[at + 12..at + 12 + len];
            let crc = u32::from_le_bytes(bytes[at + 12 + len..at + 16 + len].try_into().unwrap());
            assert_eq!(crc, masked_crc32c(data), "data CRC");
            at += 16 + len;
            records += 1;
            let (mut i, mut step) = (0, 0i64);
            while i < data.len() {
                let key = varint(data, &mut i);
                match (key >> 3, key & 7) {
                    (2, 0) => step = varint(data, &mut i) as i64,
                    (5, 2) => {
                        let end = varint(data, &mut i) as usize + i;
                        while i < end {
                            assert_eq!(varint(data, &mut i), (1 << 3) | 2, "Summary.value");
                            let value_end = varint(data, &mut i) as usize + i;
                            let (mut tag, mut value) = (String::new(), f32::NAN);
                            while i < value_end {
                                match varint(data, &mut i) {
                                    0x0a => {
                                        let n = varint(data, &mut i) as usize;
                                        tag = String::from_utf8(data[i..i + n].to_vec()).unwrap();
                                        i += n;
                                    }
                                    0x15 => {
                                        value =
                                            f32::from_le_bytes(data[i..i + 4].try_into().unwrap());
                                        i += 4;
                                    }
                                    other => panic!("unexpected Value field {other}"),
                                }
                            }
                            scalars.push((step, tag, value));
                        }
                    }
                    (_, 1) => i += 8,
                    (_, 0) => {
                        varint(data, &mut i);
                    }
                    (_, 2) => i += varint(data, &mut i) as usize,
                    other => panic!("unexpected wire type {other:?}"),
                }
            }
        }
        (records, scalars)
    }

    #[test]
    fn steps_reach_the_disk_within_an_epoch_and_tensorboard_reads_every_number() {
        let dir = scratch("events");
        let mut log = RunLog::new(&dir, false).with_flush_every(Duration::ZERO);
        log.start(4, 0);
        log.step(&step(0, 1.5), 2).unwrap();
        log.step(&step(1, 1.25), 2).unwrap();
        // No epoch has ended, nothing has been finished: the rows are on disk.
        let text = std::fs::read_to_string(dir.join(files::STEPS)).unwrap();
        assert_eq!(text.lines().count(), 3, "{text}");
        let epoch = EpochRecord {
            epoch: 0,
            mean_loss: 1.375,
            lr: 0.0125,
            images_per_s: 50.0,
            seconds: 2.0,
            stats: Vec::new(),
            columns: vec![
                ("knn20_top1".into(), Cell::Rounded(0.75, 4)),
                ("curation_rejected".into(), Cell::Empty),
            ],
            notes: Vec::new(),
            checkpoint: None,
        };
        log.epoch(&epoch, 2).unwrap();
        let files: Vec<PathBuf> = std::fs::read_dir(dir.join(TENSORBOARD_DIR))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(files.len(), 1);
        let name = files[0].file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with("events.out.tfevents."), "{name}");
        let (records, scalars) = read_events(&files[0]);
        // The file-version record, four scalars per step, three at the epoch (no empty cell).
        assert_eq!(records, 1 + 2 * 4 + 3);
        let expected = [
            (1, "train/loss", 1.5f32),
            (1, "train/lr", 0.0125),
            (1, "train/images_per_s", 100.0),
            (1, "train/mixup_lambda", 0.2),
            (2, "train/loss", 1.25),
            (2, "train/lr", 0.0125),
            (2, "train/images_per_s", 100.0),
            (2, "train/mixup_lambda", 0.2),
            (2, "epoch/mean_loss", 1.375),
            (2, "epoch/images_per_s", 50.0),
            (2, "epoch/knn20_top1", 0.75),
        ];
        let got: Vec<(i64, &str, f32)> = scalars
            .iter()
            .map(|(s, t, v)| (*s, t.as_str(), *v))
            .collect();
        assert_eq!(got, expected);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
