//! Datasets read offline from the files a user has, and the loader that batches them.
//!
//! Every format is read into an [`ImageArray`]: all images of one split as `u8` pixels in
//! height × width × channel order, plus the labels when the split has them. An `ImageArray`
//! implements burn-dataset's [`Dataset`] trait with [`ImageItem`] items, is cheap to clone (the
//! pixels are shared) and can drop its labels ([`ImageArray::unlabeled`]) for pretraining.
//!
//! | format | reader |
//! |---|---|
//! | MNIST / Fashion-MNIST IDX (raw or `.gz`) | [`idx`] |
//! | CIFAR-10 / CIFAR-100 binary | [`cifar`] |
//! | STL-10 binary (train, test, unlabeled) | [`stl10`] |
//! | class sub-folders of PNG / JPEG | [`image_folder`] |
//! | the embedded Fashion-MNIST subset | [`embedded`] |
//!
//! An evaluation reads an [`ImageSet`]: an `ImageArray`, or image files decoded as they are
//! read ([`stream::StreamedImages`]).
//!
//! Batches: [`HostBatch`] holds the bytes of a batch on the host (built on the loader's worker
//! threads, see [`Loader`]); [`HostBatch::to_device`] uploads it as a `[N, C, H, W]` float tensor
//! in `[0, 1]` plus the labels.

mod batch;
pub mod cifar;
pub mod embedded;
mod error;
pub mod idx;
mod image_array;
pub mod image_folder;
mod image_set;
pub mod layouts;
mod loader;
pub mod stl10;
pub mod stream;

pub use burn_dataset::Dataset;

pub use batch::{HostBatch, ImageBatch, ImageBatcher};
pub use error::DataError;
pub use image_array::{ImageArray, ImageItem};
pub use image_set::{channel_stats, ImageSet};
pub use loader::{EpochIter, Loader, LoaderConfig, OrderedBatches};
