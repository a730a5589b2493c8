//! The data a recipe trains on (`--data-dir`, `--dataset`): where it comes from, the checks
//! before anything is read, the splits, and whether a folder's images are decoded into memory
//! once or streamed from their files every epoch (`--stream`, or chosen when they are large).

use super::args::{DatasetChoice, RecipeRun};
use crate::usage::usage;
use anyhow::{Context, Result};
use curriculum_ssl::data::embedded::load_or_embedded;
use curriculum_ssl::data::idx::Split;
use curriculum_ssl::data::stl10::{self, Stl10Images};
use curriculum_ssl::data::stream::DecodedImage;
use curriculum_ssl::data::stream::{
    ImageFiles, ImageSource, SequentialEpoch, Shards, StreamedImages, ViewCrop, INDEX_FILE,
};
use curriculum_ssl::data::LoaderConfig;
use curriculum_ssl::data::{image_folder, DataError, ImageArray};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Where a recipe's images come from (recorded in the run's description).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct DataSource {
    /// The dataset.
    pub dataset: DatasetChoice,
    /// Its directory; `None`: the embedded subset.
    pub dir: Option<PathBuf>,
    /// image-folder, folder: the square size images are resized and centre-cropped to.
    pub image_size: Option<usize>,
    /// A labelled `train/` + `val/` tree of class folders for the kNN monitor, instead of the
    /// dataset's own labelled splits.
    pub knn_data: Option<PathBuf>,
    /// image-folder: a class list file; only those class folders are read (ImageNet-100).
    pub classes: Option<PathBuf>,
    /// image-folder: a labels file for a `val/` that holds its images without class folders
    /// (ImageNet's download).
    pub val_labels: Option<PathBuf>,
}

impl DataSource {
    /// Checks the combination before anything is read.
    ///
    /// # Errors
    /// A dataset other than Fashion-MNIST without `--data-dir`, `--image-size` outside
    /// image-folder or out of range, a `--data-dir` that is not a readable directory.
    pub fn validate(&self) -> Result<()> {
        let dataset = self.dataset;
        if self.dir.is_none() && dataset != DatasetChoice::FashionMnist {
            return Err(usage(format!(
                "--dataset {dataset}: needs --data-dir (only Fashion-MNIST has an embedded subset)"
            )));
        }
        if let Some(size) = self.image_size {
            if !dataset.is_files() {
                return Err(usage(
                    "--image-size: only for --dataset image-folder, folder or shards (the others have \
                     their own size)",
                ));
            }
            if !(8..=1024).contains(&size) {
                return Err(usage(format!("--image-size {size}: must lie in [8, 1024]")));
            }
        }
        for (option, file) in [
            ("--classes", &self.classes),
            ("--val-labels", &self.val_labels),
        ] {
            let Some(file) = file else { continue };
            if self.dataset != DatasetChoice::ImageFolder {
                return Err(usage(format!(
                    "{option}: only for --dataset image-folder (ImageNet's layout)"
                )));
            }
            if !file.is_file() {
                return Err(usage(format!("{option} {}: no such file", file.display())));
            }
        }
        if let Some(dir) = &self.dir {
            check_data_dir(dir)?;
        }
        if let Some(dir) = &self.knn_data {
            check_dir("--knn-data", dir)?;
            for split in ["train", "val"] {
                if !dir.join(split).is_dir() {
                    return Err(usage(format!(
                        "--knn-data {}: no {split}/ folder (the kNN monitor needs a train/ and a \
                         val/ tree of class folders)",
                        dir.display()
                    )));
                }
            }
        }
        Ok(())
    }

    /// Loads the images: what the method trains on, and the labeled train and test splits of
    /// the kNN monitor. (The readers' errors name the file that is missing or damaged, so the
    /// context only says which split was being read.)
    pub fn load(&self) -> Result<Data> {
        self.load_splits(true)
    }

    /// As [`DataSource::load`]; without `pretrain`, STL-10's unlabeled split is not read (an
    /// evaluation needs only the labeled splits).
    pub fn load_splits(&self, pretrain: bool) -> Result<Data> {
        use curriculum_ssl::data::{cifar, idx, stl10};
        let Some(dir) = self.dir.as_deref() else {
            let train = load_or_embedded(None, Split::Train)
                .context("loading the training images of the embedded subset")?;
            let test = load_or_embedded(None, Split::Test)
                .context("loading the test images of the embedded subset")?;
            return Ok(Data {
                pretrain: None,
                train,
                test: Some(test),
            });
        };
        let (pretrain, train, test) = match self.dataset {
            DatasetChoice::FashionMnist | DatasetChoice::Mnist => (
                None,
                idx::load(dir, Split::Train).context("loading the training images")?,
                Some(idx::load(dir, Split::Test).context("loading the test images")?),
            ),
            DatasetChoice::Cifar10 => (
                None,
                cifar::load_cifar10(dir, cifar::Split::Train)
                    .context("loading the training images")?,
                Some(
                    cifar::load_cifar10(dir, cifar::Split::Test)
                        .context("loading the test images")?,
                ),
            ),
            DatasetChoice::Cifar100 => {
                let fine = cifar::Cifar100Labels::Fine;
                (
                    None,
                    cifar::load_cifar100(dir, cifar::Split::Train, fine)
                        .context("loading the training images")?,
                    Some(
                        cifar::load_cifar100(dir, cifar::Split::Test, fine)
                            .context("loading the test images")?,
                    ),
                )
            }
            DatasetChoice::Stl10 => (
                if pretrain {
                    Some(
                        stl10::load_unlabeled(dir, stl10::Split::Unlabeled)
                            .context("loading the unlabeled images")?,
                    )
                } else {
                    None
                },
                stl10::load(dir, stl10::Split::Train).context("loading the training images")?,
                Some(stl10::load(dir, stl10::Split::Test).context("loading the test images")?),
            ),
            DatasetChoice::ImageFolder if self.classes.is_some() || self.val_labels.is_some() => {
                self.listed_folder(dir)?
            }
            DatasetChoice::ImageFolder => self.folder_tree(dir)?,
            DatasetChoice::Shards => {
                return Err(usage(format!(
                    "{}: --dataset shards is read as it is trained on (streamed), not decoded \
                     into memory first: this command reads only folders of images here (pack \
                     from, or point it at, the folder the shards were written from)",
                    dir.display()
                )))
            }
            DatasetChoice::Folder => {
                let (images, _) = image_folder::load_images(dir, self.folder_options(None))
                    .map_err(|e| size_hint(e, "the folder"))
                    .context("loading the images")?;
                (None, images, None)
            }
        };
        if let Some(knn) = &self.knn_data {
            return self.with_knn_data(knn, pretrain, train);
        }
        Ok(Data {
            pretrain,
            train,
            test,
        })
    }

    /// A folder whose classes come from a class list or a labels file: the listing decided
    /// here, then decoded.
    fn listed_folder(&self, dir: &Path) -> Result<Splits> {
        let (train_files, val_files) = self.folder_splits(dir)?;
        let train = train_files
            .decode_all(self.folder_options(None))
            .map_err(|e| size_hint(e, "train/"))
            .context("loading the training images (train/)")?;
        let test = match val_files {
            Some(val) => Some(
                val.decode_all(self.folder_options(Some(&train)))
                    .map_err(|e| size_hint(e, "val/"))
                    .context("loading the validation images (val/)")?,
            ),
            None => None,
        };
        Ok((None, train, test))
    }

    /// A folder of `train/` (and `val/`) trees of class folders.
    fn folder_tree(&self, dir: &Path) -> Result<Splits> {
        let options = self.folder_options(None);
        let train = image_folder::load(dir.join("train"), options)
            .map_err(|e| size_hint(e, "train/"))
            .context("loading the training images (train/)")?;
        let val = dir.join("val");
        let test = if val.is_dir() {
            // The class folders compared before val/ is decoded (a listing, not the images).
            let (_, val_classes) = image_folder::scan(&val)
                .map_err(|e| size_hint(e, "val/"))
                .context("loading the validation images (val/)")?;
            same_classes(
                (&val, &val_classes),
                (&dir.join("train"), train.class_names()),
            )?;
            let val = image_folder::load(&val, self.folder_options(Some(&train)))
                .map_err(|e| size_hint(e, "val/"))
                .context("loading the validation images (val/)")?;
            Some(val)
        } else if self.knn_data.is_none() {
            log::warn!(
                "{}: no val/ folder, so the kNN monitor is off (add a val/ tree of the \
                 same classes to measure the features as training goes)",
                dir.display()
            );
            None
        } else {
            None
        };
        Ok((None, train, test))
    }

    /// The data with the kNN monitor's labelled images from `knn` (`train/` the bank, `val/`
    /// the queries), at the size and channels of the images trained on.
    fn with_knn_data(
        &self,
        knn: &Path,
        pretrain: Option<ImageArray>,
        train: ImageArray,
    ) -> Result<Data> {
        let like = pretrain.as_ref().unwrap_or(&train);
        let options = self.folder_options(Some(like));
        // The class folders compared before either side is decoded (listings, not images).
        let (bank_dir, queries_dir) = (knn.join("train"), knn.join("val"));
        let (_, bank_classes) = image_folder::scan(&bank_dir)
            .context("loading the kNN monitor's labelled images (--knn-data …/train)")?;
        let (_, query_classes) = image_folder::scan(&queries_dir)
            .context("loading the kNN monitor's labelled images (--knn-data …/val)")?;
        same_classes((&queries_dir, &query_classes), (&bank_dir, &bank_classes))?;
        let bank = image_folder::load(&bank_dir, options)
            .context("loading the kNN monitor's labelled images (--knn-data …/train)")?;
        let queries = image_folder::load(&queries_dir, options)
            .context("loading the kNN monitor's labelled images (--knn-data …/val)")?;
        let images = match pretrain {
            Some(images) => images,
            None => train.unlabeled(),
        };
        Ok(Data {
            pretrain: Some(images),
            train: bank,
            test: Some(queries),
        })
    }
}

/// A data set's splits as read: the pre-training images (where they are not the training
/// split), the training split and the test split.
type Splits = (Option<ImageArray>, ImageArray, Option<ImageArray>);

/// The images a training run reads: decoded into memory once, or streamed from their files
/// every epoch.
#[derive(Clone)]
pub enum TrainData {
    /// Decoded once, up front, at the training size.
    Memory(Data),
    /// Image files decoded every epoch, the views cut from the originals.
    Stream(Streamed),
}

impl TrainData {
    /// Whether the images trained on have labels (as their first one says: a set's images all
    /// have one or none has).
    pub fn is_labelled(&self) -> bool {
        match self {
            Self::Memory(data) => data.trained_on().is_labeled(),
            Self::Stream(s) => !s.files.is_empty() && s.files.label(0).is_some(),
        }
    }
}

/// Image files trained on by streaming them (image-folder's `train/`, a folder, or shards).
#[derive(Clone)]
pub struct Streamed {
    /// The files trained on.
    pub files: Files,
    /// The side of the square images the pipeline is built for (the views' size).
    pub side: usize,
    /// The fraction of an image's shorter side an evaluation keeps, centred: ImageNet's 0.875
    /// (`Resize(256)` + `CenterCrop(224)`) for image files, 1 for STL-10 (the whole image, as
    /// in memory).
    pub eval_ratio: f64,
    /// The kNN monitor's labelled bank and queries (image-folder's or the shards' `train/` and
    /// `val/`, or --knn-data's), centre-cut at `side` when read.
    pub monitor: Option<(Files, Files)>,
}

/// The first readable image of `files`, whose size stands for the folder's (a bad file is
/// skipped when streamed, refused when decoded into memory): up to `FIRST_TRIES` are tried.
fn first_image(files: &Files) -> Result<DecodedImage> {
    let mut first = Err(anyhow::anyhow!("no image"));
    for i in 0..files.len().min(FIRST_TRIES) {
        first = files
            .read(i)
            .and_then(|bytes| files.decode(i, &bytes, 3))
            .map_err(anyhow::Error::from);
        if first.is_ok() {
            break;
        }
    }
    first.with_context(|| {
        format!(
            "reading the first images of {} (their size sets the views' size)",
            files.root().display()
        )
    })
}

/// The image files a streamed run reads: a folder's, or WebDataset shards.
#[derive(Debug, Clone)]
pub enum Files {
    /// A folder's files (image-folder, folder).
    Folder(ImageFiles),
    /// WebDataset shards (`--dataset shards`).
    Shards(Shards),
    /// A split of STL-10's binaries (`--dataset stl10 --stream`).
    Stl10(Stl10Images),
}

impl Files {
    /// The folder they are read from.
    pub fn root(&self) -> &Path {
        match self {
            Self::Folder(f) => f.root(),
            Self::Shards(s) => s.root(),
            Self::Stl10(s) => s.root(),
        }
    }

    /// Their class names (empty when unlabelled).
    pub fn class_names(&self) -> &[String] {
        match self {
            Self::Folder(f) => f.class_names(),
            Self::Shards(s) => s.class_names(),
            Self::Stl10(s) => s.class_names(),
        }
    }

    /// The items `indices`, in that order.
    pub fn subset(&self, indices: &[usize]) -> Self {
        match self {
            Self::Folder(f) => Self::Folder(f.subset(indices)),
            Self::Shards(s) => Self::Shards(s.subset(indices)),
            Self::Stl10(s) => Self::Stl10(s.subset(indices)),
        }
    }

    /// What the listing left out: files not named as images, or shards' samples without an
    /// image or a label.
    fn left_out(&self) -> (usize, &'static str) {
        match self {
            Self::Folder(f) => (
                f.not_images(),
                "files that are not .png, .jpg or .jpeg left out",
            ),
            Self::Shards(s) => (
                s.left_out(),
                "samples without an image or a valid label left out",
            ),
            Self::Stl10(_) => (0, ""),
        }
    }

    /// The summary's line on what the listing left out, when it left anything out.
    pub fn left_out_line(&self) -> Option<String> {
        let (n, what) = self.left_out();
        (n > 0).then(|| {
            format!(
                "{n} {what} when {} was listed (see the log)",
                self.root().display()
            )
        })
    }

    fn inner(&self) -> &dyn ImageSource {
        match self {
            Self::Folder(f) => f,
            Self::Shards(s) => s,
            Self::Stl10(s) => s,
        }
    }
}

impl ImageSource for Files {
    fn len(&self) -> usize {
        self.inner().len()
    }

    fn read(&self, index: usize) -> Result<Vec<u8>, DataError> {
        self.inner().read(index)
    }

    fn label(&self, index: usize) -> Option<u16> {
        self.inner().label(index)
    }

    fn name(&self, index: usize) -> PathBuf {
        self.inner().name(index)
    }

    fn decode(
        &self,
        index: usize,
        bytes: &[u8],
        channels: usize,
    ) -> Result<DecodedImage, DataError> {
        self.inner().decode(index, bytes, channels)
    }

    fn byte_size(&self, index: usize) -> Option<u64> {
        self.inner().byte_size(index)
    }

    fn sequential_epoch(&self, loader: &LoaderConfig, epoch: u64) -> Option<SequentialEpoch> {
        self.inner().sequential_epoch(loader, epoch)
    }

    fn read_stream(
        &self,
        stream: &[usize],
        keep: &dyn Fn(usize) -> bool,
        sink: &mut dyn FnMut(usize, Result<Vec<u8>, DataError>) -> bool,
    ) {
        self.inner().read_stream(stream, keep, sink)
    }
}

/// The largest bank of raw pixels (as f32 features) the raw-pixel baseline computes: 2 GiB
/// (the full Fashion-MNIST's is 188 MB, CIFAR-10's 614 MB; ImageNet's would be 770 GB).
pub const RAW_PIXELS_BYTES: u64 = 2 << 30;

/// The GiB a raw-pixel bank of `images` images of `shape` would take, when over
/// [`RAW_PIXELS_BYTES`] (the baseline is then left out, or refused when asked for).
pub fn raw_pixels_too_large(images: usize, (h, w, c): (usize, usize, usize)) -> Option<f64> {
    let bytes = images as u64 * (h * w * c) as u64 * 4;
    (bytes > RAW_PIXELS_BYTES).then(|| bytes as f64 / f64::from(1u32 << 30))
}

/// Whether the run in `run_dir` streamed its files, as its `config.json` records it (absent:
/// it did not, as every run recorded before streaming); `None` without a record. A resume of a
/// run whose `recipe.toml` predates `stream` reads it here instead of deciding by the memory
/// available now.
pub fn recorded_stream(run_dir: &Path) -> Option<bool> {
    let text = std::fs::read_to_string(run_dir.join("config.json")).ok()?;
    let record: serde_json::Value = serde_json::from_str(&text).ok()?;
    Some(record["run"]["stream"].as_bool().unwrap_or(false))
}

/// Files tried in a row for the size of a folder's images.
const FIRST_TRIES: usize = 16;

impl Streamed {
    /// A streamed set of `files` as an evaluation reads it: each image centre-cut at the side.
    pub fn eval_set(&self, files: &Files) -> Result<StreamedImages<Files>> {
        Ok(StreamedImages::new(
            files.clone(),
            files.root(),
            ViewCrop::Center {
                size: (self.side, self.side),
                ratio: self.eval_ratio,
            },
            3,
            0,
        )?)
    }
}

impl TrainData {
    /// `(height, width, channels)` of the images the pipeline is built for.
    pub fn shape(&self) -> (usize, usize, usize) {
        match self {
            Self::Memory(data) => data.shape(),
            Self::Stream(s) => (s.side, s.side, 3),
        }
    }
}

/// Images a folder may hold decoded in memory before a run streams it without being asked: a
/// quarter of the memory available (what the system says; 16 GiB when it does not say).
fn auto_stream_bytes() -> u64 {
    available_memory().map_or(16 << 30, |a| a / 4)
}

/// The memory the system can give without swapping (`MemAvailable` of /proc/meminfo), where it
/// says: read once, before the replicas' threads allocate their networks.
pub(crate) fn available_memory() -> Option<u64> {
    static AVAILABLE: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        let text = std::fs::read_to_string("/proc/meminfo").ok()?;
        let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    })
}

impl DataSource {
    /// The images of a training run: streamed when `stream` says so, or, when it does not
    /// say, when a folder's images decoded at the training size would take more than a quarter
    /// of the available memory (said in the log); else decoded into memory
    /// ([`DataSource::load`]).
    ///
    /// # Errors
    /// `--stream` for a dataset that is not a folder of image files, a folder with no image, a
    /// kNN split whose classes are not the bank's, or what [`DataSource::load`] refuses.
    pub fn load_for_training(&self, stream: Option<bool>) -> Result<TrainData> {
        if let (DatasetChoice::Stl10, Some(dir)) = (self.dataset, self.dir.as_deref()) {
            if let Some(streamed) = self.stl10_streamed(dir, stream)? {
                return Ok(TrainData::Stream(streamed));
            }
            return Ok(TrainData::Memory(self.load()?));
        }
        let Some(dir) = self.dir.as_deref().filter(|_| self.dataset.is_files()) else {
            if stream == Some(true) {
                return Err(usage(format!(
                    "--stream: only for --dataset image-folder, folder, shards or stl10 (the image files a run \
                     decodes every epoch); --dataset {} is read from its own files into memory",
                    self.dataset
                )));
            }
            return Ok(TrainData::Memory(self.load()?));
        };
        let shards = self.dataset == DatasetChoice::Shards;
        if stream == Some(false) {
            if shards {
                return Err(usage(
                    "--stream false: shards are read as they are trained on (--dataset shards \
                     always streams; `recipe pack` wrote them from a folder that can be decoded \
                     into memory)",
                ));
            }
            return Ok(TrainData::Memory(self.load()?));
        }
        let (files, val_files) = match self.dataset {
            DatasetChoice::ImageFolder => {
                let (train, val) = self.folder_splits(dir)?;
                (Files::Folder(train), val.map(Files::Folder))
            }
            DatasetChoice::Shards => shard_splits(dir)?,
            _ => (
                Files::Folder(ImageFiles::unlabeled(dir).context("listing the images")?),
                None,
            ),
        };
        let image = first_image(&files)?;
        if stream.is_none() && !shards && self.fits_in_memory(&files, val_files.as_ref(), &image) {
            return Ok(TrainData::Memory(self.load()?));
        }
        let side = match self.image_size {
            Some(side) => side,
            None => {
                let side = image.height.min(image.width).min(224);
                log::info!(
                    "streaming: views of {side} px (the first image's shorter side, at most \
                     224; --image-size sets it)"
                );
                side
            }
        };
        let monitor = self.streamed_monitor(dir, &files, val_files)?;
        log::info!(
            "streaming {} images from {}{}{}",
            files.len(),
            files.root().display(),
            match &files {
                Files::Shards(s) => format!(
                    " ({} shards, read in a shuffled order through a buffer of {} samples)",
                    s.shard_files().len(),
                    s.shuffle_buffer()
                ),
                Files::Folder(_) | Files::Stl10(_) => String::new(),
            },
            match files.left_out() {
                (0, _) => String::new(),
                (n, what) => format!(" ({n} {what})"),
            }
        );
        Ok(TrainData::Stream(Streamed {
            files,
            side,
            eval_ratio: curriculum_ssl::data::stream::EVAL_CENTRE_RATIO,
            monitor,
        }))
    }

    /// Whether a folder's images (`files`, the held-out `val_files` and the kNN monitor's
    /// splits) decoded at the training size fit in a quarter of the available memory: every
    /// image at `--image-size`, or at the first image's size (which all must then have). When
    /// they do not, the log says so and why they are streamed.
    fn fits_in_memory(
        &self,
        files: &Files,
        val_files: Option<&Files>,
        image: &DecodedImage,
    ) -> bool {
        let (h, w) = self
            .image_size
            .map_or((image.height, image.width), |s| (s, s));
        // The labelled splits of the kNN monitor are decoded too.
        let mut splits = Vec::new();
        if let Some(knn) = &self.knn_data {
            splits.extend([knn.join("train"), knn.join("val")]);
        }
        let held_out: usize = val_files.map_or(0, |v| v.len())
            + splits
                .iter()
                .filter(|d| d.is_dir())
                .map(|d| ImageFiles::classes(d).map_or(0, |f| f.len()))
                .sum::<usize>();
        let images = files.len() + held_out;
        let bytes = images as u64 * (h * w * 3) as u64;
        let limit = auto_stream_bytes();
        if bytes <= limit {
            return true;
        }
        log::info!(
            "{images} images at {h}x{w} would take {:.1} GiB decoded, more than a quarter of \
             the memory available ({:.1} GiB): streaming them from their files every epoch \
             (--stream false decodes them into memory)",
            bytes as f64 / f64::from(1u32 << 30),
            limit as f64 * 4.0 / f64::from(1u32 << 30),
        );
        false
    }

    /// STL-10 streamed from its binaries: when `--stream` says so, or, when it does not say, when
    /// its images would take more than a quarter of the available memory; `None`: decoded into
    /// memory. The run trains on the unlabeled split at 96 px, the kNN monitor reads train and
    /// test (or --knn-data's folders), each image whole, as in memory.
    fn stl10_streamed(&self, dir: &Path, stream: Option<bool>) -> Result<Option<Streamed>> {
        let open = |split, what| {
            Stl10Images::open(dir, split).with_context(|| format!("listing the {what} images"))
        };
        let unlabeled = open(stl10::Split::Unlabeled, "unlabeled")?;
        let (train, test) = (
            open(stl10::Split::Train, "training")?,
            open(stl10::Split::Test, "test")?,
        );
        let images = unlabeled.len() + train.len() + test.len();
        let bytes = (images * stl10::IMAGE_BYTES) as u64;
        match stream {
            Some(false) => return Ok(None),
            Some(true) => {}
            None if bytes <= auto_stream_bytes() => return Ok(None),
            None => log::info!(
                "STL-10's {images} images would take {:.1} GiB decoded, more than a quarter of \
                 the memory available: streaming them from the binaries every epoch (--stream \
                 false decodes them into memory)",
                bytes as f64 / f64::from(1u32 << 30)
            ),
        }
        let files = Files::Stl10(unlabeled);
        let monitor = match &self.knn_data {
            Some(_) => self.streamed_monitor(dir, &files, None)?,
            None => Some((Files::Stl10(train), Files::Stl10(test))),
        };
        log::info!(
            "streaming STL-10's {} unlabeled images from {}",
            files.len(),
            files.root().display()
        );
        Ok(Some(Streamed {
            files,
            side: stl10::SIDE,
            eval_ratio: 1.0,
            monitor,
        }))
    }

    /// The kNN monitor's bank and queries of a streamed run: --knn-data's train/ and val/, else
    /// image-folder's train/ (the files trained on) and val/; none for a folder without
    /// --knn-data or an image-folder without val/ (warned about, as in memory).
    fn streamed_monitor(
        &self,
        dir: &Path,
        files: &Files,
        val_files: Option<Files>,
    ) -> Result<Option<(Files, Files)>> {
        let (bank, queries) = if let Some(knn) = &self.knn_data {
            (
                Files::Folder(
                    ImageFiles::classes(knn.join("train")).context(
                        "listing the kNN monitor's labelled images (--knn-data …/train)",
                    )?,
                ),
                Files::Folder(
                    ImageFiles::classes(knn.join("val"))
                        .context("listing the kNN monitor's labelled images (--knn-data …/val)")?,
                ),
            )
        } else if matches!(
            self.dataset,
            DatasetChoice::ImageFolder | DatasetChoice::Shards
        ) {
            let Some(val) = val_files else {
                log::warn!(
                    "{}: no val/ folder, so the kNN monitor is off (add a val/ tree of the same \
                     classes to measure the features as training goes)",
                    dir.display()
                );
                return Ok(None);
            };
            (files.clone(), val)
        } else {
            return Ok(None);
        };
        same_classes(
            (queries.root(), queries.class_names()),
            (bank.root(), bank.class_names()),
        )?;
        Ok(Some((bank, queries)))
    }
}

/// Refuses labelled queries (`val/`) whose class folders are not the bank's (`train/`): the
/// kNN monitor scores a query by its neighbours' labels, which are positions in the bank's
/// list of folders, so `val/{a,c}` against `train/{a,b}` would score every `c` as a `b`. The
/// error names the folders found on one side only.
fn same_classes(
    (queries, query_names): (&Path, &[String]),
    (bank, bank_names): (&Path, &[String]),
) -> Result<()> {
    if query_names == bank_names {
        return Ok(());
    }
    let only = |names: &[String], other: &[String]| {
        let missing: Vec<&String> = names.iter().filter(|n| !other.contains(n)).collect();
        match missing.len() {
            0 => "none".to_string(),
            _ => crate::usage::some_of(&missing, 5),
        }
    };
    Err(usage(format!(
        "{}: its classes ({}) are not those of {} ({}): only in the first: {}; only in the \
         second: {}. The kNN monitor scores a query by its neighbours' classes, which must be \
         the same folders",
        queries.display(),
        query_names.len(),
        bank.display(),
        bank_names.len(),
        only(query_names, bank_names),
        only(bank_names, query_names)
    )))
}

/// The shards of `--dataset shards`: `dir/train/` and, when there, `dir/val/` (as `recipe
/// pack` writes them), else `dir`'s own shards with no held-out split.
fn shard_splits(dir: &Path) -> Result<(Files, Option<Files>)> {
    let train_dir = dir.join("train");
    if !train_dir.is_dir() {
        let train = Shards::open(dir).context("listing the shards")?;
        return Ok((Files::Shards(train), None));
    }
    let train = Shards::open(&train_dir).context("listing the training shards (train/)")?;
    let val_dir = dir.join("val");
    let val = if val_dir.is_dir() {
        let val = Shards::open(&val_dir).context("listing the validation shards (val/)")?;
        // One split's index lost: its classes would be numbers against the other's names.
        if val.indexed() != train.indexed() {
            let (lacks, has) = if train.indexed() {
                (&val_dir, &train_dir)
            } else {
                (&train_dir, &val_dir)
            };
            return Err(usage(format!(
                "{}: missing, while {} names the classes; both splits need theirs (`recipe \
                 pack` writes them) for the kNN monitor to match val/'s classes to train/'s",
                lacks.join(INDEX_FILE).display(),
                has.join(INDEX_FILE).display()
            )));
        }
        // Without indexes the classes are numbers, and val/ may not hold the last ones.
        let val = if !val.indexed() && !train.indexed() {
            val.with_class_names(train.class_names())
                .context("listing the validation shards (val/)")?
        } else {
            val
        };
        Some(Files::Shards(val))
    } else {
        None
    };
    Ok((Files::Shards(train), val))
}

impl DataSource {
    /// An image folder's listed splits: `train/` (the class list's folders alone with
    /// --classes), and `val/` when it exists (labelled by --val-labels when given, else by its
    /// class folders, the class list's alone).
    pub(crate) fn folder_splits(&self, dir: &Path) -> Result<(ImageFiles, Option<ImageFiles>)> {
        let classes = match &self.classes {
            Some(file) => Some(
                curriculum_ssl::data::layouts::read_class_list(file)
                    .map_err(|e| usage(format!("--classes: {e}")))?,
            ),
            None => None,
        };
        let train_dir = dir.join("train");
        let train = match &classes {
            Some(classes) => ImageFiles::classes_in(&train_dir, classes),
            None => ImageFiles::classes(&train_dir),
        }
        .context("listing the training images (train/)")?;
        let val_dir = dir.join("val");
        if !val_dir.is_dir() {
            if self.val_labels.is_some() {
                return Err(usage(format!(
                    "--val-labels: {} has no val/ folder",
                    dir.display()
                )));
            }
            return Ok((train, None));
        }
        let val = match (&self.val_labels, &classes) {
            (Some(file), _) => {
                let labels = curriculum_ssl::data::layouts::read_val_labels(file)
                    .map_err(|e| usage(format!("--val-labels: {e}")))?;
                ImageFiles::labelled_by(&val_dir, &labels, train.class_names())
            }
            (None, Some(classes)) => ImageFiles::classes_in(&val_dir, classes),
            (None, None) => ImageFiles::classes(&val_dir),
        }
        .context("listing the validation images (val/)")?;
        Ok((train, Some(val)))
    }

    /// The source a run's record names.
    pub fn of_run(run: &RecipeRun) -> Self {
        Self {
            dataset: run.dataset,
            dir: run.data.clone(),
            image_size: run.image_size,
            knn_data: run.knn_data.clone(),
            classes: run.classes.clone(),
            val_labels: run.val_labels.clone(),
        }
    }

    /// How image files are read: three channels, at --image-size (resized and centre-cropped)
    /// or at the size of `like`'s images when given, else at the size of the first image.
    fn folder_options(&self, like: Option<&ImageArray>) -> image_folder::ImageFolderOptions {
        let size = match (self.image_size, like) {
            (Some(s), _) => Some((s, s)),
            (None, Some(like)) => Some((like.image_shape().0, like.image_shape().1)),
            (None, None) => None,
        };
        image_folder::ImageFolderOptions {
            channels: Some(3),
            size,
            resize: size.is_some(),
            threads: 0,
        }
    }
}

/// Images of several sizes without --image-size: the error says which option resizes them.
fn size_hint(error: DataError, place: &str) -> anyhow::Error {
    match error {
        DataError::ImageShape {
            path,
            height,
            width,
            found_height,
            found_width,
            ..
        } if (height, width) != (found_height, found_width) => usage(format!(
            "{}: {found_width}x{found_height} pixels where the first image of {place} has \
             {width}x{height}; give --image-size N to resize and centre-crop every image to \
             N×N",
            path.display()
        )),
        other => other.into(),
    }
}

/// Checks that `--data-dir DIR` names a directory (before anything is read or written).
pub fn check_data_dir(dir: &Path) -> Result<()> {
    check_dir("--data-dir", dir)
}

/// Checks that the directory an option names exists.
fn check_dir(option: &str, dir: &Path) -> Result<()> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(usage(format!(
            "{option} {}: not a directory",
            dir.display()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Err(usage(format!(
            "{option} {}: permission denied",
            dir.display()
        ))),
        Err(_) => Err(usage(format!(
            "{option} {}: no such directory",
            dir.display()
        ))),
    }
}

/// Whether `path` (which need not exist yet) lies inside the existing directory `dir`, links
/// resolved.
pub(crate) fn is_inside(path: &Path, dir: &Path) -> bool {
    let Ok(dir) = dir.canonicalize() else {
        return false;
    };
    let Ok(mut base) = std::path::absolute(path) else {
        return false;
    };
    let mut rest = Vec::new();
    while !base.exists() {
        match (base.file_name(), base.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name.to_os_string());
                base = parent.to_path_buf();
            }
            _ => return false,
        }
    }
    let Ok(mut resolved) = base.canonicalize() else {
        return false;
    };
    resolved.extend(rest.iter().rev());
    resolved.starts_with(&dir)
}

/// Training and test images (cheap to clone: the pixels are shared).
#[derive(Clone)]
pub struct Data {
    /// What the method trains on when it is not `train` (STL-10's unlabeled split, a folder
    /// whose kNN monitor reads --knn-data).
    pub pretrain: Option<ImageArray>,
    /// Training split (trained on unless `pretrain` is given; the kNN monitor's bank when it is
    /// labelled).
    pub train: ImageArray,
    /// Test split (the kNN monitor's queries); `None` where the data has no labels.
    pub test: Option<ImageArray>,
}

impl Data {
    /// The images the method trains on.
    pub fn trained_on(&self) -> &ImageArray {
        self.pretrain.as_ref().unwrap_or(&self.train)
    }

    /// `(height, width, channels)` of the images the method trains on.
    pub fn shape(&self) -> (usize, usize, usize) {
        self.trained_on().image_shape()
    }

    /// The labelled train and test splits, or an error saying that `what` needs them.
    pub fn labelled(&self, what: &str) -> Result<(&ImageArray, &ImageArray)> {
        match &self.test {
            Some(test) if self.train.is_labeled() => Ok((&self.train, test)),
            _ => Err(usage(format!(
                "{what} needs labelled images: this data has none (--dataset folder: give \
                 --knn-data with a train/ and a val/ tree of class folders; image-folder: add \
                 val/)"
            ))),
        }
    }
}
