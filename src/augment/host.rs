//! A view's operations after the crop, run on the host, image by image, on every core: the
//! CPU's fast path ([`crate::pipeline::Augmenter::with_host_ops`]).
//!
//! The tensor forms of the other files run each operation as a chain of whole-batch tensor
//! operations — the hue step alone is about 60 of them, each a pass over memory, which on a CPU
//! backend cost more than the network at 224 px (`benches/README.md`). Here each image goes
//! through flip, colour jitter, grayscale, blur, solarisation and normalisation in one thread,
//! one pass per operation over an image that stays in the core's cache, with the same per-sample
//! draws and the same expressions as the tensor forms (each family's `host` functions say where
//! they can differ: the contrast's mean and the blur's sums, by f32 rounding). Images are
//! independent, so the values do not depend on the number of threads.
//!
//! This is written by hand because it is the augmentation itself: torchvision's CPU path (PIL,
//! or its tensor kernels) has no Rust counterpart, and `image`/`imageproc` work on 8-bit pixels
//! with other formulas.

use burn::tensor::{backend::Backend, Tensor, TensorData};

use super::blur::blur_host;
use super::colour::host as colour;
use super::normalize::Normalize;

/// The drawn operations of one view for a batch of `n` images (one entry per image where a
/// vector), as [`crate::pipeline::Augmenter`] draws them for the tensor forms.
#[derive(Debug, Clone, Default)]
pub struct HostView<'a> {
    /// Which images are mirrored.
    pub flip: Option<&'a [bool]>,
    /// The colour jitter: which operations are on, and per image whether it is jittered, the
    /// order and the factors ([`super::colour::JitterParams`]).
    pub jitter: Option<HostJitter<'a>>,
    /// Which images are turned gray.
    pub grayscale: Option<&'a [bool]>,
    /// Each image's blur kernel (`None`: not blurred).
    pub blur: Option<&'a [Option<Vec<f32>>]>,
    /// The solarisation threshold and which images are solarised.
    pub solarize: Option<(f64, &'a [bool])>,
    /// The normalisation, last.
    pub normalize: Option<&'a Normalize>,
}

/// The colour jitter's draws, borrowed.
#[derive(Debug, Clone, Copy)]
pub struct HostJitter<'a> {
    /// Which of brightness, contrast, saturation and hue are on.
    pub enabled: [bool; 4],
    /// Whether each image is jittered.
    pub apply: &'a [bool],
    /// Each image's order of the four operations.
    pub order: &'a [[usize; 4]],
    /// Each image's factors.
    pub factors: &'a [[f32; 4]],
}

/// Images as the loader's workers left them: `N × H × W × C` bytes (`shape`), each channel
/// value `v` standing for `v / 255`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostImages {
    /// The bytes, image after image, each row after row, channels interleaved.
    pub pixels: Vec<u8>,
    /// `[N, H, W, C]`.
    pub shape: [usize; 4],
}

impl HostImages {
    /// `[N, C, H, W]`, the shape of the batch these bytes make.
    pub fn dims(&self) -> [usize; 4] {
        let [n, h, w, c] = self.shape;
        [n, c, h, w]
    }

    /// Image `i` as `[C, H, W]` floats in `[0, 1]` (`v / 255`, as torchvision's `to_tensor`)
    /// written into `out`.
    fn planar_into(&self, i: usize, out: &mut [f32]) {
        let [_, h, w, c] = self.shape;
        let plane = h * w;
        let bytes = &self.pixels[i * plane * c..(i + 1) * plane * c];
        for (ch, dst) in out.chunks_exact_mut(plane).enumerate() {
            for (d, px) in dst.iter_mut().zip(bytes.chunks_exact(c)) {
                *d = px[ch] as f32 / 255.0;
            }
        }
    }

    /// The batch on `device` as `[N, C, H, W]` floats in `[0, 1]`, converted on the host.
    ///
    /// # Panics
    /// If the bytes do not fill the shape.
    pub fn to_device<B: Backend>(&self, device: &B::Device) -> Tensor<B, 4> {
        apply_bytes(self, &HostView::default(), device)
    }
}

/// Applies `ops` to images given as bytes, made into floats image by image on the same threads
/// (one pass), and returns the batch on `device`: the loader's views go to the device once,
/// augmented.
///
/// # Panics
/// If the bytes do not fill the shape, or as [`apply`].
pub fn apply_bytes<B: Backend>(
    images: &HostImages,
    ops: &HostView<'_>,
    device: &B::Device,
) -> Tensor<B, 4> {
    let dims = images.dims();
    assert_eq!(
        images.pixels.len(),
        dims.iter().product::<usize>(),
        "N·H·W·C bytes"
    );
    let mut values = vec![0f32; images.pixels.len()];
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    apply_on(&mut values, dims, ops, threads, Some(images));
    Tensor::from_data(TensorData::new(values, dims), device)
}

/// Applies `ops` to the batch `x` (`[N, C, H, W]`, floats in `[0, 1]`) on the host: the values
/// are read back, each image transformed on one of up to `available_parallelism` threads, and
/// the batch made again on `x`'s device.
///
/// # Panics
/// If a per-image list is not `N` long, or a normalisation does not have `C` entries.
pub fn apply<B: Backend>(x: Tensor<B, 4>, ops: &HostView<'_>) -> Tensor<B, 4> {
    let device = x.device();
    let [n, c, h, w] = x.dims();
    let mut values: Vec<f32> = x
        .into_data()
        .convert::<f32>()
        .into_vec::<f32>()
        .expect("a float tensor's values read as f32");
    apply_values(&mut values, [n, c, h, w], ops);
    Tensor::from_data(TensorData::new(values, [n, c, h, w]), &device)
}

/// [`apply`] on the values of a `[N, C, H, W]` batch in host memory.
///
/// # Panics
/// As [`apply`], and if `values` does not hold `N·C·H·W` floats.
pub fn apply_values(values: &mut [f32], dims: [usize; 4], ops: &HostView<'_>) {
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    apply_on(values, dims, ops, threads, None);
}

/// [`apply_values`] on at most `threads` threads; with `bytes`, each image is first made from
/// its bytes.
fn apply_on(
    values: &mut [f32],
    [n, c, h, w]: [usize; 4],
    ops: &HostView<'_>,
    threads: usize,
    bytes: Option<&HostImages>,
) {
    assert_eq!(values.len(), n * c * h * w, "N·C·H·W values");
    let lists = [
        ops.flip.map(<[bool]>::len),
        ops.jitter.map(|j| j.apply.len()),
        ops.jitter.map(|j| j.order.len()),
        ops.jitter.map(|j| j.factors.len()),
        ops.grayscale.map(<[bool]>::len),
        ops.blur.map(<[Option<Vec<f32>>]>::len),
        ops.solarize.map(|s| s.1.len()),
    ];
    assert!(
        lists.iter().flatten().all(|&len| len == n),
        "one draw per image"
    );
    let normalize = ops.normalize.map(|nz| {
        assert!(
            nz.mean.len() == c && nz.std.len() == c,
            "one mean and std per channel"
        );
        let f = |v: &[f64]| v.iter().map(|&v| v as f32).collect::<Vec<f32>>();
        (f(&nz.mean), f(&nz.std))
    });
    let image = c * h * w;
    if image == 0 || n == 0 {
        return;
    }
    let threads = threads.clamp(1, n);
    let per_thread = n.div_ceil(threads);
    let run = |first: usize, chunk: &mut [f32]| {
        let mut scratch = Vec::new();
        for (k, img) in chunk.chunks_exact_mut(image).enumerate() {
            if let Some(bytes) = bytes {
                bytes.planar_into(first + k, img);
            }
            augment_image(
                img,
                [c, h, w],
                first + k,
                ops,
                normalize.as_ref(),
                &mut scratch,
            );
        }
    };
    if threads == 1 {
        run(0, values);
        return;
    }
    std::thread::scope(|scope| {
        for (t, chunk) in values.chunks_mut(per_thread * image).enumerate() {
            let run = &run;
            scope.spawn(move || run(t * per_thread, chunk));
        }
    });
}

/// Image `i`'s operations, in the pipeline's order.
fn augment_image(
    img: &mut [f32],
    [c, h, w]: [usize; 3],
    i: usize,
    ops: &HostView<'_>,
    normalize: Option<&(Vec<f32>, Vec<f32>)>,
    scratch: &mut Vec<f32>,
) {
    if ops.flip.is_some_and(|f| f[i]) {
        for row in img.chunks_exact_mut(w) {
            row.reverse();
        }
    }
    if let Some(j) = &ops.jitter {
        if j.apply[i] {
            colour::jitter(img, c, j.order[i], j.factors[i], j.enabled);
        }
    }
    if ops.grayscale.is_some_and(|g| g[i]) {
        colour::grayscale(img, c);
    }
    if let Some(Some(kernel)) = ops.blur.map(|b| &b[i]) {
        blur_host(img, [c, h, w], kernel, scratch);
    }
    if let Some((threshold, flags)) = ops.solarize {
        if flags[i] {
            // `x >= threshold` compared as the tensor form does, in the element type.
            let threshold = threshold as f32;
            for v in img.iter_mut() {
                if *v >= threshold {
                    *v = 1.0 - *v;
                }
            }
        }
    }
    if let Some((mean, std)) = normalize {
        let plane = h * w;
        for ((channel, &m), &s) in img.chunks_exact_mut(plane).zip(mean).zip(std) {
            for v in channel.iter_mut() {
                *v = (*v - m) / s;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::augment::blur::gaussian_kernel1d;

    /// A batch of 5 RGB 12×10 images of varied values, and draws for each operation.
    #[test]
    fn values_do_not_depend_on_the_thread_count() {
        let dims = [5, 3, 12, 10];
        let x: Vec<f32> = (0..5 * 3 * 12 * 10)
            .map(|i| ((i * 7919) % 1000) as f32 / 999.0)
            .collect();
        let flip = [true, false, true, true, false];
        let apply = [true, true, false, true, true];
        let order = [
            [0, 1, 2, 3],
            [3, 2, 1, 0],
            [1, 3, 0, 2],
            [2, 0, 3, 1],
            [0, 2, 1, 3],
        ];
        let two = [[1.3, 0.7, 1.5, 0.1], [0.6, 1.4, 0.2, -0.3]];
        let factors: Vec<[f32; 4]> = (0..5).map(|i| two[i % 2]).collect();
        let gray = [false, false, true, false, true];
        let kernels: Vec<Option<Vec<f32>>> = (0..5)
            .map(|i| {
                (i % 2 == 0).then(|| {
                    gaussian_kernel1d(5, 0.5 + i as f64)
                        .into_iter()
                        .map(|v| v as f32)
                        .collect()
                })
            })
            .collect();
        let solarize = [false, true, false, false, true];
        let normalize = Normalize::new(&[0.4, 0.5, 0.6], &[0.2, 0.25, 0.3]);
        let ops = HostView {
            flip: Some(&flip),
            jitter: Some(HostJitter {
                enabled: [true; 4],
                apply: &apply,
                order: &order,
                factors: &factors,
            }),
            grayscale: Some(&gray),
            blur: Some(&kernels),
            solarize: Some((0.5, &solarize)),
            normalize: Some(&normalize),
        };
        let run = |threads| {
            let mut v = x.clone();
            apply_on(&mut v, dims, &ops, threads, None);
            v
        };
        let one = run(1);
        assert_ne!(one, x);
        for threads in [2, 3, 8] {
            assert_eq!(run(threads), one, "{threads} threads");
        }
        // Each image alone gives its rows of the batch.
        let image = 3 * 12 * 10;
        for i in 0..5 {
            let mut v = x[i * image..(i + 1) * image].to_vec();
            let k = [kernels[i].clone()];
            let alone = HostView {
                flip: Some(&flip[i..=i]),
                jitter: Some(HostJitter {
                    enabled: [true; 4],
                    apply: &apply[i..=i],
                    order: &order[i..=i],
                    factors: &factors[i..=i],
                }),
                grayscale: Some(&gray[i..=i]),
                blur: Some(&k),
                solarize: Some((0.5, &solarize[i..=i])),
                normalize: Some(&normalize),
            };
            apply_on(&mut v, [1, 3, 12, 10], &alone, 1, None);
            assert_eq!(v, one[i * image..(i + 1) * image], "image {i}");
        }
    }
}
