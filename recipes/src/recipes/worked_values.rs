//! `worked_values`: every worked value of docs/methods.md#worked-values on the selected backend.
//!
//! A quick self-check of a backend (f32 on CUDA, wgpu or the CPU): each loss is evaluated on the
//! example docs/methods.md works out by hand and compared with the float64 reference value.

use anyhow::{bail, Result};
use curriculum_ssl::loss::worked_values;

use crate::backend;
use super::RecipeEntry;

/// Largest error accepted: f32's on the CPU and wgpu, TF32's on CUDA (see the backend's).
const TOLERANCE: f64 = backend::WORKED_VALUE_TOLERANCE;

/// Prints the table on the device `--device` names and fails if a value is off by more than
/// [`TOLERANCE`].
pub fn run(device: Option<usize>) -> Result<()> {
    let device = backend::device(device)?;
    let values = worked_values::<backend::Inner>(&device);
    println!("backend: {}", backend::NAME);
    println!(
        "{:<40} {:>12} {:>12} {:>10}",
        "worked value", "expected", "computed", "error"
    );
    let mut failed = Vec::new();
    for value in &values {
        println!(
            "{:<40} {:>12.6} {:>12.6} {:>10.2e}",
            value.name,
            value.expected,
            value.computed,
            value.error()
        );
        if value.error() > TOLERANCE || !value.computed.is_finite() {
            failed.push(value.name);
        }
    }
    if !failed.is_empty() {
        bail!(
            "{} worked value(s) off by more than {TOLERANCE}: {}",
            failed.len(),
            failed.join(", ")
        );
    }
    println!("all {} worked values within {TOLERANCE}", values.len());
    Ok(())
}

/// `recipe worked_values [--device N]`: parses the arguments and runs [`run`].
pub fn run_cli(args: &[String]) -> Result<()> {
        if matches!(args, [flag] if flag == "--help" || flag == "-h") {
            println!(
                "Usage: recipe worked_values [--device N]\n\nEvaluates every loss on \
                 its worked example on the selected backend and compares it with the \
                 float64 reference (1e-4 in f32; 1e-3 on CUDA, whose matmuls use TF32); exits 1 if one \
                 differs.\n\nOptions:\n  \
                 --device N  the device to check (as the training recipes' --device)"
            );
            return Ok(());
        }
        let device = match args {
            [] => None,
            [flag, n] if flag == "--device" => Some(n.parse::<usize>().map_err(|_| {
                crate::usage::usage(format!("--device {n}: not a device number"))
            })?),
            _ => {
                return Err(crate::usage::usage(format!(
                    "recipe `worked_values` takes only --device N, got: {}",
                    args.join(" ")
                )))
            }
        };
        run(device)
}

/// The recipe of this module.
pub const RECIPES: &[RecipeEntry] = &[RecipeEntry {
    name: "worked_values",
    summary: "evaluate every loss on its worked example (docs/methods.md) on the selected backend \
                      and compare with the reference values (a backend self-check)",
    run: run_cli,
}];
