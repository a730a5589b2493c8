//! Configuration errors: a hyperparameter that cannot be used, named, and the checks that find
//! them. The bottom of the library: every module validates its configs with these.
//!
//! Hyperparameters are validated when a config is turned into the thing it configures
//! (`config.init()`), so an impossible value is reported once, by name, before any tensor work.
/// A hyperparameter that cannot be used, with the name of the field and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid `{field}`: {reason}")]
pub struct ConfigError {
    /// Name of the offending config field (as written in the config struct).
    pub field: &'static str,
    /// What is wrong with its value.
    pub reason: String,
}

impl ConfigError {
    /// Builds an error for `field` with the given explanation.
    pub fn new(field: &'static str, reason: impl Into<String>) -> Self {
        Self {
            field,
            reason: reason.into(),
        }
    }
}

/// Checks that `value` is finite and strictly positive.
pub(crate) fn positive(field: &'static str, value: f64) -> Result<(), ConfigError> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(ConfigError::new(
            field,
            format!("must be a finite number > 0, got {value}"),
        ))
    }
}

/// Checks that `value` is finite and `>= 0`.
pub(crate) fn non_negative(field: &'static str, value: f64) -> Result<(), ConfigError> {
    if value.is_finite() && value >= 0.0 {
        Ok(())
    } else {
        Err(ConfigError::new(
            field,
            format!("must be a finite number >= 0, got {value}"),
        ))
    }
}

/// Checks that `low <= value <= high` (or `low < value` when `open_low`).
pub(crate) fn in_range(
    field: &'static str,
    value: f64,
    low: f64,
    high: f64,
    open_low: bool,
) -> Result<(), ConfigError> {
    let above = if open_low { value > low } else { value >= low };
    if value.is_finite() && above && value <= high {
        Ok(())
    } else {
        let bracket = if open_low { "(" } else { "[" };
        Err(ConfigError::new(
            field,
            format!("must lie in {bracket}{low}, {high}], got {value}"),
        ))
    }
}

/// Checks that `p` is a probability.
pub(crate) fn probability(field: &'static str, p: f64) -> Result<(), ConfigError> {
    in_range(field, p, 0.0, 1.0, false)
}
