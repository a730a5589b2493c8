//! The backend the `recipe` binary trains on, chosen by cargo feature: `cuda` before `wgpu`
//! before the CPU (`Flex`, the default).

#[cfg(feature = "cuda")]
mod selected {
    /// Inference backend.
    pub type Inner = burn::backend::Cuda;
    /// Human-readable name.
    pub const NAME: &str = "cuda";
    /// Whether `--augment-ahead` defaults to on: not until a run on a GPU has shown tensors
    /// made on the augmentation thread to be safe under burn's fusion.
    pub const AUGMENT_AHEAD: bool = false;
    /// Whether `--view-threads` defaults to on: not until checked on a GPU (see
    /// `AUGMENT_AHEAD`).
    pub const VIEW_THREADS: bool = false;
    /// Whether the small ResNet's stem runs as banded products: no, cuDNN-class kernels do
    /// better.
    pub const BANDED_STEM: bool = false;
}

#[cfg(all(feature = "wgpu", not(feature = "cuda")))]
mod selected {
    /// Inference backend.
    pub type Inner = burn::backend::Wgpu;
    /// Human-readable name.
    pub const NAME: &str = "wgpu";
    /// Whether `--augment-ahead` defaults to on (see the CUDA backend's).
    pub const AUGMENT_AHEAD: bool = false;
    /// Whether `--view-threads` defaults to on (see the CUDA backend's).
    pub const VIEW_THREADS: bool = false;
    /// Whether the small ResNet's stem runs as banded products (see the CUDA backend's).
    pub const BANDED_STEM: bool = false;
}

#[cfg(all(not(feature = "wgpu"), not(feature = "cuda")))]
mod selected {
    /// Inference backend.
    pub type Inner = burn::backend::Flex;
    /// Human-readable name.
    pub const NAME: &str = "cpu (flex)";
    /// Whether `--augment-ahead` defaults to on.
    pub const AUGMENT_AHEAD: bool = true;
    /// Whether `--view-threads` defaults to on: the convolutions' backward passes run mostly on
    /// one core, so two of them side by side use both.
    pub const VIEW_THREADS: bool = true;
    /// Whether the small ResNet's stem runs as banded products
    /// (`curriculum_ssl_models::banded_conv`): Flex's own kernels for a 1-channel 7×7
    /// convolution are scalar (forward) and gather an im2col copy element by element (weight
    /// gradient); the banded products are GEMMs.
    pub const BANDED_STEM: bool = true;
}

pub use selected::{Inner, AUGMENT_AHEAD, BANDED_STEM, NAME, VIEW_THREADS};
