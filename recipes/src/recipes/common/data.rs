//! The data a recipe trains on (`--data-dir`, `--dataset`): where it comes from, the checks
//! before anything is read, and the splits.

use super::*;

/// The datasets the recipes read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, Serialize, Deserialize)]
pub enum DatasetChoice {
    /// Fashion-MNIST IDX files (`train-images-idx3-ubyte[.gz]`, …), or the embedded subset.
    #[default]
    FashionMnist,
    /// MNIST IDX files (the same layout).
    Mnist,
    /// CIFAR-10 binary batches (`data_batch_1.bin` … `test_batch.bin`).
    Cifar10,
    /// CIFAR-100 binary files (`train.bin`, `test.bin`), fine labels.
    Cifar100,
    /// STL-10 binaries: pre-training on the unlabeled split, the kNN monitor on train/test.
    Stl10,
    /// A `train/` and a `val/` tree of class folders of PNG or JPEG images.
    ImageFolder,
}

/// Where a recipe's images come from (recorded in the run's description).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct DataSource {
    /// The dataset.
    pub dataset: DatasetChoice,
    /// Its directory; `None`: the embedded subset.
    pub dir: Option<PathBuf>,
    /// image-folder: the square size images are resized to.
    pub image_size: Option<usize>,
}

impl DataSource {
    /// The source the options name (checked by [`DataSource::validate`]).
    pub fn from_args(args: &RecipeArgs) -> Self {
        Self {
            dataset: args.dataset.unwrap_or_default(),
            dir: args.data.clone(),
            image_size: args.image_size,
        }
    }

    /// Checks the combination before anything is read.
    ///
    /// # Errors
    /// A dataset other than Fashion-MNIST without `--data-dir`, `--image-size` outside
    /// image-folder or out of range, a `--data-dir` that is not a readable directory.
    pub fn validate(&self) -> Result<()> {
        let dataset = self.dataset;
        if self.dir.is_none() && dataset != DatasetChoice::FashionMnist {
            return Err(usage(format!(
                "--dataset {}: needs --data-dir (only Fashion-MNIST has an embedded subset)",
                dataset
                    .to_possible_value()
                    .expect("no skipped variant")
                    .get_name()
            )));
        }
        if let Some(size) = self.image_size {
            if dataset != DatasetChoice::ImageFolder {
                return Err(usage("--image-size: only for --dataset image-folder"));
            }
            if !(8..=1024).contains(&size) {
                return Err(usage(format!("--image-size {size}: must lie in [8, 1024]")));
            }
        }
        if let Some(dir) = &self.dir {
            check_data_dir(dir)?;
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
        use curriculum_ssl::data::{cifar, idx, image_folder, stl10};
        let Some(dir) = self.dir.as_deref() else {
            let train = load_or_embedded(None, Split::Train)
                .context("loading the training images of the embedded subset")?;
            let test = load_or_embedded(None, Split::Test)
                .context("loading the test images of the embedded subset")?;
            return Ok(Data {
                pretrain: None,
                train,
                test,
            });
        };
        let (pretrain, train, test) = match self.dataset {
            DatasetChoice::FashionMnist | DatasetChoice::Mnist => (
                None,
                idx::load(dir, Split::Train).context("loading the training images")?,
                idx::load(dir, Split::Test).context("loading the test images")?,
            ),
            DatasetChoice::Cifar10 => (
                None,
                cifar::load_cifar10(dir, cifar::Split::Train)
                    .context("loading the training images")?,
                cifar::load_cifar10(dir, cifar::Split::Test).context("loading the test images")?,
            ),
            DatasetChoice::Cifar100 => {
                let fine = cifar::Cifar100Labels::Fine;
                (
                    None,
                    cifar::load_cifar100(dir, cifar::Split::Train, fine)
                        .context("loading the training images")?,
                    cifar::load_cifar100(dir, cifar::Split::Test, fine)
                        .context("loading the test images")?,
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
                stl10::load(dir, stl10::Split::Test).context("loading the test images")?,
            ),
            DatasetChoice::ImageFolder => {
                let options = image_folder::ImageFolderOptions {
                    channels: Some(3),
                    size: self.image_size.map(|s| (s, s)),
                    resize: self.image_size.is_some(),
                    threads: 0,
                };
                (
                    None,
                    image_folder::load(dir.join("train"), options)
                        .context("loading the training images (train/)")?,
                    image_folder::load(dir.join("val"), options)
                        .context("loading the validation images (val/)")?,
                )
            }
        };
        Ok(Data {
            pretrain,
            train,
            test,
        })
    }
}

/// Checks that `--data-dir DIR` names a directory (before anything is read or written).
pub fn check_data_dir(dir: &Path) -> Result<()> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(usage(format!(
            "--data-dir {}: not a directory",
            dir.display()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Err(usage(format!(
            "--data-dir {}: permission denied",
            dir.display()
        ))),
        Err(_) => Err(usage(format!(
            "--data-dir {}: no such directory",
            dir.display()
        ))),
    }
}

/// Checks the settings a training recipe resolved, naming the option at fault.
pub(crate) fn validate(settings: &Settings, args: &RecipeArgs) -> Result<()> {
    if settings.epochs == 0 {
        return Err(usage("--epochs: must be at least 1"));
    }
    if settings.batch_size < 2 {
        return Err(usage(format!(
            "--batch-size {}: must be at least 2 (batch norm needs two images per channel, and \
             the contrastive losses need negatives)",
            settings.batch_size
        )));
    }
    if !(settings.lr.is_finite() && settings.lr > 0.0) {
        return Err(usage(format!(
            "--lr {}: must be a finite number > 0",
            settings.lr
        )));
    }
    if args.extend && args.resume {
        return Err(usage("--extend resumes by itself: give --extend alone"));
    }
    if settings.stem.is_some() && !settings.backbone.is_resnet() {
        return Err(usage(format!(
            "--stem: only for the ResNets (resnet18, resnet34, resnet50, small), not {}",
            settings
                .backbone
                .to_possible_value()
                .expect("no skipped variant")
                .get_name()
        )));
    }
    settings.source.validate()
}

/// Training and test images (cheap to clone: the pixels are shared).
#[derive(Clone)]
pub struct Data {
    /// What the method trains on when it is not `train` (STL-10's unlabeled split).
    pub pretrain: Option<ImageArray>,
    /// Labeled training split (trained on unless `pretrain` is given; the kNN monitor's bank).
    pub train: ImageArray,
    /// Test split.
    pub test: ImageArray,
}
