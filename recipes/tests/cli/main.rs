//! The `recipe` command line as a user meets it: exit code 2 with one `error: …` line for bad
//! input, 1 for a failure during a run, 0 otherwise, and no panic for any option at 0, 1,
//! negative, huge or NaN. Runs the real binary on a tiny IDX dataset the test writes.
//!
//! One test binary; the files are its themes.

mod common;
mod data;
mod input;
mod outputs;
mod precision;
mod processes;
mod recipes;
mod resume;
mod study;
