//! CAPI (documented on `Capi`).

use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::{AsVit, Backbone, TrainableBackbone};

use super::capi_predictor::CapiPredictor;
use super::masking::{encode_kept, first_view, patch_grid, require_vit, vit, PatchMask, StepMasks};
use super::momentum::MomentumEncoder;
use super::ssl_method::{momentum_state, online_in, replica_in, HasBackbone, MethodOutput};
use super::ssl_method::{SslMethod, Views};
use crate::base::error::{in_range, non_negative, ConfigError};
use crate::base::Progress;
use crate::data_parallel::Replica;
use crate::loss::{BatchReductions, CapiLoss, CapiLossConfig};
use crate::optim::LrGroup;

/// Configuration of [`Capi`]: lightly 1.6's defaults (`CAPIProjectionHead`,
/// `CAPIPredictorTIMM`, `random_inverse_block_mask`, its example's prediction of every hidden
/// patch and its benchmark's momentum).
#[derive(Config, Debug)]
pub struct CapiConfig {
    /// Clusters (prototypes) of both heads (lightly's head default 16 384; its example 1 024).
    #[config(default = 16384)]
    pub num_clusters: usize,
    /// The predictor's cross-attention blocks (lightly's default 12; example 2, benchmark 6).
    #[config(default = 12)]
    pub predictor_depth: usize,
    /// The predictor's heads (6); the encoder's width over the heads must be a multiple of 4
    /// (its rotary positions).
    #[config(default = 6)]
    pub predictor_heads: usize,
    /// The predictor's MLP width over its token width (4).
    #[config(default = 4.0)]
    pub predictor_mlp_ratio: f64,
    /// Share of each image's patches hidden from the student: `⌊L·ratio⌋` of them (0.65).
    #[config(default = 0.65)]
    pub mask_ratio: f64,
    /// Least aspect ratio (height / width) of the visible block; the largest is its inverse
    /// (0.5).
    #[config(default = 0.5)]
    pub min_aspect: f64,
    /// Whether the visible block is rolled across the grid (true).
    #[config(default = true)]
    pub roll: bool,
    /// Share of the hidden patches the student predicts, drawn at random per image: `1` predicts
    /// every hidden patch (lightly's example), the reference and lightly's benchmark 0.05.
    #[config(default = 1.0)]
    pub prediction_subsampling: f64,
    /// The teacher encoder's momentum at the start (0.996), rising to 1 along a cosine.
    #[config(default = 0.996)]
    pub base_momentum: f64,
    /// The teacher's clustering head's learning rate over the run's (0.5: lightly's
    /// benchmark, after the reference's separate clustering optimiser; 1 steps it with the
    /// rest).
    #[config(default = 0.5)]
    pub clustering_lr_factor: f64,
    /// The loss's temperatures and Sinkhorn–Knopp iterations.
    #[config(default = "CapiLossConfig::new()")]
    pub loss: CapiLossConfig,
    /// Seed of the masks: a step's masks are drawn from `(seed, step)`.
    #[config(default = 0)]
    pub seed: u64,
}

impl CapiConfig {
    /// Builds CAPI around backbones made by `backbone` (called twice: the student encoder, and a
    /// fresh module into which the teacher's copy is loaded), which must be Vision Transformers.
    ///
    /// # Errors
    /// A backbone that is not a ViT; no cluster or predictor block; heads that do not divide the
    /// encoder's width into multiples of 4; a mask ratio that hides no patch or every patch of
    /// the ViT's grid; a prediction share outside `(0, 1]` or that predicts no patch; an aspect
    /// ratio outside `(0, 1]`; a momentum outside `[0, 1]`; a negative `clustering_lr_factor`; a
    /// loss setting; each named.
    pub fn init<B: Backend, M: Backbone<B> + AsVit<B>>(
        &self,
        backbone: impl Fn(&B::Device) -> M,
        device: &B::Device,
    ) -> Result<Capi<B, M>, ConfigError> {
        let loss = self.loss.init()?;
        if self.num_clusters == 0 {
            return Err(ConfigError::new("num_clusters", "at least one cluster"));
        }
        if self.predictor_depth == 0 {
            return Err(ConfigError::new(
                "predictor_depth",
                "the predictor needs at least one block",
            ));
        }
        in_range(
            "predictor_mlp_ratio",
            self.predictor_mlp_ratio,
            0.0,
            f64::MAX,
            false,
        )?;
        in_range("min_aspect", self.min_aspect, 0.0, 1.0, true)?;
        non_negative("clustering_lr_factor", self.clustering_lr_factor)?;
        in_range(
            "prediction_subsampling",
            self.prediction_subsampling,
            0.0,
            1.0,
            true,
        )?;
        let encoder = backbone(device);
        let vit = require_vit(
            &encoder,
            "CAPI predicts the clusters of the patch tokens of",
        )?;
        // Read from the shapes without drawing the lazily initialised parameters.
        let width = vit.embed_dim();
        let patches = vit.grid_tokens();
        let heads = self.predictor_heads;
        if heads == 0 || !width.is_multiple_of(heads) || !(width / heads).is_multiple_of(4) {
            return Err(ConfigError::new(
                "predictor_heads",
                format!(
                    "must divide the encoder's width {width} into heads whose width is a \
                     multiple of 4 (their rotary positions), got {heads}"
                ),
            ));
        }
        let hidden = PatchMask::inverse_block_hidden(patches, self.mask_ratio);
        if !(0.0..1.0).contains(&self.mask_ratio) || hidden == 0 || hidden >= patches {
            return Err(ConfigError::new(
                "mask_ratio",
                format!(
                    "must hide at least one and keep at least one of the ViT's {patches} \
                     patches (⌊L·ratio⌋ of them hidden), got {}",
                    self.mask_ratio
                ),
            ));
        }
        if predicted_count(hidden, self.prediction_subsampling) == 0 {
            return Err(ConfigError::new(
                "prediction_subsampling",
                format!(
                    "{} of the {hidden} hidden patches predicts none",
                    self.prediction_subsampling
                ),
            ));
        }
        if ((width as f64 * self.predictor_mlp_ratio) as usize) == 0 {
            return Err(ConfigError::new(
                "predictor_mlp_ratio",
                format!(
                    "leaves the predictor's MLPs no width ({width} × {})",
                    self.predictor_mlp_ratio
                ),
            ));
        }
        crate::base::seed::check_count(
            crate::base::seed::transformer_values(
                self.predictor_depth,
                width,
                self.predictor_mlp_ratio,
            ),
            "the predictor's blocks",
        )?;
        let predictor = CapiPredictor::new(
            width,
            (heads, self.predictor_depth),
            self.predictor_mlp_ratio,
            device,
        );
        let student_head = CapiHead::new(width, self.num_clusters, true, device);
        let teacher_head = CapiHead::new(width, self.num_clusters, false, device);
        let teacher = MomentumEncoder::new(
            &encoder,
            backbone(device),
            self.base_momentum,
            true,
            "base_momentum",
        )?;
        Ok(Capi {
            online: CapiNetwork {
                backbone: encoder,
                predictor,
                student_head,
                teacher_head,
            },
            teacher,
            loss,
            config: self.clone(),
            step_masks: StepMasks::new(0x4341_5049_4d41_534b, self.seed),
        })
    }
}

/// The patches predicted of `hidden`: `⌊hidden · share⌋` (the benchmark's
/// `int(num_masked · 0.05)`; every one at share 1).
fn predicted_count(hidden: usize, share: f64) -> usize {
    ((hidden as f64 * share).floor() as usize).min(hidden)
}

/// CAPI's projection head (lightly's `CAPIProjectionHead`): the tokens L2-normalised
/// (`x / max(‖x‖, 1e-12)`) and a linear layer whose `K` outputs are the clusters' logits. The
/// student's has no bias and is weight-normalised with its scale fixed at 1 (each prototype a
/// unit vector, lightly's `weight_norm` with `weight_g` 1 and frozen: the layer's weight is
/// the direction `v`, trained); the teacher's is a plain linear layer with a bias.
#[derive(Module, Debug)]
pub struct CapiHead<B: Backend> {
    /// The prototypes, `[D, K]` (burn's layout; PyTorch's `weight_v` / `weight` transposed).
    pub layer: Linear<B>,
    /// Whether each prototype (a column of the weight) is divided by its norm.
    #[module(skip)]
    pub weight_norm: bool,
}

impl<B: Backend> CapiHead<B> {
    /// A head `dim → clusters`: PyTorch's default `nn.Linear` weights; weight-normalised without
    /// a bias (the student's), or with a bias (the teacher's).
    pub fn new(dim: usize, clusters: usize, weight_norm: bool, device: &B::Device) -> Self {
        Self {
            layer: LinearConfig::new(dim, clusters)
                .with_bias(!weight_norm)
                .init(device),
            weight_norm,
        }
    }

    /// The clusters' logits of every token.
    ///
    /// # Shapes
    /// - `tokens`: `[N, T, D]` → `[N, T, K]`
    pub fn forward(&self, tokens: Tensor<B, 3>) -> Tensor<B, 3> {
        let norm = tokens
            .clone()
            .powi_scalar(2)
            .sum_dim(2)
            .sqrt()
            .clamp_min(1e-12);
        let x = tokens / norm;
        let mut weight = self.layer.weight.val();
        if self.weight_norm {
            // PyTorch's `v · (g / ‖v‖)` with g = 1, each output's row of `v` (a column here).
            let scale = weight.clone().powi_scalar(2).sum_dim(0).sqrt().recip();
            weight = weight * scale;
        }
        curriculum_ssl_models::kernels::linear(x, weight, self.layer.bias.as_ref().map(|b| b.val()))
    }
}

/// CAPI's trainable networks: the ViT encoder (the backbone, the student's), the predictor, the
/// student's head and the teacher's clustering head (trained by the clustering loss, not an EMA).
#[derive(Module, Debug)]
pub struct CapiNetwork<B: Backend, M> {
    /// The student encoder.
    pub backbone: M,
    /// The cross-attention predictor.
    pub predictor: CapiPredictor<B>,
    /// The student's head (weight-normalised prototypes).
    pub student_head: CapiHead<B>,
    /// The teacher's online clustering head.
    pub teacher_head: CapiHead<B>,
}

impl<B: Backend, M> HasBackbone<M> for CapiNetwork<B, M> {
    fn backbone(&self) -> &M {
        &self.backbone
    }
}

/// The two terms of CAPI's loss at one step.
#[derive(Debug, Clone)]
pub struct CapiTerms<B: Backend> {
    /// The student's cross-entropy against the teacher's assignments at the predicted patches.
    pub student: Tensor<B, 1>,
    /// The teacher head's cross-entropy against its own (detached) assignments at every patch.
    pub clustering: Tensor<B, 1>,
}

/// CAPI. Build it with [`CapiConfig::init`].
///
/// CAPI (Darcet et al., "Cluster and Predict Latent Patches for Improved Masked Image Modeling",
/// 2025, <https://arxiv.org/abs/2502.08769>) as lightly 1.6 writes it (its `CAPI` example,
/// `CAPILoss`, `CAPIPredictorTIMM`, `CAPIProjectionHead`): from one visible block of each image,
/// a cross-attention predictor predicts, for the hidden patches, the clusters a teacher assigns
/// them; the teacher's clusters are learnt online from its own patch tokens.
///
/// ```text
/// for each batch x (one view):
///     V = one visible block per image (⌊L·0.65⌋ patches hidden), P ⊆ hidden (all by default)
///     z = student_encoder(patches of x in V)                 (class token dropped)
///     s = student_head(predictor(z, positions V, mask tokens at positions P))   [B, |P|, K]
///     t = teacher_head(teacher_encoder(x))                   (every patch; encoder no gradient)
///     A = positionwise_sinkhorn(t / 0.06)                    (no gradient)
///     loss = CE(A[P], s / 0.12) + CE(A, t / 0.12)            (student + clustering)
///     teacher_encoder ← EMA(student_encoder)                 (the heads are not EMA'd)
/// ```
///
/// The masks (lightly's `random_inverse_block_mask`, [`PatchMask::inverse_block`]): one block of
/// `L − ⌊L·0.65⌋` patches of aspect 0.5–2 stays visible, rolled across the grid; drawn on the
/// host from `(seed, step)` for the global batch, each replica keeping its rows. The patches to
/// predict are every hidden one, or `⌊hidden · prediction_subsampling⌋` drawn per image.
///
/// What differs from lightly, and why: the repo's ViT has no register tokens (the example's 7,
/// the benchmark's 16) and no RoPE in the encoder (lightly has none either; the reference has);
/// the teacher head steps at half the rate of the rest (`clustering_lr_factor`, lightly's
/// benchmark, after the reference's separate clustering optimiser) but in the same optimiser,
/// so with the same betas and weight decay (lightly's benchmark decays neither biases nor its
/// norms; the repo's AdamW decays every parameter); the momentum after 0-based step `s` is the cosine at `s / total` (lightly's benchmark: at
/// `(s + 1) / total`, its example per epoch). On replicas the Sinkhorn's maximum and batch sums
/// are global (lightly's `gather_distributed`), so the replicas' average is the one-device loss.
/// The math and the defaults are in `docs/methods.md#capi`.
#[derive(Debug, Clone)]
pub struct Capi<B: Backend, M: Backbone<B>> {
    online: CapiNetwork<B, M>,
    teacher: MomentumEncoder<M>,
    loss: CapiLoss,
    config: CapiConfig,
    step_masks: StepMasks<B>,
}

impl<B: Backend, M: Backbone<B> + AsVit<B>> Capi<B, M> {
    /// The teacher encoder (the EMA copy of the student's).
    pub fn teacher(&self) -> &MomentumEncoder<M> {
        &self.teacher
    }

    /// The masks of the step at `progress` for `images` images on `grid`, from `(seed, step)`:
    /// the visible blocks and the patches to predict.
    pub fn masks(
        &self,
        progress: Progress,
        images: usize,
        grid: (usize, usize),
    ) -> (PatchMask, PatchMask) {
        let mut rng = self.step_masks.rng(progress);
        let c = &self.config;
        let context =
            PatchMask::inverse_block(images, grid, c.mask_ratio, (c.min_aspect, c.roll), &mut rng);
        let hidden = context.patches() - context.visible();
        let count = predicted_count(hidden, c.prediction_subsampling).max(1);
        let predict = context.hidden_subset(count, &mut rng);
        (context, predict)
    }

    /// The two terms of the loss on `images` with the visible patches `context` and the patches
    /// to predict `predict`; the Sinkhorn's batch reductions over every replica on replicas.
    ///
    /// # Shapes
    /// - `images`: `[N, C, H, W]` → two `[1]`
    pub fn terms(
        &self,
        images: Tensor<B, 4>,
        context: &PatchMask,
        predict: &PatchMask,
    ) -> CapiTerms<B> {
        let student = vit(&self.online.backbone);
        let grid = patch_grid(student, &images);
        let features = vit(self.teacher.network())
            .forward_tokens(images.clone().detach())
            .detach();
        let [n, t, d] = features.dims();
        let teacher_logits = self
            .online
            .teacher_head
            .forward(features.slice([0..n, 1..t, 0..d]));
        let tokens = encode_kept(student, images, context);
        let kc = tokens.dims()[1];
        let tokens = tokens.slice([0..n, 1..kc, 0..d]);
        let predicted = self
            .online
            .predictor
            .forward(tokens, context, predict, grid);
        let student_logits = self.online.student_head.forward(predicted);
        let replica = self.step_masks.replica();
        let max = |x: Tensor<B, 3>| -> Tensor<B, 3> {
            let [_, s, k] = x.dims();
            let r = replica.expect("reductions only on replicas");
            r.gather(x.reshape([1, s * k]))
                .max_dim(0)
                .reshape([1, s, k])
        };
        let sum = |x: Tensor<B, 3>| -> Tensor<B, 3> { Replica::sum_on(replica, x) };
        let reductions = BatchReductions {
            max: &max,
            sum: &sum,
        };
        let assignments = self
            .loss
            .assignments(teacher_logits.clone(), replica.map(|_| &reductions));
        CapiTerms {
            student: self
                .loss
                .cross_entropy(predict.gather(assignments.clone()), student_logits),
            clustering: self.loss.cross_entropy(assignments, teacher_logits),
        }
    }
}

impl<B: AutodiffBackend, M: TrainableBackbone<B> + AsVit<B>> SslMethod<B> for Capi<B, M> {
    type Online = CapiNetwork<B, M>;
    type Backbone = M;
    momentum_state!(record of teacher);
    online_in!(online);

    /// The clustering head at `clustering_lr_factor` × the run's rate.
    fn lr_groups(&self) -> Vec<LrGroup> {
        vec![LrGroup::of(
            &self.online.teacher_head,
            self.config.clustering_lr_factor,
        )]
    }

    /// The loss on the first global view (CAPI reads one view of each image).
    fn forward_views(&mut self, views: Views<B>, progress: Progress) -> MethodOutput<B> {
        let (images, grid) = first_view(views, vit(&self.online.backbone));
        let n = images.dims()[0];
        // The global batch's masks, this replica's rows.
        let (total, first) = self.step_masks.global_rows(n);
        let (context, predict) = self.masks(progress, total, grid);
        let (context, predict) = (context.rows(first, n), predict.rows(first, n));
        let terms = self.terms(images, &context, &predict);
        MethodOutput::new(terms.student.clone() + terms.clustering.clone())
            .with_stat("student_loss", terms.student)
            .with_stat("clustering_loss", terms.clustering)
            .with_value("predicted_patches", predict.visible() as f64)
            .with_momentum(self.teacher.momentum_at(progress))
    }

    replica_in!(
        /// Each replica draws the global batch's masks and keeps its rows; the Sinkhorn's maximum
        /// and batch sums are global: every replica's loss is a mean over as many tokens of the
        /// same assignments, so their average is the one-device loss.
        step_masks
    );

    fn after_step(&mut self, progress: Progress) {
        self.teacher.update(&self.online, progress);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::testing::{host, progress, Ad};
    use curriculum_ssl_models::Vit;

    /// A ViT of 12 × 12 one-channel images in 2 × 2 patches (a 6 × 6 grid), tokens 8 wide, one
    /// block of two heads.
    fn tiny_vit(d: &<Ad as burn::tensor::backend::BackendTypes>::Device) -> Vit<Ad> {
        crate::method::testing::tiny_vit(12, d)
    }

    fn config() -> CapiConfig {
        CapiConfig::new()
            .with_num_clusters(5)
            .with_predictor_depth(1)
            .with_predictor_heads(2)
    }

    fn capi(config: CapiConfig) -> Capi<Ad, Vit<Ad>> {
        crate::method::init_method::<Ad, _, ConfigError>(&Default::default(), 5, |d| {
            config.init(tiny_vit, d)
        })
        .unwrap()
    }

    fn images(n: usize, phase: f64) -> Tensor<Ad, 4> {
        crate::method::testing::square_images(n, 12, phase)
    }

    /// The student's head: its prototypes are unit vectors (each column of the weight divided by
    /// its norm) and its input tokens are normalised, so every logit is a cosine in [−1, 1]
    /// equal to the one computed here; the teacher's head adds its bias to the unnormalised
    /// weight's products.
    #[test]
    fn the_heads_compute_cosines_and_affine_logits() {
        let m = capi(config());
        let x = images(1, 0.2);
        let tokens = vit(&m.online.backbone).forward_tokens(x);
        let tokens_host = host(tokens.clone());
        for (head, normalised) in [
            (&m.online.student_head, true),
            (&m.online.teacher_head, false),
        ] {
            let logits = host(head.forward(tokens.clone()));
            let w = host(head.layer.weight.val());
            let bias = head.layer.bias.as_ref().map(|b| host(b.val()));
            for (t, row) in tokens_host.chunks(8).enumerate() {
                let norm = row.iter().map(|v| v * v).sum::<f64>().sqrt();
                for k in 0..5 {
                    let column: Vec<f64> = (0..8).map(|i| w[i * 5 + k]).collect();
                    let scale = if normalised {
                        column.iter().map(|v| v * v).sum::<f64>().sqrt()
                    } else {
                        1.0
                    };
                    let dot: f64 = row.iter().zip(&column).map(|(a, b)| a * b).sum();
                    let want = dot / norm / scale + bias.as_ref().map_or(0.0, |b| b[k]);
                    let got = logits[t * 5 + k];
                    assert!(
                        (got - want).abs() < 1e-12,
                        "token {t} cluster {k}: {got} vs {want}"
                    );
                    if normalised {
                        assert!(got.abs() <= 1.0 + 1e-12);
                    }
                }
            }
        }
        assert!(m.online.student_head.layer.bias.is_none());
    }

    /// The step's masks: on the 6 × 6 grid ⌊36 · 0.65⌋ = 23 hidden and 13 visible per image;
    /// every hidden patch predicted by default, ⌊23 · 0.2⌋ = 4 of them at a share of 0.2, all
    /// hidden; the same step draws the same masks.
    #[test]
    fn the_masks_hide_the_ratio_and_predict_hidden_patches() {
        let at = progress(3, 100, 0, 10);
        let m = capi(config());
        let (context, predict) = m.masks(at, 3, (6, 6));
        assert_eq!((context.visible(), predict.visible()), (13, 23));
        assert_eq!(m.masks(at, 3, (6, 6)), (context.clone(), predict));
        let m = capi(config().with_prediction_subsampling(0.2));
        let (context, predict) = m.masks(at, 3, (6, 6));
        assert_eq!(predict.visible(), 4);
        for i in 0..3 {
            assert!(predict.kept(i).iter().all(|&p| context.is_hidden(i, p)));
        }
    }

    /// The loss is the sum of its two terms; no gradient reaches the teacher encoder; the
    /// predictor, the student's head (through the student term) and the teacher's head (through
    /// the clustering term) get theirs, and the teacher head's gradient equals central finite
    /// differences of the loss, as does the predictor's mask token's.
    #[test]
    fn gradients_match_finite_differences() {
        let m = capi(config());
        let x = images(2, 1.1);
        let (context, predict) = m.masks(progress(2, 100, 0, 10), 2, (6, 6));
        let loss_of = |m: &Capi<Ad, Vit<Ad>>| {
            let terms = m.terms(x.clone(), &context, &predict);
            terms.student + terms.clustering
        };
        let loss = loss_of(&m);
        let grads = loss.backward();
        assert!(vit(m.teacher().network())
            .patch_embed
            .weight
            .val()
            .grad(&grads)
            .is_none());
        let token = host(m.online.predictor.mask_token.val().grad(&grads).unwrap());
        let bias = host(
            m.online
                .teacher_head
                .layer
                .bias
                .as_ref()
                .unwrap()
                .val()
                .grad(&grads)
                .unwrap(),
        );
        let h = 1e-6;
        let shifted = |which: usize, i: usize, delta: f64| -> f64 {
            let mut shifted = m.clone();
            let net = &mut shifted.online;
            let (param, shape) = match which {
                0 => (&mut net.predictor.mask_token, vec![1, 1, 8]),
                _ => {
                    let b = net.teacher_head.layer.bias.as_mut().unwrap();
                    let mut v = host(b.val());
                    v[i] += delta;
                    *b = burn::module::Param::from_tensor(Tensor::from_data(
                        TensorData::new(v, [5]),
                        &Default::default(),
                    ));
                    return loss_of(&shifted).into_scalar();
                }
            };
            let mut v = host(param.val());
            v[i] += delta;
            *param = burn::module::Param::from_tensor(Tensor::from_data(
                TensorData::new(v, shape),
                &Default::default(),
            ));
            loss_of(&shifted).into_scalar()
        };
        for (which, analytic) in [(0, &token), (1, &bias)] {
            for i in [0, 3] {
                let numeric = (shifted(which, i, h) - shifted(which, i, -h)) / (2.0 * h);
                assert!(
                    (numeric - analytic[i]).abs() < 1e-6 * numeric.abs().max(1.0),
                    "parameter {which}[{i}]: {numeric} vs {}",
                    analytic[i]
                );
                assert!(
                    analytic[i].abs() > 1e-9,
                    "parameter {which}[{i}] is trained"
                );
            }
        }
    }

    #[test]
    fn impossible_settings_are_named() {
        let device = Default::default();
        for (config, field) in [
            (config().with_predictor_heads(3), "predictor_heads"),
            (config().with_predictor_heads(4), "predictor_heads"),
            (config().with_mask_ratio(0.01), "mask_ratio"),
            (config().with_mask_ratio(1.0), "mask_ratio"),
            (
                config().with_prediction_subsampling(0.01),
                "prediction_subsampling",
            ),
            (
                config().with_prediction_subsampling(0.0),
                "prediction_subsampling",
            ),
            (config().with_min_aspect(2.0), "min_aspect"),
            (config().with_num_clusters(0), "num_clusters"),
            (config().with_predictor_depth(0), "predictor_depth"),
            (config().with_base_momentum(1.5), "base_momentum"),
            (
                config().with_clustering_lr_factor(-0.5),
                "clustering_lr_factor",
            ),
        ] {
            let e = config.init(tiny_vit, &device).unwrap_err();
            assert_eq!(e.field, field);
        }
    }
}
