use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::loader::Skipped;
use super::source::{ImageSource, SequentialEpoch};
use crate::base::seed::mix_seed;
use crate::data::error::{require_dir, DataError};
use crate::data::image_folder::{in_parts, read_dir_sorted, MAX_FILE_BYTES};
use crate::data::loader::{shuffle, LoaderConfig};

/// The samples a shuffle buffer holds by default: 2,000 (about 220 MB of ImageNet's JPEGs).
pub const DEFAULT_SHUFFLE_BUFFER: usize = 2_000;

/// The index [`pack`] writes beside its shards.
pub const INDEX_FILE: &str = "index.json";

/// The file [`pack`] writes before its first shard and removes after the index: a folder that
/// holds it is an unfinished pack, refused by [`Shards::open`].
pub const PACKING_FILE: &str = "PACKING";

/// The samples [`pack`] writes per shard by default: 1,000 (about 110 MB of ImageNet's JPEGs,
/// in WebDataset's advised 100 MB – 1 GB).
pub const DEFAULT_SAMPLES_PER_SHARD: usize = 1_000;

/// The longest `.cls` member read (a label is a short decimal number).
const MAX_LABEL_BYTES: u64 = 32;

/// The stream of the shards' epoch order, apart from the loader's other generators.
const SHARD_STREAM: u64 = 0x5348_4152_444f_5244; // "SHARDORD"

/// What [`pack`] writes beside its shards and [`Shards::open`] reads when it is there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardIndex {
    /// The shards in order: file names relative to the index's folder and their samples.
    pub shards: Vec<ShardEntry>,
    /// The class names, numbered as the `.cls` members number them (empty: unlabelled).
    pub classes: Vec<String>,
    /// The files left out when packing, and why.
    #[serde(default)]
    pub skipped: Vec<SkippedFile>,
}

/// One shard of a [`ShardIndex`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardEntry {
    /// The file, relative to the index's folder.
    pub file: String,
    /// Its samples.
    pub samples: usize,
}

/// A file [`pack`] left out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedFile {
    /// The file.
    pub file: String,
    /// Why.
    pub reason: String,
}

/// Where one sample's image lies.
#[derive(Debug, Clone, Copy)]
struct Member {
    shard: u32,
    offset: u64,
    size: u64,
    label: u16,
    ext: u8,
    key: (u32, u32),
}

const EXTENSIONS: [&str; 3] = ["jpg", "jpeg", "png"];

/// The samples of a folder of WebDataset shards.
///
/// WebDataset shards: tar files of samples `KEY.jpg` (or `.jpeg`, `.png`) +
/// `KEY.cls` (the label as decimal text), read front to back through a shuffle buffer, for data
/// on network storage or read by many machines; [`pack`] writes them from any
/// [`ImageSource`] (a folder of class folders).
///
/// # Layout
/// A folder of `*.tar` files (read in name order), with an optional `index.json` written by
/// [`pack`] ([`ShardIndex`]: the shards in order, their sample counts, the class names). As in
/// WebDataset, a sample is the run of consecutive members sharing a key, the member's path up to
/// the first dot of its file name; members of other extensions (`.json`, `.txt`) are passed
/// over. Without an index the classes are named by their numbers.
///
/// # An epoch
/// The shards are visited in an order shuffled with `(seed, epoch)`, each read from its start,
/// and the samples pass through a shuffle buffer of [`Shards::shuffle_buffer`] samples (each
/// sample read joins it, and one drawn at random leaves it for the epoch once it holds 100),
/// WebDataset's `shardshuffle` + `shuffle(n)`. The order is computed from the
/// listing alone ([`SequentialEpoch`]), so it is the same for every worker count and replica,
/// and a resume in the middle of an epoch knows which samples it still needs: the reader passes
/// over the others with a seek, not a read. [`pack`] writes the samples in a shuffled order so
/// that every shard mixes the classes and a small buffer suffices. Every replica of a
/// data-parallel run reads the stream and keeps its rows of each global batch, so replicas see
/// the batches one device would. The cost: every replica reads every shard (8 devices read the
/// data 8 times; the rows of the others are passed over, but through the read buffer, so
/// nearly every byte is fetched), where WebDataset's splitting of shards by node reads each once
/// but changes the batches. One reader per machine serving its replicas would read once; not
/// done yet.
///
/// # Bad samples
/// A member whose data lies beyond the end of its file (a truncated shard), a sample without an
/// image, a label that is not a number of a known class, or an unlabelled sample among labelled
/// ones is left out when the shards are listed, counted ([`Shards::left_out`]) and named in the
/// log; a shard that cannot be read past some point keeps the samples before it. An image that
/// does not decode is skipped by the loader like a bad file of a folder.
///
/// The listing keeps 32 bytes and the key of every sample (ImageNet's 1.28 M: about 80 MB).
/// The `tar` crate reads and writes the archives; WebDataset's grouping and shuffle buffer are
/// a few lines here (no Rust crate reads WebDataset).
#[derive(Debug, Clone)]
pub struct Shards {
    root: PathBuf,
    files: Arc<[PathBuf]>,
    members: Arc<[Member]>,
    keys: Arc<str>,
    labelled: bool,
    class_names: Vec<String>,
    left_out: usize,
    buffer: usize,
}

/// One shard as listed.
#[derive(Default)]
struct ShardScan {
    /// `(offset, size, label, extension, key)` of each sample.
    samples: Vec<(u64, u64, Option<u16>, u8, String)>,
    /// Samples left out, with why.
    left_out: Vec<String>,
}

/// A sample being grouped from consecutive members.
struct Pending {
    key: String,
    image: Option<(u64, u64, u8)>,
    label: Option<Result<u16, String>>,
}

impl Shards {
    /// The shards of `root`: those its `index.json` lists, else its `*.tar` files in name order,
    /// each listed (members' places, keys and labels; no image is read) on its own thread.
    ///
    /// # Errors
    /// `root` is not a readable folder, holds no shard, an index that does not parse or names a
    /// missing shard, or no sample with an image.
    pub fn open(root: impl Into<PathBuf>) -> Result<Self, DataError> {
        let root = root.into();
        require_dir(&root)?;
        if root.join(PACKING_FILE).exists() {
            return Err(DataError::Request {
                path: root,
                reason: format!(
                    "an unfinished pack ({PACKING_FILE} is there: `recipe pack` stopped before \
                     writing the index): pack again into a new folder"
                ),
            });
        }
        let index_path = root.join(INDEX_FILE);
        let index: Option<ShardIndex> = if index_path.is_file() {
            let text =
                std::fs::read_to_string(&index_path).map_err(|e| DataError::io(&index_path, e))?;
            Some(serde_json::from_str(&text).map_err(|e| DataError::Request {
                path: index_path.clone(),
                reason: format!("not a shard index ({e})"),
            })?)
        } else {
            None
        };
        let files: Vec<PathBuf> = match &index {
            Some(index) => index.shards.iter().map(|s| root.join(&s.file)).collect(),
            None => read_dir_sorted(&root)?
                .into_iter()
                .filter(|p| p.extension().is_some_and(|e| e == "tar") && p.is_file())
                .collect(),
        };
        if files.is_empty() {
            return Err(DataError::Request {
                path: root,
                reason: "no shard: a folder of WebDataset `.tar` files (`recipe pack` writes \
                         them) was expected"
                    .into(),
            });
        }
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let scans = in_parts(0..files.len(), threads.min(files.len()), &root, |part| {
            part.map(|s| scan_shard(&files[s]))
                .collect::<Result<Vec<_>, _>>()
        })?
        .into_iter()
        .flatten()
        .collect::<Vec<_>>();
        let labelled = scans
            .iter()
            .any(|s| s.samples.iter().any(|x| x.2.is_some()));
        let class_names: Vec<String> = match &index {
            Some(index) if !index.classes.is_empty() => index.classes.clone(),
            _ => {
                let most = scans
                    .iter()
                    .flat_map(|s| s.samples.iter().filter_map(|x| x.2))
                    .max();
                most.map_or(Vec::new(), |m| (0..=m).map(|c| c.to_string()).collect())
            }
        };
        let mut members = Vec::new();
        let mut keys = String::new();
        let mut left_out = 0;
        for (s, (scan, file)) in scans.into_iter().zip(&files).enumerate() {
            if let Some(index) = &index {
                let listed = index.shards[s].samples;
                let found = scan.samples.len() + scan.left_out.len();
                if listed != found {
                    log::warn!(
                        "{}: {found} samples where {INDEX_FILE} lists {listed}",
                        file.display()
                    );
                }
            }
            for why in &scan.left_out {
                log::warn!("{}: {why}: left out", file.display());
            }
            left_out += scan.left_out.len();
            for (offset, size, label, ext, key) in scan.samples {
                let label = match (labelled, label) {
                    (false, _) => u16::MAX,
                    (true, Some(l)) if usize::from(l) < class_names.len() => l,
                    (true, Some(l)) => {
                        log::warn!(
                            "{}: sample `{key}` of class {l}, beyond the {} classes: left out",
                            file.display(),
                            class_names.len()
                        );
                        left_out += 1;
                        continue;
                    }
                    (true, None) => {
                        log::warn!(
                            "{}: sample `{key}` has no .cls label where others have: left out",
                            file.display()
                        );
                        left_out += 1;
                        continue;
                    }
                };
                let start = keys.len() as u32;
                keys.push_str(&key);
                members.push(Member {
                    shard: s as u32,
                    offset,
                    size,
                    label,
                    ext,
                    key: (start, keys.len() as u32),
                });
            }
        }
        if members.is_empty() {
            return Err(DataError::Request {
                path: root,
                reason: format!(
                    "no sample with a .jpg, .jpeg or .png image in {} shards",
                    files.len()
                ),
            });
        }
        Ok(Self {
            root,
            files: files.into(),
            members: members.into(),
            keys: keys.into(),
            labelled,
            class_names,
            left_out,
            buffer: DEFAULT_SHUFFLE_BUFFER,
        })
    }

    /// The same shards read through a shuffle buffer of `samples` (at least 1; 1 keeps the
    /// shards' own order within each shard).
    pub fn with_shuffle_buffer(mut self, samples: usize) -> Self {
        self.buffer = samples.max(1);
        self
    }

    /// The same shards with their classes named `names` (a held-out split without an index
    /// named like its training split's, whose numbers it may not all hold).
    ///
    /// # Errors
    /// A sample's class number is beyond `names`.
    pub fn with_class_names(mut self, names: &[String]) -> Result<Self, DataError> {
        if let Some(m) = self
            .members
            .iter()
            .find(|m| self.labelled && usize::from(m.label) >= names.len())
        {
            return Err(DataError::Request {
                path: self.root.clone(),
                reason: format!(
                    "a sample of class {} where the training shards have {} classes",
                    m.label,
                    names.len()
                ),
            });
        }
        self.class_names = names.to_vec();
        Ok(self)
    }

    /// Whether an `index.json` named the shards and classes.
    pub fn indexed(&self) -> bool {
        self.root.join(INDEX_FILE).is_file()
    }

    /// The shuffle buffer's size in samples.
    pub fn shuffle_buffer(&self) -> usize {
        self.buffer
    }

    /// The folder of the shards.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The shard files, in the order listed.
    pub fn shard_files(&self) -> &[PathBuf] {
        &self.files
    }

    /// The class names (empty when unlabelled).
    pub fn class_names(&self) -> &[String] {
        if self.labelled {
            &self.class_names
        } else {
            &[]
        }
    }

    /// Samples left out when listing (see the module docs).
    pub fn left_out(&self) -> usize {
        self.left_out
    }

    /// The key of sample `index`.
    pub fn key(&self, index: usize) -> &str {
        let (a, b) = self.members[index].key;
        &self.keys[a as usize..b as usize]
    }

    /// The samples `indices`, in that order (for an evaluation's sample of the set); read
    /// where they lie, as a selection is.
    pub fn subset(&self, indices: &[usize]) -> Self {
        Self {
            members: indices.iter().map(|&i| self.members[i]).collect(),
            left_out: 0,
            ..self.clone()
        }
    }

    /// The epoch's reading order and visiting order (see the module docs).
    pub fn epoch_orders(&self, loader: &LoaderConfig, epoch: u64) -> SequentialEpoch {
        let key = mix_seed(mix_seed(loader.seed, SHARD_STREAM), epoch);
        let mut shards: Vec<usize> = (0..self.files.len()).collect();
        if loader.shuffle {
            shuffle(&mut shards, key);
        }
        // Members are listed shard by shard, in file order: each shard is a range.
        let mut starts = vec![self.members.len(); self.files.len() + 1];
        for (i, m) in self.members.iter().enumerate().rev() {
            starts[m.shard as usize] = i;
        }
        for s in (0..self.files.len()).rev() {
            starts[s] = starts[s].min(starts[s + 1]);
        }
        let stream: Vec<usize> = if self.is_subset() {
            // A subset's members are in any order: read as listed.
            (0..self.members.len()).collect()
        } else {
            shards
                .iter()
                .flat_map(|&s| starts[s]..starts[s + 1])
                .collect()
        };
        let order = if loader.shuffle {
            shuffle_buffer(
                &stream,
                self.buffer,
                &mut StdRng::seed_from_u64(mix_seed(key, 1)),
            )
        } else {
            stream.clone()
        };
        SequentialEpoch { stream, order }
    }

    /// Whether the members are not in shard and file order (a [`subset`](Self::subset)).
    fn is_subset(&self) -> bool {
        self.members
            .windows(2)
            .any(|w| (w[0].shard, w[0].offset) >= (w[1].shard, w[1].offset))
    }

    fn open_member(&self, index: usize) -> Result<(File, PathBuf), DataError> {
        let path = &self.files[self.members[index].shard as usize];
        let file = File::open(path).map_err(|e| DataError::open(path, e))?;
        Ok((file, path.clone()))
    }
}

/// Reads `size` bytes at the reader's place (a member's image), bounded as a file's are.
fn read_member(
    reader: &mut impl Read,
    size: u64,
    name: &Path,
    shard: &Path,
) -> Result<Vec<u8>, DataError> {
    if size > MAX_FILE_BYTES {
        return Err(DataError::Decode {
            path: name.to_path_buf(),
            reason: format!(
                "{size} bytes: larger than the {} MiB an image file may have",
                MAX_FILE_BYTES >> 20
            ),
        });
    }
    let mut bytes = Vec::with_capacity(size as usize);
    reader
        .take(size)
        .read_to_end(&mut bytes)
        .map_err(|e| DataError::io(shard, e))?;
    if bytes.len() as u64 != size {
        return Err(DataError::Truncated {
            path: name.to_path_buf(),
            what: "shard member",
            expected: size,
            found: bytes.len() as u64,
        });
    }
    Ok(bytes)
}

/// The samples a shuffle buffer holds before it gives its first (WebDataset's `initial`): the
/// first batch waits for these, not for the whole buffer.
pub(crate) const SHUFFLE_INITIAL: usize = 100;

/// `stream` through a shuffle buffer of `size` items drawn with `rng`, as WebDataset's
/// `shuffle(size, initial=100)`: each item read joins the buffer (and, while the buffer is not
/// full, the one after it too), and once it holds [`SHUFFLE_INITIAL`] items one drawn at random
/// leaves it for the epoch. The item at position `p` of the result was read at most `size`
/// positions later than `p`.
pub(crate) fn shuffle_buffer(stream: &[usize], size: usize, rng: &mut StdRng) -> Vec<usize> {
    let size = size.max(1);
    let initial = size.min(SHUFFLE_INITIAL);
    let mut buffer = Vec::with_capacity(size.min(stream.len()));
    let mut order = Vec::with_capacity(stream.len());
    let mut items = stream.iter().copied();
    while let Some(item) = items.next() {
        buffer.push(item);
        if buffer.len() < size {
            buffer.extend(items.next());
        }
        if buffer.len() >= initial {
            order.push(buffer.swap_remove(rng.random_range(0..buffer.len())));
        }
    }
    while !buffer.is_empty() {
        order.push(buffer.swap_remove(rng.random_range(0..buffer.len())));
    }
    order
}

/// A member's key and extension, as WebDataset splits them: the path up to the first dot of the
/// file name, and the rest. `None` for a name without one (or starting with a dot).
fn split_key(path: &str) -> Option<(&str, &str)> {
    let name_start = path.rfind('/').map_or(0, |i| i + 1);
    let dot = path[name_start..].find('.')? + name_start;
    (dot > name_start).then(|| (&path[..dot], &path[dot + 1..]))
}

/// Lists one shard: each sample's image place, label and key (see the module docs).
fn scan_shard(path: &Path) -> Result<ShardScan, DataError> {
    let file = File::open(path).map_err(|e| DataError::open(path, e))?;
    let len = file.metadata().map_err(|e| DataError::io(path, e))?.len();
    let mut archive = tar::Archive::new(BufReader::new(file));
    let mut scan = ShardScan::default();
    let entries = match archive.entries_with_seek() {
        Ok(entries) => entries,
        Err(e) => {
            scan.left_out.push(format!("not a readable tar file ({e})"));
            return Ok(scan);
        }
    };
    let mut pending: Option<Pending> = None;
    for entry in entries {
        let mut entry = match entry {
            Ok(entry) => entry,
            Err(e) => {
                scan.left_out.push(format!(
                    "unreadable after {} samples ({e}); the rest of the shard",
                    scan.samples.len()
                ));
                break;
            }
        };
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let name = match entry.path() {
            Ok(p) => p.to_string_lossy().into_owned(),
            Err(_) => continue,
        };
        let Some((key, ext)) = split_key(&name) else {
            continue;
        };
        if pending.as_ref().is_none_or(|p| p.key != key) {
            finish(pending.take(), &mut scan);
            pending = Some(Pending {
                key: key.to_string(),
                image: None,
                label: None,
            });
        }
        let sample = pending.as_mut().expect("just set");
        let ext = ext.to_ascii_lowercase();
        let (offset, size) = (entry.raw_file_position(), entry.size());
        if let Some(e) = EXTENSIONS.iter().position(|x| *x == ext) {
            if sample.image.is_none() {
                if offset.saturating_add(size) > len {
                    scan.left_out.push(format!(
                        "sample `{key}`: its image ends {} bytes past the end of the file (a \
                         truncated shard)",
                        offset.saturating_add(size) - len
                    ));
                    pending = None;
                    continue;
                }
                sample.image = Some((offset, size, e as u8));
            }
        } else if ext == "cls" {
            let label = if size > MAX_LABEL_BYTES {
                Err(format!("a .cls member of {size} bytes"))
            } else {
                let mut text = String::new();
                match entry.read_to_string(&mut text) {
                    Ok(_) => text
                        .trim()
                        .parse::<u16>()
                        .map_err(|_| format!("label `{}` is not a class number", text.trim())),
                    Err(e) => Err(format!("its .cls member is unreadable ({e})")),
                }
            };
            sample.label = Some(label);
        }
    }
    finish(pending, &mut scan);
    Ok(scan)
}

/// Adds a grouped sample to `scan`, or counts why it is left out.
fn finish(pending: Option<Pending>, scan: &mut ShardScan) {
    let Some(p) = pending else { return };
    match (p.image, p.label) {
        (None, _) => scan.left_out.push(format!(
            "sample `{}` has no .jpg, .jpeg or .png image",
            p.key
        )),
        (Some(_), Some(Err(why))) => scan.left_out.push(format!("sample `{}`: {why}", p.key)),
        (Some((offset, size, ext)), label) => {
            scan.samples
                .push((offset, size, label.map(|l| l.expect("checked")), ext, p.key))
        }
    }
}

impl ImageSource for Shards {
    fn len(&self) -> usize {
        self.members.len()
    }

    fn read(&self, index: usize) -> Result<Vec<u8>, DataError> {
        let m = self.members[index];
        let (mut file, shard) = self.open_member(index)?;
        file.seek(SeekFrom::Start(m.offset))
            .map_err(|e| DataError::io(&shard, e))?;
        read_member(&mut file, m.size, &self.name(index), &shard)
    }

    fn label(&self, index: usize) -> Option<u16> {
        self.labelled.then(|| self.members[index].label)
    }

    fn name(&self, index: usize) -> PathBuf {
        let m = self.members[index];
        self.files[m.shard as usize].join(format!(
            "{}.{}",
            self.key(index),
            EXTENSIONS[m.ext as usize]
        ))
    }

    fn byte_size(&self, index: usize) -> Option<u64> {
        Some(self.members[index].size)
    }

    fn sequential_epoch(&self, loader: &LoaderConfig, epoch: u64) -> Option<SequentialEpoch> {
        Some(self.epoch_orders(loader, epoch))
    }

    /// Reads each shard front to back, passing over the items not kept with a seek (within
    /// the read buffer when it is short).
    fn read_stream(
        &self,
        stream: &[usize],
        keep: &dyn Fn(usize) -> bool,
        sink: &mut dyn FnMut(usize, Result<Vec<u8>, DataError>) -> bool,
    ) {
        // (shard, reader, its place)
        let mut open: Option<(u32, BufReader<File>, u64)> = None;
        for &i in stream {
            if !keep(i) {
                continue;
            }
            let m = self.members[i];
            let shard = &self.files[m.shard as usize];
            let bytes = (|| {
                if open.as_ref().is_none_or(|o| o.0 != m.shard) {
                    let file = File::open(shard).map_err(|e| DataError::open(shard, e))?;
                    open = Some((m.shard, BufReader::with_capacity(1 << 20, file), 0));
                }
                let (_, reader, place) = open.as_mut().expect("just opened");
                if *place != m.offset {
                    let moved = if m.offset > *place {
                        reader.seek_relative((m.offset - *place) as i64)
                    } else {
                        reader.seek(SeekFrom::Start(m.offset)).map(|_| ())
                    };
                    if let Err(e) = moved {
                        open = None;
                        return Err(DataError::io(shard, e));
                    }
                }
                let read = read_member(reader, m.size, &self.name(i), shard);
                match &read {
                    Ok(_) => open.as_mut().expect("open").2 = m.offset + m.size,
                    Err(_) => open = None,
                }
                read
            })();
            if !sink(i, bytes) {
                return;
            }
        }
    }
}

/// Settings of [`pack`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackConfig {
    /// Samples per shard (the last shard holds the rest). Default
    /// [`DEFAULT_SAMPLES_PER_SHARD`].
    pub samples_per_shard: usize,
    /// Seeds the order the samples are written in (shuffled, so that every shard mixes the
    /// classes).
    pub seed: u64,
    /// Threads that check the images decode (`0`: every core).
    pub threads: usize,
}

impl Default for PackConfig {
    fn default() -> Self {
        Self {
            samples_per_shard: DEFAULT_SAMPLES_PER_SHARD,
            seed: 0,
            threads: 0,
        }
    }
}

/// What [`pack`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackSummary {
    /// The index written beside the shards.
    pub index: ShardIndex,
    /// Samples written.
    pub samples: usize,
    /// Bytes of the shard files.
    pub bytes: u64,
}

/// The files of one pack step checked on the threads before they are written.
const PACK_CHUNK: usize = 512;

/// Writes `source`'s images to WebDataset shards in `out` (created; it must hold no shard or
/// index yet): `shard-NNNNNN.tar` files of `KEY.jpg` (or `.png`) + `KEY.cls` members in an
/// order shuffled with the seed, then `index.json` ([`ShardIndex`]; `classes` names the
/// labels, empty for an unlabelled source). Each image is decoded once on `threads` threads
/// first: a file that cannot be read or decoded is left out, warned about and listed in the
/// index. A shard is written under a `.partial` name and renamed when complete, the index
/// last; a `PACKING` file ([`PACKING_FILE`]) marks the folder until the index is written, so an
/// interrupted pack is refused when read, not trained on in part. The key is the sample's
/// number and its file's stem (`00000042_n01440764_10026`); members carry no owner and time,
/// so the same folder and seed give the same bytes.
///
/// # Errors
/// `out` holds shards or an index already or cannot be written, or no image can be read.
pub fn pack(
    source: &impl ImageSource,
    classes: &[String],
    out: &Path,
    config: &PackConfig,
) -> Result<PackSummary, DataError> {
    let refuse = |reason: String| DataError::Request {
        path: out.to_path_buf(),
        reason,
    };
    if config.samples_per_shard == 0 {
        return Err(refuse("shards of 0 samples".into()));
    }
    let packed = |p: &PathBuf| {
        p.file_name()
            .is_some_and(|n| n == INDEX_FILE || n == PACKING_FILE)
            || p.extension().is_some_and(|e| e == "tar" || e == "partial")
    };
    if out.exists() {
        require_dir(out)?;
        // A pack that stopped (a full disk, a kill) left its `PACKING` mark: the shards and the
        // partial files beside it are its own (it began in a new or empty folder), removed
        // before it starts again (the folder was refused as holding shards already).
        if out.join(PACKING_FILE).exists() {
            let leftovers: Vec<PathBuf> =
                read_dir_sorted(out)?.into_iter().filter(packed).collect();
            log::warn!(
                "{}: an unfinished pack's {} files ({PACKING_FILE} is there) are removed and the \
                 folder packed again",
                out.display(),
                leftovers.len()
            );
            for path in leftovers {
                std::fs::remove_file(&path).map_err(|e| DataError::write(&path, e))?;
            }
        }
        let taken = read_dir_sorted(out)?.into_iter().any(|p| packed(&p));
        if taken {
            return Err(refuse(
                "holds shards or an index already: pack into a new or empty folder".into(),
            ));
        }
    }
    std::fs::create_dir_all(out).map_err(|e| DataError::write(out, e))?;
    let packing = out.join(PACKING_FILE);
    std::fs::write(
        &packing,
        "recipe pack is writing this folder; it is removed once index.json is written\n",
    )
    .map_err(|e| DataError::write(&packing, e))?;
    let mut order: Vec<usize> = (0..source.len()).collect();
    shuffle(&mut order, mix_seed(config.seed, SHARD_STREAM));
    let threads = match config.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        t => t,
    };
    let mut writer = ShardWriter::new(out, config.samples_per_shard);
    let mut skipped = Vec::new();
    for chunk in order.chunks(PACK_CHUNK) {
        let checked = in_parts(0..chunk.len(), threads.min(chunk.len()), out, |part| {
            Ok(part
                .map(|k| {
                    let i = chunk[k];

                    source.read(i).and_then(|bytes| {
                        source.decode(i, &bytes, 3)?;
                        Ok(bytes)
                    })
                })
                .collect::<Vec<_>>())
        })?;
        for (&i, result) in chunk.iter().zip(checked.into_iter().flatten()) {
            match result {
                Ok(bytes) => writer.add(&source.name(i), &bytes, source.label(i))?,
                Err(e) => {
                    log::warn!("{e}: left out of the shards");
                    skipped.push(Skipped {
                        name: source.name(i),
                        reason: e.to_string(),
                    });
                }
            }
        }
    }
    let (shards, samples, bytes) = writer.finish()?;
    if samples == 0 {
        return Err(refuse(format!(
            "none of the {} images could be read (the first: {})",
            source.len(),
            skipped.first().map_or("", |s| s.reason.as_str())
        )));
    }
    let index = ShardIndex {
        shards,
        classes: if source.is_empty() || source.label(0).is_none() {
            Vec::new()
        } else {
            classes.to_vec()
        },
        skipped: skipped
            .into_iter()
            .map(|s| SkippedFile {
                file: s.name.display().to_string(),
                reason: s.reason,
            })
            .collect(),
    };
    let text = serde_json::to_string_pretty(&index).expect("an index serialises");
    let path = out.join(INDEX_FILE);
    let partial = out.join(format!("{INDEX_FILE}.partial"));
    std::fs::write(&partial, text).map_err(|e| DataError::write(&partial, e))?;
    std::fs::rename(&partial, &path).map_err(|e| DataError::write(&path, e))?;
    std::fs::remove_file(&packing).map_err(|e| DataError::write(&packing, e))?;
    Ok(PackSummary {
        index,
        samples,
        bytes,
    })
}

/// Writes samples into numbered shards of `per` samples.
struct ShardWriter {
    out: PathBuf,
    per: usize,
    current: Option<(tar::Builder<BufWriter<File>>, usize)>,
    shards: Vec<ShardEntry>,
    samples: usize,
    bytes: u64,
}

impl ShardWriter {
    fn new(out: &Path, per: usize) -> Self {
        Self {
            out: out.to_path_buf(),
            per,
            current: None,
            shards: Vec::new(),
            samples: 0,
            bytes: 0,
        }
    }

    fn shard_name(&self) -> String {
        format!("shard-{:06}.tar", self.shards.len())
    }

    fn add(&mut self, name: &Path, bytes: &[u8], label: Option<u16>) -> Result<(), DataError> {
        let path = self.out.join(format!("{}.partial", self.shard_name()));
        if self.current.is_none() {
            let file = File::create(&path).map_err(|e| DataError::write(&path, e))?;
            let mut builder = tar::Builder::new(BufWriter::new(file));
            builder.mode(tar::HeaderMode::Deterministic);
            self.current = Some((builder, 0));
        }
        let stem = name
            .file_stem()
            .map_or(String::new(), |s| s.to_string_lossy().replace('.', "_"));
        let ext = match name
            .extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase())
            .as_deref()
        {
            Some("png") => "png",
            _ => "jpg",
        };
        let key = format!("{:08}_{stem}", self.samples);
        let (builder, count) = self.current.as_mut().expect("just opened");
        let mut append = |member: String, data: &[u8]| {
            let mut header = tar::Header::new_gnu();
            header.set_size(data.len() as u64);
            header.set_mode(0o644);
            header.set_mtime(0);
            header.set_entry_type(tar::EntryType::Regular);
            builder
                .append_data(&mut header, member, data)
                .map_err(|e| DataError::write(&path, e))
        };
        append(format!("{key}.{ext}"), bytes)?;
        if let Some(label) = label {
            append(format!("{key}.cls"), label.to_string().as_bytes())?;
        }
        *count += 1;
        self.samples += 1;
        if *count == self.per {
            self.close()?;
        }
        Ok(())
    }

    /// Finishes the shard being written and gives it its name.
    fn close(&mut self) -> Result<(), DataError> {
        let Some((builder, count)) = self.current.take() else {
            return Ok(());
        };
        let name = self.shard_name();
        let partial = self.out.join(format!("{name}.partial"));
        let mut file = builder
            .into_inner()
            .and_then(|w| w.into_inner().map_err(|e| e.into_error()))
            .map_err(|e| DataError::write(&partial, e))?;
        file.flush()
            .and_then(|_| file.sync_all())
            .map_err(|e| DataError::write(&partial, e))?;
        self.bytes += file
            .metadata()
            .map_err(|e| DataError::write(&partial, e))?
            .len();
        let path = self.out.join(&name);
        std::fs::rename(&partial, &path).map_err(|e| DataError::write(&path, e))?;
        self.shards.push(ShardEntry {
            file: name,
            samples: count,
        });
        Ok(())
    }

    fn finish(mut self) -> Result<(Vec<ShardEntry>, usize, u64), DataError> {
        self.close()?;
        Ok((self.shards, self.samples, self.bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::stream::testing::{jpeg_folder, png_declaring, scratch};
    use crate::data::stream::ImageFiles;

    fn loader(seed: u64, shuffle: bool) -> LoaderConfig {
        LoaderConfig {
            batch_size: 2,
            shuffle,
            drop_last: true,
            workers: 0,
            prefetch: 1,
            seed,
        }
    }

    /// Packing a folder writes shards of the asked size whose samples are the folder's files,
    /// byte for byte, with their labels and class names; the same seed gives the same bytes, and
    /// a folder holding shards is not packed into again.
    #[test]
    fn packed_shards_read_back_the_folder_byte_for_byte() {
        let root = jpeg_folder("pack", 3, 4);
        let files = ImageFiles::classes(&root).unwrap();
        let out = scratch("pack-out");
        let config = PackConfig {
            samples_per_shard: 5,
            seed: 3,
            threads: 2,
        };
        let summary = pack(&files, files.class_names(), &out, &config).unwrap();
        assert_eq!(summary.samples, 12);
        let counts: Vec<usize> = summary.index.shards.iter().map(|s| s.samples).collect();
        assert_eq!(counts, [5, 5, 2]);
        assert!(summary.index.skipped.is_empty());
        let shards = Shards::open(&out).unwrap();
        assert_eq!((shards.len(), shards.left_out()), (12, 0));
        assert_eq!(shards.class_names(), files.class_names());
        let mut seen = Vec::new();
        for i in 0..shards.len() {
            // Keys are the sample's number and its file's stem: `00000003_002`.
            let key = shards.key(i).to_string();
            assert_eq!(key[..8].parse::<usize>().unwrap(), i);
            let label = shards.label(i).unwrap();
            let original = root.join(format!("class{label}/{}.jpg", &key[9..]));
            assert_eq!(shards.read(i).unwrap(), std::fs::read(&original).unwrap());
            assert_eq!(
                shards.byte_size(i),
                Some(std::fs::metadata(&original).unwrap().len())
            );
            assert!(shards.name(i).ends_with(format!("{key}.jpg")));
            seen.push(original);
        }
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 12);
        // Shuffled when written: the first shard is not the first class alone.
        let first: Vec<u16> = (0..5).map(|i| shards.label(i).unwrap()).collect();
        assert!(first.iter().any(|&l| l != first[0]), "{first:?}");

        let again = scratch("pack-again");
        pack(&files, files.class_names(), &again, &config).unwrap();
        for name in ["shard-000000.tar", "shard-000002.tar", INDEX_FILE] {
            assert_eq!(
                std::fs::read(out.join(name)).unwrap(),
                std::fs::read(again.join(name)).unwrap()
            );
        }
        let e = pack(&files, files.class_names(), &out, &config).unwrap_err();
        assert!(e.to_string().contains("holds shards"), "{e}");
        // A pack is marked unfinished until its index is written; such a folder is refused.
        assert!(!out.join(PACKING_FILE).exists());
        std::fs::write(out.join(PACKING_FILE), "").unwrap();
        let e = Shards::open(&out).unwrap_err();
        assert!(e.to_string().contains("an unfinished pack"), "{e}");
        // Packing into it again (a pack stopped by a full disk or a kill, rerun) removes the
        // unfinished pack's files and writes the same bytes (it was refused as holding shards).
        std::fs::write(out.join("shard-000003.tar.partial"), "cut").unwrap();
        std::fs::remove_file(out.join(INDEX_FILE)).unwrap();
        pack(&files, files.class_names(), &out, &config).unwrap();
        assert!(!out.join(PACKING_FILE).exists());
        assert!(!out.join("shard-000003.tar.partial").exists());
        for name in ["shard-000000.tar", "shard-000002.tar", INDEX_FILE] {
            assert_eq!(
                std::fs::read(out.join(name)).unwrap(),
                std::fs::read(again.join(name)).unwrap()
            );
        }
        std::fs::write(out.join(PACKING_FILE), "").unwrap();
        // Classes named like another split's, when every class number fits.
        let named = ["a", "b", "c", "d"].map(String::from);
        let renamed = shards.clone().with_class_names(&named).unwrap();
        assert_eq!(renamed.class_names(), named);
        let e = shards.with_class_names(&named[..2]).unwrap_err();
        assert!(
            e.to_string().contains("where the training shards have 2"),
            "{e}"
        );
    }

    /// An epoch's order is a permutation of its stream in which each item is at most the
    /// buffer's length earlier than where it was read; the stream is whole shards in a shuffled
    /// order; unshuffled, both are the listing; epochs and seeds differ.
    #[test]
    fn an_epoch_is_the_shuffled_shards_through_the_buffer() {
        let root = jpeg_folder("orders", 2, 10);
        let files = ImageFiles::classes(&root).unwrap();
        let out = scratch("orders-out");
        let config = PackConfig {
            samples_per_shard: 4,
            seed: 0,
            threads: 1,
        };
        pack(&files, files.class_names(), &out, &config).unwrap();
        let shards = Shards::open(&out).unwrap().with_shuffle_buffer(3);
        let n = shards.len();
        let plain = shards.epoch_orders(&loader(1, false), 0);
        assert_eq!(plain.stream, (0..n).collect::<Vec<_>>());
        assert_eq!(plain.order, plain.stream);
        let e0 = shards.epoch_orders(&loader(1, true), 0);
        let mut sorted = e0.order.clone();
        sorted.sort();
        assert_eq!(sorted, (0..n).collect::<Vec<_>>());
        // Whole shards of 4, each in file order.
        for run in e0.stream.chunks(4) {
            assert_eq!(run[0] % 4, 0);
            assert!(run.windows(2).all(|w| w[1] == w[0] + 1), "{:?}", e0.stream);
        }
        assert_ne!(e0.stream, plain.stream);
        for (p, item) in e0.order.iter().enumerate() {
            let read_at = e0.stream.iter().position(|x| x == item).unwrap();
            assert!(read_at <= p + 3, "item {item} at {p} was read at {read_at}");
        }
        assert_ne!(shards.epoch_orders(&loader(1, true), 1), e0);
        assert_ne!(shards.epoch_orders(&loader(2, true), 0), e0);
        assert_eq!(shards.epoch_orders(&loader(1, true), 0), e0);
    }

    /// The buffer gives its first item once it holds 100 (not the whole buffer), keeps every
    /// item within `size` positions of where it was read, and moves most items far.
    #[test]
    fn the_shuffle_buffer_starts_early_and_keeps_its_bound() {
        let stream: Vec<usize> = (0..1000).collect();
        let order = shuffle_buffer(&stream, 300, &mut StdRng::seed_from_u64(1));
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(sorted, stream);
        assert!(order[0] < SHUFFLE_INITIAL, "{}", order[0]);
        for (p, &item) in order.iter().enumerate() {
            assert!(item <= p + 300, "item {item} at {p}");
        }
        let far = order
            .iter()
            .enumerate()
            .filter(|(p, &i)| i.abs_diff(*p) > 50)
            .count();
        assert!(far > 500, "{far} of 1000 moved more than 50 places");
    }

    fn append(builder: &mut tar::Builder<Vec<u8>>, name: &str, data: &[u8]) {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_entry_type(tar::EntryType::Regular);
        builder.append_data(&mut header, name, data).unwrap();
    }

    /// Samples without an image, with a label that is not a number, unlabelled among labelled
    /// ones, and a shard cut short in a member are left out and counted when listed; images that
    /// do not decode (truncated, not an image, a header of 100,000 × 100,000 pixels) are listed
    /// and skipped by the loader, which keeps its batches full; no panic.
    #[test]
    fn bad_samples_are_left_out_or_skipped_and_counted() {
        let root = jpeg_folder("bad-shards", 1, 3);
        let good = std::fs::read(root.join("class0/000.jpg")).unwrap();
        let dir = scratch("bad-shards-out");
        let mut a = tar::Builder::new(Vec::new());
        for (key, image, label) in [
            ("good0", Some(good.clone()), Some("0")),
            ("cut", Some(good[..good.len() / 2].to_vec()), Some("1")),
            ("text", Some(b"not an image at all".to_vec()), Some("0")),
            ("wide", Some(png_declaring(100_000)), Some("1")),
            ("nolabel", Some(good.clone()), None),
            ("badlabel", Some(good.clone()), Some("cat")),
            ("onlylabel", None, Some("0")),
            ("good1", Some(good.clone()), Some("1")),
        ] {
            if let Some(image) = &image {
                let ext = if key == "wide" { "png" } else { "jpg" };
                append(&mut a, &format!("{key}.{ext}"), image);
            }
            if let Some(label) = label {
                append(&mut a, &format!("{key}.cls"), label.as_bytes());
            }
            append(&mut a, &format!("{key}.json"), b"{}");
        }
        std::fs::write(dir.join("a.tar"), a.into_inner().unwrap()).unwrap();
        // A second shard cut in the middle of its second image.
        let mut b = tar::Builder::new(Vec::new());
        for key in ["good2", "lost"] {
            append(&mut b, &format!("{key}.jpg"), &good);
            append(&mut b, &format!("{key}.cls"), b"1");
        }
        let bytes = b.into_inner().unwrap();
        let cut = 512 + good.len().div_ceil(512) * 512 + 1024 + 512 + good.len() / 2;
        std::fs::write(dir.join("b.tar"), &bytes[..cut]).unwrap();
        std::fs::write(dir.join("notes.txt"), "not a shard").unwrap();

        let shards = Shards::open(&dir).unwrap().with_shuffle_buffer(4);
        let keys: Vec<&str> = (0..shards.len()).map(|i| shards.key(i)).collect();
        assert_eq!(keys, ["good0", "cut", "text", "wide", "good1", "good2"]);
        assert_eq!(shards.left_out(), 4);
        assert_eq!(shards.class_names(), ["0", "1"]);

        use crate::data::stream::{StreamConfig, StreamLoader, ViewCrop};
        let config = StreamConfig {
            loader: LoaderConfig {
                batch_size: 3,
                shuffle: true,
                drop_last: true,
                workers: 2,
                prefetch: 1,
                seed: 5,
            },
            channels: 3,
            views: vec![ViewCrop::Random(
                crate::augment::crop::RandomResizedCrop::new(8),
            )],
        };
        let loader = StreamLoader::new(shards, config).unwrap();
        let mut skipped = Vec::new();
        for batch in loader.epoch(0, None, 0) {
            let batch = batch.unwrap();
            assert_eq!(batch.len, 3);
            assert_eq!(batch.views[0].pixels.len(), 3 * 8 * 8 * 3);
            for &i in &batch.indices {
                assert!(["good0", "good1", "good2"].contains(&loader.source().key(i)));
            }
            skipped.extend(batch.skipped);
        }
        for key in ["cut.jpg", "text.jpg", "wide.png"] {
            assert!(
                skipped
                    .iter()
                    .any(|s| s.name == dir.join("a.tar").join(key)),
                "{key} not among {skipped:?}"
            );
        }
        assert!(skipped.iter().all(|s| !s.name.ends_with("good0.jpg")));

        let empty = scratch("no-shards");
        let e = Shards::open(&empty).unwrap_err();
        assert!(e.to_string().contains("no shard"), "{e}");
    }
}
