//! Where a streaming loader reads its images: [`ImageSource`] (one encoded file per item) and
//! its folder of files, [`ImageFiles`].

use std::path::{Path, PathBuf};

use crate::data::error::{require_dir, DataError};
use crate::data::image_folder::{read_dir_sorted, read_image_file, scan_images};

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
}

/// The image files of a folder, read one by one: a folder of class sub-folders (ImageNet's
/// `train/` of synset folders; images at any depth inside a class) or a folder of images
/// without classes. Files that are not `.png`, `.jpg` or `.jpeg` are left out and counted.
#[derive(Debug, Clone)]
pub struct ImageFiles {
    root: PathBuf,
    files: Vec<PathBuf>,
    labels: Option<Vec<u16>>,
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
        let mut files = Vec::new();
        let mut labels = Vec::new();
        let mut class_names = Vec::new();
        let mut not_images = 0;
        for entry in read_dir_sorted(&root)? {
            if !entry.is_dir() {
                not_images += 1;
                continue;
            }
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
            files,
            labels: Some(labels),
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
            files,
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
}
