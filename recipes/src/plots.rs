//! The pictures of a run: one PNG per logged quantity, drawn from `steps.csv` and `epochs.csv`
//! after training — the loss, the learning rate, every statistic and scheduled knob over the
//! steps, the kNN accuracies and the selection counts over the epochs.
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
struct Table {
    names: Vec<String>,
    rows: Vec<Vec<Option<f64>>>,
}

impl Table {
    fn read(path: &Path) -> Result<Self> {
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

    /// `(x, y)` points of column `y` against column `x`, where both have a value.
    fn series(&self, x: usize, y: usize) -> Vec<(f64, f64)> {
        self.rows
            .iter()
            .filter_map(|r| Some((r.get(x).copied()??, r.get(y).copied()??)))
            .filter(|(_, v)| v.is_finite())
            .collect()
    }
}

/// One line plot of `series` (name, points) into `path`.
fn draw(
    path: &Path,
    title: &str,
    x_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<()> {
    register_font();
    let points = series.iter().flat_map(|(_, s)| s.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in points {
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let pad = if y1 > y0 {
        0.05 * (y1 - y0)
    } else {
        0.5 * y0.abs().max(1e-3)
    };
    let (y0, y1) = (y0 - pad, y1 + pad);
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    let error = |e: &dyn std::fmt::Display| anyhow::anyhow!("drawing {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| error(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(|e| error(&e))?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|e| error(&e))?;
    let colours = [BLUE, RED, GREEN, MAGENTA, CYAN, BLACK];
    for (i, (name, points)) in series.iter().enumerate() {
        let colour = colours[i % colours.len()];
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                colour.stroke_width(2),
            ))
            .map_err(|e| error(&e))?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], colour));
    }
    if series.len() > 1 {
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

/// Draws the plots of the run in `run_dir` into `run_dir/plots/`; returns their paths.
///
/// # Errors
/// If a log cannot be read or a picture cannot be written.
pub fn plot_run(run_dir: &Path) -> Result<Vec<PathBuf>> {
    let out = run_dir.join("plots");
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let mut written = Vec::new();
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
        let path = out.join(format!("{name}.png"));
        draw(&path, name, "step", &[(name.clone(), points)])?;
        written.push(path);
    }
    let epochs_file = run_dir.join("epochs.csv");
    if epochs_file.is_file() {
        let epochs = Table::read(&epochs_file)?;
        let epoch = epochs.names.iter().position(|n| n == "epoch").unwrap_or(0);
        let knn: Vec<(String, Vec<(f64, f64)>)> = epochs
            .names
            .iter()
            .enumerate()
            .filter(|(_, n)| n.starts_with("knn") && n.ends_with("_top1"))
            .map(|(i, n)| {
                let percent = epochs
                    .series(epoch, i)
                    .into_iter()
                    .map(|(x, y)| (x, 100.0 * y));
                (n.clone(), percent.collect::<Vec<_>>())
            })
            .filter(|(_, s)| !s.is_empty())
            .collect();
        if !knn.is_empty() {
            let path = out.join("knn_top1.png");
            draw(&path, "kNN top-1 (%)", "epoch", &knn)?;
            written.push(path);
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
                let path = out.join(format!("epoch_{name}.png"));
                draw(&path, name, "epoch", &[(name.clone(), points)])?;
                written.push(path);
            }
        }
    }
    Ok(written)
}
