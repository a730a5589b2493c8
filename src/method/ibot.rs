//! iBOT and DINOv2's objective (documented on `Ibot`).

use burn::module::Param;
use burn::nn::Initializer;
use burn::optim::GradientsParams;
use burn::prelude::*;
use burn::record::Record;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::{AsVit, Backbone, TrainableBackbone, Vit};
use rand::seq::SliceRandom;
use rand::Rng;

use super::dino::{next_center, DinoHead, DinoHeadConfig};
use super::masking::{class_token as cls, patch_count, require_vit, vit, StepMasks, UnitMask};
use super::momentum::MomentumEncoder;
use super::running::Running;
use super::ssl_method::{
    gradients_without, locals_through, online_in, replica_in, split_views, stat, HasBackbone,
    MethodOutput, SslMethod, Views,
};
use crate::base::error::{in_range, ConfigError};
use crate::base::Progress;
use crate::data_parallel::Replica;
use crate::loss::{
    sinkhorn, DinoLoss, DinoLossConfig, IbotPatchLoss, IbotPatchLossConfig, KoLeoLoss,
    KoLeoLossConfig,
};

/// Sinkhorn–Knopp iterations of DINOv2's centring (its `sinkhorn_knopp_teacher`'s 3).
pub(crate) const SINKHORN_ITERATIONS: usize = 3;

/// Configuration of [`Ibot`].
#[derive(Config, Debug)]
pub struct IbotConfig {
    /// Hidden width of the head (the papers' 2048).
    #[config(default = 2048)]
    pub hidden_dim: usize,
    /// Bottleneck width (256).
    #[config(default = 256)]
    pub bottleneck_dim: usize,
    /// Output width `K` of the head (iBOT's 8192).
    #[config(default = 8192)]
    pub output_dim: usize,
    /// One head for \[CLS\] and patch tokens (iBOT's `shared_head`, DINOv2's default); `false`
    /// gives the patch tokens a head of their own.
    #[config(default = true)]
    pub shared_head: bool,
    /// The teacher's momentum at the start (0.996), rising to 1 along a cosine.
    #[config(default = 0.996)]
    pub base_momentum: f64,
    /// Epochs during which the heads' last layers receive no update (1).
    #[config(default = 1)]
    pub freeze_last_layer_epochs: usize,
    /// The \[CLS\] loss (temperatures and their warm-up, centre momentum).
    #[config(default = "DinoLossConfig::new()")]
    pub loss: DinoLossConfig,
    /// The patch loss (student temperature, centre momentum, iBOT++'s weight of the visible
    /// tokens; its teacher temperature follows `loss`'s warm-up).
    #[config(default = "IbotPatchLossConfig::new()")]
    pub patch_loss: IbotPatchLossConfig,
    /// Weight of the patch loss (iBOT's λ₂ = 1, DINOv2's 1).
    #[config(default = 1.0)]
    pub patch_loss_weight: f64,
    /// Weight of the KoLeo regulariser on the student's \[CLS\] features (0: iBOT; DINOv2's 0.1).
    #[config(default = 0.0)]
    pub koleo_weight: f64,
    /// DINOv2's Sinkhorn–Knopp centring: the teacher's targets are its outputs balanced by
    /// 3 Sinkhorn–Knopp iterations at the teacher temperature — over the
    /// global batch's \[CLS\] outputs of both global views, and over its hidden tokens' outputs
    /// — instead of the centred softmax; the centres then stay where they are. `false`: iBOT's
    /// centring.
    #[config(default = false)]
    pub sinkhorn_knopp: bool,
    /// Share of the global views that hide patches (0.5).
    #[config(default = 0.5)]
    pub mask_probability: f64,
    /// Least share of a view's patches hidden (0.1).
    #[config(default = 0.1)]
    pub mask_ratio_min: f64,
    /// Largest share of a view's patches hidden (0.5).
    #[config(default = 0.5)]
    pub mask_ratio_max: f64,
    /// Seed of the masks: a step's masks are drawn from `(seed, step)`.
    #[config(default = 0)]
    pub seed: u64,
}

impl IbotConfig {
    /// Builds iBOT around backbones made by `backbone` (called twice: the student, and a fresh
    /// module into which the teacher's copy is loaded), which must be Vision Transformers.
    ///
    /// # Errors
    /// A backbone that is not a ViT, a zero width, a probability or ratio outside `[0, 1]`,
    /// ratios in the wrong order, a negative weight, an impossible momentum or temperature,
    /// iBOT++'s visible tokens with Sinkhorn–Knopp centring; each named.
    pub fn init<B: Backend, M: Backbone<B> + AsVit<B>>(
        &self,
        backbone: impl Fn(&B::Device) -> M,
        device: &B::Device,
    ) -> Result<Ibot<B, M>, ConfigError> {
        in_range("mask_probability", self.mask_probability, 0.0, 1.0, false)?;
        in_range("mask_ratio_min", self.mask_ratio_min, 0.0, 1.0, false)?;
        in_range("mask_ratio_max", self.mask_ratio_max, 0.0, 1.0, false)?;
        if self.mask_ratio_min > self.mask_ratio_max {
            return Err(ConfigError::new(
                "mask_ratio_min",
                format!(
                    "must not exceed mask_ratio_max ({} > {})",
                    self.mask_ratio_min, self.mask_ratio_max
                ),
            ));
        }
        for (field, value) in [
            ("patch_loss_weight", self.patch_loss_weight),
            ("koleo_weight", self.koleo_weight),
        ] {
            if !(value >= 0.0 && value.is_finite()) {
                return Err(ConfigError::new(
                    field,
                    format!("must be 0 or more, got {value}"),
                ));
            }
        }
        if self.sinkhorn_knopp && self.patch_loss.visible_loss_weight > 0.0 {
            // Neither DINOv2 nor lightly's iBOT++ says over which tokens the visible tokens'
            // targets would be balanced.
            return Err(ConfigError::new(
                "visible_loss_weight",
                format!(
                    "iBOT++'s visible tokens ({}) take the centred softmax's targets: set \
                     sinkhorn_knopp = false, or visible_loss_weight = 0",
                    self.patch_loss.visible_loss_weight
                ),
            ));
        }
        let student_backbone = backbone(device);
        let width = require_vit(&student_backbone, "iBOT masks patch tokens of")?.embed_dim();
        let head = DinoHeadConfig::new(width)
            .with_hidden_dim(self.hidden_dim)
            .with_bottleneck_dim(self.bottleneck_dim)
            .with_output_dim(self.output_dim);
        let network = |backbone: M| -> Result<IbotNetwork<B, M>, ConfigError> {
            Ok(IbotNetwork {
                backbone,
                mask_token: Initializer::Zeros.init([1, 1, width], device),
                head: head.init(device)?,
                patch_head: if self.shared_head {
                    None
                } else {
                    Some(head.init(device)?)
                },
            })
        };
        let student = network(student_backbone)?;
        let fresh = network(backbone(device))?;
        let teacher =
            MomentumEncoder::new(&student, fresh, self.base_momentum, true, "base_momentum")?;
        Ok(Ibot {
            student,
            teacher,
            loss: self.loss.init()?,
            patch_loss: self.patch_loss.init()?,
            koleo: KoLeoLossConfig::new().init()?,
            center: Running::new(Tensor::zeros([1, self.output_dim], device)),
            patch_center: Running::new(Tensor::zeros([1, self.output_dim], device)),
            config: self.clone(),
            frozen: false,
            step_masks: StepMasks::new(0x6942_4f54_4d41_534b, self.seed),
        })
    }
}

/// The student (or teacher): the ViT backbone, its mask token and the head(s).
#[derive(Module, Debug)]
pub struct IbotNetwork<B: Backend, M> {
    /// The encoder.
    pub backbone: M,
    /// The token that replaces every hidden patch's embedding, `[1, 1, D]` (iBOT's
    /// `masked_embed`, initialised to zeros).
    pub mask_token: Param<Tensor<B, 3>>,
    /// DINO's head, for the \[CLS\] token (and the patch tokens when shared).
    pub head: DinoHead<B>,
    /// The patch tokens' own head (`shared_head = false`).
    pub patch_head: Option<DinoHead<B>>,
}

impl<B: Backend, M> HasBackbone<M> for IbotNetwork<B, M> {
    fn backbone(&self) -> &M {
        &self.backbone
    }
}

impl<B: Backend, M: Backbone<B> + AsVit<B>> IbotNetwork<B, M> {
    fn vit(&self) -> &Vit<B> {
        vit(&self.backbone)
    }

    /// Every token after the final norm, the patches that `mask` hides replaced by the mask
    /// token before the positional embeddings (none when `mask` is `None`).
    ///
    /// # Shapes
    /// - `images`: `[N, C, H, W]` → `[N, 1 + L, D]`
    pub fn tokens(&self, images: Tensor<B, 4>, mask: Option<&UnitMask>) -> Tensor<B, 3> {
        let vit = self.vit();
        let (patches, grid) = vit.patch_tokens(images);
        let patches = match mask {
            Some(mask) => {
                let [n, l, d] = patches.dims();
                let hidden = mask
                    .weights::<B>(&patches.device())
                    .reshape([n, l, 1])
                    .expand([n, l, d]);
                let token = self.mask_token.val().expand([n, l, d]);
                patches * (hidden.clone().neg() + 1.0) + token * hidden
            }
            None => patches,
        };
        vit.encode_patch_tokens(patches, grid)
    }

    /// The patch tokens' head.
    pub fn patch_head(&self) -> &DinoHead<B> {
        self.patch_head.as_ref().unwrap_or(&self.head)
    }
}

/// The checkpointed state of [`Ibot`]: the teacher and both centres.
#[derive(Record)]
pub struct IbotState<B: Backend, M: Backbone<B>> {
    /// The teacher's record.
    pub teacher: <IbotNetwork<B, M> as Module<B>>::Record,
    /// The \[CLS\] centre, `[1, K]`.
    pub center: Tensor<B, 2>,
    /// The patch centre, `[1, K]`.
    pub patch_center: Tensor<B, 2>,
}

/// iBOT (and DINOv2's objective with `koleo_weight > 0`). Build it with [`IbotConfig::init`].
///
/// iBOT (Zhou et al., "iBOT: Image BERT Pre-Training with Online Tokenizer", ICLR 2022,
/// <https://arxiv.org/abs/2111.07832>) and DINOv2's training objective at the scale that runs here
/// (Oquab et al., "DINOv2: Learning Robust Visual Features without Supervision", 2023,
/// <https://arxiv.org/abs/2304.07193>): DINO's self-distillation of the \[CLS\] token
/// ([`DinoLoss`](crate::loss::DinoLoss)) plus masked image modelling in the teacher's output space
/// — the student sees its global views with some patch tokens replaced by a learned mask token, the
/// teacher sees them whole, and every hidden token's student output learns the teacher's for the
/// same token ([`IbotPatchLoss`](crate::loss::IbotPatchLoss)). DINOv2 adds the KoLeo regulariser on
/// the student's \[CLS\] features ([`KoLeoLoss`](crate::loss::KoLeoLoss)).
///
/// ```text
/// for each batch x:
///     g1, g2, l1 .. lV = multi_crop(x);  masks m1, m2 for g1, g2 (DINOv2's collate, below)
///     teacher: every token of g1, g2 → head → t_cls, t_patch      (no gradient)
///     student: g1, g2 with the hidden tokens replaced → head → s_cls, s_patch; locals → s_cls
///     loss = DINO(t_cls, s_cls)                                    (pairs of different views)
///          + λ_patch · iBOT(t_patch, s_patch at the hidden tokens of the same view)
///          + λ_koleo · Σ_g KoLeo(student [CLS] features of g)
///     teacher ← EMA(student); both centres ← EMA(mean teacher output)
/// ```
///
/// The masks of a step (DINOv2's `collate_data_and_cast` and iBOT's `pred_ratio`): of the
/// `2N` global views (view-major), `⌊2N·p⌋` hide patches (`p = mask_probability`, 0.5), the
/// `i`-th of them `⌊L·u_i⌋` random patches with `u_i` uniform in the `i`-th of `⌊2N·p⌋` equal
/// slices of `[ratio_min, ratio_max]` (0.1, 0.5), the rest none; which views hide is shuffled.
/// Drawn on the host from `(seed, step)`, so a resumed run draws the same. DINOv2's masks are
/// BEiT-style blocks of patches; here they are single patches (iBOT's `pred_shape = rand`), a
/// choice for the 7 × 7 grids of Fashion-MNIST, where a block is most of the image.
///
/// The head is shared between \[CLS\] and patch tokens (iBOT's `shared_head`, DINOv2's default),
/// or a second [`DinoHead`] for the patch tokens (`shared_head = false`); both are DINO's head,
/// with its last layer frozen for the first `freeze_last_layer_epochs` epochs. The patch loss's
/// teacher temperature follows the \[CLS\] loss's warm-up.
///
/// iBOT++ (TIPSv2, 2026, <https://arxiv.org/abs/2604.12012>; lightly's `IBOTPlusPlusPatchLoss`)
/// with `patch_loss.visible_loss_weight = w > 0`: the patch loss also takes the student's
/// outputs at the patches it sees against the teacher's for the same patches, each image's mean
/// over its visible tokens weighted by `w`
/// ([`IbotPatchLoss::forward_with_visible`](crate::loss::IbotPatchLoss::forward_with_visible)),
/// and the patch centre moves by the mean over every patch token of the global views. The heads
/// then run on the visible tokens too; at `w = 0` (the default) they do not, and the step is
/// iBOT's. Not with Sinkhorn–Knopp centring (refused by [`IbotConfig::init`]).
///
/// On several replicas each replica draws the global batch's masks and keeps its rows (its two
/// views' slices); each replica's \[CLS\] and patch losses are means over its own images (their
/// average over replicas is the one-device loss); the \[CLS\] centre moves by the replicas' mean
/// teacher output, the patch centre by the mean over every replica's hidden tokens (a sum and a
/// count all-reduced: replicas hide different numbers; with iBOT++'s visible tokens, over every
/// replica's patch tokens); KoLeo runs on the gathered global batch
/// (DINOv2 computes it per GPU; here the replicas equal one device). The math and the defaults are
/// in `docs/methods.md#ibot`.
#[derive(Debug, Clone)]
pub struct Ibot<B: Backend, M: Backbone<B>> {
    student: IbotNetwork<B, M>,
    teacher: MomentumEncoder<IbotNetwork<B, M>>,
    loss: DinoLoss,
    patch_loss: IbotPatchLoss,
    koleo: KoLeoLoss,
    center: Running<B, 2>,
    patch_center: Running<B, 2>,
    config: IbotConfig,
    /// Whether the last layers are frozen at the step being computed.
    frozen: bool,
    step_masks: StepMasks<B>,
}

/// The masks of `views` global views (view-major) of `patches` patches each, drawn from `rng`
/// as DINOv2's collate draws them (see the module docs).
pub(crate) fn ibot_masks(
    views: usize,
    patches: usize,
    probability: f64,
    (ratio_min, ratio_max): (f64, f64),
    rng: &mut impl Rng,
) -> UnitMask {
    let masked = (views as f64 * probability).floor() as usize;
    let mut hidden: Vec<Vec<usize>> = (0..views)
        .map(|i| {
            if i >= masked {
                return Vec::new();
            }
            let slice = (ratio_max - ratio_min) / masked as f64;
            let low = ratio_min + slice * i as f64;
            let ratio = low + slice * rng.random::<f64>();
            let count = ((patches as f64 * ratio).floor() as usize).min(patches);
            let mut order: Vec<usize> = (0..patches).collect();
            order.shuffle(rng);
            let mut chosen = order[..count].to_vec();
            chosen.sort_unstable();
            chosen
        })
        .collect();
    hidden.shuffle(rng);
    UnitMask::from_hidden(patches, &hidden).expect("patches below the count")
}

impl<B: Backend, M: Backbone<B> + AsVit<B>> Ibot<B, M> {
    /// The momentum copy (the EMA teacher).
    pub fn teacher(&self) -> &MomentumEncoder<IbotNetwork<B, M>> {
        &self.teacher
    }

    /// The \[CLS\] centre, `[1, K]`.
    pub fn center(&self) -> Tensor<B, 2> {
        self.center.value()
    }

    /// The patch centre, `[1, K]`.
    pub fn patch_center(&self) -> Tensor<B, 2> {
        self.patch_center.value()
    }

    /// The masks of the step at `progress` for the `2N` global views of a batch of `images`
    /// images with `patches` patches each (view-major), drawn from `(seed, step)`.
    pub fn masks(&self, progress: Progress, images: usize, patches: usize) -> UnitMask {
        let mut rng = self.step_masks.rng(progress);
        let c = &self.config;
        ibot_masks(
            2 * images,
            patches,
            c.mask_probability,
            (c.mask_ratio_min, c.mask_ratio_max),
            &mut rng,
        )
    }
}

/// The masks of `first`'s images, then `second`'s.
fn stack_masks(first: &UnitMask, second: &UnitMask) -> UnitMask {
    let patches = first.patches();
    let hidden: Vec<Vec<usize>> = [first, second]
        .iter()
        .flat_map(|m| {
            (0..m.images()).map(move |i| (0..patches).filter(|&p| m.is_hidden(i, p)).collect())
        })
        .collect();
    UnitMask::from_hidden(patches, &hidden).expect("the same patches")
}

/// The rows `image·L + patch` of the hidden patches (image by image), and each image's count.
fn hidden_rows(mask: &UnitMask) -> (Vec<i64>, Vec<usize>) {
    rows_where(mask, true)
}

/// The rows `image·L + patch` of the visible patches (image by image), and each image's count.
fn visible_rows(mask: &UnitMask) -> (Vec<i64>, Vec<usize>) {
    rows_where(mask, false)
}

/// The rows `image·L + patch` of the patches that are hidden (`hidden`) or visible, image by
/// image, and each image's count.
fn rows_where(mask: &UnitMask, hidden: bool) -> (Vec<i64>, Vec<usize>) {
    let (images, patches) = (mask.images(), mask.patches());
    let mut rows = Vec::new();
    let counts = (0..images)
        .map(|i| {
            let before = rows.len();
            rows.extend(
                (0..patches)
                    .filter(|&p| mask.is_hidden(i, p) == hidden)
                    .map(|p| (i * patches + p) as i64),
            );
            rows.len() - before
        })
        .collect();
    (rows, counts)
}

/// The patch tokens of `tokens` (the \[CLS\] token first, then `L` patches) at `rows` (`image·L +
/// patch`: the hidden ones, or the visible ones), `[M, D]`.
fn gather_hidden<B: Backend>(tokens: Tensor<B, 3>, rows: &[i64]) -> Tensor<B, 2> {
    let [n, t, d] = tokens.dims();
    let patches = tokens.slice([0..n, 1..t, 0..d]).reshape([n * (t - 1), d]);
    let index = Tensor::<B, 1, Int>::from_data(
        TensorData::new(rows.to_vec(), [rows.len()]),
        &patches.device(),
    );
    patches.select(0, index)
}

/// `head`'s outputs at the hidden patch tokens of `tokens` (or the visible ones: `rows`), `[M, K]`;
/// `[0, K]` when no token is hidden (a batch of few patches, or `mask_probability` 0: the patch
/// loss is then 0).
fn hidden_outputs<B: Backend>(
    head: &DinoHead<B>,
    tokens: Tensor<B, 3>,
    rows: &[i64],
) -> Tensor<B, 2> {
    if rows.is_empty() {
        return Tensor::zeros([0, head.output_dim()], &tokens.device());
    }
    head.forward(gather_hidden(tokens, rows))
}

/// This replica's rows of the \[CLS\] outputs (`n` images of each global view, view-major) within
/// the global batch's `2·n·W`: `(global start, local start, rows)` per view.
fn cls_segments(n: usize, replicas: usize, rank: usize) -> Vec<(usize, usize, usize)> {
    (0..2)
        .map(|view| ((view * replicas + rank) * n, view * n, n))
        .collect()
}

/// This replica's hidden tokens' rows within the global batch's, from the global masks
/// (`2·n·W` views, view-major, every replica knows them): `(global start, local start, rows)`
/// per view.
fn hidden_segments(
    global: &UnitMask,
    n: usize,
    replicas: usize,
    rank: usize,
) -> Vec<(usize, usize, usize)> {
    let (_, counts) = hidden_rows(global);
    let before = |image: usize| counts[..image].iter().sum::<usize>();
    let mut local = 0;
    (0..2)
        .map(|view| {
            let first = (view * replicas + rank) * n;
            let start = before(first);
            let len = before(first + n) - start;
            let segment = (start, local, len);
            local += len;
            segment
        })
        .collect()
}

/// DINOv2's Sinkhorn–Knopp targets of the teacher's outputs `local` at `temperature`, balanced
/// over the global batch's `total` rows: on replicas each replica's rows are placed at their
/// `segments` of the global batch and summed over replicas, so every replica balances what one
/// device balances, and keeps its rows. No gradient. Nothing to balance when `total` is 0.
///
/// # Shapes
/// - `local`: `[M, K]` → `[M, K]`
fn global_sinkhorn<B: Backend>(
    replica: Option<&Replica<B>>,
    local: Tensor<B, 2>,
    segments: &[(usize, usize, usize)],
    total: usize,
    temperature: f64,
) -> Tensor<B, 2> {
    if total == 0 {
        return local.detach();
    }
    let Some(r) = replica else {
        return sinkhorn(local, SINKHORN_ITERATIONS, temperature);
    };
    let [_, k] = local.dims();
    let device = local.device();
    let local = local.detach();
    let segments: Vec<_> = segments.iter().filter(|s| s.2 > 0).collect();
    let mut placed = Tensor::zeros([total, k], &device);
    for &&(global, own, len) in &segments {
        placed = placed.slice_assign(
            [global..global + len, 0..k],
            local.clone().slice([own..own + len, 0..k]),
        );
    }
    let balanced = sinkhorn(r.sum(placed), SINKHORN_ITERATIONS, temperature);
    if segments.is_empty() {
        return Tensor::zeros([0, k], &device);
    }
    Tensor::cat(
        segments
            .iter()
            .map(|&&(global, _, len)| balanced.clone().slice([global..global + len, 0..k]))
            .collect(),
        0,
    )
}

impl<B: AutodiffBackend, M: Backbone<B> + AsVit<B>> Ibot<B, M> {
    /// Proposes the centres after the step (a redrawn attempt's outputs never move them): the
    /// \[CLS\] centre by the replicas' mean teacher output, the patch centre by the mean over the
    /// global batch's `global_tokens` patch tokens whose teacher outputs this replica holds in
    /// `teacher_patch` (the hidden ones; with iBOT++'s visible tokens, the visible ones too) —
    /// this replica's sum, summed over replicas, divided by their count (replicas hide
    /// different numbers).
    fn propose_centers(
        &mut self,
        teacher: &[Tensor<B, 2>],
        teacher_patch: Tensor<B, 2>,
        global_tokens: usize,
    ) {
        let center = next_center(
            &self.loss,
            self.center.value(),
            teacher,
            self.step_masks.replica(),
        );
        let k = teacher_patch.dims()[1];
        let patch_sum = if teacher_patch.dims()[0] == 0 {
            Tensor::zeros([1, k], &teacher_patch.device())
        } else {
            teacher_patch.sum_dim(0)
        };
        let patch_sum = Replica::sum_on(self.step_masks.replica(), patch_sum.detach());
        let patch_center =
            self.patch_loss
                .moved_center(self.patch_center.value(), patch_sum, global_tokens);
        self.center.propose(center);
        self.patch_center.propose(patch_center);
    }
}

impl<B: AutodiffBackend, M: TrainableBackbone<B> + AsVit<B>> SslMethod<B> for Ibot<B, M> {
    type Online = IbotNetwork<B, M>;
    type Backbone = M;
    type State = IbotState<B, M>;

    online_in!(student);

    fn state(&self) -> IbotState<B, M> {
        IbotState {
            teacher: self.teacher.record(),
            center: self.center.value(),
            patch_center: self.patch_center.value(),
        }
    }

    fn load_state(&mut self, state: IbotState<B, M>) -> Result<(), ConfigError> {
        self.center
            .restore(state.center, "output_dim", "iBOT's [CLS] centre")?;
        self.patch_center
            .restore(state.patch_center, "output_dim", "iBOT's patch centre")?;
        self.teacher.load_record(state.teacher);
        Ok(())
    }

    fn takes_local_crops(&self) -> bool {
        true
    }

    fn forward_views(&mut self, views: Views<B>, progress: Progress) -> MethodOutput<B> {
        let (globals, n, locals) = views.batched();
        self.frozen = progress.epoch < self.config.freeze_last_layer_epochs;
        let patches = patch_count(self.student.vit(), &globals);
        // The hidden tokens of the global batch, for the patch centre: known on the host.
        let (replicas, rank) = self
            .step_masks
            .replica()
            .map_or((1, 0), |r| (r.replicas(), r.rank()));
        let (mask, global) = if self.step_masks.replica().is_some() {
            // The global batch's views are view-major: this replica's rows of each view.
            let global = self.masks(progress, n * replicas, patches);
            let own = |view: usize| global.rows((view * replicas + rank) * n, n);
            (stack_masks(&own(0), &own(1)), Some(global))
        } else {
            (self.masks(progress, n, patches), None)
        };
        let global_hidden = global.as_ref().unwrap_or(&mask).hidden_count();
        let (rows, counts) = hidden_rows(&mask);
        // iBOT++'s visible tokens: their outputs are computed only when they weigh.
        let plus_plus = self.patch_loss.config().visible_loss_weight > 0.0;
        let (visible, visible_counts) = if plus_plus {
            visible_rows(&mask)
        } else {
            (Vec::new(), Vec::new())
        };
        let teacher_net = self.teacher.network();
        let teacher_tokens = teacher_net.tokens(globals.clone().detach(), None).detach();
        let teacher_cls = teacher_net
            .head
            .forward(cls(teacher_tokens.clone()))
            .detach();
        let teacher_visible = plus_plus.then(|| {
            hidden_outputs(teacher_net.patch_head(), teacher_tokens.clone(), &visible).detach()
        });
        let teacher_patch =
            hidden_outputs(teacher_net.patch_head(), teacher_tokens, &rows).detach();

        let student_tokens = self.student.tokens(globals, Some(&mask));
        let student_features = cls(student_tokens.clone());
        let (bottleneck, student_cls) = self
            .student
            .head
            .forward_with_bottleneck(student_features.clone());
        let student_visible = plus_plus
            .then(|| hidden_outputs(self.student.patch_head(), student_tokens.clone(), &visible));
        let student_patch = hidden_outputs(self.student.patch_head(), student_tokens, &rows);
        let embeddings = split_views(bottleneck.detach(), n, 2);
        let teacher = split_views(teacher_cls.clone(), n, 2);
        let mut student = split_views(student_cls, n, 2);
        student.extend(locals_through(locals, n, |x| {
            let local_features = self.student.backbone.forward_features(x);
            self.student.head.forward(local_features)
        }));

        let teacher_temp = self.loss.teacher_temp_at(progress.epoch);
        let (cls_loss, patch_loss) = if self.config.sinkhorn_knopp {
            // Balanced over the global batch, as one device balances it.
            let replica = self.step_masks.replica();
            let cls_targets = global_sinkhorn(
                replica,
                teacher_cls,
                &cls_segments(n, replicas, rank),
                2 * n * replicas,
                teacher_temp,
            );
            let patch_segments = match &global {
                Some(global) => hidden_segments(global, n, replicas, rank),
                None => vec![(0, 0, rows.len())],
            };
            let patch_targets = global_sinkhorn(
                replica,
                teacher_patch.clone(),
                &patch_segments,
                global_hidden,
                teacher_temp,
            );
            (
                self.loss
                    .forward_targets(&split_views(cls_targets, n, 2), &student),
                self.patch_loss
                    .forward_targets(patch_targets, student_patch, &counts),
            )
        } else {
            let patch_loss = match (&teacher_visible, student_visible) {
                (Some(teacher_visible), Some(student_visible)) => {
                    self.patch_loss.forward_with_visible(
                        [teacher_patch.clone(), teacher_visible.clone()],
                        [student_patch, student_visible],
                        [&counts, &visible_counts],
                        self.patch_center.value(),
                        teacher_temp,
                    )
                }
                _ => self.patch_loss.forward(
                    teacher_patch.clone(),
                    student_patch,
                    &counts,
                    self.patch_center.value(),
                    teacher_temp,
                ),
            };
            (
                self.loss
                    .forward(&teacher, &student, self.center.value(), teacher_temp),
                patch_loss,
            )
        };
        let mut loss =
            cls_loss.clone() + patch_loss.clone().mul_scalar(self.config.patch_loss_weight);
        let mut stats = Vec::new();
        if self.config.koleo_weight > 0.0 {
            // A batch of one image has no nearest neighbour: the term is 0 there.
            let koleo = split_views(student_features, n, 2)
                .into_iter()
                .map(|x| {
                    let x = Replica::gather_on(self.step_masks.replica(), x);
                    if x.dims()[0] < 2 {
                        x.sum().mul_scalar(0.0)
                    } else {
                        self.koleo.forward(x)
                    }
                })
                .reduce(|a, b| a + b)
                .expect("two views");
            loss = loss + koleo.clone().mul_scalar(self.config.koleo_weight);
            stats.push(("koleo", koleo.detach()));
        }
        if !self.config.sinkhorn_knopp {
            // iBOT++'s centre: every patch token of the global batch's global views.
            let (patch_rows, global_tokens) = match teacher_visible {
                Some(teacher_visible) => {
                    let parts: Vec<_> = [teacher_patch, teacher_visible]
                        .into_iter()
                        .filter(|t| t.dims()[0] > 0)
                        .collect();
                    (Tensor::cat(parts, 0), 2 * n * replicas * patches)
                }
                None => (teacher_patch, global_hidden),
            };
            self.propose_centers(&teacher, patch_rows, global_tokens);
        }
        let device = loss.device();
        let hidden = rows.len() as f64 / (2 * n * patches).max(1) as f64;
        stats.extend([
            ("cls_loss", cls_loss.detach()),
            ("patch_loss", patch_loss.detach()),
            ("hidden_fraction", stat(hidden, &device)),
            ("teacher_temp", stat(teacher_temp, &device)),
            self.teacher.stat(progress, &device),
        ]);
        MethodOutput {
            loss,
            stats,
            embeddings: Some([embeddings[0].clone(), embeddings[1].clone()]),
        }
    }

    /// Drops the last layers' gradients while they are frozen.
    fn gradients(&mut self, loss: &Tensor<B, 1>) -> GradientsParams {
        let heads = std::iter::once(&self.student.head).chain(&self.student.patch_head);
        let frozen = heads.map(|h| h.last_layer.id).filter(|_| self.frozen);
        gradients_without(loss, &self.student, frozen)
    }

    replica_in!(
        /// See the module docs: the global batch's masks, each replica's losses over its images,
        /// the centres from every replica's outputs, KoLeo on the gathered batch.
        step_masks
    );

    fn after_step(&mut self, progress: Progress) {
        self.center.commit();
        self.patch_center.commit();
        self.teacher.update(&self.student, progress);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::testing::{host, progress, Ad, Dev};
    use rand::SeedableRng;

    /// A ViT of 8 × 8 one-channel images in sixteen 2 × 2 patches, tokens 8 wide, one block of
    /// two heads.
    fn tiny_vit(d: &Dev) -> Vit<Ad> {
        crate::method::testing::tiny_vit(8, d)
    }

    fn ibot(config: IbotConfig) -> Ibot<Ad, Vit<Ad>> {
        let device = Default::default();
        crate::method::init_method::<Ad, _, ConfigError>(&device, 5, |d| {
            config
                .with_hidden_dim(8)
                .with_bottleneck_dim(4)
                .with_output_dim(6)
                .init(tiny_vit, d)
        })
        .unwrap()
    }

    fn images(n: usize, phase: f64) -> Tensor<Ad, 4> {
        crate::method::testing::square_images(n, 8, phase)
    }

    /// The loss tests' step: two views of three images at step 4 of 100, its masks, the rows
    /// and counts of the hidden patches, and the teacher's and the student's tokens of both
    /// views.
    struct Step {
        views: (Tensor<Ad, 4>, Tensor<Ad, 4>),
        at: Progress,
        mask: UnitMask,
        rows: Vec<i64>,
        counts: Vec<usize>,
        teacher_tokens: Tensor<Ad, 3>,
        student_tokens: Tensor<Ad, 3>,
    }

    fn step(m: &Ibot<Ad, Vit<Ad>>) -> Step {
        let (v1, v2) = (images(3, 0.0), images(3, 1.0));
        let at = progress(4, 100, 0, 10);
        let mask = m.masks(at, 3, 16);
        let (rows, counts) = hidden_rows(&mask);
        let globals = Tensor::cat(vec![v1.clone(), v2.clone()], 0);
        let teacher_tokens = m.teacher().network().tokens(globals.clone(), None);
        let student_tokens = m.online().tokens(globals, Some(&mask));
        Step {
            views: (v1, v2),
            at,
            mask,
            rows,
            counts,
            teacher_tokens,
            student_tokens,
        }
    }

    /// DINO's \[CLS\] loss of the teacher's and the student's outputs of both views (three
    /// images each), at the centre and a teacher temperature of 0.04.
    fn cls_loss(m: &Ibot<Ad, Vit<Ad>>, t_cls: Tensor<Ad, 2>, s_cls: Tensor<Ad, 2>) -> f64 {
        m.loss
            .forward(
                &split_views(t_cls, 3, 2),
                &split_views(s_cls, 3, 2),
                m.center(),
                0.04,
            )
            .into_scalar()
    }

    /// DINOv2's collate: ⌊2N·p⌋ views hide patches, the i-th of them a share of the patches
    /// inside the i-th slice of [min, max]; the others hide none.
    #[test]
    fn the_masks_follow_dinov2s_collate() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let (views, patches) = (8, 100);
        let mask = ibot_masks(views, patches, 0.5, (0.1, 0.5), &mut rng);
        let (_, counts) = hidden_rows(&mask);
        let mut hiding: Vec<usize> = counts.iter().copied().filter(|&c| c > 0).collect();
        assert_eq!(hiding.len(), 4, "{counts:?}");
        assert_eq!(counts.iter().filter(|&&c| c == 0).count(), 4);
        hiding.sort_unstable();
        for (i, c) in hiding.iter().enumerate() {
            let (low, high) = (10 + 10 * i, 20 + 10 * i);
            assert!(
                (low..=high).contains(c),
                "view {i} hides {c}, not in [{low}, {high}]"
            );
        }
    }

    /// The student's hidden patches never reach its tokens (changing their pixels changes
    /// nothing), while the teacher's tokens see them.
    #[test]
    fn hidden_pixels_do_not_reach_the_student() {
        let m = ibot(IbotConfig::new());
        let mask = UnitMask::from_hidden(16, &[vec![0, 5], vec![3]]).unwrap();
        let a = images(2, 0.0);
        // Patch 0 of image 0 is its top-left 2 × 2 pixels; patch 3 of image 1 its top-right.
        let mut values = host(a.clone());
        values[0] += 5.0;
        values[64 + 7] -= 3.0;
        let b =
            Tensor::<Ad, 4>::from_data(TensorData::new(values, [2, 1, 8, 8]), &Default::default());
        let ta = host(m.online().tokens(a.clone(), Some(&mask)));
        let tb = host(m.online().tokens(b.clone(), Some(&mask)));
        assert_eq!(ta, tb);
        let ua = host(m.online().tokens(a, None));
        let ub = host(m.online().tokens(b, None));
        assert_ne!(ua, ub);
    }

    /// The step's loss is the \[CLS\] loss plus the patch loss on the gathered hidden tokens
    /// plus KoLeo, each recomputed here from the networks; the centres move after the step.
    #[test]
    fn the_loss_adds_its_three_terms() {
        let mut m = ibot(
            IbotConfig::new()
                .with_koleo_weight(0.25)
                .with_patch_loss_weight(0.5),
        );
        let Step {
            views: (v1, v2),
            at,
            rows,
            counts,
            teacher_tokens,
            student_tokens,
            ..
        } = step(&m);
        assert!(!rows.is_empty());
        let t_cls = m
            .teacher()
            .network()
            .head
            .forward(cls(teacher_tokens.clone()));
        let s_features = cls(student_tokens.clone());
        let s_cls = m.online().head.forward(s_features.clone());
        let t_patch = m
            .teacher()
            .network()
            .head
            .forward(gather_hidden(teacher_tokens, &rows));
        let s_patch = m
            .online()
            .head
            .forward(gather_hidden(student_tokens, &rows));
        let cls_loss = cls_loss(&m, t_cls, s_cls);
        let patch_loss: f64 = m
            .patch_loss
            .forward(t_patch.clone(), s_patch, &counts, m.patch_center(), 0.04)
            .into_scalar();
        let koleo: f64 = split_views(s_features, 3, 2)
            .into_iter()
            .map(|features| m.koleo.forward(features).into_scalar())
            .sum();
        let out = m.forward_views(Views::pair(v1, v2), at);
        let total: f64 = out.loss.into_scalar();
        let expected = cls_loss + 0.5 * patch_loss + 0.25 * koleo;
        assert!((total - expected).abs() < 1e-12, "{total} vs {expected}");
        assert_eq!(host(m.patch_center()), vec![0.0; 6], "not before the step");
        m.after_step(at);
        let t = host(t_patch);
        let mean: Vec<f64> = (0..6)
            .map(|k| (0..rows.len()).map(|r| t[r * 6 + k]).sum::<f64>() / rows.len() as f64)
            .collect();
        for (a, b) in host(m.patch_center()).iter().zip(&mean) {
            assert!((a - 0.1 * b).abs() < 1e-12, "patch centre");
        }
    }

    /// iBOT++: the step's patch loss takes the visible tokens too — the loss's
    /// `forward_with_visible` of the hidden and the visible tokens' outputs recomputed from the
    /// networks — and the patch centre moves by the mean over every patch token of both views.
    #[test]
    fn ibot_plus_plus_distils_the_visible_tokens_and_centres_on_every_token() {
        let w = 0.6;
        let mut m = ibot(
            IbotConfig::new()
                .with_patch_loss(IbotPatchLossConfig::new().with_visible_loss_weight(w)),
        );
        let step = step(&m);
        let (v1, v2) = step.views;
        let (at, mask, rows, counts) = (step.at, step.mask, step.rows, step.counts);
        let (teacher_tokens, student_tokens) = (step.teacher_tokens, step.student_tokens);
        let (visible, visible_counts) = visible_rows(&mask);
        assert!(!rows.is_empty() && !visible.is_empty());
        assert_eq!(rows.len() + visible.len(), 6 * 16);
        assert!(
            visible_counts.contains(&16),
            "a view hiding nothing: {visible_counts:?}"
        );
        let teacher = m.teacher().network();
        let t_cls = teacher.head.forward(cls(teacher_tokens.clone()));
        let s_cls = m.online().head.forward(cls(student_tokens.clone()));
        let outputs = |net: &IbotNetwork<Ad, Vit<Ad>>, tokens: &Tensor<Ad, 3>, at: &[i64]| {
            net.head.forward(gather_hidden(tokens.clone(), at))
        };
        let t_hidden = outputs(teacher, &teacher_tokens, &rows);
        let t_visible = outputs(teacher, &teacher_tokens, &visible);
        let s_hidden = outputs(m.online(), &student_tokens, &rows);
        let s_visible = outputs(m.online(), &student_tokens, &visible);
        let cls_loss = cls_loss(&m, t_cls, s_cls);
        let patch_loss: f64 = m
            .patch_loss
            .forward_with_visible(
                [t_hidden.clone(), t_visible.clone()],
                [s_hidden.clone(), s_visible],
                [&counts, &visible_counts],
                m.patch_center(),
                0.04,
            )
            .into_scalar();
        let ibot_only: f64 = m
            .patch_loss
            .forward(t_hidden.clone(), s_hidden, &counts, m.patch_center(), 0.04)
            .into_scalar();
        assert!(
            (patch_loss - ibot_only).abs() > 1e-3,
            "the visible tokens count"
        );
        let out = m.forward_views(Views::pair(v1, v2), at);
        let total: f64 = out.loss.into_scalar();
        let expected = cls_loss + patch_loss;
        assert!((total - expected).abs() < 1e-12, "{total} vs {expected}");
        m.after_step(at);
        let t = [host(t_hidden), host(t_visible)].concat();
        let tokens = t.len() / 6;
        assert_eq!(tokens, 6 * 16);
        for (k, ours) in host(m.patch_center()).iter().enumerate() {
            let mean = (0..tokens).map(|r| t[r * 6 + k]).sum::<f64>() / tokens as f64;
            assert!((ours - 0.1 * mean).abs() < 1e-12, "patch centre[{k}]");
        }
    }

    /// DINOv2's `sinkhorn_knopp_teacher`, written out on the host (`Q = exp(t/τ)ᵀ`, divided by
    /// its sum, three times rows to `1/K` and columns to `1/B`, times `B`), equals the
    /// Sinkhorn–Knopp this file uses.
    #[test]
    fn the_centring_is_dinov2s_sinkhorn_knopp_teacher() {
        let (b, k, temp) = (5, 4, 0.07);
        let t: Vec<f64> = (0..b * k).map(|e| 0.3 * (0.9 * e as f64).sin()).collect();
        // q[p][i]: prototype p, image i.
        let mut q: Vec<Vec<f64>> = (0..k)
            .map(|p| (0..b).map(|i| (t[i * k + p] / temp).exp()).collect())
            .collect();
        let total: f64 = q.iter().flatten().sum();
        q.iter_mut().flatten().for_each(|x| *x /= total);
        for _ in 0..3 {
            for row in q.iter_mut() {
                let sum: f64 = row.iter().sum();
                row.iter_mut().for_each(|x| *x /= sum * k as f64);
            }
            let sums: Vec<f64> = (0..b).map(|i| q.iter().map(|row| row[i]).sum()).collect();
            for row in q.iter_mut() {
                for (x, sum) in row.iter_mut().zip(&sums) {
                    *x /= sum * b as f64;
                }
            }
        }
        let ours = host(sinkhorn(
            Tensor::<Ad, 2>::from_data(TensorData::new(t, [b, k]), &Default::default()),
            SINKHORN_ITERATIONS,
            temp,
        ));
        for i in 0..b {
            for p in 0..k {
                let theirs = q[p][i] * b as f64;
                assert!((ours[i * k + p] - theirs).abs() < 1e-12, "{i}, {p}");
            }
        }
    }

    /// With Sinkhorn–Knopp centring the step's loss is DINO's and the patch loss on the
    /// teacher's outputs balanced over the batch (the \[CLS\] outputs of both views together, the
    /// hidden tokens' together), recomputed here; the centres stay.
    #[test]
    fn sinkhorn_knopp_centring_balances_the_teachers_outputs_and_keeps_the_centres() {
        let mut m = ibot(IbotConfig::new().with_sinkhorn_knopp(true));
        let step = step(&m);
        let (rows, counts) = (step.rows, step.counts);
        assert!(!rows.is_empty());
        let (teacher, tokens) = (m.teacher().network(), step.teacher_tokens);
        let t_cls = sinkhorn(teacher.head.forward(cls(tokens.clone())), 3, 0.04);
        let t_patch = sinkhorn(teacher.head.forward(gather_hidden(tokens, &rows)), 3, 0.04);
        let student = m.online();
        let s_cls = student.head.forward(cls(step.student_tokens.clone()));
        let s_patch = student
            .head
            .forward(gather_hidden(step.student_tokens, &rows));
        let cls_loss: f64 = m
            .loss
            .forward_targets(&split_views(t_cls, 3, 2), &split_views(s_cls, 3, 2))
            .into_scalar();
        let patch_loss: f64 = m
            .patch_loss
            .forward_targets(t_patch, s_patch, &counts)
            .into_scalar();
        let (v1, v2) = step.views;
        let out = m.forward_views(Views::pair(v1, v2), step.at);
        let total: f64 = out.loss.into_scalar();
        let expected = cls_loss + patch_loss;
        assert!((total - expected).abs() < 1e-12, "{total} vs {expected}");
        m.after_step(step.at);
        assert_eq!(host(m.center()), vec![0.0; 6]);
        assert_eq!(host(m.patch_center()), vec![0.0; 6]);
    }

    /// The mask token is trained: its gradient equals a central finite difference of the loss
    /// (the teacher's outputs held fixed, as the loss detaches them).
    #[test]
    fn the_mask_tokens_gradient_matches_finite_differences() {
        let m = ibot(IbotConfig::new());
        let (v1, v2) = (images(2, 0.3), images(2, 1.3));
        let at = progress(7, 100, 2, 10);
        let loss_with = |m: &Ibot<Ad, Vit<Ad>>| -> Tensor<Ad, 1> {
            let mut m = m.clone();
            m.forward_views(Views::pair(v1.clone(), v2.clone()), at)
                .loss
        };
        let grads = loss_with(&m).backward();
        let analytic = host(m.online().mask_token.val().grad(&grads).unwrap());
        let h = 1e-6;
        for i in [0, 3, 7] {
            let shifted = |delta: f64| {
                let mut m = m.clone();
                let mut net = m.online().clone();
                let mut token = host(net.mask_token.val());
                token[i] += delta;
                net.mask_token = Param::from_tensor(Tensor::from_data(
                    TensorData::new(token, [1, 1, 8]),
                    &Default::default(),
                ));
                m.set_online(net);
                loss_with(&m).into_scalar()
            };
            let numeric = (shifted(h) - shifted(-h)) / (2.0 * h);
            assert!(
                (numeric - analytic[i]).abs() < 1e-6 * numeric.abs().max(1.0),
                "component {i}: {numeric} vs {}",
                analytic[i]
            );
            assert!(analytic[i].abs() > 1e-9, "component {i} is trained");
        }
    }

    /// Edge cases that must not panic: no view hides a patch (`mask_probability` 0: the patch
    /// loss is 0 and the patch centre stays), and a batch of one image with KoLeo on (no
    /// nearest neighbour: the term is 0).
    #[test]
    fn nothing_hidden_and_a_single_image_give_zero_terms() {
        let mut m = ibot(
            IbotConfig::new()
                .with_mask_probability(0.0)
                .with_koleo_weight(0.1),
        );
        let at = progress(1, 100, 0, 10);
        let out = m.forward_views(Views::pair(images(1, 0.0), images(1, 1.0)), at);
        let stat = |name: &str| -> f64 {
            let (_, v) = out.stats.iter().find(|(n, _)| *n == name).unwrap();
            v.clone().into_scalar()
        };
        assert_eq!(stat("patch_loss"), 0.0);
        assert_eq!(stat("koleo"), 0.0);
        assert_eq!(stat("hidden_fraction"), 0.0);
        let loss: f64 = out.loss.clone().into_scalar();
        assert!((loss - stat("cls_loss")).abs() < 1e-12);
        let _ = m.gradients(&out.loss);
        m.after_step(at);
        assert_eq!(host(m.patch_center()), vec![0.0; 6]);
    }

    #[test]
    fn impossible_settings_are_named() {
        let device = Default::default();
        let e = IbotConfig::new()
            .with_mask_ratio_min(0.6)
            .init(tiny_vit, &device)
            .unwrap_err();
        assert_eq!(e.field, "mask_ratio_min");
        let e = IbotConfig::new()
            .with_koleo_weight(-1.0)
            .init(tiny_vit, &device)
            .unwrap_err();
        assert_eq!(e.field, "koleo_weight");
        let e = IbotConfig::new()
            .with_sinkhorn_knopp(true)
            .with_patch_loss(IbotPatchLossConfig::new().with_visible_loss_weight(1.0))
            .init(tiny_vit, &device)
            .unwrap_err();
        assert_eq!(e.field, "visible_loss_weight");
    }
}
