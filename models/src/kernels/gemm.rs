//! What the slice kernels share: the element types they run in ([`Real`]), a per-thread scratch
//! buffer ([`with_scratch`]), outputs filled plane by plane in parallel ([`written_planes`]) and
//! the strided GEMM call the convolutions are made of ([`gemm`], the `gemm` crate's).
//!
//! Nothing here knows of burn: the functions take and return plain slices.

use std::cell::RefCell;
use std::thread::LocalKey;

/// A fixed pseudo-random sequence for the kernels' unit tests (an LCG), values in [−1, 1).
#[cfg(test)]
pub(crate) fn test_values(len: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    (0..len)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect()
}

/// Element types the kernels run in: `f32` and `f64` (the `gemm` crate dispatches on the type).
pub trait Real:
    Copy
    + Send
    + Sync
    + 'static
    + Default
    + PartialEq
    + core::ops::AddAssign
    + core::ops::Add<Output = Self>
    + core::ops::Sub<Output = Self>
    + core::ops::Mul<Output = Self>
{
    /// The multiplicative identity.
    const ONE: Self;
    /// This thread's scratch buffer of this type (the one `with_scratch` lends).
    fn scratch() -> &'static LocalKey<RefCell<Vec<Self>>>;
    /// The value in f64 (exact).
    fn to_f64(self) -> f64;
    /// The nearest value to `v`.
    fn from_f64(v: f64) -> Self;
}
impl Real for f32 {
    const ONE: Self = 1.0;
    fn scratch() -> &'static LocalKey<RefCell<Vec<Self>>> {
        &SCRATCH_F32
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
}
impl Real for f64 {
    const ONE: Self = 1.0;
    fn scratch() -> &'static LocalKey<RefCell<Vec<Self>>> {
        &SCRATCH_F64
    }
    fn to_f64(self) -> f64 {
        self
    }
    fn from_f64(v: f64) -> Self {
        v
    }
}

/// A vector of `len` values computed plane by plane in parallel: `fill(i, plane)` writes the
/// entries of plane `i` (`plane` of them; the last may be shorter). What an output whose every
/// entry is computed needs, without the zeroing pass of `vec![0; len]` (a `memset` of the whole
/// output, about 1 % of a ResNet-18 training step for each of the outputs that use this).
///
/// # Safety
/// `fill` must write every entry of the plane it is given (`MaybeUninit::write`); the vector's
/// entries are read as initialised afterwards.
pub(crate) unsafe fn written_planes<T: Real>(
    len: usize,
    plane: usize,
    fill: impl Fn(usize, &mut [std::mem::MaybeUninit<T>]) + Sync + Send,
) -> Vec<T> {
    use rayon::prelude::*;
    let mut out: Vec<T> = Vec::with_capacity(len);
    out.spare_capacity_mut()[..len]
        .par_chunks_mut(plane.max(1))
        .enumerate()
        .for_each(|(i, chunk)| fill(i, chunk));
    // SAFETY: the capacity is `len`, and the caller's `fill` wrote all `len` entries (above).
    unsafe { out.set_len(len) };
    out
}

thread_local! {
    static SCRATCH_F32: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    static SCRATCH_F64: RefCell<Vec<f64>> = const { RefCell::new(Vec::new()) };
}

/// The products below this many multiply-adds run on one thread (`gemm`'s own threshold for
/// burn's Flex products is the same size).
pub(crate) const PARALLEL_GEMM_WORK: usize = 192 * 192 * 192;

/// Runs `f` on `N` buffers of `sizes` values whose contents are left from earlier calls (every
/// caller writes before it reads). The buffer is kept per thread and grows to the largest
/// request: a fresh multi-megabyte `Vec` per call cost a page fault per 4 KiB (7 % of a
/// ResNet-18 step in `clear_page`). A call that finds the buffer in use — a rayon worker that
/// stole another convolution while it waited inside one — gets a fresh one.
pub(crate) fn with_scratch<T: Real, R, const N: usize>(
    sizes: [usize; N],
    f: impl FnOnce([&mut [T]; N]) -> R,
) -> R {
    let total: usize = sizes.iter().sum();
    fn split<T, const N: usize>(buffer: &mut [T], sizes: [usize; N]) -> [&mut [T]; N] {
        let mut rest = buffer;
        sizes.map(|len| {
            let (piece, tail) = std::mem::take(&mut rest).split_at_mut(len);
            rest = tail;
            piece
        })
    }
    let mut f = Some(f);
    let reused = T::scratch().with(|cell| {
        let mut buffer = cell.try_borrow_mut().ok()?;
        if buffer.len() < total {
            buffer.resize(total, T::default());
        }
        let pieces = split(&mut buffer[..total], sizes);
        Some((f.take().expect("called once"))(pieces))
    });
    reused.unwrap_or_else(|| {
        let mut buffer = vec![T::default(); total];
        (f.take().expect("not called when the buffer was busy"))(split(&mut buffer, sizes))
    })
}
/// `dst[m, n] (=|+=) lhs[m, k] · rhs[k, n]` with each operand given by its strides:
/// `(row stride, column stride)`. Products of at least [`PARALLEL_GEMM_WORK`] multiply-adds
/// run on every thread.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm<T: Real>(
    [m, n, k]: [usize; 3],
    dst: &mut [T],
    accumulate: bool,
    lhs: &[T],
    lhs_strides: (usize, usize),
    rhs: &[T],
    rhs_strides: (usize, usize),
) {
    let parallel = m * n * k >= PARALLEL_GEMM_WORK;
    gemm_on(
        parallel,
        [m, n, k],
        dst,
        accumulate,
        lhs,
        lhs_strides,
        rhs,
        rhs_strides,
    );
}

/// [`gemm`] on the calling thread alone, or on every thread when `parallel`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_on<T: Real>(
    parallel: bool,
    [m, n, k]: [usize; 3],
    dst: &mut [T],
    accumulate: bool,
    lhs: &[T],
    lhs_strides: (usize, usize),
    rhs: &[T],
    rhs_strides: (usize, usize),
) {
    assert!(dst.len() >= m * n, "gemm: destination too short");
    // SAFETY: `dst` holds `m·n` initialised values (asserted), read only when `accumulate`.
    unsafe {
        gemm_raw(
            parallel,
            [m, n, k],
            dst.as_mut_ptr(),
            accumulate,
            lhs,
            lhs_strides,
            rhs,
            rhs_strides,
        )
    }
}

/// `dst[m, n] = lhs[m, k] · rhs[k, n]` into a destination not yet written: every entry is
/// written, none is read.
pub(crate) fn gemm_into<T: Real>(
    parallel: bool,
    [m, n, k]: [usize; 3],
    dst: &mut [std::mem::MaybeUninit<T>],
    lhs: &[T],
    lhs_strides: (usize, usize),
    rhs: &[T],
    rhs_strides: (usize, usize),
) {
    assert!(dst.len() >= m * n, "gemm: destination too short");
    // SAFETY: `dst` has room for `m·n` values (asserted); without `accumulate` the product
    // writes every entry of `dst[..m·n]` and reads none (`MaybeUninit<T>` has `T`'s layout).
    unsafe {
        gemm_raw(
            parallel,
            [m, n, k],
            dst.as_mut_ptr().cast::<T>(),
            false,
            lhs,
            lhs_strides,
            rhs,
            rhs_strides,
        )
    }
}

/// The `gemm` crate's call on a row-major `[m, n]` destination.
///
/// # Safety
/// `dst` points to `m·n` writable values, initialised when `accumulate`, that alias neither
/// operand.
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_raw<T: Real>(
    parallel: bool,
    [m, n, k]: [usize; 3],
    dst: *mut T,
    accumulate: bool,
    lhs: &[T],
    (lhs_rs, lhs_cs): (usize, usize),
    rhs: &[T],
    (rhs_rs, rhs_cs): (usize, usize),
) {
    assert!(m == 0 || k == 0 || (m - 1) * lhs_rs + (k - 1) * lhs_cs < lhs.len());
    assert!(k == 0 || n == 0 || (k - 1) * rhs_rs + (n - 1) * rhs_cs < rhs.len());
    let parallelism = if parallel {
        ::gemm::Parallelism::Rayon(0)
    } else {
        ::gemm::Parallelism::None
    };
    // SAFETY: the asserts above keep every index the strides reach inside the slices; the
    // caller vouches for `dst`.
    unsafe {
        ::gemm::gemm(
            m,
            n,
            k,
            dst,
            1,
            n as isize,
            accumulate,
            lhs.as_ptr(),
            lhs_cs as isize,
            lhs_rs as isize,
            rhs.as_ptr(),
            rhs_cs as isize,
            rhs_rs as isize,
            T::ONE,
            T::ONE,
            false,
            false,
            false,
            parallelism,
        );
    }
}
