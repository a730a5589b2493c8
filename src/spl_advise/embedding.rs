//! SPL-ADVisE's embedding network (documented on `EmbeddingNet`).

use burn::config::Config;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;
use curriculum_ssl_models::Backbone;

use crate::data::ImageArray;
use crate::train::ClassifierAugmentConfig;

/// Configuration of an [`EmbeddingNet`].
#[derive(Config, Debug)]
pub struct EmbeddingNetConfig {
    /// Width `E` of the embedding (the magnet loss's space).
    #[config(default = 32)]
    pub dim: usize,
}

impl EmbeddingNetConfig {
    /// `backbone` followed by a linear embedding layer of [`EmbeddingNetConfig::dim`] outputs.
    pub fn init<B: Backend, M: Backbone<B>>(
        &self,
        backbone: M,
        device: &B::Device,
    ) -> EmbeddingNet<B, M> {
        let embed = LinearConfig::new(backbone.feature_dim(), self.dim).init(device);
        EmbeddingNet { backbone, embed }
    }
}

/// A backbone and a linear embedding layer.
///
/// SPL-ADVisE's embedding network: a backbone whose classifier is replaced by an embedding layer
/// (the paper's LeNet on Fashion-MNIST, VGG-16 on the RGB sets), trained with the magnet loss
/// on neighbourhood batches ([`MagnetSampler`](super::MagnetSampler)); its representations of
/// the training set are what the student's examples are clustered by.
#[derive(Module, Debug)]
pub struct EmbeddingNet<B: Backend, M> {
    /// Feature extractor.
    pub backbone: M,
    /// Features to the embedding.
    pub embed: Linear<B>,
}

impl<B: Backend, M: Backbone<B>> EmbeddingNet<B, M> {
    /// Embeddings.
    ///
    /// # Shapes
    /// - `images`: `[N, C, H, W]` → `[N, E]`
    pub fn forward(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        self.embed.forward(self.backbone.forward_features(images))
    }

    /// Width of the embedding.
    pub fn dim(&self) -> usize {
        self.embed.weight.lazy_shape().dims::<2>()[1]
    }

    /// The embedding of every image of `data`, row-major `N × E`, in chunks of `batch_size`
    /// images prepared by `images` without augmentation. Call it on an inference network
    /// (`net.valid()`): batch norm then uses its running statistics.
    pub fn embed_all(
        &self,
        data: &ImageArray,
        images: &ClassifierAugmentConfig,
        batch_size: usize,
        device: &B::Device,
    ) -> Vec<f32> {
        let n = data.len();
        let indices: Vec<usize> = (0..n).collect();
        let mut out = Vec::with_capacity(n * self.dim());
        for chunk in indices.chunks(batch_size.max(1)) {
            let x = images.images::<B>(data, chunk, None, device);
            out.extend(
                self.forward(x)
                    .into_data()
                    .convert::<f32>()
                    .into_vec::<f32>()
                    .expect("f32 data"),
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    type B = NdArray<f64>;

    /// The embedding is the linear layer applied to the backbone's features, row by row, and
    /// `embed_all` gives the same rows as one forward pass.
    #[test]
    fn embedding_is_the_linear_layer_on_the_features() {
        let device = Default::default();
        let net = crate::base::seed::init_module::<B, _>(&device, 0, |d| {
            EmbeddingNetConfig::new()
                .with_dim(2)
                .init(crate::method::testing::TinyBackbone::<B>::new(4, 3, d), d)
        });
        assert_eq!(net.dim(), 2);
        let pixels: Vec<u8> = (0..3 * 4).map(|v| (v * 20) as u8).collect();
        let data = ImageArray::new("mem", 2, 2, 1, pixels, Some(vec![0, 1, 0]), 2).unwrap();
        let prep = ClassifierAugmentConfig::new();
        let all = net.embed_all(&data, &prep, 2, &device);
        let x = prep.images::<B>(&data, &[0, 1, 2], None, &device);
        let features = net.backbone.forward_features(x.clone());
        let w = net.embed.weight.val().into_data().to_vec::<f64>().unwrap();
        let b = net
            .embed
            .bias
            .as_ref()
            .unwrap()
            .val()
            .into_data()
            .to_vec::<f64>()
            .unwrap();
        let f = features.into_data().to_vec::<f64>().unwrap();
        for row in 0..3 {
            for j in 0..2 {
                let expected: f64 =
                    (0..3).map(|k| f[row * 3 + k] * w[k * 2 + j]).sum::<f64>() + b[j];
                assert!((f64::from(all[row * 2 + j]) - expected).abs() < 1e-5);
            }
        }
    }
}
