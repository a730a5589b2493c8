//! Streaming image data: each epoch decodes its image files anew on worker threads and cuts the
//! views out of the original images, so datasets of any size train with memory bounded by the
//! prefetch depth ([`StreamLoader`]). The in-memory [`ImageArray`](super::ImageArray) path stays
//! for the small datasets and the embedded default.
//!
//! - Decoding: one file to pixels ([`decode_image`]: `zune-jpeg`, the `image` crate), a view's
//!   box to its output size ([`crop_resize`]: `fast_image_resize`); why these crates is below;
//! - a source as an evaluation reads it ([`StreamedImages`], an [`ImageSet`](super::ImageSet)):
//!   each image decoded and centre-cut when asked (by [`EVAL_CENTRE_RATIO`] by default);
//! - where the files come from ([`ImageSource`], a folder's [`ImageFiles`]);
//! - WebDataset shards read front to back through a shuffle buffer ([`Shards`]), and [`pack`],
//!   which writes them ([`ShardIndex`], [`DEFAULT_SAMPLES_PER_SHARD`]);
//! - the worker pool, determinism, resume in the middle of an epoch, replica shards and bad
//!   files: [`StreamLoader`]; a private reader feeds a source front to back to its workers.
//!
//! # Why these crates
//! Decoding one image file and cutting its views out of it is the work a streaming loader's
//! worker does per image.
//!
//! - JPEG: `zune-jpeg` (pure Rust, SIMD IDCT and colour conversion; the decoder the `image`
//!   crate itself uses). Measured on the benchmark's 500 × 375 ImageNet-like files
//!   (`benches/pytorch/make_jpegs.py`, one core, 300 files): 1.26 ms a file, against 1.83 ms for
//!   `jpeg-decoder` and 1.7 ms for Pillow (libjpeg-turbo). `jpeg-decoder` is the only pure-Rust
//!   decoder that decodes at a reduced scale (its `scale`: the IDCT at 1/2, 1/4 or 1/8, the trick
//!   DALI and FFCV use), but its entropy decoding is slower: at 1/2 it took 1.49 ms and at 1/4
//!   1.18 ms, so a reduced-scale decode would pay only when a crop is at least four times the
//!   output's side (rare: a random resized crop of a 500 × 375 image to 224 px needs a box of
//!   896 px). So every JPEG is decoded whole, by `zune-jpeg`, and the crop does the rest.
//! - Other formats (PNG, a PNG named `.JPEG` as ImageNet has one): the `image` crate, through
//!   [`image_folder::decode_bytes`](super::image_folder::decode_bytes) and its bounds.
//! - Crop and resize: `fast_image_resize` (SIMD convolution). Its bilinear filter is Pillow's
//!   (a triangle whose support widens with the downscale factor, so shrinking is antialiased),
//!   which is what torchvision's `RandomResizedCrop` applies to a PIL image; the box is cut and
//!   resized in one pass without copying it first.

mod decode;
mod feed;
mod images;
mod loader;
mod shards;
mod source;

pub(crate) use decode::luma_601;
pub use decode::{crop_resize, decode_image, DecodedImage, ViewCrop, EVAL_CENTRE_RATIO};
pub use images::StreamedImages;
pub use loader::{
    Skipped, StreamBatch, StreamConfig, StreamEpoch, StreamLoader, ViewPixels, MAX_SUBSTITUTES,
};
pub use shards::{
    pack, PackConfig, PackSummary, ShardEntry, ShardIndex, Shards, SkippedFile,
    DEFAULT_SAMPLES_PER_SHARD, DEFAULT_SHUFFLE_BUFFER, INDEX_FILE, PACKING_FILE,
};
pub use source::{ImageFiles, ImageSource, SequentialEpoch};

/// Tiny folders of JPEGs for the tests.
#[cfg(test)]
pub(crate) mod testing {
    use std::path::PathBuf;

    /// A fresh scratch folder named after `name` and the process.
    pub(crate) fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "curriculum-ssl-stream-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A folder of `classes` class folders of `per_class` RGB JPEGs of varied sizes (48–80 px)
    /// and content.
    pub(crate) fn jpeg_folder(name: &str, classes: usize, per_class: usize) -> PathBuf {
        let root = scratch(name);
        for c in 0..classes {
            let dir = root.join(format!("class{c}"));
            std::fs::create_dir_all(&dir).unwrap();
            for i in 0..per_class {
                let (w, h) = (
                    48 + ((i * 13 + c * 7) % 33) as u32,
                    48 + ((i * 5) % 33) as u32,
                );
                let img = image::RgbImage::from_fn(w, h, |x, y| {
                    image::Rgb([
                        ((x * 3 + i as u32 * 17) % 256) as u8,
                        ((y * 5 + c as u32 * 60) % 256) as u8,
                        ((x + y) * 2 % 256) as u8,
                    ])
                });
                img.save(dir.join(format!("{i:03}.jpg"))).unwrap();
            }
        }
        root
    }

    /// A PNG whose header declares `side × side` pixels, with a valid checksum, on a file of a
    /// few dozen bytes.
    pub(crate) fn png_declaring(side: u32) -> Vec<u8> {
        let mut out = Vec::new();
        image::GrayImage::from_pixel(2, 1, image::Luma([9]))
            .write_to(&mut std::io::Cursor::new(&mut out), image::ImageFormat::Png)
            .unwrap();
        // Signature (8), IHDR length (4), "IHDR" (4), width (4) ..., its CRC after 13 bytes.
        out[16..20].copy_from_slice(&side.to_be_bytes());
        out[20..24].copy_from_slice(&side.to_be_bytes());
        let mut crc = flate2::Crc::new();
        crc.update(&out[12..29]);
        out[29..33].copy_from_slice(&crc.sum().to_be_bytes());
        out
    }
}
