//! Hard patches mining (documented on `Hpm`).

use burn::prelude::*;
use burn::tensor::activation::softplus;
use burn::tensor::backend::AutodiffBackend;
use curriculum_ssl_models::{AsVit, Backbone, TrainableBackbone, Vit};
use rand::seq::SliceRandom;
use rand::SeedableRng;

use super::mae::{hidden_mean, MaeConfig, MaeNetwork};
use super::mae_decoder::MaeDecoder;
use super::masking::{encode_kept, first_view, vit, MaskRatio, PatchMask, StepMasks};
use super::ssl_method::{
    online_in, replica_in, stateless, HasBackbone, MethodOutput, SslMethod, Views,
};
use crate::base::error::ConfigError;
use crate::base::schedule::{Pace, SchedulerConfig};
use crate::base::seed::mix_seed;
use crate::base::Progress;

/// The paper's share of hard patches: linear from 0 to 0.5 over the epochs.
pub(crate) fn paper_hard_share() -> SchedulerConfig {
    SchedulerConfig::Linear {
        start: 0.0,
        end: 0.5,
        pace: Pace::Epoch,
    }
}

/// Configuration of [`Hpm`].
#[derive(Config, Debug)]
pub struct HpmConfig {
    /// MAE (mask ratio and its schedule, decoder, targets, seed).
    #[config(default = "MaeConfig::new()")]
    pub mae: MaeConfig,
    /// Blocks of the loss predictor (its width and heads are the decoder's; the paper's as
    /// many blocks as the decoder).
    #[config(default = 1)]
    pub predictor_depth: usize,
    /// Share of each image's hidden patches chosen as the hardest predicted, along training
    /// (values in `[0, 1]`; by default the paper's, linear from 0 to 0.5 over the epochs).
    #[config(default = "paper_hard_share()")]
    pub hard_share: SchedulerConfig,
    /// Weight `λ` of the ranking term (the paper's 1).
    #[config(default = 1.0)]
    pub loss_weight: f64,
}

impl HpmConfig {
    /// Builds hard patches mining around the backbone `backbone` makes (called once), which must be
    /// a Vision Transformer.
    ///
    /// # Errors
    /// MAE's errors, no predictor block, a share schedule outside `[0, 1]`, a negative
    /// weight; each named.
    pub fn init<B: Backend, M: Backbone<B> + AsVit<B>>(
        &self,
        backbone: impl Fn(&B::Device) -> M,
        device: &B::Device,
    ) -> Result<Hpm<B, M>, ConfigError> {
        if self.predictor_depth == 0 {
            return Err(ConfigError::new(
                "predictor_depth",
                "the loss predictor needs at least one block",
            ));
        }
        self.hard_share.validate("hard_share", 0.0, 1.0)?;
        if !(self.loss_weight >= 0.0 && self.loss_weight.is_finite()) {
            return Err(ConfigError::new(
                "loss_weight",
                format!("must be 0 or more, got {}", self.loss_weight),
            ));
        }
        let mae = self.mae.network(backbone, device)?;
        let width = vit(&mae.backbone).embed_dim();
        let m = &self.mae;
        let loss_predictor = MaeDecoder::new(
            width,
            (m.decoder_dim, m.decoder_heads, self.predictor_depth),
            1,
            device,
        );
        Ok(Hpm {
            online: HpmNetwork {
                mae,
                loss_predictor,
            },
            ratio: MaskRatio::visible(m.mask_ratio, m.mask_ratio_schedule.as_ref())?,
            config: self.clone(),
            step_masks: StepMasks::new(0x4850_4d5f_4d41_534b, self.mae.seed),
        })
    }
}

/// The trainable part of [`Hpm`]: MAE's encoder and decoder, and the loss predictor.
#[derive(Module, Debug)]
pub struct HpmNetwork<B: Backend, M> {
    /// MAE's networks.
    pub mae: MaeNetwork<B, M>,
    /// The loss predictor: one value per patch.
    pub loss_predictor: MaeDecoder<B>,
}

impl<B: Backend, M> HasBackbone<M> for HpmNetwork<B, M> {
    fn backbone(&self) -> &M {
        &self.mae.backbone
    }
}

impl<B: Backend, M: Backbone<B> + AsVit<B>> HpmNetwork<B, M> {
    fn vit(&self) -> &Vit<B> {
        vit(&self.mae.backbone)
    }

    /// The predicted difficulty of every patch of `images`, the encoder seeing them all.
    ///
    /// # Shapes
    /// - `images`: `[N, C, H, W]` → `[N, L]`
    pub fn predicted_losses(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        let [n, _, h, w] = images.dims();
        let p = self.vit().patch_size;
        let grid = (h / p, w / p);
        let every =
            PatchMask::from_visible(grid.0 * grid.1, vec![(0..grid.0 * grid.1).collect(); n])
                .expect("every patch");
        let encoded = encode_kept(self.vit(), images, &every);
        self.loss_predictor
            .forward(encoded, &every, grid)
            .reshape([n, grid.0 * grid.1])
    }
}

/// Hard patches mining on MAE. Build it with [`HpmConfig::init`].
///
/// Hard patches mining (Wang et al., "Hard Patches Mining for Masked Image Modeling", CVPR 2023,
/// <https://arxiv.org/abs/2304.05919>): MAE that also learns to predict how hard each patch is to
/// reconstruct, and hides the patches it predicts hardest — a masking curriculum that the model
/// steers itself, from random masks towards its own hard patches.
///
/// ```text
/// for each batch x:
///     l̂ = loss_predictor(encoder(every patch of x))       (no gradient: the "teacher" role)
///     per image: of the H = L − ⌊L·(1 − r)⌋ hidden patches, h = ⌊H·s(p)⌋ are the h patches of
///       highest l̂, the other H − h are drawn at random among the rest
///     MAE on x with these masks → reconstruction error ℓ_i of every hidden patch i
///     loss = mean_i ℓ_i + λ · ranking(loss_predictor(encoder(visible patches)) at the hidden
///            patches, ℓ)
/// ```
///
/// The share `s(p)` of the hidden patches chosen by the predictor follows a schedule (the
/// paper's `(epoch + 1)/epochs · 0.5`: linear from 0 to 0.5 over the epochs here). The loss
/// predictor is a second decoder of MAE's shape ([`MaeDecoder`], one output per patch) on the
/// encoder's tokens; it learns the order of the hidden patches' reconstruction errors (the
/// paper's relative objective, its better one): for every ordered pair `(i, j)` of hidden
/// patches of an image,
///
/// ```text
/// ranking = (1 / (N·H·(H − 1))) Σ_images Σ_{i ≠ j} [ℓ_j > ℓ_i]·softplus(−(l̂_j − l̂_i))
///                                                 + [ℓ_j < ℓ_i]·softplus(l̂_j − l̂_i)
/// ```
///
/// (`−log σ` and `−log(1 − σ)` of the difference, written stably; the authors add 1e-6 inside
/// the logarithms and divide by the pairs whose errors differ — the same pairs but for exact
/// ties). The errors are detached: the ranking term trains the predictor and, through the
/// tokens it reads, the encoder; the reconstruction term trains the encoder and MAE's decoder.
///
/// The masks are drawn on the host from the predictions and `(seed, step, image)`: on
/// data-parallel replicas each replica draws its own images' masks with their indices in the
/// global batch, as one device draws them. The math and what was chosen where the paper and
/// its code differ are in `docs/methods.md#hard-patches-mining`.
#[derive(Debug, Clone)]
pub struct Hpm<B: Backend, M: Backbone<B>> {
    online: HpmNetwork<B, M>,
    ratio: MaskRatio,
    config: HpmConfig,
    step_masks: StepMasks<B>,
}

/// The masks of `predicted.len() / patches` images: each hides `hidden` patches, the
/// `⌊hidden·share⌋` of highest predicted loss and the rest at random among the others, drawn
/// from `(step_seed, first + i)` for image `i` (its index in the global batch; `step_seed` the
/// step's, [`StepMasks::step_seed`]).
pub(crate) fn hard_patch_masks(
    predicted: &[f64],
    patches: usize,
    hidden: usize,
    share: f64,
    (step_seed, first): (u64, usize),
) -> PatchMask {
    let hard = ((hidden as f64) * share).floor() as usize;
    let visible = predicted
        .chunks(patches)
        .enumerate()
        .map(|(i, losses)| {
            let mut order: Vec<usize> = (0..patches).collect();
            // Highest predicted loss first; ties by index.
            order.sort_by(|&a, &b| losses[b].total_cmp(&losses[a]).then(a.cmp(&b)));
            let mut rest = order[hard..].to_vec();
            let mut rng =
                rand::rngs::StdRng::seed_from_u64(mix_seed(step_seed, (first + i) as u64));
            rest.sort_unstable();
            rest.shuffle(&mut rng);
            let mut kept = rest[hidden - hard..].to_vec();
            kept.sort_unstable();
            kept
        })
        .collect();
    PatchMask::from_visible(patches, visible).expect("the same count per image")
}

/// The paper's relative objective: over every ordered pair of hidden patches of an image,
/// `softplus(−(l̂_j − l̂_i))` where `ℓ_j > ℓ_i`, `softplus(l̂_j − l̂_i)` where `ℓ_j < ℓ_i`,
/// summed and divided by the ordered pairs `N·H·(H − 1)`. No gradient into `errors`.
///
/// # Shapes
/// - `predicted`, `errors`: `[N, H]` (the hidden patches of each image) → `[1]`
pub(crate) fn ranking_loss<B: Backend>(
    predicted: Tensor<B, 2>,
    errors: Tensor<B, 2>,
) -> Tensor<B, 1> {
    let [n, h] = predicted.dims();
    if h < 2 {
        return predicted.sum().mul_scalar(0.0);
    }
    let errors = errors.detach();
    // [N, H, H]: entry (i, j) compares patch j with patch i.
    let difference = predicted.clone().reshape([n, 1, h]) - predicted.reshape([n, h, 1]);
    let higher = errors
        .clone()
        .reshape([n, 1, h])
        .greater(errors.clone().reshape([n, h, 1]))
        .float();
    let lower = errors
        .clone()
        .reshape([n, 1, h])
        .lower(errors.reshape([n, h, 1]))
        .float();
    (higher * softplus(difference.clone().neg(), 1.0) + lower * softplus(difference, 1.0))
        .sum()
        .mul_scalar(1.0 / (n * h * (h - 1)) as f64)
}

impl<B: Backend, M: Backbone<B> + AsVit<B>> Hpm<B, M> {
    /// The share of patches hidden at `progress` (MAE's ratio, or its schedule's).
    pub fn mask_ratio(&self, progress: Progress) -> f64 {
        self.ratio.at(progress)
    }

    /// The share of the hidden patches chosen by the predictor at `progress`.
    pub fn hard_share(&self, progress: Progress) -> f64 {
        self.config.hard_share.value(progress)
    }

    /// The step's masks for `images` (this replica's): the predictions of the current
    /// networks, read on the host.
    pub fn masks(&self, images: Tensor<B, 4>, progress: Progress) -> PatchMask {
        let n = images.dims()[0];
        let predicted = self.online.predicted_losses(images.detach()).detach();
        let patches = predicted.dims()[1];
        let values: Vec<f64> = predicted
            .into_data()
            .convert::<f64>()
            .to_vec()
            .expect("float predictions");
        let ratio = self.mask_ratio(progress);
        let hidden = patches - PatchMask::visible_count(patches, ratio);
        let (_, first) = self.step_masks.global_rows(n);
        hard_patch_masks(
            &values,
            patches,
            hidden,
            self.hard_share(progress),
            (self.step_masks.step_seed(progress), first),
        )
    }
}

/// The columns of the hidden patches of every image, `[N, H]`.
fn hidden_columns<B: Backend>(x: Tensor<B, 2>, mask: &PatchMask) -> Tensor<B, 2> {
    let (n, l) = (mask.images(), mask.patches());
    let index: Vec<i64> = (0..n)
        .flat_map(|i| {
            (0..l)
                .filter(move |&p| mask.is_hidden(i, p))
                .map(|p| p as i64)
        })
        .collect();
    let h = index.len() / n.max(1);
    let index = Tensor::<B, 2, Int>::from_data(TensorData::new(index, [n, h]), &x.device());
    x.gather(1, index)
}

impl<B: AutodiffBackend, M: TrainableBackbone<B> + AsVit<B>> SslMethod<B> for Hpm<B, M> {
    type Online = HpmNetwork<B, M>;
    type Backbone = M;
    // Nothing besides the trainable networks (the masks come from them, the seed and the step).
    stateless!();
    online_in!(online);

    /// On the first global view, as MAE (the second is not used).
    fn forward_views(&mut self, views: Views<B>, progress: Progress) -> MethodOutput<B> {
        let (images, grid) = first_view(views, self.online.vit());
        let mask = self.masks(images.clone(), progress);
        let (encoded, errors) =
            self.online
                .mae
                .reconstruct(images, &mask, self.config.mae.normalize_targets);
        let reconstruction = hidden_mean(errors.clone(), &mask);
        let [n, l] = errors.dims();
        let predicted = self
            .online
            .loss_predictor
            .forward(encoded, &mask, grid)
            .reshape([n, l]);
        let ranking = ranking_loss(
            hidden_columns(predicted, &mask),
            hidden_columns(errors, &mask),
        );
        let loss = reconstruction.clone() + ranking.clone().mul_scalar(self.config.loss_weight);
        MethodOutput::new(loss)
            .with_stat("reconstruction", reconstruction)
            .with_stat("ranking", ranking)
            .with_value("mask_ratio", self.mask_ratio(progress))
            .with_value("hard_share", self.hard_share(progress))
    }

    replica_in!(
        /// Each replica's images draw their masks with their global indices; every image hides as
        /// many patches, so the replicas' mean loss is the one-device loss.
        step_masks
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::curriculum::mask_schedule;
    use crate::method::testing::{host, progress, tiny_vit, Ad};
    use burn::backend::NdArray;

    fn hpm(config: HpmConfig) -> Hpm<Ad, Vit<Ad>> {
        let device = Default::default();
        crate::method::init_method::<Ad, _, ConfigError>(&device, 5, |d| {
            config
                .with_mae(
                    MaeConfig::new()
                        .with_decoder_dim(8)
                        .with_decoder_heads(2)
                        .with_decoder_depth(1),
                )
                .init(|d| tiny_vit(8, d), d)
        })
        .unwrap()
    }

    fn images(n: usize, phase: f64) -> Tensor<Ad, 4> {
        crate::method::testing::square_images(n, 8, phase)
    }

    fn hidden(mask: &PatchMask, image: usize) -> Vec<usize> {
        (0..mask.patches())
            .filter(|&p| mask.is_hidden(image, p))
            .collect()
    }

    /// Of 4 hidden patches out of 8, share 0.5 hides the 2 of highest predicted loss and 2
    /// others at random; share 1 exactly the 4 hardest; an image's masks depend on its index
    /// in the global batch only (a replica holding image 1 draws what one device draws).
    #[test]
    fn the_masks_hide_the_hardest_predicted_patches_and_draw_the_rest() {
        let predicted: Vec<f64> = [0.1, 0.9, 0.3, 0.8, 0.2, 0.0, 0.5, 0.4]
            .iter()
            .chain(&[0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.95])
            .copied()
            .collect();
        // The step seeds of seed 3, as the method draws them.
        let seed = |step| {
            StepMasks::<Ad>::new(0x4850_4d5f_4d41_534b, 3).step_seed(progress(step, 20, 0, 1))
        };
        let masks = hard_patch_masks(&predicted, 8, 4, 0.5, (seed(7), 0));
        for (image, hardest) in [(0, [1, 3]), (1, [0, 7])] {
            let hidden = hidden(&masks, image);
            assert_eq!(hidden.len(), 4);
            assert!(hardest.iter().all(|p| hidden.contains(p)), "{hidden:?}");
        }
        let all_hard = hard_patch_masks(&predicted, 8, 4, 1.0, (seed(7), 0));
        assert_eq!(hidden(&all_hard, 0), vec![1, 3, 6, 7]);
        assert_eq!(hidden(&all_hard, 1), vec![0, 1, 2, 7]);
        let replica = hard_patch_masks(&predicted[8..], 8, 4, 0.5, (seed(7), 1));
        assert_eq!(hidden(&replica, 0), hidden(&masks, 1));
        let other_step = (0..20)
            .map(|s| hidden(&hard_patch_masks(&predicted, 8, 4, 0.0, (seed(s), 0)), 0))
            .collect::<std::collections::HashSet<_>>();
        assert!(other_step.len() > 5, "random masks vary with the step");
    }

    /// The ranking objective against its pairs written out, and its gradient against central
    /// finite differences.
    #[test]
    fn the_ranking_loss_is_the_pairwise_objective() {
        let p0 = vec![0.3, -0.2, 0.5, 0.1, 0.4, -0.6];
        let errors = vec![1.0, 3.0, 2.0, 0.5, 0.2, 0.9];
        let tensor = |v: Vec<f64>| -> Tensor<Ad, 2> {
            Tensor::from_data(TensorData::new(v, [2, 3]), &Default::default())
        };
        let softplus = |x: f64| (1.0 + x.exp()).ln();
        let by_hand = |p: &[f64]| -> f64 {
            let mut total = 0.0;
            for image in 0..2 {
                for i in 0..3 {
                    for j in 0..3 {
                        let (li, lj) = (errors[image * 3 + i], errors[image * 3 + j]);
                        let d = p[image * 3 + j] - p[image * 3 + i];
                        if lj > li {
                            total += softplus(-d);
                        } else if lj < li {
                            total += softplus(d);
                        }
                    }
                }
            }
            total / 12.0
        };
        let p = tensor(p0.clone()).require_grad();
        let loss = ranking_loss(p.clone(), tensor(errors.clone()));
        let value: f64 = loss.clone().into_scalar();
        assert!((value - by_hand(&p0)).abs() < 1e-12);
        let grad = host(p.grad(&loss.backward()).unwrap());
        for k in 0..6 {
            let (mut up, mut down) = (p0.clone(), p0.clone());
            up[k] += 1e-6;
            down[k] -= 1e-6;
            let numeric = (by_hand(&up) - by_hand(&down)) / 2e-6;
            assert!(
                (numeric - grad[k]).abs() < 1e-8,
                "{k}: {numeric} vs {}",
                grad[k]
            );
        }
    }

    /// The step's loss is MAE's reconstruction on the step's masks plus the weighted ranking
    /// of the predictor's values at the hidden patches, recomputed here; the masks hide the
    /// predictor's hardest patches at the scheduled share, and the predictor is trained.
    #[test]
    fn the_step_is_reconstruction_plus_the_weighted_ranking() {
        let mut m = hpm(HpmConfig::new().with_loss_weight(0.5));
        let x = images(3, 0.2);
        let at = progress(40, 100, 5, 10);
        assert_eq!(m.hard_share(at), 0.25);
        let mask = m.masks(x.clone(), at);
        // 16 patches at 0.75: 12 hidden, ⌊12 · 0.25⌋ = 3 of them the hardest predicted.
        let predicted = host(m.online().predicted_losses(x.clone()));
        for image in 0..3 {
            let row = &predicted[image * 16..(image + 1) * 16];
            let mut order: Vec<usize> = (0..16).collect();
            order.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
            assert!(order[..3].iter().all(|&p| mask.is_hidden(image, p)));
            assert_eq!(hidden(&mask, image).len(), 12);
        }
        let (encoded, errors) = m.online().mae.reconstruct(x.clone(), &mask, true);
        let reconstruction: f64 = hidden_mean(errors.clone(), &mask).into_scalar();
        let ranked = m
            .online()
            .loss_predictor
            .forward(encoded, &mask, (4, 4))
            .reshape([3, 16]);
        let ranking: f64 =
            ranking_loss(hidden_columns(ranked, &mask), hidden_columns(errors, &mask))
                .into_scalar();
        let out = m.forward_views(Views::pair(x.clone(), x), at);
        let grads = out.loss.backward();
        let total: f64 = out.loss.into_scalar();
        assert!((total - (reconstruction + 0.5 * ranking)).abs() < 1e-12);
        let token = m
            .online()
            .loss_predictor
            .mask_token
            .val()
            .grad(&grads)
            .unwrap();
        assert!(
            host(token).iter().any(|g| g.abs() > 1e-12),
            "the predictor is trained"
        );
    }

    #[test]
    fn impossible_settings_are_named() {
        let device = Default::default();
        let vit = || tiny_vit::<NdArray<f64>>(8, &device);
        let e = HpmConfig::new()
            .with_predictor_depth(0)
            .init(|_| vit(), &device)
            .unwrap_err();
        assert_eq!(e.field, "predictor_depth");
        let e = HpmConfig::new()
            .with_loss_weight(-1.0)
            .init(|_| vit(), &device)
            .unwrap_err();
        assert_eq!(e.field, "loss_weight");
        let e = HpmConfig::new()
            .with_hard_share(mask_schedule::easy_to_hard(0.0, 1.5))
            .init(|_| vit(), &device)
            .unwrap_err();
        assert_eq!(e.field, "hard_share");
    }
}
