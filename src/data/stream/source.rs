//! Where a streaming loader reads its images: [`ImageSource`] (one encoded file per item) and
//! its folder of files, [`ImageFiles`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::decode::{decode_image, DecodedImage};
use crate::data::error::{require_dir, DataError};
use crate::data::image_folder::{read_dir_sorted, read_image_file, scan_images};
use crate::data::loader::LoaderConfig;

/// Where a streaming loader reads its images: one encoded file per item.
pub trait ImageSource: Send + Sync + 'static {
    /// Number of items.
    fn len(&self) -> usize;

    /// Whether there is no item.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The encoded bytes of item `index`.
    fn read(&self, index: usize) -> Result<Vec<u8>, DataError>;

    /// The label of item `index`, when the source has labels.
    fn label(&self, index: usize) -> Option<u16>;

    /// What names item `index` in errors and in the list of skipped files.
    fn name(&self, index: usize) -> PathBuf;

    /// Item `index`'s pixels from the bytes [`read`](Self::read) gave, as `channels` (1 or 3)
    /// channels. The default decodes an image file ([`decode_image`]); a source of raw pixels
    /// (STL-10's binaries) lays its bytes out instead.
    fn decode(
        &self,
        index: usize,
        bytes: &[u8],
        channels: usize,
    ) -> Result<DecodedImage, DataError> {
        decode_image(&self.name(index), bytes, channels)
    }

    /// The size in bytes of item `index`'s encoded image, for a run's fingerprint; `None`
    /// where it cannot be told without reading it.
    fn byte_size(&self, _index: usize) -> Option<u64> {
        None
    }

    /// For a source read front to back ([`Shards`](super::Shards)): the order its items are
    /// read in during epoch `epoch` and the order the epoch visits them (see
    /// [`SequentialEpoch`]). `None`, the default: the loader shuffles with its own permutation
    /// and reads each item where it lies.
    fn sequential_epoch(&self, _loader: &LoaderConfig, _epoch: u64) -> Option<SequentialEpoch> {
        None
    }

    /// Reads the items of `stream` that `keep` keeps, in `stream`'s order, handing each to
    /// `sink` until it returns `false`. The default reads each with [`read`](Self::read); a
    /// source read front to back reads its files in one pass.
    fn read_stream(
        &self,
        stream: &[usize],
        keep: &dyn Fn(usize) -> bool,
        sink: &mut dyn FnMut(usize, Result<Vec<u8>, DataError>) -> bool,
    ) {
        for &i in stream {
            if keep(i) && !sink(i, self.read(i)) {
                return;
            }
        }
    }
}

/// The two orders of an epoch of a source read front to back: `stream`, the items as its files
/// are read (e.g. the shards in a shuffled order, each from its start), and `order`, the items
/// as the epoch visits them (the stream passed through a shuffle buffer). `order` is a
/// permutation of `stream` in which the item at position `p` was read at most `buffer`
/// positions later than `p`, so a reader that reads ahead only as far as the batches being
/// built ask holds at most a buffer's worth of items it has not handed on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SequentialEpoch {
    /// The items in the order they are read.
    pub stream: Vec<usize>,
    /// The items in the order the epoch visits them.
    pub order: Vec<usize>,
}

impl ImageSource for Box<dyn ImageSource> {
    fn len(&self) -> usize {
        (**self).len()
    }

    fn read(&self, index: usize) -> Result<Vec<u8>, DataError> {
        (**self).read(index)
    }

    fn label(&self, index: usize) -> Option<u16> {
        (**self).label(index)
    }

    fn name(&self, index: usize) -> PathBuf {
        (**self).name(index)
    }

    fn decode(
        &self,
        index: usize,
        bytes: &[u8],
        channels: usize,
    ) -> Result<DecodedImage, DataError> {
        (**self).decode(index, bytes, channels)
    }

    fn byte_size(&self, index: usize) -> Option<u64> {
        (**self).byte_size(index)
    }

    fn sequential_epoch(&self, loader: &LoaderConfig, epoch: u64) -> Option<SequentialEpoch> {
        (**self).sequential_epoch(loader, epoch)
    }

    fn read_stream(
        &self,
        stream: &[usize],
        keep: &dyn Fn(usize) -> bool,
        sink: &mut dyn FnMut(usize, Result<Vec<u8>, DataError>) -> bool,
    ) {
        (**self).read_stream(stream, keep, sink)
    }
}

/// The image files of a folder, read one by one: a folder of class sub-folders (ImageNet's
/// `train/` of synset folders; images at any depth inside a class) or a folder of images
/// without classes. Files that are not `.png`, `.jpg` or `.jpeg` are left out and counted.
#[derive(Debug, Clone)]
pub struct ImageFiles {
    root: PathBuf,
    // Shared: a run clones its listing for every replica's loader and for the kNN bank, and
    // ImageNet's is 1.28 M paths.
    files: Arc<[PathBuf]>,
    labels: Option<Arc<[u16]>>,
    class_names: Vec<String>,
    not_images: usize,
}

impl ImageFiles {
    /// The images of `root`'s class sub-folders, labelled by the folder's position in name order
    /// (torchvision's `ImageFolder`). Files at the top of `root` are not images of a class: left
    /// out and counted.
    ///
    /// # Errors
    /// `root` is not a readable folder, has no class folder, or a class folder holds no image.
    pub fn classes(root: impl Into<PathBuf>) -> Result<Self, DataError> {
        let root = root.into();
        require_dir(&root)?;
        let mut dirs = Vec::new();
        let mut not_images = 0;
        for entry in read_dir_sorted(&root)? {
            if entry.is_dir() {
                dirs.push(entry);
            } else {
                not_images += 1;
            }
        }
        Self::of_class_dirs(root, dirs, not_images)
    }

    /// The images of the class sub-folders of `root` that `classes` names (a class list, e.g.
    /// ImageNet-100's: [`read_class_list`](crate::data::layouts::read_class_list)), labelled
    /// by their position in `classes` (sorted: as `ImageFolder` labels a tree of those classes
    /// alone); the other folders are not read.
    ///
    /// # Errors
    /// `root` is not a readable folder, a listed class has no folder, or one holds no image.
    pub fn classes_in(root: impl Into<PathBuf>, classes: &[String]) -> Result<Self, DataError> {
        let root = root.into();
        require_dir(&root)?;
        let mut dirs = Vec::with_capacity(classes.len());
        for class in classes {
            let dir = root.join(class);
            if !dir.is_dir() {
                return Err(DataError::Request {
                    path: dir,
                    reason: format!("class `{class}` of the class list has no folder here"),
                });
            }
            dirs.push(dir);
        }
        Self::of_class_dirs(root, dirs, 0)
    }

    /// The images of `root` at any depth labelled by `labels` (a file's name without extension
    /// to its class: [`read_val_labels`](crate::data::layouts::read_val_labels)), each class
    /// numbered by its position in `class_names` (the training split's); a file of a class not
    /// among them is left out (an ImageNet-100 run reads ImageNet's whole `val/`).
    ///
    /// # Errors
    /// `root` is not a readable folder, a file has no label, or no file is of the classes.
    pub fn labelled_by(
        root: impl Into<PathBuf>,
        labels: &std::collections::HashMap<String, String>,
        class_names: &[String],
    ) -> Result<Self, DataError> {
        let root = root.into();
        let (all, not_images) = scan_images(&root)?;
        let index: std::collections::HashMap<&str, u16> = class_names
            .iter()
            .enumerate()
            .map(|(i, c)| (c.as_str(), i as u16))
            .collect();
        let mut files = Vec::with_capacity(all.len());
        let mut numbers = Vec::with_capacity(all.len());
        let mut other_classes = 0;
        for file in all {
            let stem = file
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let Some(class) = labels.get(&stem) else {
                return Err(DataError::Request {
                    path: file,
                    reason: format!("no label for `{stem}` in the labels file"),
                });
            };
            match index.get(class.as_str()) {
                Some(&label) => {
                    files.push(file);
                    numbers.push(label);
                }
                None => other_classes += 1,
            }
        }
        if files.is_empty() {
            return Err(DataError::Empty {
                path: root,
                what: "no image of the training split's classes".into(),
            });
        }
        if other_classes > 0 {
            log::info!(
                "{}: {other_classes} images of classes the training split does not have left out",
                root.display()
            );
        }
        Ok(Self {
            root,
            files: files.into(),
            labels: Some(numbers.into()),
            class_names: class_names.to_vec(),
            not_images,
        })
    }

    /// Every image decoded into memory with `options` (resized and centre-cropped to its size,
    /// as an image folder is read), with the labels and class names: the in-memory path of a
    /// listing the folder reader does not make (a class list, a labels file).
    ///
    /// # Errors
    /// As [`image_folder::load`](crate::data::image_folder::load): an unreadable image, sizes
    /// that differ without resizing.
    pub fn decode_all(
        &self,
        options: crate::data::image_folder::ImageFolderOptions,
    ) -> Result<crate::data::ImageArray, DataError> {
        let (h, w, c, pixels) =
            crate::data::image_folder::decode_listed(&self.root, &self.files, options)?;
        let classes = self.class_names.len();
        Ok(crate::data::ImageArray::new(
            &self.root,
            h,
            w,
            c,
            pixels,
            self.labels.as_deref().map(<[u16]>::to_vec),
            classes,
        )?
        .with_class_names(self.class_names.clone()))
    }

    /// The listing of `dirs`, one class each in that order.
    fn of_class_dirs(
        root: PathBuf,
        dirs: Vec<PathBuf>,
        not_images: usize,
    ) -> Result<Self, DataError> {
        let mut not_images = not_images;
        let mut files = Vec::new();
        let mut labels = Vec::new();
        let mut class_names = Vec::new();
        for entry in dirs {
            if class_names.len() == u16::MAX as usize {
                return Err(DataError::Request {
                    path: root,
                    reason: format!("more than {} classes", u16::MAX),
                });
            }
            let (images, others) = scan_images(&entry)?;
            not_images += others;
            labels.extend(std::iter::repeat_n(class_names.len() as u16, images.len()));
            files.extend(images);
            class_names.push(
                entry
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            );
        }
        if class_names.is_empty() {
            return Err(DataError::Empty {
                path: root,
                what: "no class sub-folders".into(),
            });
        }
        Ok(Self {
            root,
            files: files.into(),
            labels: Some(labels.into()),
            class_names,
            not_images,
        })
    }

    /// The images of `root` at any depth, without labels, in path order.
    ///
    /// # Errors
    /// `root` is not a readable folder or holds no image.
    pub fn unlabeled(root: impl Into<PathBuf>) -> Result<Self, DataError> {
        let root = root.into();
        let (files, not_images) = scan_images(&root)?;
        Ok(Self {
            root,
            files: files.into(),
            labels: None,
            class_names: Vec::new(),
            not_images,
        })
    }

    /// The folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The class names (label = position); empty without classes.
    pub fn class_names(&self) -> &[String] {
        &self.class_names
    }

    /// Files left out because they are not `.png`, `.jpg` or `.jpeg`.
    pub fn not_images(&self) -> usize {
        self.not_images
    }

    /// The files at `indices`, in that order, with their labels and the class names (e.g. an
    /// evenly spread sample to estimate the images' statistics).
    ///
    /// # Panics
    /// If an index is not below [`ImageSource::len`].
    pub fn subset(&self, indices: &[usize]) -> Self {
        Self {
            root: self.root.clone(),
            files: indices.iter().map(|&i| self.files[i].clone()).collect(),
            labels: self
                .labels
                .as_ref()
                .map(|l| indices.iter().map(|&i| l[i]).collect()),
            class_names: self.class_names.clone(),
            not_images: 0,
        }
    }
}

impl ImageSource for ImageFiles {
    fn len(&self) -> usize {
        self.files.len()
    }

    fn read(&self, index: usize) -> Result<Vec<u8>, DataError> {
        read_image_file(&self.files[index])
    }

    fn label(&self, index: usize) -> Option<u16> {
        self.labels.as_ref().map(|l| l[index])
    }

    fn name(&self, index: usize) -> PathBuf {
        self.files[index].clone()
    }

    fn byte_size(&self, index: usize) -> Option<u64> {
        std::fs::metadata(&self.files[index]).ok().map(|m| m.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::image_folder::ImageFolderOptions;
    use crate::data::stream::testing::{jpeg_folder, scratch};

    /// A class list reads its folders alone, labelled by their order in the list; a labels
    /// file labels a flat folder by the training classes, leaving the other classes out; both
    /// decode into memory with their labels.
    #[test]
    fn a_class_list_reads_its_folders_alone_and_a_labels_file_labels_a_flat_folder() {
        let root = jpeg_folder("classes-in", 3, 2);
        let listed = ["class0".to_string(), "class2".to_string()];
        let some = ImageFiles::classes_in(&root, &listed).unwrap();
        assert_eq!(some.len(), 4);
        assert_eq!(some.labels.as_deref(), Some(&[0, 0, 1, 1][..]));
        assert_eq!(some.class_names(), listed);
        assert!(some.name(2).ends_with("class2/000.jpg"));
        let err = ImageFiles::classes_in(&root, &["class9".to_string()]).unwrap_err();
        assert!(
            err.to_string().contains("class `class9` of the class list"),
            "{err}"
        );

        let flat = scratch("labelled-by");
        for (from, to) in [
            ("class1/000.jpg", "a.jpg"),
            ("class2/001.jpg", "b.jpg"),
            ("class0/000.jpg", "c.jpg"),
        ] {
            std::fs::copy(root.join(from), flat.join(to)).unwrap();
        }
        let mut labels: std::collections::HashMap<String, String> =
            [("a", "class1"), ("b", "class2"), ("c", "class0")]
                .map(|(f, c)| (f.to_string(), c.to_string()))
                .into();
        let train = ["class1".to_string(), "class2".to_string()];
        let val = ImageFiles::labelled_by(&flat, &labels, &train).unwrap();
        assert_eq!(val.len(), 2);
        assert_eq!(val.labels.as_deref(), Some(&[0, 1][..]));
        assert!(val.name(1).ends_with("b.jpg"));
        labels.remove("b");
        let err = ImageFiles::labelled_by(&flat, &labels, &train).unwrap_err();
        assert!(err.to_string().contains("no label for `b`"), "{err}");

        let options = ImageFolderOptions {
            channels: Some(3),
            size: Some((16, 16)),
            resize: true,
            threads: 1,
        };
        let array = some.decode_all(options).unwrap();
        assert_eq!(array.image_shape(), (16, 16, 3));
        assert_eq!(array.labels(), Some(&[0u16, 0, 1, 1][..]));
        assert_eq!(array.class_names(), listed);
    }
}
