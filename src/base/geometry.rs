//! Boxes in images and where a view's pixels came from: what the augmentation's crops report
//! and what crop-and-rotate's object boxes are mapped through.

use serde::{Deserialize, Serialize};

/// A box in pixels: rows `top..top + height`, columns `left..left + width`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CropBox {
    /// First row.
    pub top: usize,
    /// First column.
    pub left: usize,
    /// Number of rows.
    pub height: usize,
    /// Number of columns.
    pub width: usize,
}

impl CropBox {
    /// The whole `[height, width]` image.
    pub fn whole(image_size: [usize; 2]) -> Self {
        Self {
            top: 0,
            left: 0,
            height: image_size[0],
            width: image_size[1],
        }
    }

    /// The square this box is rotated in: side `max(height, width)` (clipped to the image's
    /// shorter side), centred on the box's centre (rounded towards the top left), and moved
    /// inside the image where it would cross a border — moved, not shrunk, so that it still
    /// covers the box. A quarter turn maps a square onto itself, which a non-square box would not.
    pub fn square_in(&self, image_size: [usize; 2]) -> CropBox {
        let [h, w] = image_size;
        let side = self.height.max(self.width).min(h.min(w)).max(1);
        let place = |start: usize, len: usize, limit: usize| -> usize {
            // Twice the centre minus the side, halved (floor), then clamped to the image.
            let twice = 2 * start as i64 + len as i64 - side as i64;
            twice
                .div_euclid(2)
                .clamp(0, limit.saturating_sub(side) as i64) as usize
        };
        CropBox {
            top: place(self.top, self.height, h),
            left: place(self.left, self.width, w),
            height: side,
            width: side,
        }
    }
}

/// Where one image of a view came from: what a piece that works in input-image coordinates
/// (crop-and-rotate's object boxes) needs to find its pixels in the view.
///
/// Only the geometric operations move pixels: the random resized crop (a box of the input,
/// resized to the output size) and the horizontal flip (applied after the crop). Colour
/// operations, blur, solarisation and normalisation leave every pixel where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ViewGeometry {
    /// The crop box drawn, in input pixels; the whole input image when the view has no crop.
    pub crop: CropBox,
    /// Whether the view was flipped horizontally (after the crop).
    pub flipped: bool,
    /// The view's `[height, width]` (the crop's output size, or the input size without a crop).
    pub output: [usize; 2],
}
