//! Fuzzing the dataset readers of `curriculum_ssl::data` with random and mutated files.
//!
//! What is fuzzed: every reader in `src/data/` through its public API, on files the test writes
//! — IDX images and labels raw and `.gz` (`idx::load`, `idx::load_unlabeled`,
//! `idx::parse_images`, `idx::parse_labels`), CIFAR-10 and CIFAR-100 binaries, raw and `.gz`
//! (`cifar::load_cifar10`, `cifar::load_cifar100`), STL-10 (`stl10::load`) and image folders of
//! PNG and JPEG files (`image_folder::load`). Each case starts from tiny valid files and mutates
//! one of them: flipped bytes, truncation, bytes appended, inserted or removed, and header
//! fields rewritten to extreme values (`0xFFFF_FFFF` items, rows or columns, PNG / JPEG sizes
//! with the PNG checksums fixed up so that the decoder believes them, gzip trailers). A `.gz`
//! file is mutated either before compression (a valid stream of a bad file) or after (a bad
//! stream). One more property feeds random bytes to every reader.
//!
//! Properties:
//! - a reader returns `Ok` or a typed [`DataError`], never panics (proptest reports a panic as
//!   a failure; a panic in an image-decoding thread would come back as an error saying
//!   "panicked", which fails too);
//! - an error is about a path under the case's directory and its message names that path;
//! - an `Ok` array is consistent (pixel bytes = images × H × W × C, one label per image, labels
//!   in range);
//! - no allocation is bigger than the files justify: a global allocator records the largest
//!   single request during each read, which must stay under 4 × the bytes the input files can
//!   hold — their length, 1032 × their length for a gzip stream (deflate's largest expansion),
//!   33,024 × their length for a PNG / JPEG (1032 × 32: a 1-bit palette pixel decodes to
//!   4 bytes) — plus 1 MiB. A header claiming billions of items must not get past that.
//!
//! Deterministic cases next to the properties pin the worst inputs down: gzip bombs behind a
//! small IDX header and in a CIFAR file, IDX dimensions whose product overflows `u64`, and an
//! image folder whose first image is large and the rest garbage.
//!
//! Cases: `FUZZ_CASES` per property (default 64, which keeps the file well under a minute in a
//! debug build); run more locally with `FUZZ_CASES=2000 cargo test --test fuzz_parsers`.
//! Tests in this file run one at a time (they share the allocation counter).
//!
//! Why proptest: it runs on stable Rust as ordinary `#[test]`s, so CI runs a bounded number of
//! cases on every push with no extra tooling; cargo-fuzz (libFuzzer) needs a nightly toolchain.

mod common;

use common::gz;
use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use curriculum_ssl::data::cifar::{self, Cifar100Labels};
use curriculum_ssl::data::image_folder::{self, ImageFolderOptions};
use curriculum_ssl::data::{idx, stl10, DataError, Dataset, ImageArray};
use proptest::collection::vec;
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------------
// Allocation tracking.

/// The system allocator, recording the largest single request (allocation or reallocation).
struct Tracking;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the only addition is an
// atomic maximum, which neither allocates nor panics.
unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Tracking = Tracking;

/// Held by every test for its whole run: the allocation counter is global.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs `f` and returns its result with the largest single allocation made meanwhile.
fn measured<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LARGEST.store(0, Ordering::SeqCst);
    let out = f();
    (out, LARGEST.load(Ordering::SeqCst))
}

/// Allowance for allocations that do not depend on the input (buffers of the gzip and image
/// decoders, thread bookkeeping, error messages).
const SLACK: u64 = 1 << 20;
/// Deflate expands at most 1032:1 (a 258-byte match in 2 bits).
const DEFLATE_RATIO: u64 = 1032;
/// A PNG pixel of 1 bit (palette) decodes to 4 bytes (RGBA): 32 × deflate's ratio.
const IMAGE_RATIO: u64 = DEFLATE_RATIO * 32;

/// Bytes a file can legitimately stand for: its length, or what its gzip stream can expand to.
fn justified(bytes: &[u8]) -> u64 {
    let len = bytes.len() as u64;
    if bytes.starts_with(&[0x1f, 0x8b]) {
        len * DEFLATE_RATIO
    } else {
        len
    }
}

fn cases() -> u32 {
    std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

// ---------------------------------------------------------------------------------------------
// Files.

fn scratch(name: &str) -> PathBuf {
    common::scratch_dir("fuzz_parsers", name)
}

/// Deterministic pixel bytes.
fn px(i: usize) -> u8 {
    (i.wrapping_mul(37) % 251) as u8
}

/// IDX bytes written by hand (big-endian header).
fn idx_bytes(magic: u32, dims: &[u32], data: &[u8]) -> Vec<u8> {
    let mut v = magic.to_be_bytes().to_vec();
    for d in dims {
        v.extend_from_slice(&d.to_be_bytes());
    }
    v.extend_from_slice(data);
    v
}

fn idx_images(n: usize, rows: usize, cols: usize) -> Vec<u8> {
    let data: Vec<u8> = (0..n * rows * cols).map(px).collect();
    idx_bytes(0x0803, &[n as u32, rows as u32, cols as u32], &data)
}

fn idx_labels(labels: &[u8]) -> Vec<u8> {
    idx_bytes(0x0801, &[labels.len() as u32], labels)
}

/// One CIFAR record: label bytes then planar RGB.
fn cifar_record(labels: &[u8], seed: usize) -> Vec<u8> {
    let mut v = labels.to_vec();
    v.extend((0..3 * 32 * 32).map(|i| px(i + seed)));
    v
}

fn stl_images(n: usize) -> Vec<u8> {
    (0..n * stl10::IMAGE_BYTES).map(px).collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ImageKind {
    Png,
    PngGray,
    Jpeg,
}

fn encode_image(kind: ImageKind, w: u32, h: u32, seed: usize) -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    let at = |x: u32, y: u32, c: usize| px(seed + (y * w + x) as usize * 3 + c);
    match kind {
        ImageKind::Png => image::RgbImage::from_fn(w, h, |x, y| {
            image::Rgb([at(x, y, 0), at(x, y, 1), at(x, y, 2)])
        })
        .write_to(&mut out, image::ImageFormat::Png),
        ImageKind::PngGray => image::GrayImage::from_fn(w, h, |x, y| image::Luma([at(x, y, 0)]))
            .write_to(&mut out, image::ImageFormat::Png),
        ImageKind::Jpeg => image::RgbImage::from_fn(w, h, |x, y| {
            image::Rgb([at(x, y, 0), at(x, y, 1), at(x, y, 2)])
        })
        .write_to(&mut out, image::ImageFormat::Jpeg),
    }
    .unwrap();
    out.into_inner()
}

/// Recomputes the CRC of every PNG chunk that still lies inside the file, so that the decoder
/// acts on mutated chunk contents (e.g. a rewritten IHDR size) instead of rejecting the checksum.
fn fix_png_crcs(bytes: &mut [u8]) {
    let mut pos = 8;
    while pos + 12 <= bytes.len() {
        let len = u32::from_be_bytes(bytes[pos..pos + 4].try_into().unwrap()) as usize;
        let Some(end) = (pos + 8).checked_add(len) else {
            return;
        };
        if end + 4 > bytes.len() {
            return;
        }
        let mut crc = flate2::Crc::new();
        crc.update(&bytes[pos + 4..end]);
        bytes[end..end + 4].copy_from_slice(&crc.sum().to_be_bytes());
        pos = end + 4;
    }
}

// ---------------------------------------------------------------------------------------------
// Mutations.

/// Where a header field lies: from the start or back from the end of the file.
#[derive(Debug, Clone, Copy)]
enum At {
    Start(usize),
    End(usize),
}

/// A header field: position, width in bytes (1, 2 or 4) and byte order.
#[derive(Debug, Clone, Copy)]
struct Field {
    at: At,
    width: usize,
    big_endian: bool,
}

const fn be(at: usize, width: usize) -> Field {
    Field {
        at: At::Start(at),
        width,
        big_endian: true,
    }
}

const fn le(at: At, width: usize) -> Field {
    Field {
        at,
        width,
        big_endian: false,
    }
}

/// Magic, count, rows, columns.
const IDX_IMAGE_FIELDS: &[Field] = &[be(0, 4), be(4, 4), be(8, 4), be(12, 4)];
/// Magic, count.
const IDX_LABEL_FIELDS: &[Field] = &[be(0, 4), be(4, 4)];
/// Compression method, flags, mtime, then the trailer's CRC-32 and ISIZE.
const GZ_FIELDS: &[Field] = &[
    le(At::Start(2), 1),
    le(At::Start(3), 1),
    le(At::Start(4), 4),
    le(At::End(8), 4),
    le(At::End(4), 4),
];
/// PNG: IHDR width, height, bit depth, colour type, interlace.
const PNG_FIELDS: &[Field] = &[be(16, 4), be(20, 4), be(24, 1), be(25, 1), be(28, 1)];

/// JPEG: height, width and component count of the first SOF segment.
fn jpeg_fields(bytes: &[u8]) -> Vec<Field> {
    bytes
        .windows(2)
        .position(|w| w[0] == 0xff && (w[1] == 0xc0 || w[1] == 0xc2))
        .map(|sof| vec![be(sof + 5, 2), be(sof + 7, 2), be(sof + 9, 1)])
        .unwrap_or_default()
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip {
        at: usize,
        mask: u8,
    },
    Truncate {
        keep: usize,
    },
    Extend {
        tail: Vec<u8>,
    },
    Insert {
        at: usize,
        bytes: Vec<u8>,
    },
    Remove {
        at: usize,
        count: usize,
    },
    /// Rewrites header field `field` (modulo the format's list) to `value`.
    Field {
        field: usize,
        value: u32,
    },
}

/// Header values that break naive readers: zero, one, powers of two, the extremes of `u32`.
fn extreme_u32() -> impl Strategy<Value = u32> {
    prop_oneof![
        Just(0u32),
        Just(1),
        Just(0xffff_ffff),
        Just(0x7fff_ffff),
        Just(0x8000_0000),
        Just(0xffff),
        Just(0x1_0000),
        Just(4096),
        Just(8192),
        Just(16384),
        0u32..64,
        any::<u32>(),
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<usize>(), 1u8..=255).prop_map(|(at, mask)| Mutation::Flip { at, mask }),
        1 => any::<usize>().prop_map(|keep| Mutation::Truncate { keep }),
        1 => vec(any::<u8>(), 1..64).prop_map(|tail| Mutation::Extend { tail }),
        1 => (any::<usize>(), vec(any::<u8>(), 1..16))
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        1 => (any::<usize>(), 1usize..64).prop_map(|(at, count)| Mutation::Remove { at, count }),
        3 => (any::<usize>(), extreme_u32()).prop_map(|(field, value)| Mutation::Field { field, value }),
    ]
}

fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    vec(mutation(), 0..4)
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation, fields: &[Field]) {
    let len = bytes.len();
    match m {
        Mutation::Flip { at, mask } if len > 0 => bytes[at % len] ^= mask,
        Mutation::Flip { .. } => {}
        Mutation::Truncate { keep } => bytes.truncate(keep % (len + 1)),
        Mutation::Extend { tail } => bytes.extend_from_slice(tail),
        Mutation::Insert { at, bytes: b } => {
            let at = at % (len + 1);
            bytes.splice(at..at, b.iter().copied());
        }
        Mutation::Remove { at, count } if len > 0 => {
            let at = at % len;
            bytes.drain(at..(at + count).min(len));
        }
        Mutation::Remove { .. } => {}
        Mutation::Field { field, value } if !fields.is_empty() => {
            let f = fields[field % fields.len()];
            let start = match f.at {
                At::Start(o) => Some(o),
                At::End(o) => len.checked_sub(o),
            };
            let Some(start) = start.filter(|s| s + f.width <= len) else {
                return;
            };
            let v = if f.big_endian {
                value.to_be_bytes()[4 - f.width..].to_vec()
            } else {
                value.to_le_bytes()[..f.width].to_vec()
            };
            bytes[start..start + f.width].copy_from_slice(&v);
        }
        Mutation::Field { .. } => {}
    }
}

fn mutate(mut bytes: Vec<u8>, fields: &[Field], muts: &[Mutation]) -> Vec<u8> {
    for m in muts {
        apply(&mut bytes, m, fields);
    }
    bytes
}

/// How a file is stored and where its mutations apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layer {
    /// Uncompressed; mutations apply to the file.
    Raw,
    /// Gzip of the mutated content: a valid stream of a bad file.
    GzContent,
    /// Mutations apply to the gzip stream.
    GzStream,
}

fn layer() -> impl Strategy<Value = Layer> {
    prop_oneof![
        Just(Layer::Raw),
        Just(Layer::GzContent),
        Just(Layer::GzStream)
    ]
}

/// The bytes to write for `content` (whose header fields are `fields`) stored as `layer` and
/// mutated by `muts`.
fn stored(content: Vec<u8>, fields: &[Field], layer: Layer, muts: &[Mutation]) -> Vec<u8> {
    match layer {
        Layer::Raw => mutate(content, fields, muts),
        Layer::GzContent => gz(&mutate(content, fields, muts)),
        Layer::GzStream => mutate(gz(&content), GZ_FIELDS, muts),
    }
}

/// Writes `bytes` as `path`; returns the bytes they justify.
fn put(path: &Path, bytes: &[u8]) -> u64 {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(path, bytes).unwrap();
    justified(bytes)
}

// ---------------------------------------------------------------------------------------------
// Checks.

/// An `Ok` array is consistent.
fn check_array(a: &ImageArray) -> Result<(), TestCaseError> {
    let (h, w, c) = a.image_shape();
    let per = h * w * c;
    prop_assert!(per > 0 && !a.is_empty(), "empty array {a:?}");
    prop_assert_eq!(a.all_pixels().len(), a.len() * per);
    if let Some(labels) = a.labels() {
        prop_assert_eq!(labels.len(), a.len());
        prop_assert!(labels.iter().all(|&l| (l as usize) < a.num_classes()));
    }
    prop_assert!(a.get(a.len()).is_none());
    prop_assert_eq!(a.get(a.len() - 1).unwrap().pixels.len(), per);
    Ok(())
}

/// An error is about a path under `dir`, names it, and is not a caught panic.
fn check_error(e: &DataError, dir: &Path) -> Result<(), TestCaseError> {
    let msg = e.to_string();
    prop_assert!(
        e.path().starts_with(dir),
        "`{msg}` is about {}, not a file under {}",
        e.path().display(),
        dir.display()
    );
    prop_assert!(
        msg.contains(&e.path().display().to_string()),
        "`{msg}` does not name {}",
        e.path().display()
    );
    prop_assert!(!msg.contains("panicked"), "{msg}");
    Ok(())
}

/// The largest allocation stays within what the input files justify.
fn check_peak(what: &str, peak: usize, justified: u64) -> Result<(), TestCaseError> {
    let bound = 4 * justified + SLACK;
    prop_assert!(
        peak as u64 <= bound,
        "{what}: an allocation of {peak} bytes, more than {bound} (the files justify {justified})"
    );
    Ok(())
}

/// Runs a reader and checks all properties; returns whether it succeeded.
fn read_and_check(
    what: &str,
    dir: &Path,
    justified: u64,
    read: impl FnOnce() -> Result<ImageArray, DataError>,
) -> Result<bool, TestCaseError> {
    let (r, peak) = measured(read);
    check_peak(what, peak, justified)?;
    match r {
        Ok(a) => check_array(&a).map(|_| true),
        Err(e) => check_error(&e, dir).map(|_| false),
    }
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Properties.

#[derive(Debug, Clone)]
struct IdxCase {
    rows: usize,
    cols: usize,
    labels: Vec<u8>,
    layer: Layer,
    mutate_labels: bool,
    muts: Vec<Mutation>,
}

fn idx_case() -> impl Strategy<Value = IdxCase> {
    (
        1usize..5,
        1usize..5,
        vec(0u8..10, 1..4),
        layer(),
        any::<bool>(),
        mutations(),
    )
        .prop_map(|(rows, cols, labels, layer, mutate_labels, muts)| IdxCase {
            rows,
            cols,
            labels,
            layer,
            mutate_labels,
            muts,
        })
}

fn idx_property(case: IdxCase) -> Result<(), TestCaseError> {
    let _serial = serial();
    let dir = scratch("idx");
    let suffix = if case.layer == Layer::Raw { "" } else { ".gz" };
    let none: &[Mutation] = &[];
    let (image_muts, label_muts) = if case.mutate_labels {
        (none, &case.muts[..])
    } else {
        (&case.muts[..], none)
    };
    let images = idx_images(case.labels.len(), case.rows, case.cols);
    let labels = idx_labels(&case.labels);
    let image_bytes = stored(images.clone(), IDX_IMAGE_FIELDS, case.layer, image_muts);
    let label_bytes = stored(labels.clone(), IDX_LABEL_FIELDS, case.layer, label_muts);
    let ji = put(
        &dir.join(format!("train-images-idx3-ubyte{suffix}")),
        &image_bytes,
    );
    let jl = put(
        &dir.join(format!("train-labels-idx1-ubyte{suffix}")),
        &label_bytes,
    );

    let ok = read_and_check("idx::load", &dir, ji + jl, || {
        idx::load(&dir, idx::Split::Train)
    })?;
    if case.muts.is_empty() {
        prop_assert!(ok, "the unmutated files must load");
    }
    read_and_check("idx::load_unlabeled", &dir, ji, || {
        idx::load_unlabeled(&dir, idx::Split::Train)
    })?;

    // The parsers on decompressed bytes (as the embedded subset uses them).
    if case.layer != Layer::GzStream {
        let content = mutate(images, IDX_IMAGE_FIELDS, image_muts);
        let path = dir.join("images-in-memory");
        let (r, peak) = measured(|| idx::parse_images(&path, &content));
        check_peak("idx::parse_images", peak, content.len() as u64)?;
        match r {
            Ok((n, rows, cols, pixels)) => prop_assert_eq!(pixels.len(), n * rows * cols),
            Err(e) => check_error(&e, &dir)?,
        }
        let content = mutate(labels, IDX_LABEL_FIELDS, label_muts);
        let (r, peak) = measured(|| idx::parse_labels(&path, &content, idx::NUM_CLASSES));
        check_peak("idx::parse_labels", peak, content.len() as u64)?;
        match r {
            Ok(l) => prop_assert!(l.iter().all(|&l| (l as usize) < idx::NUM_CLASSES)),
            Err(e) => check_error(&e, &dir)?,
        }
    }
    Ok(())
}

#[derive(Debug, Clone)]
struct HeaderCase {
    fields: Vec<(usize, u32)>,
    body: usize,
    layer: Layer,
}

/// IDX headers with one to three fields set to extreme values and a body of any length: the
/// reader must compare the claim with the file before allocating anything of that size.
fn idx_header_property(case: HeaderCase) -> Result<(), TestCaseError> {
    let _serial = serial();
    let dir = scratch("idx_header");
    let mut images = idx_images(2, 3, 2);
    images.resize(16 + case.body, 7);
    let muts: Vec<Mutation> = case
        .fields
        .iter()
        .map(|&(field, value)| Mutation::Field { field, value })
        .collect();
    let layer = if case.layer == Layer::GzStream {
        Layer::GzContent
    } else {
        case.layer
    };
    let bytes = stored(images, IDX_IMAGE_FIELDS, layer, &muts);
    let j = put(&dir.join("train-images-idx3-ubyte"), &bytes);
    read_and_check("idx::load_unlabeled", &dir, j, || {
        idx::load_unlabeled(&dir, idx::Split::Train)
    })?;
    Ok(())
}

#[derive(Debug, Clone)]
struct CifarCase {
    hundred: bool,
    records: usize,
    labels: Vec<(u8, u8)>,
    victim: usize,
    layer: Layer,
    muts: Vec<Mutation>,
}

fn cifar_case() -> impl Strategy<Value = CifarCase> {
    (
        any::<bool>(),
        1usize..3,
        vec((0u8..20, 0u8..100), 6),
        0usize..6,
        layer(),
        mutations(),
    )
        .prop_map(
            |(hundred, records, labels, victim, layer, muts)| CifarCase {
                hundred,
                records,
                labels,
                victim,
                layer,
                muts,
            },
        )
}

fn cifar_property(case: CifarCase) -> Result<(), TestCaseError> {
    let _serial = serial();
    let dir = scratch("cifar");
    let label_fields: &[Field] = if case.hundred {
        &[be(0, 1), be(1, 1), be(3074, 1), be(3075, 1)]
    } else {
        &[be(0, 1), be(3073, 1)]
    };
    let none: &[Mutation] = &[];
    // CIFAR-10: five one-record training batches and a test batch; CIFAR-100: train and test.
    let names: Vec<String> = if case.hundred {
        vec!["train.bin".into(), "test.bin".into()]
    } else {
        (1..=5)
            .map(|k| format!("data_batch_{k}.bin"))
            .chain(["test_batch.bin".to_string()])
            .collect()
    };
    let victim = case.victim % names.len();
    let mut total = 0;
    for (k, name) in names.iter().enumerate() {
        let records = if name.starts_with("data_batch") {
            1
        } else {
            case.records
        };
        let mut content = Vec::new();
        for r in 0..records {
            let (coarse, fine) = case.labels[(k + r) % case.labels.len()];
            let labels = if case.hundred {
                vec![coarse, fine]
            } else {
                vec![fine % 10]
            };
            content.extend(cifar_record(&labels, k * 7 + r));
        }
        let muts = if k == victim { &case.muts[..] } else { none };
        let layer = if k == victim { case.layer } else { Layer::Raw };
        total += put(&dir.join(name), &stored(content, label_fields, layer, muts));
    }
    let mut oks = Vec::new();
    if case.hundred {
        for which in [Cifar100Labels::Fine, Cifar100Labels::Coarse] {
            for split in [cifar::Split::Train, cifar::Split::Test] {
                oks.push(read_and_check("cifar::load_cifar100", &dir, total, || {
                    cifar::load_cifar100(&dir, split, which)
                })?);
            }
        }
    } else {
        for split in [cifar::Split::Train, cifar::Split::Test] {
            oks.push(read_and_check("cifar::load_cifar10", &dir, total, || {
                cifar::load_cifar10(&dir, split)
            })?);
        }
    }
    if case.muts.is_empty() {
        prop_assert!(oks.iter().all(|&ok| ok), "the unmutated files must load");
    }
    Ok(())
}

#[derive(Debug, Clone)]
struct StlCase {
    labels: Vec<u8>,
    mutate_labels: bool,
    muts: Vec<Mutation>,
}

fn stl_property(case: StlCase) -> Result<(), TestCaseError> {
    let _serial = serial();
    let dir = scratch("stl10").join("stl10_binary");
    std::fs::create_dir_all(&dir).unwrap();
    let none: &[Mutation] = &[];
    let (xm, ym) = if case.mutate_labels {
        (none, &case.muts[..])
    } else {
        (&case.muts[..], none)
    };
    let label_fields: Vec<Field> = (0..case.labels.len()).map(|i| be(i, 1)).collect();
    let x = mutate(stl_images(case.labels.len()), &[], xm);
    let y = mutate(case.labels.clone(), &label_fields, ym);
    let jx = put(&dir.join("train_X.bin"), &x);
    let jy = put(&dir.join("train_y.bin"), &y);
    put(&dir.join("unlabeled_X.bin"), &x);
    let root = dir.parent().unwrap();
    let ok = read_and_check("stl10::load", root, jx + jy, || {
        stl10::load(root, stl10::Split::Train)
    })?;
    if case.muts.is_empty() {
        prop_assert!(ok, "the unmutated files must load");
    }
    read_and_check("stl10::load", root, jx, || {
        stl10::load(root, stl10::Split::Unlabeled)
    })?;
    Ok(())
}

#[derive(Debug, Clone)]
struct FolderCase {
    w: u32,
    h: u32,
    kinds: Vec<ImageKind>,
    victim: usize,
    muts: Vec<Mutation>,
    fix_crcs: bool,
    garbage: Option<Vec<u8>>,
    channels: Option<usize>,
    threads: usize,
}

fn image_kind() -> impl Strategy<Value = ImageKind> {
    prop_oneof![
        Just(ImageKind::Png),
        Just(ImageKind::PngGray),
        Just(ImageKind::Jpeg)
    ]
}

/// Garbage for an image file: random bytes, often behind a PNG or JPEG signature.
fn garbage() -> impl Strategy<Value = Vec<u8>> {
    let sig = prop_oneof![
        Just(Vec::new()),
        Just(b"\x89PNG\r\n\x1a\n".to_vec()),
        Just(b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec()),
        Just(vec![0xff, 0xd8, 0xff]),
        Just(vec![0xff, 0xd8, 0xff, 0xc0, 0x00, 0x11, 0x08]),
    ];
    (sig, vec(any::<u8>(), 0..256)).prop_map(|(mut s, tail)| {
        s.extend(tail);
        s
    })
}

fn folder_case() -> impl Strategy<Value = FolderCase> {
    (
        (1u32..9, 1u32..9, vec(image_kind(), 2..5)),
        (any::<usize>(), mutations(), any::<bool>()),
        prop::option::weighted(0.2, garbage()),
        prop_oneof![Just(None), Just(Some(1)), Just(Some(3))],
        0usize..3,
    )
        .prop_map(
            |((w, h, kinds), (victim, muts, fix_crcs), garbage, channels, threads)| FolderCase {
                w,
                h,
                kinds,
                victim,
                muts,
                fix_crcs,
                garbage,
                channels,
                threads,
            },
        )
}

fn folder_property(case: FolderCase) -> Result<(), TestCaseError> {
    let _serial = serial();
    let root = scratch("image_folder");
    let victim = case.victim % case.kinds.len();
    // With no conversion asked for, all images must have one channel count: make them agree.
    let uniform = case.channels.is_none();
    let mut total = 0;
    for (i, &kind) in case.kinds.iter().enumerate() {
        let kind = match (uniform, case.kinds[0], kind) {
            (false, _, kind) => kind,
            (true, ImageKind::PngGray, _) => ImageKind::PngGray,
            (true, _, ImageKind::PngGray) => ImageKind::Png,
            (true, _, kind) => kind,
        };
        let ext = if kind == ImageKind::Jpeg {
            "jpg"
        } else {
            "png"
        };
        let path = root
            .join(if i % 2 == 0 { "a" } else { "b" })
            .join(format!("{i}.{ext}"));
        let mut bytes = encode_image(kind, case.w, case.h, i * 11);
        if i == victim {
            if let Some(g) = &case.garbage {
                bytes = g.clone();
            } else {
                let fields = match kind {
                    ImageKind::Jpeg => jpeg_fields(&bytes),
                    _ => PNG_FIELDS.to_vec(),
                };
                bytes = mutate(bytes, &fields, &case.muts);
                if case.fix_crcs && kind != ImageKind::Jpeg {
                    fix_png_crcs(&mut bytes);
                }
            }
        }
        put(&path, &bytes);
        total += bytes.len() as u64 * IMAGE_RATIO;
    }
    let options = ImageFolderOptions {
        resize: false,
        channels: case.channels,
        size: None,
        threads: case.threads,
    };
    let ok = read_and_check("image_folder::load", &root, total, || {
        image_folder::load(&root, options)
    })?;
    if case.muts.is_empty() && case.garbage.is_none() {
        prop_assert!(ok, "the unmutated files must load");
    }
    Ok(())
}

#[derive(Debug, Clone)]
struct ImageSizeCase {
    kind: ImageKind,
    width: u32,
    height: u32,
    fix_crcs: bool,
    channels: Option<usize>,
}

/// Image sizes that cost from a few MiB to exabytes once decoded.
fn extreme_side() -> impl Strategy<Value = u32> {
    prop_oneof![
        Just(0u32),
        Just(1),
        Just(4096),
        Just(8192),
        Just(10_000),
        Just(16_384),
        Just(0xffff),
        Just(0x1_0000),
        Just(0x7fff_ffff),
        Just(0xffff_ffff),
        1u32..70_000,
    ]
}

/// A valid PNG or JPEG whose header declares another size (both sides rewritten at once), next
/// to a valid image: the decoder must not allocate what the header claims when the file cannot
/// hold it.
fn image_size_property(case: ImageSizeCase) -> Result<(), TestCaseError> {
    let _serial = serial();
    let root = scratch("image_size");
    let kind = case.kind;
    let ext = if kind == ImageKind::Jpeg {
        "jpg"
    } else {
        "png"
    };
    let mut bytes = encode_image(kind, 6, 5, 3);
    let fields = match kind {
        ImageKind::Jpeg => jpeg_fields(&bytes),
        _ => PNG_FIELDS.to_vec(),
    };
    let muts = [
        Mutation::Field {
            field: 0,
            value: case.height,
        },
        Mutation::Field {
            field: 1,
            value: case.width,
        },
    ];
    // PNG: width then height; JPEG: height then width.
    let muts = if kind == ImageKind::Jpeg {
        muts.to_vec()
    } else {
        vec![
            Mutation::Field {
                field: 0,
                value: case.width,
            },
            Mutation::Field {
                field: 1,
                value: case.height,
            },
        ]
    };
    bytes = mutate(bytes, &fields, &muts);
    if case.fix_crcs && kind != ImageKind::Jpeg {
        fix_png_crcs(&mut bytes);
    }
    let other = encode_image(kind, 6, 5, 4);
    let j = (put(&root.join("a").join(format!("0.{ext}")), &bytes)
        + put(&root.join("b").join(format!("0.{ext}")), &other))
        * IMAGE_RATIO;
    let options = ImageFolderOptions {
        resize: false,
        channels: case.channels,
        ..ImageFolderOptions::default()
    };
    read_and_check("image_folder::load", &root, j, || {
        image_folder::load(&root, options)
    })?;
    let path = root.join("a").join(format!("0.{ext}"));
    let (r, peak) = measured(|| image_folder::decode(&path, case.channels));
    check_peak(
        "image_folder::decode",
        peak,
        bytes.len() as u64 * IMAGE_RATIO,
    )?;
    match r {
        Ok((h, w, c, pixels)) => prop_assert_eq!(pixels.len(), h * w * c),
        Err(e) => check_error(&e, &root)?,
    }
    Ok(())
}

/// Random bytes, often behind the signature of one of the formats.
fn random_file() -> impl Strategy<Value = Vec<u8>> {
    let sig = prop_oneof![
        4 => Just(Vec::new()),
        1 => Just(vec![0x1f, 0x8b]),
        1 => Just(vec![0x1f, 0x8b, 0x08, 0x00]),
        1 => Just(vec![0, 0, 8, 3]),
        1 => Just(vec![0, 0, 8, 1]),
        1 => Just(b"\x89PNG\r\n\x1a\n".to_vec()),
        1 => Just(vec![0xff, 0xd8, 0xff]),
    ];
    (sig, vec(any::<u8>(), 0..2048), any::<bool>()).prop_map(|(mut s, tail, compress)| {
        s.extend(tail);
        if compress {
            gz(&s)
        } else {
            s
        }
    })
}

/// The same random file as every format's input (the other files of the format stay valid).
fn random_property(bytes: Vec<u8>) -> Result<(), TestCaseError> {
    let _serial = serial();
    let j = justified(&bytes);

    let dir = scratch("random_idx_images");
    put(&dir.join("train-images-idx3-ubyte"), &bytes);
    let jl = put(&dir.join("train-labels-idx1-ubyte"), &idx_labels(&[1, 2]));
    read_and_check("idx::load", &dir, j + jl, || {
        idx::load(&dir, idx::Split::Train)
    })?;
    let dir = scratch("random_idx_labels");
    let ji = put(&dir.join("train-images-idx3-ubyte"), &idx_images(2, 2, 2));
    put(&dir.join("train-labels-idx1-ubyte"), &bytes);
    read_and_check("idx::load", &dir, ji + j, || {
        idx::load(&dir, idx::Split::Train)
    })?;
    let path = dir.join("in-memory");
    let (r, peak) = measured(|| idx::parse_images(&path, &bytes).map(|_| ()));
    check_peak("idx::parse_images", peak, bytes.len() as u64)?;
    if let Err(e) = r {
        check_error(&e, &dir)?;
    }
    let (r, peak) = measured(|| idx::parse_labels(&path, &bytes, 10).map(|_| ()));
    check_peak("idx::parse_labels", peak, bytes.len() as u64)?;
    if let Err(e) = r {
        check_error(&e, &dir)?;
    }

    let dir = scratch("random_cifar");
    put(&dir.join("test_batch.bin"), &bytes);
    put(&dir.join("test.bin"), &bytes);
    read_and_check("cifar::load_cifar10", &dir, j, || {
        cifar::load_cifar10(&dir, cifar::Split::Test)
    })?;
    read_and_check("cifar::load_cifar100", &dir, j, || {
        cifar::load_cifar100(&dir, cifar::Split::Test, Cifar100Labels::Fine)
    })?;

    let dir = scratch("random_stl10");
    put(&dir.join("train_X.bin"), &bytes);
    put(&dir.join("train_y.bin"), &bytes);
    put(&dir.join("unlabeled_X.bin"), &bytes);
    let (r, peak) = measured(|| stl10::parse_labels(&dir.join("y"), &bytes).map(|_| ()));
    check_peak("stl10::parse_labels", peak, bytes.len() as u64)?;
    if let Err(e) = r {
        check_error(&e, &dir)?;
    }
    for split in [stl10::Split::Train, stl10::Split::Unlabeled] {
        read_and_check("stl10::load", &dir, 2 * bytes.len() as u64, || {
            stl10::load(&dir, split)
        })?;
    }

    let dir = scratch("random_folder");
    put(&dir.join("a").join("0.png"), &bytes);
    put(&dir.join("b").join("0.jpg"), &bytes);
    read_and_check(
        "image_folder::load",
        &dir,
        2 * bytes.len() as u64 * IMAGE_RATIO,
        || image_folder::load(&dir, ImageFolderOptions::default()),
    )?;
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    /// IDX image and label files, raw or gzip, mutated anywhere.
    #[test]
    fn idx_mutated_files(case in idx_case()) {
        idx_property(case)?;
    }

    /// IDX image headers with fields (magic, count, rows, columns) set to extreme values.
    #[test]
    fn idx_extreme_header_fields(
        case in (vec((0usize..4, extreme_u32()), 1..4), 0usize..64, layer())
            .prop_map(|(fields, body, layer)| HeaderCase { fields, body, layer })
    ) {
        idx_header_property(case)?;
    }

    /// CIFAR-10 and CIFAR-100 binaries, raw or gzip, one file mutated.
    #[test]
    fn cifar_mutated_files(case in cifar_case()) {
        cifar_property(case)?;
    }

    /// STL-10 images or labels mutated.
    #[test]
    fn stl10_mutated_files(
        case in (vec(1u8..=10, 1..3), any::<bool>(), mutations())
            .prop_map(|(labels, mutate_labels, muts)| StlCase { labels, mutate_labels, muts })
    ) {
        stl_property(case)?;
    }

    /// Image folders with one PNG / JPEG mutated (sizes rewritten, PNG checksums fixed up) or
    /// replaced by garbage.
    #[test]
    fn image_folder_mutated_files(case in folder_case()) {
        folder_property(case)?;
    }

    /// A PNG (checksums fixed up or not) or JPEG whose header declares an extreme size.
    #[test]
    fn image_extreme_sizes(
        case in (image_kind(), extreme_side(), extreme_side(), any::<bool>(),
                 prop_oneof![Just(None), Just(Some(1)), Just(Some(3))])
            .prop_map(|(kind, width, height, fix_crcs, channels)| ImageSizeCase {
                kind, width, height, fix_crcs, channels,
            })
    ) {
        image_size_property(case)?;
    }

    /// Random bytes as the file of every reader.
    #[test]
    fn random_bytes_everywhere(bytes in random_file()) {
        random_property(bytes)?;
    }
}

// ---------------------------------------------------------------------------------------------
// Deterministic worst cases.

/// Gzip of `head` followed by `zeros` zero bytes, compressed chunk by chunk.
fn gz_with_zeros(head: &[u8], zeros: usize) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(head).unwrap();
    let chunk = vec![0u8; 1 << 20];
    let mut left = zeros;
    while left > 0 {
        let n = left.min(chunk.len());
        e.write_all(&chunk[..n]).unwrap();
        left -= n;
    }
    e.finish().unwrap()
}

/// A gzip bomb behind an IDX header declaring one 1×1 image: the reader stops one byte past what
/// the header declares instead of inflating 64 MiB.
#[test]
fn idx_gzip_bomb_stops_where_the_header_ends() {
    let _serial = serial();
    let dir = scratch("idx_bomb");
    let bomb = gz_with_zeros(&idx_bytes(0x0803, &[1, 1, 1], &[]), 64 << 20);
    put(&dir.join("train-images-idx3-ubyte.gz"), &bomb);
    let (r, peak) = measured(|| idx::load_unlabeled(&dir, idx::Split::Train));
    let e = r.unwrap_err();
    assert!(matches!(e, DataError::TooLarge { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("train-images-idx3-ubyte.gz"), "{msg}");
    assert!(peak < SLACK as usize, "an allocation of {peak} bytes");
}

/// Dimensions whose product does not fit in 64 bits are a bad header (not an overflow).
#[test]
fn idx_dimensions_beyond_u64_are_a_bad_header() {
    let _serial = serial();
    let dir = scratch("idx_overflow");
    let head = idx_bytes(0x0803, &[u32::MAX; 3], &[1, 2, 3]);
    for (name, bytes) in [
        ("train-images-idx3-ubyte", head.clone()),
        ("t10k-images-idx3-ubyte.gz", gz(&head)),
    ] {
        put(&dir.join(name), &bytes);
    }
    for split in [idx::Split::Train, idx::Split::Test] {
        let (r, peak) = measured(|| idx::load_unlabeled(&dir, split));
        let e = r.unwrap_err();
        assert!(matches!(e, DataError::BadHeader { .. }), "{e:?}");
        assert!(e.to_string().contains("-images-idx3-ubyte"), "{e}");
        assert!(peak < SLACK as usize, "an allocation of {peak} bytes");
    }
    let e = idx::parse_images(Path::new("mem"), &head).unwrap_err();
    assert!(matches!(e, DataError::BadHeader { .. }), "{e:?}");
}

/// A gzip stream far too short for what its header declares (1000 × 1000 × 1000 bytes) is
/// rejected before it is inflated.
#[test]
fn idx_gzip_header_claiming_more_than_the_stream_can_hold() {
    let _serial = serial();
    let dir = scratch("idx_claim");
    let bytes = gz(&idx_bytes(0x0803, &[1000, 1000, 1000], &[5; 100]));
    put(&dir.join("train-images-idx3-ubyte.gz"), &bytes);
    let (r, peak) = measured(|| idx::load_unlabeled(&dir, idx::Split::Train));
    let e = r.unwrap_err();
    assert!(matches!(e, DataError::BadHeader { .. }), "{e:?}");
    assert!(e.to_string().contains("gzip"), "{e}");
    assert!(peak < SLACK as usize, "an allocation of {peak} bytes");
}

/// A gzipped CIFAR file that inflates past the largest CIFAR file (50,000 records) stops there.
#[test]
fn cifar_gzip_bomb_stops_at_the_largest_cifar_file() {
    let _serial = serial();
    let dir = scratch("cifar_bomb");
    let records = 50_001;
    put(
        &dir.join("test.bin"),
        &gz_with_zeros(&[], records * (2 + 3072)),
    );
    let (r, peak) =
        measured(|| cifar::load_cifar100(&dir, cifar::Split::Test, Cifar100Labels::Fine));
    let e = r.unwrap_err();
    assert!(matches!(e, DataError::TooLarge { .. }), "{e:?}");
    assert!(e.to_string().contains("test.bin"), "{e}");
    // The decompressed bytes up to the limit, in a vector that grows by doubling.
    assert!(peak <= 2 * 50_000 * 3074 + SLACK as usize, "{peak}");
}

/// One large image (2048 × 2048, a few KiB as PNG) then garbage files: memory follows the images
/// decoded, not the first image's size times the number of files.
#[test]
fn image_folder_of_garbage_costs_no_more_than_the_images_decoded() {
    let _serial = serial();
    let root = scratch("folder_garbage");
    let mut big = std::io::Cursor::new(Vec::new());
    image::GrayImage::from_pixel(2048, 2048, image::Luma([9]))
        .write_to(&mut big, image::ImageFormat::Png)
        .unwrap();
    put(&root.join("a").join("0.png"), big.get_ref());
    for i in 0..256 {
        put(
            &root.join("b").join(format!("{i:03}.png")),
            b"\x89PNG\r\n\x1a\nnot a png",
        );
    }
    let (r, peak) = measured(|| {
        image_folder::load(
            &root,
            ImageFolderOptions {
                resize: false,
                threads: 2,
                ..ImageFolderOptions::default()
            },
        )
    });
    let e = r.unwrap_err();
    assert!(matches!(e, DataError::Decode { .. }), "{e:?}");
    assert!(e.to_string().contains("000.png"), "{e}");
    assert!(
        peak <= 4 * 2048 * 2048 + SLACK as usize,
        "an allocation of {peak} bytes"
    );
}

/// A decompression bomb: a PNG whose header declares 60000 × 60000 grey pixels (3.6 GB) in a
/// file of 11 MB, which deflated zeros could honestly fill (deflate packs up to 1032 bytes in
/// one), so the bound per byte of file lets it through. It is refused by the bound on one
/// image's bytes before the decoder allocates, naming the size it declares.
#[test]
fn a_png_declaring_sixty_thousand_squared_pixels_is_refused_before_it_allocates() {
    let _serial = serial();
    let dir = scratch("bomb");
    let mut bytes = encode_image(ImageKind::PngGray, 6, 5, 1);
    // IHDR's width and height: bytes 16..24 (after the signature, the chunk's length and type).
    bytes[16..20].copy_from_slice(&60000u32.to_be_bytes());
    bytes[20..24].copy_from_slice(&60000u32.to_be_bytes());
    fix_png_crcs(&mut bytes);
    bytes.resize(bytes.len() + (11 << 20), 0);
    let path = dir.join("bomb.png");
    put(&path, &bytes);
    let (result, peak) = measured(|| image_folder::decode(&path, None));
    let err = result.unwrap_err().to_string();
    assert!(
        err.contains("60000x60000")
            && err.contains("more than the 512 MiB one image may decode to"),
        "{err}"
    );
    check_peak("the bomb", peak, bytes.len() as u64).unwrap();
}
