//! Loading torchvision state_dicts into the backbones and heads.
//!
//! Each supported model has one function that maps a torchvision (or, for the ViT, timm) key to
//! the path of the same tensor in our module ([`resnet_key`], [`efficientnet_key`],
//! [`mobilenet_v3_key`], [`vit_key`]); keys it maps
//! to `None` (the classifier, `num_batches_tracked`) are ignored. [`load_torchvision`] reads a
//! safetensors file (or, with the `pytorch` feature, a `.pth` file through burn-store's PyTorch
//! reader), renames the keys, transposes linear weights, and fails with a [`ModelError`] naming
//! every missing tensor or every tensor with the wrong shape.
//!
//! Export a torchvision model to safetensors with
//! `safetensors.torch.save_file(model.state_dict(), "resnet18.safetensors")`.
//!
//! A model built for other than three input channels takes three-channel weights the way timm's
//! `adapt_input_conv` does: the first convolution's filters are summed over the colour channels
//! for one channel, and for `c` channels the colour channels repeat cyclically, scaled by `3 / c`
//! (safetensors files; [`TorchvisionImport::first_conv_key`]).
//!
//! The other way, [`save_safetensors`] writes a model's tensors under PyTorch's conventions
//! (linear weights transposed back, norm `gamma` / `beta` as `weight` / `bias`) with the
//! structural renames of [`TorchvisionImport::export_renames`], so that a ResNet loads into
//! torchvision's (or timm's) `resnet*`, an EfficientNet or MobileNet-V3 into torchvision's, and a
//! ViT into timm's `VisionTransformer` with `load_state_dict(…, strict=False)` (only the
//! classifier is missing).

use std::path::Path;

use burn::prelude::*;
use burn_store::{
    ApplyResult, BurnToPyTorchAdapter, KeyRemapper, ModuleSnapshot, ModuleStore,
    PyTorchToBurnAdapter, SafetensorsStore,
};

use crate::efficientnet::EfficientNet;
use crate::error::ModelError;
use crate::head::Classifier;
use crate::mobilenet_v3::MobileNetV3;
use crate::resnet::ResNet;
use crate::vit::Vit;

/// torchvision `resnet*` key → [`ResNet`] path. The shortcut's `downsample.0` / `downsample.1`
/// become `downsample.conv` / `downsample.bn`; `fc.*` belongs to the head
/// (see [`resnet_head_key`]).
pub fn resnet_key(key: &str) -> Option<String> {
    if key.ends_with("num_batches_tracked") || key.starts_with("fc.") {
        return None;
    }
    Some(
        key.replace(".downsample.0.", ".downsample.conv.")
            .replace(".downsample.1.", ".downsample.bn."),
    )
}

/// torchvision `resnet*` head key (`fc.*`) → [`Classifier`] path.
pub fn resnet_head_key(key: &str) -> Option<String> {
    key.strip_prefix("fc.")
        .map(|rest| format!("layers.0.{rest}"))
}

/// Maps `N.0.x` / `N.1.x` of a torchvision `Conv2dNormActivation` to `conv.x` / `bn.x`.
fn conv_norm(rest: &str) -> Option<String> {
    let (idx, param) = rest.split_once('.')?;
    match idx {
        "0" => Some(format!("conv.{param}")),
        "1" => Some(format!("bn.{param}")),
        _ => None,
    }
}

/// Splits `"12.rest"` into `(12, "rest")`.
fn index(key: &str) -> Option<(usize, &str)> {
    let (i, rest) = key.split_once('.')?;
    Some((i.parse().ok()?, rest))
}

/// The parts of an MBConv / inverted residual in torchvision's `block.K` order, given whether it
/// has an expansion convolution and a squeeze-excitation.
fn block_parts(has_expand: bool, has_se: bool) -> Vec<&'static str> {
    let mut names = Vec::new();
    if has_expand {
        names.push("expand");
    }
    names.push("depthwise");
    if has_se {
        names.push("se");
    }
    names.push("project");
    names
}

/// Maps the `block.K.…` part of an MBConv / inverted residual, given whether the block has an
/// expansion convolution and a squeeze-excitation.
fn inverted_block(rest: &str, has_expand: bool, has_se: bool) -> Option<String> {
    let (k, rest) = index(rest.strip_prefix("block.")?)?;
    match *block_parts(has_expand, has_se).get(k)? {
        "se" => Some(format!("se.{rest}")),
        name => Some(format!("{name}.{}", conv_norm(rest)?)),
    }
}

/// torchvision `efficientnet_b*` key → [`EfficientNet`] path: `features.0` is the stem,
/// `features.1…7` the stages (`block.K` numbered with or without the expansion convolution),
/// `features.8` the last 1×1 convolution; `classifier.*` belongs to the head.
pub fn efficientnet_key<B: Backend>(model: &EfficientNet<B>, key: &str) -> Option<String> {
    if key.ends_with("num_batches_tracked") {
        return None;
    }
    let (i, rest) = index(key.strip_prefix("features.")?)?;
    let n = model.stages.len();
    if i == 0 {
        return Some(format!("stem.{}", conv_norm(rest)?));
    }
    if i == n + 1 {
        return Some(format!("head.{}", conv_norm(rest)?));
    }
    let (b, rest) = index(rest)?;
    let block = model.stages.get(i - 1)?.get(b)?;
    let mapped = inverted_block(rest, block.expand.is_some(), true)?;
    Some(format!("stages.{}.{b}.{mapped}", i - 1))
}

/// torchvision EfficientNet head key (`classifier.1.*`) → [`Classifier`] path.
pub fn efficientnet_head_key(key: &str) -> Option<String> {
    key.strip_prefix("classifier.1.")
        .map(|rest| format!("layers.0.{rest}"))
}

/// torchvision `mobilenet_v3_*` key → [`MobileNetV3`] path: `features.0` is the stem,
/// `features.1…N` the inverted residual blocks, `features.N+1` the last 1×1 convolution.
pub fn mobilenet_v3_key<B: Backend>(model: &MobileNetV3<B>, key: &str) -> Option<String> {
    if key.ends_with("num_batches_tracked") {
        return None;
    }
    let (i, rest) = index(key.strip_prefix("features.")?)?;
    let n = model.blocks.len();
    if i == 0 {
        return Some(format!("stem.{}", conv_norm(rest)?));
    }
    if i == n + 1 {
        return Some(format!("head.{}", conv_norm(rest)?));
    }
    let block = model.blocks.get(i - 1)?;
    let mapped = inverted_block(rest, block.expand.is_some(), block.se.is_some())?;
    Some(format!("blocks.{}.{mapped}", i - 1))
}

/// torchvision MobileNet-V3 head key (`classifier.0.*`, `classifier.3.*`) → [`Classifier`] path.
pub fn mobilenet_v3_head_key(key: &str) -> Option<String> {
    if let Some(rest) = key.strip_prefix("classifier.0.") {
        Some(format!("layers.0.{rest}"))
    } else {
        key.strip_prefix("classifier.3.")
            .map(|rest| format!("layers.1.{rest}"))
    }
}

/// timm `VisionTransformer` key → [`Vit`] path: `patch_embed.proj.*` becomes `patch_embed.*`;
/// the classifier (`head.*`) and the pooled-feature norm of average pooling (`fc_norm.*`) are
/// not part of the backbone. LayerNorm `weight` / `bias` become `gamma` / `beta` and linear
/// weights are transposed by the loader, as for torchvision's models.
pub fn vit_key(key: &str) -> Option<String> {
    if key.starts_with("head.") || key.starts_with("fc_norm.") {
        return None;
    }
    Some(key.replace("patch_embed.proj.", "patch_embed."))
}

/// Owned `(regex, replacement)` pairs.
fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

/// The inverse of [`conv_norm`] for the stem (`features.0`) and the last 1×1 convolution
/// (`features.{n+1}`) of an EfficientNet or MobileNet-V3 with `n` stages or blocks.
fn stem_and_head(n: usize) -> Vec<(String, String)> {
    vec![
        (r"^stem\.conv\.".into(), "features.0.0.".into()),
        (r"^stem\.bn\.".into(), "features.0.1.".into()),
        (r"^head\.conv\.".into(), format!("features.{}.0.", n + 1)),
        (r"^head\.bn\.".into(), format!("features.{}.1.", n + 1)),
    ]
}

/// The inverse of [`inverted_block`] for the block at `ours`, whose torchvision prefix is
/// `theirs`: each part to `theirs.block.K.` (a convolution's `conv` / `bn` to `0` / `1`).
fn block_renames(
    ours: &str,
    theirs: &str,
    has_expand: bool,
    has_se: bool,
) -> Vec<(String, String)> {
    let ours = ours.replace('.', r"\.");
    let mut renames = Vec::new();
    for (k, name) in block_parts(has_expand, has_se).into_iter().enumerate() {
        if name == "se" {
            renames.push((format!(r"^{ours}\.se\."), format!("{theirs}.block.{k}.")));
        } else {
            renames.push((
                format!(r"^{ours}\.{name}\.conv\."),
                format!("{theirs}.block.{k}.0."),
            ));
            renames.push((
                format!(r"^{ours}\.{name}\.bn\."),
                format!("{theirs}.block.{k}.1."),
            ));
        }
    }
    renames
}

/// A model whose torchvision (or timm) state_dict keys we know how to rename.
pub trait TorchvisionImport<B: Backend>: ModuleSnapshot<B> + Sized {
    /// The path in this module of torchvision's `key`, or `None` for keys that belong elsewhere.
    fn torchvision_key(&self, key: &str) -> Option<String>;

    /// The renames from this module's paths to torchvision's (timm's) keys, as `(regex,
    /// replacement)` pairs, for [`save_safetensors`]; `None` where the inverse of
    /// [`TorchvisionImport::torchvision_key`] is not a set of patterns (the file then keeps
    /// the module's own paths).
    fn export_renames(&self) -> Option<Vec<(String, String)>> {
        None
    }

    /// The state_dict key of the first convolution's weight (`[out, in, kh, kw]`), whose input
    /// channels [`load_torchvision`] adapts when the model has other than the file's three.
    fn first_conv_key(&self) -> Option<&'static str> {
        None
    }
}

impl<B: Backend> TorchvisionImport<B> for ResNet<B> {
    fn torchvision_key(&self, key: &str) -> Option<String> {
        resnet_key(key)
    }

    fn first_conv_key(&self) -> Option<&'static str> {
        Some("conv1.weight")
    }

    fn export_renames(&self) -> Option<Vec<(String, String)>> {
        Some(pairs(&[
            (r"\.downsample\.conv\.", ".downsample.0."),
            (r"\.downsample\.bn\.", ".downsample.1."),
        ]))
    }
}

impl<B: Backend> TorchvisionImport<B> for EfficientNet<B> {
    fn torchvision_key(&self, key: &str) -> Option<String> {
        efficientnet_key(self, key)
    }

    fn export_renames(&self) -> Option<Vec<(String, String)>> {
        let n = self.stages.len();
        let mut renames = stem_and_head(n);
        for (s, stage) in self.stages.iter().enumerate() {
            for (b, block) in stage.iter().enumerate() {
                renames.extend(block_renames(
                    &format!("stages.{s}.{b}"),
                    &format!("features.{}.{b}", s + 1),
                    block.expand.is_some(),
                    true,
                ));
            }
        }
        Some(renames)
    }

    fn first_conv_key(&self) -> Option<&'static str> {
        Some("features.0.0.weight")
    }
}

impl<B: Backend> TorchvisionImport<B> for Vit<B> {
    fn torchvision_key(&self, key: &str) -> Option<String> {
        vit_key(key)
    }

    fn export_renames(&self) -> Option<Vec<(String, String)>> {
        Some(pairs(&[(r"^patch_embed\.", "patch_embed.proj.")]))
    }

    fn first_conv_key(&self) -> Option<&'static str> {
        Some("patch_embed.proj.weight")
    }
}

impl<B: Backend> TorchvisionImport<B> for MobileNetV3<B> {
    fn torchvision_key(&self, key: &str) -> Option<String> {
        mobilenet_v3_key(self, key)
    }

    fn export_renames(&self) -> Option<Vec<(String, String)>> {
        let mut renames = stem_and_head(self.blocks.len());
        for (i, block) in self.blocks.iter().enumerate() {
            renames.extend(block_renames(
                &format!("blocks.{i}"),
                &format!("features.{}", i + 1),
                block.expand.is_some(),
                block.se.is_some(),
            ));
        }
        Some(renames)
    }

    fn first_conv_key(&self) -> Option<&'static str> {
        Some("features.0.0.weight")
    }
}

/// Which torchvision classifier layout a [`Classifier`] is loaded from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TorchvisionHead {
    /// ResNet's `fc`.
    ResNet,
    /// EfficientNet's `classifier.1`.
    EfficientNet,
    /// MobileNet-V3's `classifier.0` and `classifier.3`.
    MobileNetV3,
}

/// A classifier paired with the torchvision layout it is read from.
pub struct HeadImport<'a, B: Backend> {
    /// The head to fill.
    pub head: &'a mut Classifier<B>,
    /// Its torchvision layout.
    pub layout: TorchvisionHead,
}

fn head_key(layout: TorchvisionHead, key: &str) -> Option<String> {
    match layout {
        TorchvisionHead::ResNet => resnet_head_key(key),
        TorchvisionHead::EfficientNet => efficientnet_head_key(key),
        TorchvisionHead::MobileNetV3 => mobilenet_v3_head_key(key),
    }
}

/// Escapes a key for an anchored regex (keys only hold `[A-Za-z0-9_.]`).
fn exact(key: &str) -> String {
    let mut s = String::from("^");
    for ch in key.chars() {
        if !ch.is_ascii_alphanumeric() && ch != '_' {
            s.push('\\');
        }
        s.push(ch);
    }
    s.push('$');
    s
}

fn remapper(
    keys: &[String],
    map: impl Fn(&str) -> Option<String>,
    path: &Path,
) -> Result<KeyRemapper, ModelError> {
    let pairs: Vec<(String, String)> = keys
        .iter()
        .filter_map(|k| map(k).filter(|m| m != k).map(|m| (exact(k), m)))
        .collect();
    KeyRemapper::from_patterns(pairs).map_err(|e| ModelError::WeightFile {
        path: path.display().to_string(),
        message: format!("key renaming failed: {e}"),
    })
}

fn check(result: ApplyResult, path: &Path, expected: &[String]) -> Result<(), ModelError> {
    let path_s = path.display().to_string();
    if !result.errors.is_empty() {
        return Err(ModelError::WrongTensor {
            path: path_s,
            message: result
                .errors
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("; "),
        });
    }
    let mut missing: Vec<String> = result.missing.iter().map(|(p, _)| p.clone()).collect();
    // Tensors the model has that were neither applied nor reported (defensive).
    for e in expected {
        if !result.applied.contains(e) && !missing.contains(e) {
            missing.push(e.clone());
        }
    }
    if !missing.is_empty() {
        return Err(ModelError::MissingKeys {
            path: path_s,
            missing,
        });
    }
    Ok(())
}

fn module_paths<B: Backend, M: ModuleSnapshot<B>>(module: &M) -> Vec<String> {
    module
        .collect(None, None, false)
        .iter()
        .map(|s| s.full_path())
        .collect()
}

fn open_error(path: &Path, e: impl std::fmt::Display) -> ModelError {
    ModelError::WeightFile {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

/// Reads the keys of a weight file (safetensors, or `.pth`/`.pt` with the `pytorch` feature).
fn file_keys(path: &Path) -> Result<Vec<String>, ModelError> {
    if !path.exists() {
        return Err(open_error(path, "no such file"));
    }
    // Opening a FIFO blocks until something writes to it (the import hung), and a directory
    // failed with "No such device".
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => return Err(open_error(path, "a directory, not a weight file")),
        Ok(m) if !m.is_file() => {
            return Err(open_error(
                path,
                "not a regular file (a pipe, socket or device); give a .safetensors file",
            ))
        }
        Ok(_) => {}
        Err(e) => return Err(open_error(path, e)),
    }
    if is_pth(path) {
        return pth::keys(path);
    }
    SafetensorsStore::from_file(path)
        .keys()
        .map_err(|e| open_error(path, e))
}

/// Refuses a tensor of the file that would be loaded into one of the model's parameters
/// (`expected`; a file key `k` lands at `map(k)`, or at `k` where `map` keeps it) but holds no
/// floating-point values: burn's conversion panicked on it (`Expected float dtype, got I64`).
/// Integer tensors the model does not take (`num_batches_tracked`) stay allowed. A `.pth`
/// file's tensors are converted by its own reader.
fn check_float_tensors(
    path: &Path,
    map: impl Fn(&str) -> Option<String>,
    expected: &[String],
) -> Result<(), ModelError> {
    if is_pth(path) {
        return Ok(());
    }
    let mut store = SafetensorsStore::from_file(path);
    let snapshots = store.get_all_snapshots().map_err(|e| open_error(path, e))?;
    let mut wrong: Vec<String> = snapshots
        .iter()
        .filter(|(key, snapshot)| {
            let target = map(key).unwrap_or_else(|| key.to_string());
            !snapshot.dtype.is_float() && expected.contains(&target)
        })
        .map(|(key, snapshot)| format!("{key} is {:?}", snapshot.dtype))
        .collect();
    if wrong.is_empty() {
        return Ok(());
    }
    wrong.sort();
    Err(ModelError::WrongTensor {
        path: path.display().to_string(),
        message: format!(
            "{}: the model's parameters take floating-point values (F16, BF16, F32 or F64)",
            wrong.join(", ")
        ),
    })
}

fn is_pth(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("pth") | Some("pt")
    )
}

fn apply_file<B: Backend, M: ModuleSnapshot<B>>(
    module: &mut M,
    path: &Path,
    adapted: Option<&[u8]>,
    remap: KeyRemapper,
) -> Result<ApplyResult, ModelError> {
    if is_pth(path) {
        return pth::apply(module, path, remap);
    }
    let store = match adapted {
        Some(bytes) => SafetensorsStore::from_bytes(Some(bytes.to_vec())),
        None => SafetensorsStore::from_file(path),
    };
    let mut store = store
        .with_from_adapter(PyTorchToBurnAdapter)
        .remap(remap)
        .allow_partial(true)
        .validate(false);
    module
        .load_from(&mut store)
        .map_err(|e| open_error(path, e))
}

/// Loads a torchvision state_dict into `model` (and optionally into a classifier head).
///
/// `path` is a safetensors file, or with the `pytorch` feature a `.pth`/`.pt` file. The file
/// may hold more tensors than the model needs (the classifier, `num_batches_tracked`); every
/// tensor of the model must be present with the right shape.
///
/// # Errors
/// [`ModelError::WeightFile`] if the file cannot be read, [`ModelError::MissingKeys`] listing
/// every tensor the model needs that the file lacks, [`ModelError::WrongTensor`] for tensors of
/// the wrong shape.
pub fn load_torchvision<B: Backend, M: TorchvisionImport<B>>(
    model: &mut M,
    head: Option<HeadImport<'_, B>>,
    path: impl AsRef<Path>,
) -> Result<(), ModelError> {
    let path = path.as_ref();
    let keys = file_keys(path)?;
    let expected = module_paths(model);
    let remap = remapper(&keys, |k| model.torchvision_key(k), path)?;
    check_float_tensors(path, |k| model.torchvision_key(k), &expected)?;
    let adapted = if is_pth(path) {
        None
    } else {
        adapt_input_channels(model, path)?
    };
    let result = apply_file(model, path, adapted.as_deref(), remap)?;
    check(result, path, &expected)?;
    if let Some(HeadImport { head, layout }) = head {
        let expected = module_paths(head);
        let remap = remapper(&keys, |k| head_key(layout, k), path)?;
        let prefix_ok = keys.iter().any(|k| head_key(layout, k).is_some());
        if !prefix_ok {
            return Err(ModelError::MissingKeys {
                path: path.display().to_string(),
                missing: expected,
            });
        }
        check_float_tensors(path, |k| head_key(layout, k), &expected)?;
        let result = apply_file(head, path, None, remap)?;
        check(result, path, &expected)?;
    }
    Ok(())
}

/// The first convolution's weights `[out, 3, kh, kw]` (row-major) for `channels` input channels,
/// as timm's `adapt_input_conv`: summed over the three for one channel; for `c` channels, channel
/// `i` takes colour channel `i mod 3`, all scaled by `3 / c`.
pub fn adapt_input_conv(weights: &[f32], shape: [usize; 4], channels: usize) -> Vec<f32> {
    let [out, three, kh, kw] = shape;
    let plane = kh * kw;
    let mut adapted = Vec::with_capacity(out * channels * plane);
    for o in 0..out {
        let filter = &weights[o * three * plane..(o + 1) * three * plane];
        if channels == 1 {
            adapted
                .extend((0..plane).map(|p| (0..three).map(|c| filter[c * plane + p]).sum::<f32>()));
        } else {
            let scale = three as f32 / channels as f32;
            for i in 0..channels {
                let source = &filter[(i % three) * plane..(i % three + 1) * plane];
                adapted.extend(source.iter().map(|w| w * scale));
            }
        }
    }
    adapted
}

/// The file's bytes with the first convolution adapted to the model's input channels, or
/// `None` when they already match (or the model names no first convolution).
fn adapt_input_channels<B: Backend, M: TorchvisionImport<B>>(
    model: &M,
    path: &Path,
) -> Result<Option<Vec<u8>>, ModelError> {
    use safetensors::{tensor::TensorView, Dtype, SafeTensors};
    let Some(key) = model.first_conv_key() else {
        return Ok(None);
    };
    let Some(ours) = model.torchvision_key(key).and_then(|mapped| {
        model
            .collect(None, None, false)
            .into_iter()
            .find(|s| s.full_path() == mapped)
            .map(|s| s.shape.to_vec())
    }) else {
        return Ok(None);
    };
    let bytes = std::fs::read(path).map_err(|e| open_error(path, e))?;
    let file = SafeTensors::deserialize(&bytes).map_err(|e| open_error(path, e))?;
    let Ok(theirs) = file.tensor(key) else {
        return Ok(None);
    };
    let shape = theirs.shape().to_vec();
    if shape.len() != 4 || ours.len() != 4 || shape[1] == ours[1] || shape[1] != 3 {
        // Equal, or not a three-channel file: the shape check reports any mismatch.
        return Ok(None);
    }
    if theirs.dtype() != Dtype::F32 {
        return Err(ModelError::WrongTensor {
            path: path.display().to_string(),
            message: format!(
                "{key}: {:?} weights; adapting them to {} input channels needs float32",
                theirs.dtype(),
                ours[1]
            ),
        });
    }
    let weights: Vec<f32> = theirs
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let adapted = adapt_input_conv(&weights, [shape[0], 3, shape[2], shape[3]], ours[1]);
    let adapted_bytes: Vec<u8> = adapted.iter().flat_map(|w| w.to_le_bytes()).collect();
    let adapted_shape = vec![shape[0], ours[1], shape[2], shape[3]];
    let mut tensors = Vec::new();
    for (name, view) in file.tensors() {
        if name == key {
            let view = TensorView::new(Dtype::F32, adapted_shape.clone(), &adapted_bytes)
                .map_err(|e| open_error(path, e))?;
            tensors.push((name, view));
        } else {
            tensors.push((name, view));
        }
    }
    let out = safetensors::serialize(tensors, None).map_err(|e| open_error(path, e))?;
    Ok(Some(out))
}

/// Writes `module`'s tensors to the safetensors file `path` (replacing it) under PyTorch's
/// conventions: linear weights transposed to `[out, in]`, norm layers' `gamma` / `beta` named
/// `weight` / `bias`, and the keys renamed by `renames` (`(regex, replacement)` pairs); the
/// `metadata` pairs go into the file's header. Returns the keys written, sorted.
///
/// # Errors
/// [`ModelError::WeightFile`] if a pattern is not a valid regex, [`ModelError::WeightWrite`] if
/// the file cannot be written.
pub fn save_safetensors<B: Backend, M: ModuleSnapshot<B>>(
    module: &M,
    renames: &[(String, String)],
    metadata: &[(String, String)],
    path: impl AsRef<Path>,
) -> Result<Vec<String>, ModelError> {
    let path = path.as_ref();
    let remap = KeyRemapper::from_patterns(renames.to_vec()).map_err(|e| open_error(path, e))?;
    let mut store = SafetensorsStore::from_file(path)
        .with_to_adapter(BurnToPyTorchAdapter)
        .remap(remap)
        .overwrite(true);
    for (key, value) in metadata {
        store = store.metadata(key.clone(), value.clone());
    }
    module
        .save_into(&mut store)
        .map_err(|e| ModelError::WeightWrite {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
    let mut keys = SafetensorsStore::from_file(path)
        .keys()
        .map_err(|e| open_error(path, e))?;
    keys.sort();
    Ok(keys)
}

#[cfg(feature = "pytorch")]
mod pth {
    use super::*;
    use burn_store::PytorchStore;

    pub(super) fn keys(path: &Path) -> Result<Vec<String>, ModelError> {
        PytorchStore::from_file(path)
            .map_indices_contiguous(false)
            .keys()
            .map_err(|e| open_error(path, e))
    }

    pub(super) fn apply<B: Backend, M: ModuleSnapshot<B>>(
        module: &mut M,
        path: &Path,
        remap: KeyRemapper,
    ) -> Result<ApplyResult, ModelError> {
        let mut store = PytorchStore::from_file(path)
            .map_indices_contiguous(false)
            .remap(remap)
            .allow_partial(true)
            .validate(false);
        module
            .load_from(&mut store)
            .map_err(|e| open_error(path, e))
    }
}

#[cfg(not(feature = "pytorch"))]
mod pth {
    use super::*;

    fn disabled(path: &Path) -> ModelError {
        open_error(
            path,
            "reading .pth files needs the `pytorch` feature of curriculum-ssl-models \
             (or convert the file to safetensors)",
        )
    }

    pub(super) fn keys(path: &Path) -> Result<Vec<String>, ModelError> {
        Err(disabled(path))
    }

    pub(super) fn apply<B: Backend, M: ModuleSnapshot<B>>(
        _module: &mut M,
        path: &Path,
        _remap: KeyRemapper,
    ) -> Result<ApplyResult, ModelError> {
        Err(disabled(path))
    }
}
