use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::SeedableRng;

use super::decode::{crop_resize, ViewCrop};
use super::source::ImageSource;
use crate::base::error::ConfigError;
use crate::base::seed::mix_seed;
use crate::data::batch::HostBatch;
use crate::data::error::DataError;
use crate::data::image_folder::in_parts;
use crate::data::image_set::ImageSet;

/// The images of a source, each cut by `crop` when read.
///
/// The images of an [`ImageSource`] as an evaluation reads them, each decoded when asked and cut by one crop (the evaluation transform's centre crop), a range at a
/// time on several threads: an [`ImageSet`] that never holds a split decoded (ImageNet's
/// validation split is 7.5 GB at 224 px; the features the kNN monitor keeps of it, 100 MB).
///
/// A file that cannot be read or decoded is left out of the batch that asked for it (named in a
/// warning, counted by [`StreamedImages::left_out`]): the batch's `indices` and `labels` say
/// which images it holds, so an evaluation scores the readable ones, as the training loader
/// skips the same files.
pub struct StreamedImages<S> {
    source: Arc<S>,
    name: PathBuf,
    crop: ViewCrop,
    channels: usize,
    labels: Option<Vec<u16>>,
    num_classes: usize,
    threads: usize,
    left_out: std::sync::atomic::AtomicUsize,
}

impl<S: ImageSource> StreamedImages<S> {
    /// The images of `source` (named `name` in errors), every one cut by `crop` and converted
    /// to `channels` (1 or 3), read on `threads` threads (0: one per core). A random crop
    /// draws from a generator seeded by the image's index: the same box at every read.
    ///
    /// # Errors
    /// An empty source, a crop whose settings are impossible, or channels other than 1 or 3.
    pub fn new(
        source: S,
        name: impl Into<PathBuf>,
        crop: ViewCrop,
        channels: usize,
        threads: usize,
    ) -> Result<Self, ConfigError> {
        crop.validate()?;
        if channels != 1 && channels != 3 {
            return Err(ConfigError::new(
                "channels",
                format!("images are read as 1 or 3 channels, got {channels}"),
            ));
        }
        if source.is_empty() {
            return Err(ConfigError::new("source", "no image to read"));
        }
        let labels: Option<Vec<u16>> = (0..source.len()).map(|i| source.label(i)).collect();
        let num_classes = labels
            .as_ref()
            .map_or(0, |l| l.iter().max().map_or(0, |&m| m as usize + 1));
        let threads = match threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            t => t,
        };
        Ok(Self {
            source: Arc::new(source),
            name: name.into(),
            crop,
            channels,
            labels,
            num_classes,
            threads,
            left_out: Default::default(),
        })
    }

    /// Files left out of the batches read so far because they could not be read or decoded
    /// (each read counts again).
    pub fn left_out(&self) -> usize {
        self.left_out.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The source.
    pub fn source_images(&self) -> &S {
        &self.source
    }

    /// The crop every image is cut by.
    pub fn crop(&self) -> ViewCrop {
        self.crop
    }
}

impl<S: ImageSource> std::fmt::Debug for StreamedImages<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamedImages")
            .field("name", &self.name)
            .field("images", &self.source.len())
            .field("crop", &self.crop)
            .field("channels", &self.channels)
            .field("num_classes", &self.num_classes)
            .field("threads", &self.threads)
            .finish()
    }
}

impl<S: ImageSource> ImageSet for StreamedImages<S> {
    fn len(&self) -> usize {
        self.source.len()
    }

    fn image_shape(&self) -> (usize, usize, usize) {
        let (h, w) = self.crop.size();
        (h, w, self.channels)
    }

    fn labels(&self) -> Option<&[u16]> {
        self.labels.as_deref()
    }

    fn num_classes(&self) -> usize {
        self.num_classes
    }

    fn source(&self) -> &Path {
        &self.name
    }

    fn read_range(&self, range: Range<usize>) -> Result<HostBatch, DataError> {
        let batch = read_cut(
            &*self.source,
            range.clone(),
            self.crop,
            self.channels,
            0,
            self.threads,
            true,
        )?;
        self.left_out.fetch_add(
            range.len() - batch.len,
            std::sync::atomic::Ordering::Relaxed,
        );
        Ok(batch)
    }
}

/// The items `range` of `source` cut by `crop` (a random crop drawn from a generator seeded by
/// `(seed, index)`), decoded on up to `threads` scoped threads, each a contiguous part of the
/// range. An unreadable file is left out with a warning naming it when `leave_out` (the batch's
/// `indices` and `labels` then list the images it holds), else an error naming it.
pub(crate) fn read_cut<S: ImageSource + ?Sized>(
    source: &S,
    range: Range<usize>,
    crop: ViewCrop,
    channels: usize,
    seed: u64,
    threads: usize,
    leave_out: bool,
) -> Result<HostBatch, DataError> {
    let len = source.len();
    if range.end > len || range.is_empty() {
        return Err(DataError::Request {
            path: PathBuf::from("<image files>"),
            reason: format!("items {range:?} asked of a source of {len}"),
        });
    }
    let (h, w) = crop.size();
    type Part = (Vec<u8>, Vec<usize>);
    let cut = |part: Range<usize>| -> Result<Part, DataError> {
        let mut pixels = Vec::with_capacity(part.len() * h * w * channels);
        let mut kept = Vec::with_capacity(part.len());
        for i in part {
            let image = match source
                .read(i)
                .and_then(|bytes| source.decode(i, &bytes, channels))
            {
                Ok(image) => image,
                Err(e) if leave_out => {
                    log::warn!("{e}: left out of the evaluation");
                    continue;
                }
                Err(e) => return Err(e),
            };
            // A centre crop draws nothing; a random one draws from the item's own stream.
            let mut rng = StdRng::seed_from_u64(mix_seed(seed, i as u64));
            let bx = crop.draw(&mut rng, image.height, image.width);
            pixels.extend_from_slice(&crop_resize(&image, bx, (h, w)));
            kept.push(i);
        }
        Ok((pixels, kept))
    };
    let threads = threads.clamp(1, range.len());
    let (pixels, indices) = if threads == 1 {
        cut(range.clone())?
    } else {
        let parts = in_parts(range.clone(), threads, Path::new("<image files>"), cut)?;
        let mut pixels = Vec::with_capacity(range.len() * h * w * channels);
        let mut indices = Vec::with_capacity(range.len());
        for (p, i) in parts {
            pixels.extend_from_slice(&p);
            indices.extend(i);
        }
        (pixels, indices)
    };
    let labels: Option<Vec<i64>> = indices
        .iter()
        .map(|&i| source.label(i).map(i64::from))
        .collect();
    Ok(HostBatch {
        pixels,
        len: indices.len(),
        height: h,
        width: w,
        channels,
        labels,
        indices,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::stream::decode_image;
    use crate::data::stream::testing::jpeg_folder;
    use crate::data::stream::ImageFiles;

    /// The set's bytes are each file decoded and centre-cut on its own (the decoder and the
    /// resize are deterministic), whatever the thread count and the range's cut.
    #[test]
    fn a_range_is_each_file_cut_alone_whatever_the_threads() {
        let root = jpeg_folder("streamed-images", 2, 5);
        let crop = ViewCrop::Center {
            size: (24, 24),
            ratio: 0.875,
        };
        let files = ImageFiles::classes(&root).unwrap();
        let mut expected = Vec::new();
        for i in 0..files.len() {
            let image = decode_image(&files.name(i), &files.read(i).unwrap(), 3).unwrap();
            let bx = crop.draw(&mut StdRng::seed_from_u64(0), image.height, image.width);
            expected.push(crop_resize(&image, bx, (24, 24)));
        }
        for threads in [1, 3] {
            let set = StreamedImages::new(files.clone(), &root, crop, 3, threads).unwrap();
            assert_eq!(set.image_shape(), (24, 24, 3));
            assert_eq!(set.num_classes(), 2);
            assert_eq!(set.labels(), Some(&[0u16, 0, 0, 0, 0, 1, 1, 1, 1, 1][..]));
            let batch = set.read_range(3..9).unwrap();
            assert_eq!(batch.pixels, expected[3..9].concat(), "threads {threads}");
            assert_eq!(batch.labels, Some(vec![0, 0, 1, 1, 1, 1]));
            assert_eq!(batch.indices, (3..9).collect::<Vec<_>>());
        }
        let set = StreamedImages::new(files, &root, crop, 3, 2).unwrap();
        let err = set.read_range(8..11).unwrap_err();
        assert!(
            err.to_string()
                .contains("items 8..11 asked of a source of 10"),
            "{err}"
        );
    }

    /// A file that cannot be decoded is left out of the evaluation's batch (its index and label
    /// with it) and counted; the loader's named reads (`StreamLoader::images`) refuse it.
    #[test]
    fn an_unreadable_file_is_left_out_and_counted() {
        let root = jpeg_folder("streamed-images-bad", 1, 3);
        let bad = root.join("class0/001.jpg");
        std::fs::write(&bad, b"not a jpeg").unwrap();
        let files = ImageFiles::classes(&root).unwrap();
        let crop = ViewCrop::Center {
            size: (16, 16),
            ratio: 1.0,
        };
        let set = StreamedImages::new(files.clone(), &root, crop, 1, 2).unwrap();
        let batch = set.read_range(0..3).unwrap();
        assert_eq!((batch.len, batch.indices.clone()), (2, vec![0, 2]));
        assert_eq!(batch.pixels.len(), 2 * 16 * 16);
        assert_eq!(batch.labels, Some(vec![0, 0]));
        assert_eq!(set.left_out(), 1);
        let err = read_cut(&files, 0..3, crop, 1, 0, 2, false).unwrap_err();
        assert!(err.to_string().contains("001.jpg"), "{err}");
    }
}
