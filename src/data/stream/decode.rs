//! Decoding one image file and cutting its views out of it: the work a streaming loader's
//! worker does per image.

use std::path::Path;

use fast_image_resize as fr;
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};

use crate::augment::crop::RandomResizedCrop;
use crate::base::error::ConfigError;
use crate::base::geometry::CropBox;
use crate::data::error::DataError;
use crate::data::image_folder::{
    decode_bytes, ends_its_scan, is_jpeg, MAX_DECODED_PER_FILE_BYTE, MAX_IMAGE_BYTES,
};

/// A decoded image: `height × width × channels` bytes, channels last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedImage {
    /// Rows.
    pub height: usize,
    /// Columns.
    pub width: usize,
    /// 1 (luma) or 3 (RGB).
    pub channels: usize,
    /// The pixels, row-major, channels last.
    pub pixels: Vec<u8>,
}

/// How one view is cut out of a decoded image.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum ViewCrop {
    /// A random resized crop drawn on the original image (torchvision's `RandomResizedCrop`).
    Random(RandomResizedCrop),
    /// The evaluation transform: the centre box that torchvision's `Resize(size / ratio)` then
    /// `CenterCrop(size)` keeps, resized to `size` in one pass (`ratio` 0.875 is ImageNet's
    /// 224 / 256).
    Center {
        /// Output `(height, width)`.
        size: (usize, usize),
        /// The kept fraction of the shorter side, in `(0, 1]`.
        ratio: f64,
    },
}

/// The fraction of the shorter side ImageNet's evaluation transform keeps: `Resize(256)` then
/// `CenterCrop(224)`.
pub const EVAL_CENTRE_RATIO: f64 = 0.875;

impl ViewCrop {
    /// The evaluation transform at `size`: the centre box `Resize(size / 0.875)` then
    /// `CenterCrop(size)` keep ([`EVAL_CENTRE_RATIO`]), what a streamed set is evaluated on.
    pub fn evaluation(size: (usize, usize)) -> Self {
        Self::Center {
            size,
            ratio: EVAL_CENTRE_RATIO,
        }
    }

    /// Output `(height, width)`.
    pub fn size(&self) -> (usize, usize) {
        match self {
            Self::Random(c) => c.size,
            Self::Center { size, .. } => *size,
        }
    }

    /// Checks the settings.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match self {
            Self::Random(c) => c.validate(),
            Self::Center { size, ratio } => {
                if size.0 == 0 || size.1 == 0 {
                    return Err(ConfigError::new(
                        "crop.size",
                        format!("must be positive, got {size:?}"),
                    ));
                }
                if !(*ratio > 0.0 && *ratio <= 1.0) {
                    return Err(ConfigError::new(
                        "crop.ratio",
                        format!("the centre crop keeps a fraction in (0, 1], got {ratio}"),
                    ));
                }
                Ok(())
            }
        }
    }

    /// The box this view takes from an `h × w` image (`rng` is drawn from only by a random
    /// crop).
    pub fn draw(&self, rng: &mut StdRng, h: usize, w: usize) -> CropBox {
        match self {
            Self::Random(c) => c.sample_box(rng, h, w),
            Self::Center { size, ratio } => {
                // Resize(size.0 / ratio) scales the shorter side to size.0 / ratio; the centre
                // crop keeps `size` of that, i.e. `size · ratio / size.0` of the shorter side.
                let scale = h.min(w) as f64 * ratio / size.0 as f64;
                let bh = ((size.0 as f64 * scale).round() as usize).clamp(1, h);
                let bw = ((size.1 as f64 * scale).round() as usize).clamp(1, w);
                CropBox {
                    top: (h - bh) / 2,
                    left: (w - bw) / 2,
                    height: bh,
                    width: bw,
                }
            }
        }
    }
}

/// Decodes an image file's bytes to `channels` (1 or 3) channels; `path` names it in errors.
///
/// The size the header declares is bounded before any pixel is allocated, as the in-memory
/// reader bounds it ([`MAX_DECODED_PER_FILE_BYTE`] per byte of the file, at most
/// [`MAX_IMAGE_BYTES`]): a header declaring 50,000 × 50,000 pixels on a small file is an error,
/// not a gigabyte allocation. A truncated JPEG is an error (as in Pillow); other departures
/// from the standard (extraneous bytes before a marker, as a few ImageNet files have) are
/// decoded leniently, as libjpeg does.
pub fn decode_image(path: &Path, bytes: &[u8], channels: usize) -> Result<DecodedImage, DataError> {
    if !is_jpeg(bytes) {
        let (height, width, _, rgb) = decode_bytes(path, bytes, Some(3))?;
        let pixels = if channels == 1 { luma_601(&rgb) } else { rgb };
        return Ok(DecodedImage {
            height,
            width,
            channels,
            pixels,
        });
    }
    use zune_core::colorspace::ColorSpace;
    use zune_core::options::DecoderOptions;
    let bad = |reason: String| DataError::Decode {
        path: path.to_path_buf(),
        reason,
    };
    let most = (bytes.len() as u64)
        .saturating_mul(MAX_DECODED_PER_FILE_BYTE)
        .min(MAX_IMAGE_BYTES);
    let colour = if channels == 1 {
        ColorSpace::Luma
    } else {
        ColorSpace::RGB
    };
    // zune's own bound on each side (its default is 16,384); the product is checked below.
    let options = DecoderOptions::default()
        .set_max_width(1 << 16)
        .set_max_height(1 << 16)
        .jpeg_set_out_colorspace(colour);
    let mut decoder =
        zune_jpeg::JpegDecoder::new_with_options(std::io::Cursor::new(bytes), options);
    decoder
        .decode_headers()
        .map_err(|e| bad(format!("not a readable JPEG: {e:?}")))?;
    let info = decoder
        .info()
        .ok_or_else(|| bad("a JPEG without a frame header".into()))?;
    let (width, height) = (info.width as usize, info.height as usize);
    let declared = (width as u64) * (height as u64) * channels as u64;
    if declared > most {
        return Err(bad(format!(
            "the header declares {width}x{height} pixels ({declared} bytes decoded), more than \
             a file of {} bytes may decode to (at most {} bytes)",
            bytes.len(),
            most
        )));
    }
    // zune-jpeg, like libjpeg, fills a scan cut short with grey and carries on; Pillow refuses
    // such a file ("image file is truncated"), and so does this reader.
    if !ends_its_scan(bytes) {
        return Err(bad(
            "a truncated JPEG: no end-of-image marker after its scans".into(),
        ));
    }
    let pixels = decoder
        .decode()
        .map_err(|e| bad(format!("a corrupt JPEG: {e:?}")))?;
    if pixels.len() != width * height * channels {
        return Err(bad(format!(
            "decoded {} bytes for {width}x{height}x{channels}",
            pixels.len()
        )));
    }
    Ok(DecodedImage {
        height,
        width,
        channels,
        pixels,
    })
}

/// Cuts `bx` out of `image` and resizes it to `size` (Pillow's bilinear filter, antialiased
/// when shrinking): `size.0 × size.1 × channels` bytes.
///
/// The box is copied out first, as torchvision's `resized_crop` crops the PIL image before it
/// resizes it: the filter's support is clamped at the box's border, not fed with the pixels
/// around it (as a resize with Pillow's `box=` or `fast_image_resize`'s own crop would be).
pub fn crop_resize(image: &DecodedImage, bx: CropBox, size: (usize, usize)) -> Vec<u8> {
    let c = image.channels;
    let pixel = if c == 1 {
        fr::PixelType::U8
    } else {
        fr::PixelType::U8x3
    };
    let row = bx.width * c;
    let mut cut = Vec::with_capacity(bx.height * row);
    for y in bx.top..bx.top + bx.height {
        let start = (y * image.width + bx.left) * c;
        cut.extend_from_slice(&image.pixels[start..start + row]);
    }
    if (bx.height, bx.width) == size {
        return cut;
    }
    let src = fr::images::ImageRef::new(bx.width as u32, bx.height as u32, &cut, pixel)
        .expect("the box's rows hold width · channels bytes each");
    let mut dst = fr::images::Image::new(size.1 as u32, size.0 as u32, pixel);
    let options =
        fr::ResizeOptions::new().resize_alg(fr::ResizeAlg::Convolution(fr::FilterType::Bilinear));
    fr::Resizer::new()
        .resize(&src, &mut dst, &options)
        .expect("a non-empty output of the source's pixel type");
    dst.into_vec()
}

/// Pillow's conversion of RGB to luma (`Image.convert("L")`, ITU-R 601-2 weights in 16-bit
/// fixed point): what torchvision's `Grayscale` and a grey `ImageFolder` give.
pub(crate) fn luma_601(rgb: &[u8]) -> Vec<u8> {
    rgb.chunks_exact(3)
        .map(|p| {
            ((p[0] as u32 * 19595 + p[1] as u32 * 38470 + p[2] as u32 * 7471 + 0x8000) >> 16) as u8
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;
    use burn::tensor::{Tensor, TensorData};
    use rand::SeedableRng;

    fn ramp(h: usize, w: usize, c: usize) -> DecodedImage {
        let mut pixels = Vec::with_capacity(h * w * c);
        for y in 0..h {
            for x in 0..w {
                for k in 0..c {
                    pixels.push(((x * 7 + y * 3 + k * 40) % 256) as u8);
                }
            }
        }
        DecodedImage {
            height: h,
            width: w,
            channels: c,
            pixels,
        }
    }

    #[test]
    fn a_box_of_the_output_size_is_cut_exactly() {
        let img = ramp(20, 30, 3);
        let bx = CropBox {
            top: 3,
            left: 5,
            height: 8,
            width: 10,
        };
        let out = crop_resize(&img, bx, (8, 10));
        for y in 0..8 {
            for x in 0..10 {
                for k in 0..3 {
                    let want = img.pixels[((y + 3) * 30 + x + 5) * 3 + k];
                    assert_eq!(out[(y * 10 + x) * 3 + k], want);
                }
            }
        }
    }

    /// Enlarging a box, Pillow's bilinear filter is plain bilinear interpolation with
    /// `align_corners = False` and edge clamping: what the device's crop (`grid_sample`) computes.
    /// Compared here against that crop in f64 on NdArray; the only difference is the rounding of
    /// the result to a byte (at most one level, as fast_image_resize rounds its fixed-point sums).
    #[test]
    fn enlarging_a_box_matches_the_device_crop_within_a_level() {
        type B = NdArray<f64>;
        let img = ramp(12, 16, 1);
        let bx = CropBox {
            top: 2,
            left: 3,
            height: 5,
            width: 7,
        };
        let out = crop_resize(&img, bx, (11, 13));
        let device = Default::default();
        let x = Tensor::<B, 4>::from_data(
            TensorData::new(
                img.pixels.iter().map(|&p| p as f64).collect::<Vec<_>>(),
                [1, 1, 12, 16],
            ),
            &device,
        );
        let want: Vec<f64> = crate::augment::crop::resized_crop(x, &[bx], 11, 13)
            .into_data()
            .to_vec()
            .unwrap();
        for (i, (&o, w)) in out.iter().zip(&want).enumerate() {
            assert!((o as f64 - w).abs() <= 1.0, "pixel {i}: {o} against {w:.3}");
        }
    }

    /// Shrinking a flat image keeps it flat (the filter's weights sum to one), and shrinking a
    /// two-pixel checkerboard by 4 averages it (the antialiasing a plain bilinear sample lacks:
    /// sampled, it would alias to 0 or 255).
    #[test]
    fn shrinking_averages_instead_of_aliasing() {
        let flat = DecodedImage {
            height: 40,
            width: 40,
            channels: 1,
            pixels: vec![77; 1600],
        };
        let out = crop_resize(&flat, CropBox::whole([40, 40]), (10, 10));
        assert!(out.iter().all(|&p| p == 77));
        let checker = DecodedImage {
            height: 40,
            width: 40,
            channels: 1,
            pixels: (0..1600)
                .map(|i| if (i / 40 + i % 40) % 2 == 0 { 255 } else { 0 })
                .collect(),
        };
        let out = crop_resize(&checker, CropBox::whole([40, 40]), (10, 10));
        assert!(out.iter().all(|&p| (126..=129).contains(&p)), "{out:?}");
    }

    #[test]
    fn the_centre_crop_keeps_the_ratio_of_the_shorter_side() {
        let view = ViewCrop::Center {
            size: (224, 224),
            ratio: 0.875,
        };
        let mut rng = StdRng::seed_from_u64(0);
        // 375 × 500: Resize(256) makes it 256 × 341; CenterCrop(224) keeps 224 of 256 rows, i.e.
        // 328.1 of the 375 original rows, centred.
        let bx = view.draw(&mut rng, 375, 500);
        assert_eq!((bx.height, bx.width), (328, 328));
        assert_eq!((bx.top, bx.left), (23, 86));
        assert!(ViewCrop::Center {
            size: (8, 8),
            ratio: 1.5
        }
        .validate()
        .is_err());
    }

    fn jpeg(h: u32, w: u32, gray: bool) -> Vec<u8> {
        let mut out = Vec::new();
        let enc = image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 95);
        if gray {
            let img = image::GrayImage::from_fn(w, h, |x, y| {
                image::Luma([((x * 5 + y * 3) % 256) as u8])
            });
            img.write_with_encoder(enc).unwrap();
        } else {
            let img = image::RgbImage::from_fn(w, h, |x, y| {
                image::Rgb([(x * 4 % 256) as u8, (y * 4 % 256) as u8, 128])
            });
            img.write_with_encoder(enc).unwrap();
        }
        out
    }

    /// zune-jpeg's pixels against the `image` crate's RGB decode of the same file (in luma:
    /// Pillow's 601 weights applied to it, which is what the JPEG's own Y channel is): equal
    /// within 2 levels (the Y channel is rounded before the RGB conversion, and two colour
    /// conversions may round differently; Q95 files of smooth content).
    #[test]
    fn jpegs_decode_to_what_the_image_crate_reads_in_rgb_and_in_luma() {
        let p = Path::new("test.jpg");
        for gray in [false, true] {
            let bytes = jpeg(24, 40, gray);
            for channels in [1, 3] {
                let ours = decode_image(p, &bytes, channels).unwrap();
                assert_eq!((ours.height, ours.width, ours.channels), (24, 40, channels));
                let rgb = image::load_from_memory(&bytes)
                    .unwrap()
                    .into_rgb8()
                    .into_raw();
                let theirs = if channels == 1 { luma_601(&rgb) } else { rgb };
                let worst = ours
                    .pixels
                    .iter()
                    .zip(&theirs)
                    .map(|(&a, &b)| (a as i32 - b as i32).abs())
                    .max()
                    .unwrap();
                assert!(worst <= 2, "gray {gray}, channels {channels}: {worst}");
            }
        }
    }

    #[test]
    fn bad_jpegs_are_errors_that_name_the_file() {
        let p = Path::new("dir/bad.jpg");
        let good = jpeg(160, 160, false);
        // Truncated in its scan (the headers are the first few hundred bytes).
        assert!(good.len() > 2000, "{}", good.len());
        let e = decode_image(p, &good[..good.len() * 3 / 4], 3)
            .unwrap_err()
            .to_string();
        assert!(e.contains("dir/bad.jpg") && e.contains("truncated"), "{e}");
        // Truncated in its headers.
        let e = decode_image(p, &good[..100], 3).unwrap_err().to_string();
        assert!(e.contains("dir/bad.jpg"), "{e}");
        // Not an image at all.
        let e = decode_image(p, b"hello, this is text", 3).unwrap_err();
        assert!(e.to_string().contains("dir/bad.jpg"), "{e}");
        // A header of 50,000 × 50,000 pixels on a small file: refused before allocating.
        let mut wide = good.clone();
        let sof = wide
            .windows(2)
            .position(|w| w == [0xFF, 0xC0])
            .expect("a baseline frame header");
        // SOF0: marker, length (2), precision (1), height (2), width (2).
        wide[sof + 7..sof + 9].copy_from_slice(&50_000u16.to_be_bytes());
        wide[sof + 5..sof + 7].copy_from_slice(&50_000u16.to_be_bytes());
        let e = decode_image(p, &wide, 3).unwrap_err();
        assert!(e.to_string().contains("50000x50000"), "{e}");
    }
}
