//! A one-line progress bar on standard error: epoch, step, loss, learning rate, images/s and the
//! estimated time left. Drawn only when standard error is a terminal; otherwise (logs, CI) each
//! epoch's summary goes through `log` instead.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

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

/// The bar of a run of `total_steps` steps.
#[derive(Debug)]
pub struct ProgressBar {
    enabled: bool,
    total_steps: usize,
    started: Instant,
    first_step: usize,
    last_draw: Option<Instant>,
}

impl ProgressBar {
    /// A bar over `total_steps`, starting at `first_step` (after a resume); drawn if `enabled`
    /// and standard error is a terminal.
    pub fn new(enabled: bool, total_steps: usize, first_step: usize) -> Self {
        Self {
            enabled: enabled && std::io::stderr().is_terminal(),
            total_steps,
            started: Instant::now(),
            first_step,
            last_draw: None,
        }
    }

    /// Estimated time left after `step` steps (0-based index of the step just done).
    pub fn eta(&self, step: usize) -> Duration {
        let done = (step + 1).saturating_sub(self.first_step).max(1);
        let left = self.total_steps.saturating_sub(step + 1);
        self.started.elapsed().mul_f64(left as f64 / done as f64)
    }

    /// Redraws the line (at most ten times a second), with the method's statistics and the
    /// scheduled knobs.
    #[allow(clippy::too_many_arguments)]
    pub fn update(
        &mut self,
        epoch: usize,
        epochs: usize,
        step: usize,
        loss: f64,
        lr: f64,
        images_per_s: f64,
        values: &[(String, f64)],
    ) {
        if !self.enabled {
            return;
        }
        let now = Instant::now();
        if self
            .last_draw
            .is_some_and(|t| now - t < Duration::from_millis(100))
            && step + 1 < self.total_steps
        {
            return;
        }
        self.last_draw = Some(now);
        let width = 24;
        let filled = ((step + 1) * width / self.total_steps.max(1)).min(width);
        let bar: String = "█".repeat(filled) + &"░".repeat(width - filled);
        let values: String = values
            .iter()
            .map(|(name, v)| format!(" {name} {v:.4}"))
            .collect();
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r\x1b[2Kepoch {}/{epochs} {bar} {}/{} loss {loss:.4} lr {lr:.3e}{values} {images_per_s:.1} img/s ETA {}",
            epoch + 1,
            step + 1,
            self.total_steps,
            format_duration(self.eta(step))
        );
        let _ = err.flush();
    }

    /// Ends the line (before a log message or at the end of the run).
    pub fn finish_line(&mut self) {
        if self.enabled && self.last_draw.is_some() {
            eprintln!();
            self.last_draw = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_hours_minutes_seconds() {
        assert_eq!(format_duration(Duration::from_secs(3)), "3s");
        assert_eq!(format_duration(Duration::from_secs(123)), "2m03s");
        assert_eq!(format_duration(Duration::from_secs(3723)), "1h02m03s");
    }
}
