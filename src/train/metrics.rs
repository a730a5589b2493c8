//! Metrics of a run as CSV: `steps.csv` (one row per optimiser step) and `epochs.csv` (one row
//! per epoch), in the run directory. On resume the rows written after the checkpoint are
//! dropped, so the files always describe one consistent run.

use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::TrainError;

/// An append-only CSV file with a fixed header.
#[derive(Debug)]
pub struct CsvLog {
    path: PathBuf,
    header: Vec<String>,
    out: Option<BufWriter<File>>,
}

fn io_error(path: &Path, e: std::io::Error) -> TrainError {
    TrainError::Io {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

impl CsvLog {
    /// A log at `path`; nothing is written until the first row.
    pub fn new(path: PathBuf) -> Self {
        Self {
            path,
            header: Vec::new(),
            out: None,
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Keeps the rows whose first column (a step or epoch index) is below `end` and drops the
    /// rest: what a resumed run does with the rows written after its checkpoint.
    pub fn truncate_to(&mut self, end: usize) -> Result<(), TrainError> {
        self.out = None;
        if !self.path.exists() {
            return Ok(());
        }
        let text = fs::read_to_string(&self.path).map_err(|e| io_error(&self.path, e))?;
        let mut kept = String::new();
        for (i, line) in text.lines().enumerate() {
            let first = line.split(',').next().unwrap_or("");
            let keep = i == 0 || first.parse::<usize>().is_ok_and(|v| v < end);
            if keep {
                kept.push_str(line);
                kept.push('\n');
            }
        }
        if let Some(header) = text.lines().next() {
            self.header = header.split(',').map(str::to_string).collect();
        }
        super::checkpoint::write_atomic(&self.path, kept.as_bytes())
    }

    /// Appends a row; the first row of a new file writes `header` first.
    ///
    /// # Errors
    /// On I/O errors, or if `header` differs from the file's.
    pub fn append(&mut self, header: &[&str], values: &[String]) -> Result<(), TrainError> {
        if self.out.is_none() {
            let exists = self.path.exists() && !self.header.is_empty();
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)
                .map_err(|e| io_error(&self.path, e))?;
            let mut out = BufWriter::new(file);
            if !exists {
                self.header = header.iter().map(|h| h.to_string()).collect();
                writeln!(out, "{}", header.join(",")).map_err(|e| io_error(&self.path, e))?;
            }
            self.out = Some(out);
        }
        if self.header != header {
            return Err(TrainError::Io {
                path: self.path.clone(),
                reason: format!(
                    "columns {:?} differ from the file's {:?} (a resumed run with another \
                     method?)",
                    header, self.header
                ),
            });
        }
        let out = self.out.as_mut().expect("opened above");
        writeln!(out, "{}", values.join(",")).map_err(|e| io_error(&self.path, e))
    }

    /// Flushes buffered rows to disk.
    pub fn flush(&mut self) -> Result<(), TrainError> {
        if let Some(out) = self.out.as_mut() {
            out.flush().map_err(|e| io_error(&self.path, e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resumed_log_drops_the_rows_after_the_checkpoint() {
        let dir = std::env::temp_dir().join(format!("csvlog-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("steps.csv");
        let mut log = CsvLog::new(path.clone());
        for step in 0..4 {
            log.append(
                &["step", "loss"],
                &[step.to_string(), format!("{}", step * 10)],
            )
            .unwrap();
        }
        log.flush().unwrap();
        let mut resumed = CsvLog::new(path.clone());
        resumed.truncate_to(2).unwrap();
        resumed
            .append(&["step", "loss"], &["2".into(), "99".into()])
            .unwrap();
        resumed.flush().unwrap();
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            "step,loss\n0,0\n1,10\n2,99\n"
        );
        // Other columns are refused rather than mixed into the file.
        let err = resumed
            .append(&["step", "other"], &["3".into(), "1".into()])
            .unwrap_err();
        assert!(err.to_string().contains("columns"), "{err}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
