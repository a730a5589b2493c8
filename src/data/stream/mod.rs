//! Streaming image data: each epoch decodes its image files anew on worker threads and cuts the
//! views out of the original images, so datasets of any size train with memory bounded by the
//! prefetch depth ([`StreamLoader`]). The in-memory [`ImageArray`](super::ImageArray) path stays
//! for the small datasets and the embedded default.
//!
//! - [`decode`]: one file to pixels (`zune-jpeg`, the `image` crate), a view's box to its
//!   output size (`fast_image_resize`), and why these crates;
//! - [`images`]: a source as an evaluation reads it ([`StreamedImages`], an
//!   [`ImageSet`](super::ImageSet)): each image decoded and centre-cut when asked;
//! - [`source`]: where the files come from ([`ImageSource`], a folder's [`ImageFiles`]);
//! - [`shards`]: WebDataset shards read front to back through a shuffle buffer ([`Shards`]),
//!   and [`pack`], which writes them;
//! - [`loader`]: the worker pool, determinism, resume in the
//!   middle of an epoch, replica shards and bad files; `feed` (private) reads a source front
//!   to back for its workers.

pub mod decode;
mod feed;
pub mod images;
pub mod loader;
pub mod shards;
pub mod source;

pub use decode::{crop_resize, decode_image, DecodedImage, ViewCrop};
pub use images::StreamedImages;
pub use loader::{Skipped, StreamBatch, StreamConfig, StreamEpoch, StreamLoader, ViewPixels};
pub use shards::{pack, PackConfig, PackSummary, ShardIndex, Shards};
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
