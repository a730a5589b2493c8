use std::ops::Range;
use std::path::Path;

use super::batch::HostBatch;
use super::error::DataError;
use super::image_array::{ChannelSums, ImageArray};

/// Images read a range at a time, in a fixed order, every one `image_shape()`.
///
/// What an evaluation reads (the features of a whole labelled split for the kNN monitor and the linear
/// probe). An [`ImageArray`] is one, held in memory; a folder decoded as it is read
/// ([`StreamedImages`](super::stream::StreamedImages)) is another, so that an evaluation of
/// ImageNet's splits never holds them decoded.
pub trait ImageSet: Send + Sync + std::fmt::Debug {
    /// Number of images.
    fn len(&self) -> usize;

    /// Whether there is no image.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `(height, width, channels)` of every image as read.
    fn image_shape(&self) -> (usize, usize, usize);

    /// The class of every image, in order, when the set is labelled.
    fn labels(&self) -> Option<&[u16]>;

    /// Number of classes (0 without labels).
    fn num_classes(&self) -> usize;

    /// What names the set in errors (its file or folder).
    fn source(&self) -> &Path;

    /// The images `range` in order, with their labels when the set has them and their indices.
    ///
    /// # Errors
    /// A range beyond the set, or an image that cannot be read.
    fn read_range(&self, range: Range<usize>) -> Result<HostBatch, DataError>;
}

impl<T: ImageSet + ?Sized> ImageSet for std::sync::Arc<T> {
    fn len(&self) -> usize {
        (**self).len()
    }

    fn image_shape(&self) -> (usize, usize, usize) {
        (**self).image_shape()
    }

    fn labels(&self) -> Option<&[u16]> {
        (**self).labels()
    }

    fn num_classes(&self) -> usize {
        (**self).num_classes()
    }

    fn source(&self) -> &Path {
        (**self).source()
    }

    fn read_range(&self, range: Range<usize>) -> Result<HostBatch, DataError> {
        (**self).read_range(range)
    }
}

impl ImageSet for ImageArray {
    fn len(&self) -> usize {
        Self::len(self)
    }

    fn image_shape(&self) -> (usize, usize, usize) {
        Self::image_shape(self)
    }

    fn labels(&self) -> Option<&[u16]> {
        Self::labels(self)
    }

    fn num_classes(&self) -> usize {
        Self::num_classes(self)
    }

    fn source(&self) -> &Path {
        Self::source(self)
    }

    fn read_range(&self, range: Range<usize>) -> Result<HostBatch, DataError> {
        let n = Self::len(self);
        if range.end > n || range.is_empty() {
            return Err(DataError::Request {
                path: self.source().to_path_buf(),
                reason: format!("images {range:?} asked of a set of {n}"),
            });
        }
        let (h, w, c) = self.image_shape();
        let bytes = h * w * c;
        Ok(HostBatch {
            pixels: self.all_pixels()[range.start * bytes..range.end * bytes].to_vec(),
            len: range.len(),
            height: h,
            width: w,
            channels: c,
            labels: Self::labels(self)
                .map(|l| l[range.clone()].iter().map(|&l| l as i64).collect()),
            indices: range.collect(),
        })
    }
}

/// Each channel's mean and standard deviation over every pixel of every image of `set`, on the
/// `[0, 1]` scale (as [`ImageArray::channel_stats`]), read `chunk` images at a time: the
/// statistics of a set that is not held in memory (a sample of a streamed folder's files).
///
/// # Errors
/// An empty set, `chunk` 0, an image that cannot be read (a set that does not leave it out),
/// or no image read at all.
pub fn channel_stats(
    set: &(impl ImageSet + ?Sized),
    chunk: usize,
) -> Result<(Vec<f64>, Vec<f64>), DataError> {
    let n = set.len();
    if n == 0 || chunk == 0 {
        return Err(DataError::Empty {
            path: set.source().to_path_buf(),
            what: "no images to measure (or a chunk of 0)".into(),
        });
    }
    let mut sums = ChannelSums::new(set.image_shape().2);
    let mut start = 0;
    while start < n {
        let end = (start + chunk).min(n);
        sums.add(&set.read_range(start..end)?.pixels);
        start = end;
    }
    if sums.pixels() == 0 {
        return Err(DataError::Empty {
            path: set.source().to_path_buf(),
            what: "no image could be read to measure".into(),
        });
    }
    Ok(sums.stats())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_array_reads_its_own_bytes_and_labels_and_refuses_a_range_beyond_it() {
        let pixels: Vec<u8> = (0..5 * 2 * 2).map(|v| v as u8).collect();
        let array = ImageArray::new("five", 2, 2, 1, pixels, Some(vec![0, 1, 2, 1, 0]), 3).unwrap();
        let batch = ImageSet::read_range(&array, 1..3).unwrap();
        assert_eq!(batch.pixels, (4..12).map(|v| v as u8).collect::<Vec<_>>());
        assert_eq!(batch.labels, Some(vec![1, 2]));
        assert_eq!(batch.indices, vec![1, 2]);
        assert_eq!(
            (batch.len, batch.height, batch.width, batch.channels),
            (2, 2, 2, 1)
        );
        let err = ImageSet::read_range(&array, 4..6).unwrap_err();
        assert!(
            err.to_string().contains("images 4..6 asked of a set of 5"),
            "{err}"
        );
    }

    /// Read in chunks of any size, the statistics are the whole array's (integer sums: exact).
    #[test]
    fn chunked_statistics_are_the_arrays_own() {
        let pixels: Vec<u8> = (0..7 * 3 * 2 * 3).map(|v| (v * 37 % 256) as u8).collect();
        let array = ImageArray::new("seven", 3, 2, 3, pixels, None, 0).unwrap();
        let whole = array.channel_stats();
        for chunk in [1, 3, 7, 100] {
            assert_eq!(
                channel_stats(&array, chunk).unwrap(),
                whole,
                "chunk {chunk}"
            );
        }
    }
}
