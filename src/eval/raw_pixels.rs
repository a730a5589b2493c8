//! The raw-pixel baseline (documented on `RawPixels`).

use burn::module::Module;
use burn::prelude::*;
use curriculum_ssl_models::Backbone;

/// The identity "backbone": features are the `channels × height × width` pixel values.
///
/// The baseline every learned representation has to beat: the normalised pixels themselves.
///
/// A kNN classifier on raw pixels is strong on small centred images (about 79 % on the embedded
/// Fashion-MNIST subset): a trained backbone's kNN accuracy says little until it is read next to
/// this one. `RawPixels` is a [`Backbone`] without parameters whose features are the image,
/// flattened, so that the kNN monitor measures it exactly as it measures a network.
#[derive(Module, Debug, Clone)]
pub struct RawPixels {
    /// `channels × height × width`.
    dim: usize,
}

impl RawPixels {
    /// The baseline for images of `(height, width, channels)`.
    pub fn new((height, width, channels): (usize, usize, usize)) -> Self {
        Self {
            dim: height * width * channels,
        }
    }
}

impl<B: Backend> Backbone<B> for RawPixels {
    /// The images, flattened.
    ///
    /// # Shapes
    /// - input: `[batch, channels, height, width]`
    /// - output: `[batch, channels · height · width]`
    fn forward_features(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        images.flatten(1, 3)
    }

    fn feature_dim(&self) -> usize {
        self.dim
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::ImageArray;
    use crate::eval::KnnMonitor;
    use burn::backend::NdArray;

    /// On images that are their class's pattern plus noise, the nearest pixel vectors share the
    /// class: every query is right; with the labels of the bank shuffled against their images,
    /// the same queries land on the wrong classes.
    #[test]
    fn raw_pixels_classify_pattern_images_and_only_through_the_pixels() {
        let pattern = |class: usize, i: usize| -> Vec<u8> {
            (0..16)
                .map(|p| if (p / 4 + class).is_multiple_of(2) { 200 } else { 20 } + ((i * 7 + p) % 5) as u8)
                .collect()
        };
        let build = |n: usize, shift: usize| {
            let mut pixels = Vec::new();
            let mut labels = Vec::new();
            for i in 0..n {
                pixels.extend(pattern(i % 2, i));
                labels.push(((i + shift) % 2) as u16);
            }
            ImageArray::new("mem", 4, 4, 1, pixels, Some(labels), 2).unwrap()
        };
        let device = Default::default();
        let right = KnnMonitor::new(build(20, 0), build(10, 0), None).unwrap();
        let raw = RawPixels::new((4, 4, 1));
        assert_eq!(Backbone::<NdArray<f64>>::feature_dim(&raw), 16);
        for r in right.evaluate::<NdArray<f64>, _>(&raw, &device).unwrap() {
            assert_eq!(r.accuracy.top1, 1.0, "k = {}", r.k);
        }
        let wrong = KnnMonitor::new(build(20, 1), build(10, 0), None).unwrap();
        for r in wrong.evaluate::<NdArray<f64>, _>(&raw, &device).unwrap() {
            assert_eq!(r.accuracy.top1, 0.0, "k = {}", r.k);
        }
    }
}
