//! The backend the `recipe` binary trains on, chosen by cargo feature: `cuda` before `wgpu`
//! before the CPU (`Flex`, the default).

#[cfg(feature = "cuda")]
mod selected {
    /// Inference backend.
    pub type Inner = burn::backend::Cuda;
    /// Human-readable name.
    pub const NAME: &str = "cuda";
}

#[cfg(all(feature = "wgpu", not(feature = "cuda")))]
mod selected {
    /// Inference backend.
    pub type Inner = burn::backend::Wgpu;
    /// Human-readable name.
    pub const NAME: &str = "wgpu";
}

#[cfg(all(not(feature = "wgpu"), not(feature = "cuda")))]
mod selected {
    /// Inference backend.
    pub type Inner = burn::backend::Flex;
    /// Human-readable name.
    pub const NAME: &str = "cpu (flex)";
}

pub use selected::{Inner, NAME};
