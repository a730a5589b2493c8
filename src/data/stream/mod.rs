//! Streaming image data: each epoch decodes its image files anew on worker threads and cuts the
//! views out of the original images, so datasets of any size train with memory bounded by the
//! prefetch depth ([`StreamLoader`]). The in-memory [`ImageArray`](super::ImageArray) path stays
//! for the small datasets and the embedded default.
//!
//! - [`decode`]: one file to pixels (`zune-jpeg`, the `image` crate), a view's box to its
//!   output size (`fast_image_resize`), and why these crates;
//! - [`loader`]: the sources ([`ImageFiles`]), the worker pool, determinism, resume in the
//!   middle of an epoch, replica shards and bad files.

pub mod decode;
pub mod loader;

pub use decode::{crop_resize, decode_image, DecodedImage, ViewCrop};
pub use loader::{
    ImageFiles, ImageSource, Skipped, StreamBatch, StreamConfig, StreamEpoch, StreamLoader,
    ViewPixels,
};
