//! `[a, b, c, d] → [a, c, b, d]` (the middle two dimensions swapped) as one contiguous copy of
//! runs of `d` values: what attention does to its tokens and heads, `[N, T, H, hd] ↔ [N, H, T, hd]`.
//!
//! Why this file exists: burn's CPU backend (`Flex`) keeps a swapped tensor as a strided view
//! and copies it when it is reshaped, which attention's heads are, value by value through a
//! generic strided iterator; in an MAE step on ViT-Tiny that iterator and its copy were 18 %
//! of the samples. Here each run of `d` contiguous values (a head's 64 features) is one
//! `copy_from_slice`, in parallel over the output's `[a, c]` blocks. The backward pass of the
//! swap is the same copy of the gradient with `b` and `c` exchanged.

use rayon::prelude::*;

/// The values of `x` (`[a, b, c, d]`, contiguous) laid out as `[a, c, b, d]`.
pub fn swap_middle<T: Copy + Default + Send + Sync>(x: &[T], [a, b, c, d]: [usize; 4]) -> Vec<T> {
    assert_eq!(
        x.len(),
        a * b * c * d,
        "swap_middle: length of {:?}",
        [a, b, c, d]
    );
    let mut out = vec![T::default(); x.len()];
    if out.is_empty() {
        return out;
    }
    // Output block (i, k) is `b` runs of `d`: run j comes from x[i, j, k, :].
    out.par_chunks_mut(b * d)
        .enumerate()
        .for_each(|(block, chunk)| {
            let (i, k) = (block / c, block % c);
            for (j, run) in chunk.chunks_exact_mut(d).enumerate() {
                let start = ((i * b + j) * c + k) * d;
                run.copy_from_slice(&x[start..start + d]);
            }
        });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against the definition, index by index, on odd sizes (and a size-1 dimension); swapping
    /// twice gives the input back.
    #[test]
    fn swaps_the_middle_dimensions() {
        for dims in [[2, 3, 5, 4], [1, 7, 2, 1], [3, 1, 4, 2], [2, 4, 4, 3]] {
            let [a, b, c, d] = dims;
            let x: Vec<u32> = (0..(a * b * c * d) as u32).collect();
            let y = swap_middle(&x, dims);
            for i in 0..a {
                for j in 0..b {
                    for k in 0..c {
                        for l in 0..d {
                            assert_eq!(
                                y[((i * c + k) * b + j) * d + l],
                                x[((i * b + j) * c + k) * d + l],
                                "{dims:?} at {:?}",
                                [i, j, k, l]
                            );
                        }
                    }
                }
            }
            assert_eq!(swap_middle(&y, [a, c, b, d]), x, "{dims:?} twice");
        }
        assert!(swap_middle::<f32>(&[], [0, 3, 2, 4]).is_empty());
    }
}
