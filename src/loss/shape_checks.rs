//! The shape checks the losses run on their inputs: a shape that cannot be combined is a bug in
//! the calling training step, and the panic names the loss and both shapes.

/// Panics with a message naming `loss`, both arguments and their shapes unless they are equal.
pub(crate) fn assert_same_shape<const D: usize>(
    loss: &str,
    a: (&str, [usize; D]),
    b: (&str, [usize; D]),
) {
    assert!(
        a.1 == b.1,
        "{loss}: `{}` has shape {:?} but `{}` has shape {:?}; they must be equal",
        a.0,
        a.1,
        b.0,
        b.1
    );
}

/// Panics unless the two-view batch has at least `min` rows.
pub(crate) fn assert_min_batch(loss: &str, name: &str, dims: [usize; 2], min: usize) {
    assert!(
        dims[0] >= min,
        "{loss}: `{name}` has shape {dims:?}; at least {min} rows are needed"
    );
}
