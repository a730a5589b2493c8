//! The input checks the SPL-ADVisE pieces share: finite values, matching lengths.

use crate::error::SplAdviseError;

/// Converts host values to `f64`, rejecting NaN and infinities with the position of the first.
pub(crate) fn finite_f64<T: Copy + Into<f64>>(
    what: &'static str,
    values: &[T],
) -> Result<Vec<f64>, SplAdviseError> {
    values
        .iter()
        .enumerate()
        .map(|(index, &v)| {
            let value: f64 = v.into();
            if value.is_finite() {
                Ok(value)
            } else {
                Err(SplAdviseError::NonFinite { what, index, value })
            }
        })
        .collect()
}

/// Checks that `got == expected`, naming `what` otherwise.
pub(crate) fn same_length(
    what: &'static str,
    expected: usize,
    got: usize,
) -> Result<(), SplAdviseError> {
    if got == expected {
        Ok(())
    } else {
        Err(SplAdviseError::Length {
            what,
            expected,
            got,
        })
    }
}
