//! Dataset readers on small files written by the tests, every corrupt variant, the real
//! Fashion-MNIST when the Debian package is installed, the embedded subset and the loader.

use crate::common::gz;
use std::path::{Path, PathBuf};

use curriculum_ssl::data::cifar::{self, Cifar100Labels};
use curriculum_ssl::data::image_folder::{self, ImageFolderOptions};
use curriculum_ssl::data::{
    embedded, idx, stl10, DataError, Dataset, HostBatch, ImageArray, Loader, LoaderConfig,
};

const FASHION_MNIST: &str = "/usr/share/datasets/fashion-mnist";

fn scratch(name: &str) -> PathBuf {
    crate::common::scratch_dir("data_formats", name)
}

/// IDX bytes written by hand (big-endian header), independent of the library's encoder.
fn idx_bytes(magic: u32, dims: &[u32], data: &[u8]) -> Vec<u8> {
    let mut v = magic.to_be_bytes().to_vec();
    for d in dims {
        v.extend_from_slice(&d.to_be_bytes());
    }
    v.extend_from_slice(data);
    v
}

/// Pixel value of image `n` at (row, col, channel) used by all synthetic files.
fn px(n: usize, r: usize, c: usize, ch: usize) -> u8 {
    ((n * 50 + r * 7 + c * 3 + ch * 11) % 256) as u8
}

fn write_mnist(dir: &Path, n: usize, labels: &[u8], compress: bool) {
    let mut pixels = Vec::new();
    for i in 0..n {
        for r in 0..3 {
            for c in 0..2 {
                pixels.push(px(i, r, c, 0));
            }
        }
    }
    let images = idx_bytes(0x0803, &[n as u32, 3, 2], &pixels);
    let lab = idx_bytes(0x0801, &[labels.len() as u32], labels);
    let (suffix, images, lab) = if compress {
        (".gz", gz(&images), gz(&lab))
    } else {
        ("", images, lab)
    };
    std::fs::write(dir.join(format!("train-images-idx3-ubyte{suffix}")), images).unwrap();
    std::fs::write(dir.join(format!("train-labels-idx1-ubyte{suffix}")), lab).unwrap();
}

fn assert_names(err: &DataError, file: &str, words: &str) {
    let msg = err.to_string();
    assert!(msg.contains(file), "message `{msg}` should name `{file}`");
    assert!(msg.contains(words), "message `{msg}` should say `{words}`");
}

#[test]
fn idx_raw_and_gz_read_pixels_and_labels() {
    for compress in [false, true] {
        let dir = scratch(if compress { "idx_gz" } else { "idx_raw" });
        write_mnist(&dir, 3, &[0, 9, 4], compress);
        let a = idx::load(&dir, idx::Split::Train).unwrap();
        assert_eq!(a.len(), 3);
        assert_eq!(a.image_shape(), (3, 2, 1));
        assert_eq!(a.labels().unwrap(), &[0, 9, 4]);
        let item = a.get(2).unwrap();
        assert_eq!(item.label, Some(4));
        assert_eq!(item.pixels[3], px(2, 1, 1, 0)); // row 1, col 1
        assert_eq!(item.pixels[5], px(2, 2, 1, 0));
        assert!(a.get(3).is_none());
        let u = idx::load_unlabeled(&dir, idx::Split::Train).unwrap();
        assert_eq!(u.len(), 3);
        assert_eq!(u.get(0).unwrap().label, None);
        assert_eq!(a.class_histogram().unwrap()[9], 1);
    }
}

#[test]
fn idx_corrupt_files_are_typed_errors_naming_the_file() {
    let dir = scratch("idx_bad");
    // Wrong magic: a label file where the images are expected.
    std::fs::write(
        dir.join("train-images-idx3-ubyte"),
        idx_bytes(0x0801, &[2], &[1, 2]),
    )
    .unwrap();
    std::fs::write(
        dir.join("train-labels-idx1-ubyte"),
        idx_bytes(0x0801, &[2], &[1, 2]),
    )
    .unwrap();
    let e = idx::load(&dir, idx::Split::Train).unwrap_err();
    assert!(
        matches!(
            e,
            DataError::BadMagic {
                found: 0x801,
                expected: 0x803,
                ..
            }
        ),
        "{e:?}"
    );
    assert_names(&e, "train-images-idx3-ubyte", "magic");

    // Truncated data: header says 2 images of 3x2, only 8 bytes follow.
    std::fs::write(
        dir.join("train-images-idx3-ubyte"),
        idx_bytes(0x0803, &[2, 3, 2], &[0; 8]),
    )
    .unwrap();
    let e = idx::load(&dir, idx::Split::Train).unwrap_err();
    assert!(
        matches!(
            e,
            DataError::Truncated {
                expected: 28,
                found: 24,
                ..
            }
        ),
        "{e:?}"
    );
    assert_names(&e, "train-images-idx3-ubyte", "truncated");

    // Truncated header.
    std::fs::write(dir.join("train-images-idx3-ubyte"), [0, 0, 8, 3, 0, 0]).unwrap();
    let e = idx::load(&dir, idx::Split::Train).unwrap_err();
    assert!(
        matches!(
            e,
            DataError::Truncated {
                expected: 16,
                found: 6,
                ..
            }
        ),
        "{e:?}"
    );

    // Trailing bytes.
    std::fs::write(
        dir.join("train-images-idx3-ubyte"),
        idx_bytes(0x0803, &[1, 3, 2], &[0; 7]),
    )
    .unwrap();
    let e = idx::load(&dir, idx::Split::Train).unwrap_err();
    assert!(matches!(e, DataError::UnexpectedLength { .. }), "{e:?}");

    // Label out of range.
    std::fs::write(
        dir.join("train-images-idx3-ubyte"),
        idx_bytes(0x0803, &[2, 3, 2], &[0; 12]),
    )
    .unwrap();
    std::fs::write(
        dir.join("train-labels-idx1-ubyte"),
        idx_bytes(0x0801, &[2], &[3, 10]),
    )
    .unwrap();
    let e = idx::load(&dir, idx::Split::Train).unwrap_err();
    assert!(
        matches!(
            e,
            DataError::LabelOutOfRange {
                index: 1,
                label: 10,
                classes: 10,
                ..
            }
        ),
        "{e:?}"
    );
    assert_names(&e, "train-labels-idx1-ubyte", "out of range");

    // Count mismatch.
    std::fs::write(
        dir.join("train-labels-idx1-ubyte"),
        idx_bytes(0x0801, &[3], &[1, 2, 3]),
    )
    .unwrap();
    let e = idx::load(&dir, idx::Split::Train).unwrap_err();
    assert!(
        matches!(
            e,
            DataError::CountMismatch {
                images: 2,
                labels: 3,
                ..
            }
        ),
        "{e:?}"
    );

    // Truncated gzip stream.
    let full = gz(&idx_bytes(0x0803, &[2, 3, 2], &[7; 12]));
    std::fs::remove_file(dir.join("train-images-idx3-ubyte")).unwrap();
    std::fs::write(
        dir.join("train-images-idx3-ubyte.gz"),
        &full[..full.len() / 2],
    )
    .unwrap();
    let e = idx::load(&dir, idx::Split::Train).unwrap_err();
    assert!(matches!(e, DataError::Truncated { .. }), "{e:?}");
    assert_names(&e, "train-images-idx3-ubyte.gz", "gzip");

    // Missing file (test split not written) and missing directory.
    let e = idx::load(&dir, idx::Split::Test).unwrap_err();
    assert!(matches!(e, DataError::MissingFile { .. }), "{e:?}");
    assert_names(&e, "t10k-images-idx3-ubyte", "not found");
    let e = idx::load(dir.join("nope"), idx::Split::Train).unwrap_err();
    assert!(matches!(e, DataError::MissingDirectory { .. }), "{e:?}");
    assert_names(&e, "nope", "directory not found");
}

/// One CIFAR record: label bytes then planar RGB of image `n`.
fn cifar_record(labels: &[u8], n: usize) -> Vec<u8> {
    let mut v = labels.to_vec();
    for ch in 0..3 {
        for r in 0..32 {
            for c in 0..32 {
                v.push(px(n, r, c, ch));
            }
        }
    }
    v
}

#[test]
fn cifar10_reads_batches_in_hwc_order() {
    let dir = scratch("cifar10").join("cifar-10-batches-bin");
    std::fs::create_dir_all(&dir).unwrap();
    for k in 1..=5 {
        let mut f = cifar_record(&[k as u8], 2 * k);
        f.extend(cifar_record(&[9], 2 * k + 1));
        std::fs::write(dir.join(format!("data_batch_{k}.bin")), f).unwrap();
    }
    std::fs::write(dir.join("test_batch.bin"), cifar_record(&[3], 0)).unwrap();
    // The parent directory is accepted too.
    let train = cifar::load_cifar10(dir.parent().unwrap(), cifar::Split::Train).unwrap();
    assert_eq!(train.len(), 10);
    assert_eq!(train.image_shape(), (32, 32, 3));
    assert_eq!(train.labels().unwrap(), &[1, 9, 2, 9, 3, 9, 4, 9, 5, 9]);
    let item = train.get(4).unwrap(); // batch 3, first record: image n = 6
    for (r, c, ch) in [(0, 0, 0), (5, 17, 1), (31, 31, 2), (10, 3, 2)] {
        assert_eq!(item.pixels[(r * 32 + c) * 3 + ch], px(6, r, c, ch));
    }
    let test = cifar::load_cifar10(&dir, cifar::Split::Test).unwrap();
    assert_eq!(test.len(), 1);
    assert!(!cifar::load_cifar10_unlabeled(&dir, cifar::Split::Test)
        .unwrap()
        .is_labeled());
}

#[test]
fn cifar_corrupt_files_are_typed_errors() {
    let dir = scratch("cifar_bad");
    let mut rec = cifar_record(&[1], 0);
    rec.extend_from_slice(&[0; 100]); // a second, incomplete record
    std::fs::write(dir.join("test_batch.bin"), &rec).unwrap();
    let e = cifar::load_cifar10(&dir, cifar::Split::Test).unwrap_err();
    assert!(
        matches!(
            e,
            DataError::Truncated {
                expected: 6146,
                found: 3173,
                ..
            }
        ),
        "{e:?}"
    );
    assert_names(&e, "test_batch.bin", "truncated");

    std::fs::write(dir.join("test_batch.bin"), cifar_record(&[10], 0)).unwrap();
    let e = cifar::load_cifar10(&dir, cifar::Split::Test).unwrap_err();
    assert!(
        matches!(
            e,
            DataError::LabelOutOfRange {
                label: 10,
                classes: 10,
                ..
            }
        ),
        "{e:?}"
    );

    std::fs::write(dir.join("test_batch.bin"), []).unwrap();
    let e = cifar::load_cifar10(&dir, cifar::Split::Test).unwrap_err();
    assert!(matches!(e, DataError::Empty { .. }), "{e:?}");
    assert_names(&e, "test_batch.bin", "empty");

    // Train split with data_batch_1.bin missing.
    let e = cifar::load_cifar10(&dir, cifar::Split::Train).unwrap_err();
    assert!(matches!(e, DataError::MissingFile { .. }), "{e:?}");
    assert_names(&e, "data_batch_1.bin", "not found");
}

#[test]
fn cifar100_fine_and_coarse_labels() {
    let dir = scratch("cifar100");
    let mut f = cifar_record(&[3, 99], 0);
    f.extend(cifar_record(&[19, 42], 1));
    std::fs::write(dir.join("train.bin"), &f).unwrap();
    let fine = cifar::load_cifar100(&dir, cifar::Split::Train, Cifar100Labels::Fine).unwrap();
    assert_eq!(fine.labels().unwrap(), &[99, 42]);
    assert_eq!(fine.num_classes(), 100);
    let coarse = cifar::load_cifar100(&dir, cifar::Split::Train, Cifar100Labels::Coarse).unwrap();
    assert_eq!(coarse.labels().unwrap(), &[3, 19]);
    assert_eq!(coarse.num_classes(), 20);
    assert_eq!(
        fine.get(1).unwrap().pixels[(7 * 32 + 9) * 3 + 1],
        px(1, 7, 9, 1)
    );

    std::fs::write(dir.join("test.bin"), cifar_record(&[20, 5], 0)).unwrap();
    let e = cifar::load_cifar100(&dir, cifar::Split::Test, Cifar100Labels::Coarse).unwrap_err();
    assert!(
        matches!(
            e,
            DataError::LabelOutOfRange {
                label: 20,
                classes: 20,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(cifar::load_cifar100(&dir, cifar::Split::Test, Cifar100Labels::Fine).is_ok());
}

/// STL-10 image bytes: planar, each plane column-major.
fn stl_image(n: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(stl10::IMAGE_BYTES);
    for ch in 0..3 {
        for c in 0..96 {
            for r in 0..96 {
                v.push(px(n, r, c, ch));
            }
        }
    }
    v
}

#[test]
fn stl10_column_major_images_and_labels() {
    let dir = scratch("stl10").join("stl10_binary");
    std::fs::create_dir_all(&dir).unwrap();
    let mut x = stl_image(0);
    x.extend(stl_image(1));
    std::fs::write(dir.join("train_X.bin"), &x).unwrap();
    std::fs::write(dir.join("train_y.bin"), [1u8, 10]).unwrap();
    std::fs::write(dir.join("unlabeled_X.bin"), stl_image(2)).unwrap();
    let train = stl10::load(dir.parent().unwrap(), stl10::Split::Train).unwrap();
    assert_eq!(train.len(), 2);
    assert_eq!(train.labels().unwrap(), &[0, 9]);
    let item = train.get(1).unwrap();
    for (r, c, ch) in [(0, 1, 0), (1, 0, 0), (95, 2, 1), (40, 77, 2)] {
        assert_eq!(
            item.pixels[(r * 96 + c) * 3 + ch],
            px(1, r, c, ch),
            "({r},{c},{ch})"
        );
    }
    let unl = stl10::load(&dir, stl10::Split::Unlabeled).unwrap();
    assert!(!unl.is_labeled());
    assert_eq!(unl.get(0).unwrap().pixels[(3 * 96 + 5) * 3], px(2, 3, 5, 0));
    let both = ImageArray::concat(&[train.clone().unlabeled(), unl]).unwrap();
    assert_eq!(both.len(), 3);

    // Corrupt variants.
    std::fs::write(dir.join("train_y.bin"), [0u8, 3]).unwrap();
    let e = stl10::load(&dir, stl10::Split::Train).unwrap_err();
    assert!(
        matches!(
            e,
            DataError::LabelOutOfRange {
                index: 0,
                label: 0,
                ..
            }
        ),
        "{e:?}"
    );
    assert_names(&e, "train_y.bin", "out of range");
    std::fs::write(dir.join("train_y.bin"), [1u8]).unwrap();
    let e = stl10::load(&dir, stl10::Split::Train).unwrap_err();
    assert!(
        matches!(
            e,
            DataError::CountMismatch {
                images: 2,
                labels: 1,
                ..
            }
        ),
        "{e:?}"
    );
    std::fs::write(dir.join("unlabeled_X.bin"), &x[..1000]).unwrap();
    let e = stl10::load(&dir, stl10::Split::Unlabeled).unwrap_err();
    assert!(matches!(e, DataError::Truncated { .. }), "{e:?}");
    assert_names(&e, "unlabeled_X.bin", "truncated");
    let e = stl10::load(&dir, stl10::Split::Test).unwrap_err();
    assert_names(&e, "test_X.bin", "not found");
}

fn save_png(path: &Path, w: u32, h: u32, gray: bool, seed: usize) {
    if gray {
        image::GrayImage::from_fn(w, h, |x, y| {
            image::Luma([px(seed, y as usize, x as usize, 0)])
        })
        .save(path)
        .unwrap();
    } else {
        image::RgbImage::from_fn(w, h, |x, y| {
            let (r, c) = (y as usize, x as usize);
            image::Rgb([px(seed, r, c, 0), px(seed, r, c, 1), px(seed, r, c, 2)])
        })
        .save(path)
        .unwrap();
    }
}

#[test]
fn image_folder_reads_classes_in_order() {
    let root = scratch("folder_ok");
    for (class, files) in [("b_dog", 2), ("a_cat", 3)] {
        std::fs::create_dir_all(root.join(class)).unwrap();
        for i in 0..files {
            save_png(
                &root.join(class).join(format!("{i}.png")),
                5,
                4,
                false,
                i + 10 * files,
            );
        }
    }
    // A JPEG (lossy: only the shape is checked) and a hidden file, which is ignored.
    image::RgbImage::from_pixel(5, 4, image::Rgb([200, 10, 10]))
        .save(root.join("b_dog").join("z.jpg"))
        .unwrap();
    std::fs::write(root.join("a_cat").join(".DS_Store"), b"junk").unwrap();
    let a = image_folder::load(&root, ImageFolderOptions::default()).unwrap();
    assert_eq!(a.len(), 6);
    assert_eq!(a.image_shape(), (4, 5, 3));
    assert_eq!(a.class_names(), &["a_cat".to_string(), "b_dog".to_string()]);
    assert_eq!(a.labels().unwrap(), &[0, 0, 0, 1, 1, 1]);
    let item = a.get(4).unwrap(); // b_dog/1.png, seed 1 + 20
    assert_eq!(item.pixels[(3 * 5 + 2) * 3 + 1], px(21, 3, 2, 1));
    let jpeg = a.get(5).unwrap();
    assert!(jpeg.pixels[0] > 150 && jpeg.pixels[1] < 60);
    assert!(
        !image_folder::load_unlabeled(&root, ImageFolderOptions::default())
            .unwrap()
            .is_labeled()
    );
}

#[test]
fn image_folder_bad_input_is_reported() {
    let root = scratch("folder_bad");
    std::fs::create_dir_all(root.join("a")).unwrap();
    std::fs::create_dir_all(root.join("b")).unwrap();
    save_png(&root.join("a").join("0.png"), 5, 4, false, 0);
    save_png(&root.join("b").join("0.png"), 5, 4, false, 1);
    let opts = ImageFolderOptions::default();

    // Another size.
    save_png(&root.join("b").join("1.png"), 6, 4, false, 2);
    let e = image_folder::load(&root, opts).unwrap_err();
    assert!(
        matches!(
            e,
            DataError::ImageShape {
                width: 5,
                found_width: 6,
                ..
            }
        ),
        "{e:?}"
    );
    assert_names(&e, "1.png", "4x6");
    std::fs::remove_file(root.join("b").join("1.png")).unwrap();

    // Another channel count, unless a conversion is asked for.
    save_png(&root.join("b").join("2.png"), 5, 4, true, 3);
    let e = image_folder::load(&root, opts).unwrap_err();
    assert!(
        matches!(
            e,
            DataError::ImageShape {
                channels: 3,
                found_channels: 1,
                ..
            }
        ),
        "{e:?}"
    );
    assert_names(&e, "2.png", "1 channel");
    let conv = image_folder::load(
        &root,
        ImageFolderOptions {
            resize: false,
            channels: Some(3),
            ..opts
        },
    )
    .unwrap();
    assert_eq!(conv.len(), 3);
    let g = conv.get(2).unwrap();
    assert_eq!(g.pixels[0..3], [px(3, 0, 0, 0); 3]);
    std::fs::remove_file(root.join("b").join("2.png")).unwrap();

    // A corrupt image.
    std::fs::write(
        root.join("b").join("3.png"),
        b"\x89PNG\r\n\x1a\nthis is not a png",
    )
    .unwrap();
    let e = image_folder::load(&root, opts).unwrap_err();
    assert!(matches!(e, DataError::Decode { .. }), "{e:?}");
    assert_names(&e, "3.png", "cannot decode");
    std::fs::remove_file(root.join("b").join("3.png")).unwrap();

    // A file that is not an image.
    std::fs::write(root.join("b").join("notes.txt"), b"hello").unwrap();
    let e = image_folder::load(&root, opts).unwrap_err();
    assert_names(&e, "notes.txt", "not a .png");
    std::fs::remove_file(root.join("b").join("notes.txt")).unwrap();

    // A folder in a class folder, though its name ends in .jpg, is named as a folder.
    std::fs::create_dir_all(root.join("b").join("sub.jpg")).unwrap();
    let e = image_folder::load(&root, opts).unwrap_err();
    assert_names(&e, "sub.jpg", "a folder inside a class folder");
    std::fs::remove_dir(root.join("b").join("sub.jpg")).unwrap();

    // A link to a file that is not there, named as such (it was "not a .png, .jpg or .jpeg").
    #[cfg(unix)]
    {
        let link = root.join("b").join("gone.png");
        std::os::unix::fs::symlink(root.join("nowhere.png"), &link).unwrap();
        let e = image_folder::load(&root, opts).unwrap_err();
        assert_names(&e, "gone.png", "a dangling symbolic link");
        std::fs::remove_file(&link).unwrap();
    }

    // An empty class folder.
    std::fs::create_dir_all(root.join("c")).unwrap();
    let e = image_folder::load(&root, opts).unwrap_err();
    assert!(matches!(e, DataError::Empty { .. }), "{e:?}");
    assert_names(&e, "c", "empty");

    // An empty root and a missing root.
    let empty = scratch("folder_empty");
    let e = image_folder::load(&empty, opts).unwrap_err();
    assert!(matches!(e, DataError::Empty { .. }), "{e:?}");
    let e = image_folder::load(empty.join("missing"), opts).unwrap_err();
    assert!(matches!(e, DataError::MissingDirectory { .. }), "{e:?}");
}

#[test]
fn array_checks_labels_and_sizes() {
    let e = ImageArray::new("x.bin", 2, 2, 1, vec![0; 8], Some(vec![0, 5]), 5).unwrap_err();
    assert!(
        matches!(
            e,
            DataError::LabelOutOfRange {
                index: 1,
                label: 5,
                ..
            }
        ),
        "{e:?}"
    );
    let e = ImageArray::new("x.bin", 2, 2, 1, vec![0; 7], None, 0).unwrap_err();
    assert!(matches!(e, DataError::UnexpectedLength { .. }), "{e:?}");
    let e = ImageArray::new("x.bin", 2, 2, 1, vec![0; 8], Some(vec![0]), 5).unwrap_err();
    assert!(matches!(e, DataError::CountMismatch { .. }), "{e:?}");
}

#[test]
fn host_batch_uploads_nchw_floats_and_labels() {
    // Flex, not `NdArray<f32>`: burn keeps one default float type per device type and
    // process, and the f64 tests of this binary use `NdArray<f64>`.
    type B = burn::backend::Flex;
    let a = ImageArray::new(
        "mem",
        1,
        2,
        3,
        vec![0, 51, 102, 153, 204, 255, 1, 2, 3, 4, 5, 6],
        Some(vec![2, 7]),
        10,
    )
    .unwrap();
    let items: Vec<_> = (0..2).map(|i| a.get(i).unwrap()).collect();
    let host = HostBatch::from_items(a.source(), &items, vec![0, 1]).unwrap();
    let batch = host.to_device::<B>(&Default::default());
    assert_eq!(batch.images.dims(), [2, 3, 1, 2]);
    let v: Vec<f32> = batch.images.into_data().to_vec().unwrap();
    // Sample 0, channel 0: pixels (0, 153); channel 1: (51, 204); channel 2: (102, 255).
    let expect0 = [0.0, 0.6, 0.2, 0.8, 0.4, 1.0];
    for (got, want) in v[..6].iter().zip(expect0) {
        assert!((got - want).abs() < 1e-6, "{got} vs {want}");
    }
    assert!((v[6] - 1.0 / 255.0).abs() < 1e-7 && (v[7] - 4.0 / 255.0).abs() < 1e-7);
    let l: Vec<i64> = batch
        .labels
        .unwrap()
        .into_data()
        .convert::<i64>()
        .to_vec()
        .unwrap();
    assert_eq!(l, vec![2, 7]);
}

fn synthetic(n: usize) -> ImageArray {
    let pixels: Vec<u8> = (0..n * 4).map(|i| (i / 4) as u8).collect();
    let labels: Vec<u16> = (0..n).map(|i| (i % 3) as u16).collect();
    ImageArray::new("mem", 2, 2, 1, pixels, Some(labels), 3).unwrap()
}

fn epoch_indices(loader: &Loader<ImageArray>, epoch: u64) -> Vec<Vec<usize>> {
    loader
        .epoch(epoch)
        .map(|b| {
            let b = b.unwrap();
            // The pixels are the index itself: check the batch content matches the indices.
            for (k, &i) in b.indices.iter().enumerate() {
                assert_eq!(b.pixels[k * 4] as usize, i);
            }
            b.indices
        })
        .collect()
}

#[test]
fn loader_is_deterministic_and_covers_the_epoch() {
    let cfg = |seed, workers| LoaderConfig {
        batch_size: 16,
        shuffle: true,
        drop_last: false,
        workers,
        prefetch: 2,
        seed,
    };
    let a = Loader::new(synthetic(100), "mem", cfg(7, 3)).unwrap();
    let b = Loader::new(synthetic(100), "mem", cfg(7, 3)).unwrap();
    let inline = Loader::new(synthetic(100), "mem", cfg(7, 0)).unwrap();
    let other = Loader::new(synthetic(100), "mem", cfg(8, 3)).unwrap();
    let e0 = epoch_indices(&a, 0);
    assert_eq!(e0.len(), 7);
    assert_eq!(e0.last().unwrap().len(), 4);
    assert_eq!(e0, epoch_indices(&b, 0));
    assert_eq!(e0, epoch_indices(&inline, 0));
    assert_ne!(e0, epoch_indices(&other, 0));
    assert_ne!(e0, epoch_indices(&a, 1));
    let mut all: Vec<usize> = e0.concat();
    all.sort();
    assert_eq!(all, (0..100).collect::<Vec<_>>());
    // drop_last and stopping early.
    let d = Loader::new(
        synthetic(100),
        "mem",
        LoaderConfig {
            drop_last: true,
            ..cfg(7, 2)
        },
    )
    .unwrap();
    assert_eq!(d.num_batches(), 6);
    assert_eq!(epoch_indices(&d, 0)[..], e0[..6]);
    let first = d.epoch(3).next().unwrap().unwrap();
    assert_eq!(first.len, 16);
    let e = Loader::new(
        synthetic(10),
        "mem",
        LoaderConfig {
            batch_size: 0,
            ..cfg(1, 1)
        },
    );
    assert!(e.is_err());
}

#[test]
fn embedded_subset_is_balanced() {
    let train = embedded::train().unwrap();
    let test = embedded::test().unwrap();
    assert_eq!(train.len(), 8000);
    assert_eq!(test.len(), 2000);
    assert_eq!(train.image_shape(), (28, 28, 1));
    assert_eq!(train.class_histogram().unwrap(), vec![800; 10]);
    assert_eq!(test.class_histogram().unwrap(), vec![200; 10]);
    assert_eq!(train.class_names()[9], "Ankle boot");
    assert!(embedded::compressed_bytes() < 5_000_000);
    assert!(!embedded::train_unlabeled().unwrap().is_labeled());
    let default = embedded::load_or_embedded(None, idx::Split::Test).unwrap();
    assert_eq!(default.all_pixels(), test.all_pixels());
    // Real images: not constant, mean brightness of Fashion-MNIST (about 0.29).
    let mean = train.all_pixels().iter().map(|&p| p as f64).sum::<f64>()
        / train.all_pixels().len() as f64
        / 255.0;
    assert!((0.25..0.33).contains(&mean), "mean {mean}");
}

#[test]
fn fashion_mnist_full_sets_when_installed() {
    let dir = Path::new(FASHION_MNIST);
    if !dir.is_dir() {
        eprintln!("skipped: {FASHION_MNIST} absent (apt-get install -y dataset-fashion-mnist)");
        return;
    }
    let train = idx::load(dir, idx::Split::Train).unwrap();
    let test = idx::load(dir, idx::Split::Test).unwrap();
    assert_eq!(train.len(), 60_000);
    assert_eq!(test.len(), 10_000);
    assert_eq!(train.image_shape(), (28, 28, 1));
    assert_eq!(train.class_histogram().unwrap(), vec![6_000; 10]);
    assert_eq!(test.class_histogram().unwrap(), vec![1_000; 10]);

    // The embedded subset is the first 800 / 200 images per class of these files, and the
    // remake tool's function reproduces the committed files byte for byte.
    let emb = embedded::train().unwrap();
    let idx_train = embedded::first_per_class(&train, 800).unwrap();
    let sel = train.select(&idx_train).unwrap();
    assert_eq!(sel.all_pixels(), emb.all_pixels());
    assert_eq!(sel.labels(), emb.labels());
    let remade = embedded::make_subset(dir, 800, 200).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/data/embedded");
    for (name, bytes) in embedded::FILES.iter().zip(&remade.files) {
        assert_eq!(&std::fs::read(root.join(name)).unwrap(), bytes, "{name}");
    }
}
