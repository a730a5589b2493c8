//! The masked-image methods' shared pieces (documented on the `method` page and on `PatchMask`).

use burn::prelude::*;
use curriculum_ssl_models::{AsVit, Vit};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;
use rand::SeedableRng;

use super::ssl_method::Views;
use crate::base::error::ConfigError;
use crate::base::schedule::SchedulerConfig;
use crate::base::seed::mix_seed;
use crate::base::Progress;
use crate::curriculum::mask_schedule;
use crate::data_parallel::Replica;

/// Where a masked-image method's masks come from: a generator seeded by the method's `tag`, the
/// run's seed and the step, so that a resumed run draws the same masks; drawn for the global
/// batch, of which each replica of a data-parallel run keeps its own rows, so that the replicas
/// draw what one device draws.
#[derive(Debug, Clone)]
pub struct StepMasks<B: Backend> {
    tag: u64,
    seed: u64,
    replica: Option<Replica<B>>,
}

impl<B: Backend> StepMasks<B> {
    /// The masks of a method tagged `tag` (a constant of its own, so that two methods with the
    /// same seed draw different masks) in a run seeded `seed`.
    pub fn new(tag: u64, seed: u64) -> Self {
        Self {
            tag,
            seed,
            replica: None,
        }
    }

    /// The seed of the step at `progress`: `(tag, seed, step)` mixed.
    pub fn step_seed(&self, progress: Progress) -> u64 {
        mix_seed(mix_seed(self.tag, self.seed), progress.step as u64)
    }

    /// The generator of the step at `progress`.
    pub fn rng(&self, progress: Progress) -> StdRng {
        StdRng::seed_from_u64(self.step_seed(progress))
    }

    /// For `n` images on this replica: the images of the global batch, and the global row of
    /// this replica's first (`(n, 0)` on one device).
    pub fn global_rows(&self, n: usize) -> (usize, usize) {
        self.replica
            .as_ref()
            .map_or((n, 0), |r| (n * r.replicas(), n * r.rank()))
    }

    /// The replicas of the run (1 on one device).
    pub fn replicas(&self) -> usize {
        self.replica.as_ref().map_or(1, Replica::replicas)
    }

    /// This method's replica in a data-parallel run.
    pub fn replica(&self) -> Option<&Replica<B>> {
        self.replica.as_ref()
    }

    /// The masks of `views` views (view-major) of this replica's `n` images of `patches` patches
    /// each: the global batch's, every view's images drawn from `rng` at `ratio`
    /// ([`PatchMask::random`]), of which this replica keeps its rows of each view (MAE's one
    /// view, MSN's anchor and focal views).
    pub fn patch_masks(
        &self,
        rng: &mut StdRng,
        (n, views): (usize, usize),
        patches: usize,
        ratio: f64,
    ) -> PatchMask {
        let (total, first) = self.global_rows(n);
        let global = PatchMask::random(total * views, patches, ratio, rng);
        let rows: Vec<_> = (0..views)
            .map(|v| global.rows(v * total + first, n))
            .collect();
        PatchMask::concat(&rows)
    }
}

/// Makes the masks a replica's: from then on [`StepMasks::global_rows`] places its rows.
impl<B: Backend> super::ssl_method::KeepsReplica<B> for StepMasks<B> {
    fn keep(&mut self, replica: Replica<B>) {
        self.replica = Some(replica);
    }
}

/// The Vision Transformer inside `backbone`, which the method checked with [`require_vit`] when
/// it was built.
pub(crate) fn vit<B: Backend, M: AsVit<B>>(backbone: &M) -> &Vit<B> {
    backbone.as_vit().expect("a ViT, checked at init")
}

/// The Vision Transformer inside `backbone`, or an error that says what the method (`needs`:
/// e.g. "MAE hides patch tokens from") does with it.
///
/// # Errors
/// A backbone that is not a ViT.
pub(crate) fn require_vit<'a, B: Backend, M: AsVit<B>>(
    backbone: &'a M,
    needs: &str,
) -> Result<&'a Vit<B>, ConfigError> {
    backbone.as_vit().ok_or_else(|| {
        ConfigError::new(
            "backbone",
            format!(
                "{needs} a Vision Transformer: train it with a ViT backbone (--backbone \
                 vit-micro, vit-tiny, vit-small or vit-base)"
            ),
        )
    })
}

/// The masks of a batch: for each of `N` images, which of its `L` patches are hidden.
///
/// A mask is drawn on the host from a seeded generator (MAE's per-image random shuffle: the
/// first `⌊L·(1 − ratio)⌋` patches of a random permutation stay visible), so that a step's masks
/// depend on `(seed, step)` alone: a resumed run draws the same, and the replicas of a
/// data-parallel run draw the global batch's masks and keep their own rows, as one device would.
/// The tokens move on the device, through `select` (whose backward is its scatter).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchMask {
    patches: usize,
    /// For each image, its visible patches in increasing order.
    visible: Vec<Vec<usize>>,
}

impl PatchMask {
    /// `⌊L·(1 − ratio)⌋` of the `patches` patches of each of `images` images stay visible, the
    /// rest are hidden, drawn independently per image from `rng` (at least one stays visible).
    pub fn random(images: usize, patches: usize, ratio: f64, rng: &mut StdRng) -> Self {
        let keep = Self::visible_count(patches, ratio);
        let visible = (0..images)
            .map(|_| {
                let mut order: Vec<usize> = (0..patches).collect();
                order.shuffle(rng);
                let mut kept = order[..keep].to_vec();
                kept.sort_unstable();
                kept
            })
            .collect();
        Self { patches, visible }
    }

    /// The masks that keep `visible[i]` of image `i`'s `patches` patches (e.g. a block
    /// sampler's, or another library's masks to compare with).
    ///
    /// # Errors
    /// If an image keeps no patch, a patch twice or a patch past `patches`, or the images keep
    /// different numbers of patches.
    pub fn from_visible(patches: usize, visible: Vec<Vec<usize>>) -> Result<Self, ConfigError> {
        let keep = visible.first().map_or(0, Vec::len);
        for (i, kept) in visible.iter().enumerate() {
            let mut sorted = kept.clone();
            sorted.sort_unstable();
            sorted.dedup();
            if kept.is_empty()
                || kept.len() != keep
                || sorted.len() != kept.len()
                || sorted.last().is_some_and(|&p| p >= patches)
            {
                return Err(ConfigError::new(
                    "visible",
                    format!(
                        "image {i} keeps patches {kept:?}: every image must keep the same number \
                         ({keep}) of distinct patches below {patches}, at least one"
                    ),
                ));
            }
        }
        let visible = visible
            .into_iter()
            .map(|mut kept| {
                kept.sort_unstable();
                kept
            })
            .collect();
        Ok(Self { patches, visible })
    }

    /// CAPI's inverse-block masks (lightly 1.6's `random_inverse_block_mask`): of each image's
    /// `rows × cols` patches `⌊L·ratio⌋` are hidden (Python's `int(L·ratio)`, not
    /// [`PatchMask::visible_count`]'s floor of the visible share) and the `V = L − ⌊L·ratio⌋`
    /// visible ones form one block. Per image, from `rng`: an aspect ratio
    /// `a = exp(U(log_lo, log_hi))` with `log_lo = max(log min_aspect, log(V / cols²))` and
    /// `log_hi = min(−log min_aspect, log(rows² / (V + 1e-5)))`; a block of
    /// `min(rows, ⌈√(V·a)⌉) × min(cols, ⌈√(V/a)⌉)` patches at a uniform place inside the grid,
    /// of which the first `V` in row-major order stay visible; with `roll`, the grid then rolled
    /// by a uniform shift of rows and of columns (the block wraps across the edges). Every patch
    /// visible when `V = L`.
    ///
    /// # Panics
    /// If no patch would stay visible (`⌊L·ratio⌋ ≥ L`) or `min_aspect` is not positive: the
    /// method checks both when it is built.
    pub fn inverse_block(
        images: usize,
        (rows, cols): (usize, usize),
        ratio: f64,
        (min_aspect, roll): (f64, bool),
        rng: &mut StdRng,
    ) -> Self {
        let patches = rows * cols;
        let visible_count = patches - Self::inverse_block_hidden(patches, ratio);
        assert!(
            visible_count >= 1 && min_aspect > 0.0,
            "PatchMask::inverse_block: {visible_count} visible of {patches}, min_aspect {min_aspect}"
        );
        let visible = (0..images)
            .map(|_| {
                if visible_count == patches {
                    return (0..patches).collect();
                }
                let v = visible_count as f64;
                let low = min_aspect.ln().max((v / (cols * cols) as f64).ln());
                let high = (1.0 / min_aspect)
                    .ln()
                    .min(((rows * rows) as f64 / (v + 1e-5)).ln());
                let aspect = (low + (high - low) * rng.random::<f64>()).exp();
                let height = rows.min((v * aspect).sqrt().ceil() as usize);
                let width = cols.min((v / aspect).sqrt().ceil() as usize);
                let top = rng.random_range(0..=rows - height);
                let left = rng.random_range(0..=cols - width);
                let (down, right) = if roll {
                    (rng.random_range(0..rows), rng.random_range(0..cols))
                } else {
                    (0, 0)
                };
                let mut kept: Vec<usize> = (top..top + height)
                    .flat_map(|r| (left..left + width).map(move |c| (r, c)))
                    .take(visible_count)
                    .map(|(r, c)| ((r + down) % rows) * cols + (c + right) % cols)
                    .collect();
                kept.sort_unstable();
                kept
            })
            .collect();
        Self { patches, visible }
    }

    /// The patches CAPI's inverse-block masks hide of `patches`: `⌊L·ratio⌋` (lightly's
    /// `int(num_patches · mask_ratio)`).
    pub fn inverse_block_hidden(patches: usize, ratio: f64) -> usize {
        ((patches as f64 * ratio).floor() as usize).min(patches)
    }

    /// The masks that keep, of each image's hidden patches (those `self` hides), `count` drawn
    /// uniformly from `rng` (CAPI's prediction subsampling: the benchmark's random
    /// `argsort(rand)[:count]` of the hidden patches), in increasing order.
    ///
    /// # Panics
    /// If `count` is zero or more than an image's hidden patches.
    pub fn hidden_subset(&self, count: usize, rng: &mut StdRng) -> Self {
        let visible = self
            .visible
            .iter()
            .map(|kept| {
                let mut hidden: Vec<usize> = (0..self.patches)
                    .filter(|p| kept.binary_search(p).is_err())
                    .collect();
                assert!(
                    count >= 1 && count <= hidden.len(),
                    "PatchMask::hidden_subset: {count} of {} hidden patches",
                    hidden.len()
                );
                hidden.shuffle(rng);
                hidden.truncate(count);
                hidden.sort_unstable();
                hidden
            })
            .collect();
        Self {
            patches: self.patches,
            visible,
        }
    }

    /// The patches image `image` keeps, in increasing order.
    pub fn kept(&self, image: usize) -> &[usize] {
        &self.visible[image]
    }

    /// How many of `patches` patches stay visible at `ratio`: `⌊L·(1 − ratio)⌋`, at least one.
    pub fn visible_count(patches: usize, ratio: f64) -> usize {
        (((patches as f64) * (1.0 - ratio)).floor() as usize).clamp(1, patches)
    }

    /// The masks of images `start..start + len` (a replica's rows of the global batch's).
    pub fn rows(&self, start: usize, len: usize) -> Self {
        Self {
            patches: self.patches,
            visible: self.visible[start..start + len].to_vec(),
        }
    }

    /// The masks of `parts`' images one after the other (e.g. a replica's rows of each view).
    ///
    /// # Panics
    /// If the parts have different numbers of patches, or keep different numbers.
    pub fn concat(parts: &[PatchMask]) -> Self {
        let patches = parts.first().map_or(0, |p| p.patches);
        let visible: Vec<Vec<usize>> = parts
            .iter()
            .inspect(|p| {
                assert!(
                    p.patches == patches && p.visible() == parts[0].visible(),
                    "PatchMask::concat: masks of different shapes"
                );
            })
            .flat_map(|p| p.visible.iter().cloned())
            .collect();
        Self { patches, visible }
    }

    /// Images.
    pub fn images(&self) -> usize {
        self.visible.len()
    }

    /// Patches per image.
    pub fn patches(&self) -> usize {
        self.patches
    }

    /// Visible patches per image.
    pub fn visible(&self) -> usize {
        self.visible.first().map_or(0, Vec::len)
    }

    /// Whether patch `patch` of image `image` is hidden.
    pub fn is_hidden(&self, image: usize, patch: usize) -> bool {
        self.visible[image].binary_search(&patch).is_err()
    }

    /// The visible tokens of every image, in their order.
    ///
    /// # Shapes
    /// - `tokens`: `[N, L, D]` → `[N, visible, D]`
    pub fn gather<B: Backend>(&self, tokens: Tensor<B, 3>) -> Tensor<B, 3> {
        let [n, l, d] = tokens.dims();
        assert_eq!([n, l], [self.images(), self.patches], "PatchMask::gather");
        let rows: Vec<usize> = (0..n)
            .flat_map(|i| self.visible[i].iter().map(move |&p| i * l + p))
            .collect();
        let device = tokens.device();
        tokens
            .reshape([n * l, d])
            .select(0, index(&rows, &device))
            .reshape([n, self.visible(), d])
    }

    /// The inverse of [`PatchMask::gather`]: every image's `L` tokens, the visible ones back in
    /// their places and `fill` (e.g. a learned mask token) at the hidden ones.
    ///
    /// # Shapes
    /// - `visible`: `[N, visible, D]`, `fill`: `[1, 1, D]` → `[N, L, D]`
    pub fn scatter<B: Backend>(&self, visible: Tensor<B, 3>, fill: Tensor<B, 3>) -> Tensor<B, 3> {
        let [n, k, d] = visible.dims();
        assert_eq!(
            [n, k],
            [self.images(), self.visible()],
            "PatchMask::scatter"
        );
        let (l, hidden) = (self.patches, self.patches - k);
        // Row r of [visible rows; fill rows]: where each of the N·L positions takes its token.
        let mut next_fill = n * k;
        let mut rows = Vec::with_capacity(n * l);
        for (i, kept) in self.visible.iter().enumerate() {
            let mut v = 0;
            for p in 0..l {
                if v < k && kept[v] == p {
                    rows.push(i * k + v);
                    v += 1;
                } else {
                    rows.push(next_fill);
                    next_fill += 1;
                }
            }
        }
        let device = visible.device();
        let mut sources = vec![visible.reshape([n * k, d])];
        if hidden > 0 {
            sources.push(fill.reshape([1, d]).expand([n * hidden, d]));
        }
        Tensor::cat(sources, 0)
            .select(0, index(&rows, &device))
            .reshape([n, l, d])
    }

    /// `1` at the hidden patches, `0` at the visible ones.
    ///
    /// # Shapes
    /// → `[N, L]`
    pub fn hidden_weights<B: Backend>(&self, device: &B::Device) -> Tensor<B, 2> {
        let n = self.images();
        let values: Vec<f32> = (0..n)
            .flat_map(|i| (0..self.patches).map(move |p| (i, p)))
            .map(|(i, p)| if self.is_hidden(i, p) { 1.0 } else { 0.0 })
            .collect();
        Tensor::from_data(TensorData::new(values, [n, self.patches]), device)
    }
}

/// SimMIM's masks: each image's patch grid cut into square units of `unit × unit` patches
/// (clipped at the right and bottom edges when the grid is not a multiple of `unit`), a share of
/// the units hidden at random per image. Unlike [`PatchMask`], images may hide different numbers
/// of patches (an edge unit is smaller), so the tokens stay in place: the encoder replaces the
/// hidden ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitMask {
    patches: usize,
    /// For each image and patch, whether it is hidden (`N·L`, image by image).
    hidden: Vec<bool>,
}

impl UnitMask {
    /// `⌈rows/unit⌉·⌈cols/unit⌉` units per image; `⌈units·ratio⌉` of them hidden (the authors'
    /// `MaskGenerator`), drawn independently per image from `rng`.
    ///
    /// # Errors
    /// A unit of zero patches, or a ratio outside `(0, 1]`.
    pub fn random(
        images: usize,
        (rows, cols): (usize, usize),
        unit: usize,
        ratio: f64,
        rng: &mut StdRng,
    ) -> Result<Self, ConfigError> {
        if unit == 0 {
            return Err(ConfigError::new("mask_unit", "must be at least one patch"));
        }
        if !(ratio > 0.0 && ratio <= 1.0) {
            return Err(ConfigError::new(
                "mask_ratio",
                format!("must lie in (0, 1], got {ratio}"),
            ));
        }
        let (unit_rows, unit_cols) = (rows.div_ceil(unit), cols.div_ceil(unit));
        let units = unit_rows * unit_cols;
        let hide = ((units as f64 * ratio).ceil() as usize).clamp(1, units.max(1));
        let mut hidden = vec![false; images * rows * cols];
        for image in 0..images {
            let mut order: Vec<usize> = (0..units).collect();
            order.shuffle(rng);
            for &u in &order[..hide] {
                let (ur, uc) = (u / unit_cols, u % unit_cols);
                for r in ur * unit..((ur + 1) * unit).min(rows) {
                    for c in uc * unit..((uc + 1) * unit).min(cols) {
                        hidden[image * rows * cols + r * cols + c] = true;
                    }
                }
            }
        }
        Ok(Self {
            patches: rows * cols,
            hidden,
        })
    }

    /// The masks that hide `hidden[i]` of image `i`'s `patches` patches (another library's
    /// masks to compare with).
    ///
    /// # Errors
    /// A patch past `patches`.
    pub fn from_hidden(patches: usize, hidden: &[Vec<usize>]) -> Result<Self, ConfigError> {
        let mut flags = vec![false; hidden.len() * patches];
        for (i, list) in hidden.iter().enumerate() {
            for &p in list {
                if p >= patches {
                    return Err(ConfigError::new(
                        "hidden",
                        format!("image {i} hides patch {p}, past its {patches} patches"),
                    ));
                }
                flags[i * patches + p] = true;
            }
        }
        Ok(Self {
            patches,
            hidden: flags,
        })
    }

    /// The masks of images `start..start + len` (a replica's rows of the global batch's).
    pub fn rows(&self, start: usize, len: usize) -> Self {
        Self {
            patches: self.patches,
            hidden: self.hidden[start * self.patches..(start + len) * self.patches].to_vec(),
        }
    }

    /// Images.
    pub fn images(&self) -> usize {
        self.hidden.len().checked_div(self.patches).unwrap_or(0)
    }

    /// Patches per image.
    pub fn patches(&self) -> usize {
        self.patches
    }

    /// Hidden patches over all images.
    pub fn hidden_count(&self) -> usize {
        self.hidden.iter().filter(|&&h| h).count()
    }

    /// Whether patch `patch` of image `image` is hidden.
    pub fn is_hidden(&self, image: usize, patch: usize) -> bool {
        self.hidden[image * self.patches + patch]
    }

    /// `1` at the hidden patches, `0` at the visible ones.
    ///
    /// # Shapes
    /// → `[N, L]`
    pub fn weights<B: Backend>(&self, device: &B::Device) -> Tensor<B, 2> {
        let values: Vec<f32> = self
            .hidden
            .iter()
            .map(|&h| f32::from(u8::from(h)))
            .collect();
        Tensor::from_data(
            TensorData::new(values, [self.images(), self.patches]),
            device,
        )
    }
}

/// Checks the share of patches an encoder does not see (MAE's hidden patches, MSN's dropped
/// tokens): `mask_ratio` in `[0, 1)` (a patch must stay visible) and a scheduled one
/// (`mask_ratio_schedule`) in `[0, 0.99]`.
///
/// # Errors
/// The setting out of range, named.
pub(crate) fn check_visible_ratio(
    ratio: f64,
    schedule: Option<&SchedulerConfig>,
) -> Result<(), ConfigError> {
    if !(0.0..1.0).contains(&ratio) {
        return Err(ConfigError::new(
            "mask_ratio",
            format!("must lie in [0, 1) (the encoder needs a visible patch), got {ratio}"),
        ));
    }
    mask_schedule::validate("mask_ratio_schedule", schedule, 0.0, 0.99)
}

/// A masked-image method's share of patches hidden (MAE's, SimMIM's units, MSN's dropped
/// tokens): its setting `mask_ratio` throughout, or `mask_ratio_schedule`'s value at the step (a
/// masking curriculum, [`mask_schedule`]), checked when the method is built.
#[derive(Debug, Clone)]
pub(crate) struct MaskRatio {
    ratio: f64,
    schedule: Option<SchedulerConfig>,
}

impl MaskRatio {
    /// A share of patches the encoder does not see (MAE's, MSN's).
    ///
    /// # Errors
    /// As [`check_visible_ratio`].
    pub fn visible(ratio: f64, schedule: Option<&SchedulerConfig>) -> Result<Self, ConfigError> {
        check_visible_ratio(ratio, schedule)?;
        let schedule = schedule.cloned();
        Ok(Self { ratio, schedule })
    }

    /// A share of mask units hidden (SimMIM's): `mask_ratio` in `(0, 1]` (a unit is hidden), a
    /// scheduled one (`mask_ratio_schedule`) in `[0.01, 1]`.
    ///
    /// # Errors
    /// The setting out of range, named.
    pub fn hidden(ratio: f64, schedule: Option<&SchedulerConfig>) -> Result<Self, ConfigError> {
        if !(ratio > 0.0 && ratio <= 1.0) {
            let reason = format!("must lie in (0, 1], got {ratio}");
            return Err(ConfigError::new("mask_ratio", reason));
        }
        mask_schedule::validate("mask_ratio_schedule", schedule, 0.01, 1.0)?;
        let schedule = schedule.cloned();
        Ok(Self { ratio, schedule })
    }

    /// The share at `progress`: the schedule's value, or the setting.
    pub fn at(&self, progress: Progress) -> f64 {
        mask_schedule::mask_ratio_at(self.ratio, self.schedule.as_ref(), progress)
    }
}

/// Checks the shape of a narrow transformer over patch tokens (MAE's decoder, I-JEPA's
/// predictor): a width that is a positive multiple of 4 (its 2-D sine-cosine positions) and of
/// the heads, and at least one block. `fields` names the three settings (width, heads, depth) and
/// `what` the network in the errors.
///
/// # Errors
/// The first setting that does not hold, named.
pub(crate) fn check_token_transformer(
    fields: [&'static str; 3],
    what: &str,
    (dim, heads, depth): (usize, usize, usize),
) -> Result<(), ConfigError> {
    let [dim_field, heads_field, depth_field] = fields;
    if dim == 0 || dim % 4 != 0 {
        return Err(ConfigError::new(
            dim_field,
            format!("must be a positive multiple of 4 (its sine-cosine positions), got {dim}"),
        ));
    }
    if heads == 0 || dim % heads != 0 {
        return Err(ConfigError::new(
            heads_field,
            format!("must divide the {what} width {dim}, got {heads}"),
        ));
    }
    if depth == 0 {
        return Err(ConfigError::new(
            depth_field,
            format!("the {what} needs at least one block"),
        ));
    }
    crate::base::seed::check_count(
        crate::base::seed::transformer_values(depth, dim, 4.0),
        &format!("the {what}'s blocks"),
    )
}

/// The patches of each of `images` a Vision Transformer `vit` cuts: `(H/p)·(W/p)`.
///
/// # Shapes
/// - `images`: `[N, C, H, W]`
pub(crate) fn patch_count<B: Backend>(vit: &Vit<B>, images: &Tensor<B, 4>) -> usize {
    let (rows, cols) = patch_grid(vit, images);
    rows * cols
}

/// The grid of patches a Vision Transformer `vit` cuts each of `images` into: `(H/p, W/p)`.
///
/// # Shapes
/// - `images`: `[N, C, H, W]`
pub(crate) fn patch_grid<B: Backend>(vit: &Vit<B>, images: &Tensor<B, 4>) -> (usize, usize) {
    let [_, _, h, w] = images.dims();
    (h / vit.patch_size, w / vit.patch_size)
}

/// The first global view of `views` (a masked-image method reads one view of each image; the
/// second is not used) and its grid of patches under `vit`.
///
/// # Shapes
/// - the view: `[N, C, H, W]`
pub(crate) fn first_view<B: Backend>(
    views: Views<B>,
    vit: &Vit<B>,
) -> (Tensor<B, 4>, (usize, usize)) {
    let [images, _] = views.two();
    let grid = patch_grid(vit, &images);
    (images, grid)
}

/// The \[CLS\] token of a transformer's tokens.
///
/// # Shapes
/// - `tokens`: `[N, T, D]` → `[N, D]`
pub(crate) fn class_token<B: Backend>(tokens: Tensor<B, 3>) -> Tensor<B, 2> {
    let [n, _, d] = tokens.dims();
    tokens.slice([0..n, 0..1, 0..d]).reshape([n, d])
}

/// A Vision Transformer on the patches `mask` keeps: the class token and the kept patches'
/// tokens (positions added before the gather), through the blocks and the final norm — MAE's
/// encoder on the visible patches, I-JEPA's on the context block.
///
/// # Shapes
/// - `images`: `[N, C, H, W]` → `[N, 1 + kept, D]`
pub(crate) fn encode_kept<B: Backend>(
    vit: &curriculum_ssl_models::Vit<B>,
    images: Tensor<B, 4>,
    mask: &PatchMask,
) -> Tensor<B, 3> {
    let (patches, (h, w)) = vit.patch_tokens(images);
    let [n, _, d] = patches.dims();
    let positions = vit.pos_embed_for(h, w);
    let patches = patches + positions.clone().slice([0..1, 1..1 + h * w, 0..d]);
    let class = (vit.cls_token.val() + positions.slice([0..1, 0..1, 0..d])).expand([n, 1, d]);
    let x = Tensor::cat(vec![class, mask.gather(patches)], 1);
    curriculum_ssl_models::vit::forward_blocks(&vit.blocks, x, &vit.norm)
}

/// The fixed 2-D sine-cosine positional embeddings of the authors' code
/// (`get_2d_sincos_pos_embed` with a class token): a zero row for the class token, then for the
/// patch at row `r`, column `c` the 1-D embeddings of `c` (first half) and of `r` (second half),
/// each `[sin(x·ω_k), cos(x·ω_k)]` with `ω_k = 10000^(−k/(D/4))`, `k < D/4`.
///
/// # Shapes
/// → `[1, 1 + rows·cols, D]`
pub fn sine_cosine_2d<B: Backend>(
    (rows, cols): (usize, usize),
    dim: usize,
    device: &B::Device,
) -> Tensor<B, 3> {
    let quarter = dim / 4;
    let omega: Vec<f64> = (0..quarter)
        .map(|k| 1.0 / 10000f64.powf(k as f64 / quarter as f64))
        .collect();
    let one_d = |x: f64| -> Vec<f64> {
        let sin = omega.iter().map(|w| (x * w).sin());
        let cos = omega.iter().map(|w| (x * w).cos());
        sin.chain(cos).collect()
    };
    let mut values = vec![0.0; dim];
    for r in 0..rows {
        for c in 0..cols {
            values.extend(one_d(c as f64));
            values.extend(one_d(r as f64));
        }
    }
    Tensor::<B, 1>::from_data(TensorData::new(values, [(1 + rows * cols) * dim]), device).reshape([
        1,
        1 + rows * cols,
        dim,
    ])
}

/// The pixels of every whole `p × p` patch of `images`, patches row by row, each patch's pixels
/// in row, column, channel order (the authors' `patchify`).
///
/// # Shapes
/// - `images`: `[N, C, H, W]` → `[N, (H/p)(W/p), p²·C]`
pub fn patchify<B: Backend>(images: Tensor<B, 4>, p: usize) -> Tensor<B, 3> {
    let [n, c, h, w] = images.dims();
    let (rows, cols) = (h / p, w / p);
    images
        .slice([0..n, 0..c, 0..rows * p, 0..cols * p])
        .reshape([n, c, rows, p, cols, p])
        .permute([0, 2, 4, 3, 5, 1])
        .reshape([n, rows * cols, p * p * c])
}

fn index<B: Backend>(rows: &[usize], device: &B::Device) -> Tensor<B, 1, Int> {
    let rows: Vec<i64> = rows.iter().map(|&r| r as i64).collect();
    let len = rows.len();
    Tensor::from_data(TensorData::new(rows, [len]), device)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;
    use rand::SeedableRng;

    type B = NdArray<f64>;

    fn tokens(n: usize, l: usize, d: usize) -> Tensor<B, 3> {
        let values: Vec<f64> = (0..n * l * d).map(|i| i as f64).collect();
        Tensor::from_data(TensorData::new(values, [n, l, d]), &Default::default())
    }

    #[test]
    fn the_mask_keeps_the_floor_of_the_visible_fraction_and_differs_by_image() {
        let mask = PatchMask::random(3, 16, 0.75, &mut StdRng::seed_from_u64(1));
        assert_eq!(mask.visible(), 4);
        for i in 0..3 {
            let hidden = (0..16).filter(|&p| mask.is_hidden(i, p)).count();
            assert_eq!(hidden, 12);
        }
        assert_ne!(mask.visible[0], mask.visible[1]);
        assert_eq!(PatchMask::visible_count(10, 0.75), 2);
        assert_eq!(PatchMask::visible_count(4, 0.99), 1);
        let again = PatchMask::random(3, 16, 0.75, &mut StdRng::seed_from_u64(1));
        assert_eq!(mask, again, "the same seed, the same masks");
    }

    /// Gathered tokens are the visible ones (each token's value names its image, patch and
    /// channel); scattering them back with a fill gives the tokens at the visible places and
    /// the fill at the hidden ones.
    #[test]
    fn gathered_tokens_round_trip_through_the_scatter() {
        let (n, l, d) = (2, 6, 3);
        let mask = PatchMask::random(n, l, 0.5, &mut StdRng::seed_from_u64(7));
        let x = tokens(n, l, d);
        let visible = mask.gather(x.clone());
        let got = visible.clone().into_data().to_vec::<f64>().unwrap();
        let mut k = 0;
        for i in 0..n {
            for p in (0..l).filter(|&p| !mask.is_hidden(i, p)) {
                for c in 0..d {
                    assert_eq!(got[k], ((i * l + p) * d + c) as f64);
                    k += 1;
                }
            }
        }
        let fill = Tensor::<B, 3>::from_data([[[-1.0, -2.0, -3.0]]], &Default::default());
        let back = mask
            .scatter(visible, fill)
            .into_data()
            .to_vec::<f64>()
            .unwrap();
        let x = x.into_data().to_vec::<f64>().unwrap();
        for i in 0..n {
            for p in 0..l {
                for c in 0..d {
                    let at = (i * l + p) * d + c;
                    let expected = if mask.is_hidden(i, p) {
                        -1.0 - c as f64
                    } else {
                        x[at]
                    };
                    assert_eq!(back[at], expected, "image {i} patch {p}");
                }
            }
        }
        let weights = mask.hidden_weights::<B>(&Default::default());
        let weights = weights.into_data().to_vec::<f64>().unwrap();
        assert_eq!(weights.iter().sum::<f64>(), (n * (l - 3)) as f64);
    }

    #[test]
    fn masks_given_by_their_visible_patches_are_checked() {
        let mask = PatchMask::from_visible(4, vec![vec![3, 1], vec![0, 2]]).unwrap();
        assert!(mask.is_hidden(0, 0) && !mask.is_hidden(0, 1) && !mask.is_hidden(0, 3));
        for bad in [
            vec![vec![1, 3], vec![0]],
            vec![vec![1, 1], vec![0, 2]],
            vec![vec![1, 4], vec![0, 2]],
            vec![vec![], vec![]],
        ] {
            let e = PatchMask::from_visible(4, bad).unwrap_err();
            assert_eq!(e.field, "visible");
        }
    }

    /// CAPI's inverse-block masks on a 6 × 6 grid at 0.65 over many draws: ⌊36 · 0.65⌋ = 23
    /// hidden, 13 visible per image, and the visible patches are the first 13 (row-major) of a
    /// block placed cyclically (rolled across the edges) whose sides the aspect range allows;
    /// without `roll` the block never wraps; at ratio 0 every patch stays visible. A subset of
    /// the hidden patches keeps only hidden ones.
    #[test]
    fn inverse_block_masks_keep_one_wrapped_block() {
        let mut rng = StdRng::seed_from_u64(9);
        assert_eq!(PatchMask::inverse_block_hidden(256, 0.65), 166);
        assert_eq!(PatchMask::inverse_block_hidden(9, 0.65), 5);
        let is_block = |kept: &[usize], wrap: bool| -> bool {
            for h in 1..=6 {
                for w in 1..=6 {
                    if h * w < 13 {
                        continue;
                    }
                    let places = if wrap { 0..6 } else { 0..7 };
                    for top in places.clone() {
                        for left in places.clone() {
                            if !wrap && (top + h > 6 || left + w > 6) {
                                continue;
                            }
                            let mut cells: Vec<usize> = (top..top + h)
                                .flat_map(|r| (left..left + w).map(move |c| (r, c)))
                                .take(13)
                                .map(|(r, c)| (r % 6) * 6 + c % 6)
                                .collect();
                            cells.sort_unstable();
                            if cells == kept {
                                return true;
                            }
                        }
                    }
                }
            }
            false
        };
        for roll in [true, false] {
            let mask = PatchMask::inverse_block(40, (6, 6), 0.65, (0.5, roll), &mut rng);
            assert_eq!(mask.visible(), 13);
            for i in 0..40 {
                assert!(
                    is_block(mask.kept(i), roll),
                    "roll {roll}, image {i}: {:?}",
                    mask.kept(i)
                );
            }
            let subset = mask.hidden_subset(4, &mut rng);
            assert_eq!(subset.visible(), 4);
            for i in 0..40 {
                assert!(subset.kept(i).iter().all(|&p| mask.is_hidden(i, p)));
            }
        }
        let wrapped = PatchMask::inverse_block(40, (6, 6), 0.65, (0.5, true), &mut rng);
        assert!(
            (0..40).any(|i| !is_block(wrapped.kept(i), false)),
            "some block wraps"
        );
        let all = PatchMask::inverse_block(2, (3, 3), 0.0, (0.5, true), &mut rng);
        assert_eq!(all.visible(), 9);
    }

    #[test]
    fn a_replicas_rows_are_the_global_batchs() {
        let mask = PatchMask::random(4, 9, 0.5, &mut StdRng::seed_from_u64(3));
        let rows = mask.rows(2, 2);
        for i in 0..2 {
            for p in 0..9 {
                assert_eq!(rows.is_hidden(i, p), mask.is_hidden(i + 2, p));
            }
        }
    }

    /// Units of 2 × 2 patches on a 5 × 5 grid: 3 × 3 units, the last row and column of them
    /// clipped to one patch; ⌈9 · 0.6⌉ = 6 hidden per image; every hidden patch belongs to a
    /// unit hidden whole; the same seed draws the same masks.
    #[test]
    fn unit_masks_hide_whole_units_clipped_at_the_edges() {
        let draw =
            |seed| UnitMask::random(3, (5, 5), 2, 0.6, &mut StdRng::seed_from_u64(seed)).unwrap();
        let mask = draw(4);
        assert_eq!(mask, draw(4));
        assert_ne!(mask, draw(5));
        let unit_of = |p: usize| (p / 5 / 2) * 3 + (p % 5) / 2;
        let size = |u: usize| (if u / 3 == 2 { 1 } else { 2 }) * (if u % 3 == 2 { 1 } else { 2 });
        for image in 0..3 {
            let mut units = std::collections::BTreeSet::new();
            for p in (0..25).filter(|&p| mask.is_hidden(image, p)) {
                units.insert(unit_of(p));
            }
            assert_eq!(units.len(), 6, "image {image}");
            let hidden = (0..25).filter(|&p| mask.is_hidden(image, p)).count();
            assert_eq!(hidden, units.iter().map(|&u| size(u)).sum::<usize>());
        }
        assert_eq!(mask.rows(1, 2).images(), 2);
        assert_eq!(
            mask.rows(1, 1).hidden_count() + mask.rows(2, 1).hidden_count(),
            mask.rows(1, 2).hidden_count()
        );
        let w: Vec<f64> = mask
            .weights::<B>(&Default::default())
            .into_data()
            .to_vec()
            .unwrap();
        assert_eq!(w.iter().sum::<f64>() as usize, mask.hidden_count());
        assert_eq!(
            UnitMask::random(1, (4, 4), 0, 0.5, &mut StdRng::seed_from_u64(0))
                .unwrap_err()
                .field,
            "mask_unit"
        );
        assert!(UnitMask::from_hidden(4, &[vec![4]]).is_err());
    }

    /// The positions of MAE's decoder: the authors' 2-D sine-cosine table (a zero row for the
    /// class token, then a row per patch: its column's sines and cosines in the first half, its
    /// row's in the second).
    #[test]
    fn the_decoder_positions_are_the_authors_sine_cosine_table() {
        let got = crate::method::testing::host(sine_cosine_2d::<B>((1, 2), 4, &Default::default()));
        let (s, c) = (1f64.sin(), 1f64.cos());
        let expected = [0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, s, c, 0.0, 1.0];
        for (g, e) in got.iter().zip(expected) {
            assert!((g - e).abs() < 1e-15, "{got:?}");
        }
    }
}
