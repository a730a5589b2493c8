//! The pictures of a run: one PNG per logged quantity, drawn from `steps.csv` and `epochs.csv`
//! after training — the loss, the learning rate, every statistic and scheduled knob over the
//! steps (with a smoothed line over the raw one), the kNN accuracies over the epochs from the
//! network at initialisation (epoch 0) beside the raw-pixel baseline, and the selection counts.
//! A quantity that never changed gets no plot: the summary names its value. [`compare_runs`]
//! draws several runs' curves on shared axes.
//!
//! Drawn with plotters' bitmap backend; the text uses DejaVu Sans, embedded in the binary
//! (`assets/DejaVuSans.ttf`, its licence beside it), so no system font or library is needed.

use std::path::{Path, PathBuf};
use std::sync::Once;

use anyhow::{Context, Result};
use plotters::prelude::*;

static FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
static REGISTER: Once = Once::new();

/// Width and height of every plot, in pixels.
pub const SIZE: (u32, u32) = (800, 480);

fn register_font() {
    REGISTER.call_once(|| {
        // The embedded font is valid; a failure would only lose the labels' text.
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
    });
}

/// A CSV file as its column names and, per column, the values of the rows that have one.
pub(crate) struct Table {
    names: Vec<String>,
    rows: Vec<Vec<Option<f64>>>,
}

impl Table {
    /// Reads `path`.
    pub(crate) fn read(path: &Path) -> Result<Self> {
        let mut reader =
            csv::Reader::from_path(path).with_context(|| format!("reading {}", path.display()))?;
        let names = reader.headers()?.iter().map(str::to_string).collect();
        let mut rows = Vec::new();
        for row in reader.records() {
            let row = row.with_context(|| format!("reading {}", path.display()))?;
            rows.push(row.iter().map(|v| v.parse::<f64>().ok()).collect());
        }
        Ok(Self { names, rows })
    }

    /// Reads `path`, or an empty table when there is no such file (a run without epochs yet,
    /// without evaluations).
    pub(crate) fn read_if_any(path: &Path) -> Result<Self> {
        if path.is_file() {
            Self::read(path)
        } else {
            Ok(Self {
                names: Vec::new(),
                rows: Vec::new(),
            })
        }
    }

    /// The column names.
    pub(crate) fn names(&self) -> &[String] {
        &self.names
    }

    /// The column called `name`, a cell per row (`None` where empty or not a number); empty
    /// when there is no such column.
    pub(crate) fn column(&self, name: &str) -> Vec<Option<f64>> {
        let Some(i) = self.names.iter().position(|n| n == name) else {
            return Vec::new();
        };
        self.rows
            .iter()
            .map(|r| r.get(i).copied().flatten())
            .collect()
    }

    /// A run's training time and speed from its epochs.csv (this table): the seconds of its
    /// epochs summed (each epoch's wall time, the kNN monitor and checkpoints excluded), and the
    /// images it trained over that time, an epoch's images being its `images_per_s × seconds`
    /// (its images over its wall time, as the trainer wrote it). Not the mean of the epochs'
    /// rates: an epoch twice as slow weighs twice as long. A run without timed epochs: `(0, 0)`.
    pub(crate) fn training_speed(&self) -> (f64, f64) {
        let (mut seconds, mut images) = (0.0, 0.0);
        for (rate, s) in self
            .column("images_per_s")
            .into_iter()
            .zip(self.column("seconds"))
        {
            if let (Some(rate), Some(s)) = (rate, s) {
                seconds += s;
                images += rate * s;
            }
        }
        let rate = if seconds > 0.0 { images / seconds } else { 0.0 };
        (seconds, rate)
    }

    /// Every value of the column called `name`, in row order.
    pub(crate) fn values(&self, name: &str) -> Vec<f64> {
        let Some(i) = self.names.iter().position(|n| n == name) else {
            return Vec::new();
        };
        self.rows
            .iter()
            .filter_map(|r| r.get(i).copied()?)
            .collect()
    }

    /// `(x, y)` points of column `y` against column `x`, where both have a value.
    fn series(&self, x: usize, y: usize) -> Vec<(f64, f64)> {
        self.rows
            .iter()
            .filter_map(|r| Some((r.get(x).copied()??, r.get(y).copied()??)))
            .filter(|(_, v)| v.is_finite())
            .collect()
    }
}

/// One line of a plot: its name, its points, and how it is drawn.
pub struct Line {
    /// The legend's name.
    pub name: String,
    /// `(x, y)` points.
    pub points: Vec<(f64, f64)>,
    /// A thin, pale line (the raw values under a smoothed one).
    pub faint: bool,
    /// A dashed line in the colour of the line after it (a baseline).
    pub dashed: bool,
    /// A shaded band around the line, `(low, high)` at each of its points (an interval over
    /// seeds); empty for none.
    pub band: Vec<(f64, f64)>,
}

impl Line {
    fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Self {
            name: name.into(),
            points,
            faint: false,
            dashed: false,
            band: Vec::new(),
        }
    }

    /// A line with a shaded band, `(low, high)` at each point.
    pub fn with_band(
        name: impl Into<String>,
        points: Vec<(f64, f64)>,
        band: Vec<(f64, f64)>,
    ) -> Self {
        Self {
            band,
            ..Self::new(name, points)
        }
    }
}

/// The exponential moving average TensorBoard draws (weight `w` on the past, debiased so the
/// first points are not pulled to zero).
pub fn smooth(points: &[(f64, f64)], w: f64) -> Vec<(f64, f64)> {
    let mut average = 0.0;
    let mut weight = 0.0;
    points
        .iter()
        .map(|&(x, y)| {
            average = w * average + (1.0 - w) * y;
            weight = w * weight + (1.0 - w);
            (x, average / weight)
        })
        .collect()
}

/// The series, and under it its smoothed line when it has enough points to be noisy.
fn with_smoothing(name: &str, points: Vec<(f64, f64)>) -> Vec<Line> {
    if points.len() < 20 {
        return vec![Line::new(name, points)];
    }
    let smoothed = smooth(&points, 0.9);
    vec![
        Line {
            name: format!("{name} (raw)"),
            points,
            faint: true,
            dashed: false,
            band: Vec::new(),
        },
        Line::new(format!("{name} (smoothed)"), smoothed),
    ]
}

/// The bitmap backend's error (plotters does not re-export its name).
type BitMapBackendError = <BitMapBackend<'static> as DrawingBackend>::ErrorType;

/// A drawing error in words: the system's for a file that cannot be written (plotters' own
/// `Display` is its `Debug`).
fn drawing_error(e: &DrawingAreaErrorKind<BitMapBackendError>) -> String {
    use plotters_backend::DrawingErrorKind;
    match e {
        DrawingAreaErrorKind::BackendError(DrawingErrorKind::DrawingError(backend)) => {
            match backend {
                BitMapBackendError::IOError(io) => io.to_string(),
                BitMapBackendError::ImageError(image) => image.to_string(),
                BitMapBackendError::InvalidBuffer => "an invalid pixel buffer".into(),
            }
        }
        DrawingAreaErrorKind::BackendError(DrawingErrorKind::FontError(font)) => {
            format!("a font error: {font}")
        }
        DrawingAreaErrorKind::SharingError => "the drawing area is in use".into(),
        DrawingAreaErrorKind::LayoutError => "the layout does not fit".into(),
    }
}

/// One line plot of `lines` into `path`, with its axes named. Written beside `path` and
/// renamed over it ([`crate::run_files::write_replacing`]): a picture
/// that fails leaves the previous one whole, and a link at `path` is replaced, not written
/// through.
pub fn draw(path: &Path, title: &str, x_label: &str, y_label: &str, lines: &[Line]) -> Result<()> {
    crate::run_files::write_replacing(path, |tmp| {
        draw_into(tmp, path, title, x_label, y_label, lines)
    })
}

/// [`draw`] into the file `file`, which becomes `path` (said in an error).
fn draw_into(
    file: &Path,
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    lines: &[Line],
) -> Result<()> {
    register_font();
    let ((x0, x1), (y0, y1)) = axis_ranges(lines);
    let root = BitMapBackend::new(file, SIZE).into_drawing_area();
    let error = |e: &DrawingAreaErrorKind<BitMapBackendError>| {
        anyhow::anyhow!("drawing {}: {}", path.display(), drawing_error(e))
    };
    root.fill(&WHITE).map_err(|e| error(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(|e| error(&e))?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|e| error(&e))?;
    let colours = [BLUE, RED, GREEN, MAGENTA, CYAN, BLACK];
    let mut colour_index = 0;
    for line in lines {
        // A faint or dashed line shares the colour of the line drawn after it (raw under
        // smoothed, a baseline before its curve).
        let colour = colours[colour_index % colours.len()];
        if !(line.faint || line.dashed) {
            colour_index += 1;
        }
        let style = if line.faint {
            colour.mix(0.3).stroke_width(1)
        } else if line.dashed {
            colour.mix(0.7).stroke_width(1)
        } else {
            colour.stroke_width(2)
        };
        if !line.band.is_empty() {
            chart
                .draw_series(std::iter::once(Polygon::new(
                    band_outline(line),
                    colour.mix(0.15).filled(),
                )))
                .map_err(|e| error(&e))?;
        }
        if line.dashed {
            chart
                .draw_series(DashedLineSeries::new(
                    line.points.iter().copied(),
                    10,
                    6,
                    style,
                ))
                .map_err(|e| error(&e))?
                .label(line.name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], style));
            continue;
        }
        if line.points.len() == 1 {
            chart
                .draw_series(std::iter::once(Circle::new(
                    line.points[0],
                    4,
                    colour.filled(),
                )))
                .map_err(|e| error(&e))?;
        }
        chart
            .draw_series(LineSeries::new(line.points.iter().copied(), style))
            .map_err(|e| error(&e))?
            .label(line.name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], style));
    }
    if lines.len() > 1 {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .draw()
            .map_err(|e| error(&e))?;
    }
    root.present().map_err(|e| error(&e))?;
    Ok(())
}

/// The axes' ranges `((x0, x1), (y0, y1))` that hold every line's points and bands: `x` from
/// the least to the largest (one unit wide when they are equal), `y` padded by 5 % of its span
/// (by half its magnitude, at least 5e-4, when the span is zero).
fn axis_ranges(lines: &[Line]) -> ((f64, f64), (f64, f64)) {
    let points = lines.iter().flat_map(|l| l.points.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in points {
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
    }
    for &(low, high) in lines.iter().flat_map(|l| l.band.iter()) {
        (y0, y1) = (y0.min(low), y1.max(high));
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let pad = if y1 > y0 {
        0.05 * (y1 - y0)
    } else {
        0.5 * y0.abs().max(1e-3)
    };
    ((x0, x1), (y0 - pad, y1 + pad))
}

/// The outline of a line's band: along the lows, back along the highs.
fn band_outline(line: &Line) -> Vec<(f64, f64)> {
    line.points
        .iter()
        .zip(&line.band)
        .map(|(&(x, _), &(low, _))| (x, low))
        .chain(
            line.points
                .iter()
                .zip(&line.band)
                .rev()
                .map(|(&(x, _), &(_, high))| (x, high)),
        )
        .collect()
}

/// What [`plot_run`] made: the pictures, and the quantities that never changed.
#[derive(Debug, Default)]
pub struct Plots {
    /// The PNG files.
    pub files: Vec<PathBuf>,
    /// `(name, value)` of every logged quantity that kept one value (no plot drawn).
    pub constants: Vec<(String, f64)>,
}

/// A run's kNN top-1 accuracies at initialisation (or of the raw pixels) by column name
/// (`knn20_top1`), read from `file` (absent: none).
fn knn_file(file: &Path) -> Vec<(String, f64)> {
    crate::run_files::read_knn_results(file)
        .iter()
        .map(|r| (format!("knn{}_top1", r.k), r.accuracy.top1))
        .collect()
}

/// The kNN top-1 curves of a run, in percent, each from epoch 0 (the network at initialisation)
/// when the run measured it.
fn knn_curves(run_dir: &Path, epochs: &Table) -> Vec<(String, Vec<(f64, f64)>)> {
    let epoch = epochs.names.iter().position(|n| n == "epoch").unwrap_or(0);
    let at_init = knn_file(&run_dir.join(crate::run_files::KNN_AT_INIT));
    epochs
        .names
        .iter()
        .enumerate()
        .filter(|(_, n)| n.starts_with("knn") && n.ends_with("_top1"))
        .map(|(i, n)| {
            let mut points: Vec<(f64, f64)> = at_init
                .iter()
                .filter(|(name, _)| name == n)
                .map(|(_, v)| (0.0, 100.0 * v))
                .collect();
            points.extend(
                epochs
                    .series(epoch, i)
                    .into_iter()
                    .map(|(x, y)| (x, 100.0 * y)),
            );
            (n.clone(), points)
        })
        .filter(|(_, s)| !s.is_empty())
        .collect()
}

/// Whether every value of the series is the same.
fn constant(points: &[(f64, f64)]) -> Option<f64> {
    let first = points.first()?.1;
    points.iter().all(|p| p.1 == first).then_some(first)
}

/// Draws the plots of the run in `run_dir` into `run_dir/plots/`.
///
/// # Errors
/// If a log cannot be read or a picture cannot be written.
pub fn plot_run(run_dir: &Path) -> Result<Plots> {
    let out = run_dir.join("plots");
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let mut plots = Plots::default();
    let steps = Table::read(&run_dir.join("steps.csv"))?;
    let step = steps.names.iter().position(|n| n == "step").unwrap_or(0);
    for (i, name) in steps.names.iter().enumerate() {
        if matches!(name.as_str(), "step" | "epoch" | "images_per_s") {
            continue;
        }
        let points = steps.series(step, i);
        if points.is_empty() {
            continue;
        }
        if let Some(value) = constant(&points).filter(|_| points.len() > 1) {
            plots.constants.push((name.clone(), value));
            continue;
        }
        let path = out.join(format!("{name}.png"));
        draw(&path, name, "step", name, &with_smoothing(name, points))?;
        plots.files.push(path);
    }
    let epochs_file = run_dir.join("epochs.csv");
    if epochs_file.is_file() {
        let epochs = Table::read(&epochs_file)?;
        let epoch = epochs.names.iter().position(|n| n == "epoch").unwrap_or(0);
        let curves = knn_curves(run_dir, &epochs);
        if !curves.is_empty() {
            let last_epoch = curves
                .iter()
                .flat_map(|(_, s)| s.iter().map(|p| p.0))
                .fold(1.0, f64::max);
            let mut lines: Vec<Line> = Vec::new();
            let raw = knn_file(&run_dir.join(crate::run_files::KNN_RAW_PIXELS));
            for (name, points) in curves {
                if let Some((_, v)) = raw.iter().find(|(n, _)| *n == name) {
                    lines.push(Line {
                        name: format!("{name}, raw pixels"),
                        points: vec![(0.0, 100.0 * v), (last_epoch, 100.0 * v)],
                        faint: false,
                        dashed: true,
                        band: Vec::new(),
                    });
                }
                lines.push(Line::new(name, points));
            }
            let path = out.join("knn_top1.png");
            draw(
                &path,
                "kNN top-1 (epoch 0: at initialisation)",
                "epoch",
                "top-1 accuracy (%)",
                &lines,
            )?;
            plots.files.push(path);
        }
        for (i, name) in epochs.names.iter().enumerate() {
            if name == "mean_loss"
                || name.starts_with("curation_")
                || name.starts_with("test_")
                || name == "selected_fraction"
            {
                let points = epochs.series(epoch, i);
                if points.is_empty() {
                    continue;
                }
                if let Some(value) = constant(&points).filter(|_| points.len() > 1) {
                    plots.constants.push((format!("epoch {name}"), value));
                    continue;
                }
                let path = out.join(format!("epoch_{name}.png"));
                draw(
                    &path,
                    name,
                    "epoch",
                    name,
                    &[Line::new(name.clone(), points)],
                )?;
                plots.files.push(path);
            }
        }
    }
    Ok(plots)
}

/// The runs' curves on shared axes, into `out`: the loss per step (smoothed) and each kNN
/// top-1 per epoch that the runs measured, one line per run named `names[i]`. Returns the
/// files written.
///
/// # Errors
/// If a run's logs cannot be read or a picture cannot be written.
pub fn compare_runs(runs: &[PathBuf], names: &[String], out: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut written = Vec::new();
    let mut losses = Vec::new();
    let mut knn: Vec<(String, Vec<Line>)> = Vec::new();
    for (run, name) in runs.iter().zip(names) {
        let steps = Table::read(&run.join("steps.csv"))?;
        let step = steps.names.iter().position(|n| n == "step").unwrap_or(0);
        if let Some(loss) = steps.names.iter().position(|n| n == "loss") {
            let points = steps.series(step, loss);
            let points = if points.len() >= 20 {
                smooth(&points, 0.9)
            } else {
                points
            };
            losses.push(Line::new(name.clone(), points));
        }
        let epochs_file = run.join("epochs.csv");
        if epochs_file.is_file() {
            for (column, points) in knn_curves(run, &Table::read(&epochs_file)?) {
                let line = Line::new(name.clone(), points);
                match knn.iter_mut().find(|(c, _)| *c == column) {
                    Some((_, lines)) => lines.push(line),
                    None => knn.push((column, vec![line])),
                }
            }
        }
    }
    if !losses.is_empty() {
        let path = out.join("loss.png");
        draw(&path, "loss (smoothed)", "step", "loss", &losses)?;
        written.push(path);
    }
    for (column, lines) in knn {
        let path = out.join(format!("{column}.png"));
        draw(
            &path,
            &format!("{column} (epoch 0: at initialisation)"),
            "epoch",
            "top-1 accuracy (%)",
            &lines,
        )?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smoothing_is_a_debiased_moving_average() {
        let points = [(1.0, 1.0), (2.0, 3.0), (3.0, 3.0)];
        let s = smooth(&points, 0.5);
        // By hand, a = 0.5·a + 0.5·y and w = 0.5·w + 0.5: a = 0.5, w = 0.5 → 1; a = 1.75,
        // w = 0.75 → 7/3; a = 2.375, w = 0.875 → 19/7.
        let want = [1.0, 7.0 / 3.0, 19.0 / 7.0];
        for ((_, got), want) in s.iter().zip(want) {
            assert!((got - want).abs() < 1e-12, "{s:?}");
        }
        assert_eq!(constant(&[(1.0, 0.99), (2.0, 0.99)]), Some(0.99));
        assert_eq!(constant(&[(1.0, 0.99), (2.0, 0.98)]), None);
    }
}
