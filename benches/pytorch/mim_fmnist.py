"""MAE, MAE with hard patches mining, SimMIM, I-JEPA, iBOT, DINOv2, MSN and PMSN with lightly + PyTorch on Fashion-MNIST,
and MoCo v3 on the same ViT-Tiny: the replica of the Rust recipes, for the side-by-side kNN and images/s of the method table
(benches/README.md, benches/mim.sh).

    recipe mae    --dataset fashion-mnist --data-dir /usr/share/datasets/fashion-mnist --epochs 1
    recipe simmim --dataset fashion-mnist --data-dir /usr/share/datasets/fashion-mnist --epochs 1
    recipe ijepa  --dataset fashion-mnist --data-dir /usr/share/datasets/fashion-mnist --epochs 1
    recipe ibot   --dataset fashion-mnist --data-dir /usr/share/datasets/fashion-mnist --epochs 1
    recipe dinov2 --dataset fashion-mnist --data-dir /usr/share/datasets/fashion-mnist --epochs 1
    recipe msn    --dataset fashion-mnist --data-dir /usr/share/datasets/fashion-mnist --epochs 1
    recipe pmsn   --dataset fashion-mnist --data-dir /usr/share/datasets/fashion-mnist --epochs 1

Usage:

    python3 benches/pytorch/mim_fmnist.py --recipe mae|mae_hpm|simmim|ijepa|ibot|dinov2|msn|pmsn|moco_v3
        [--epochs 1]
        [--threads 1] [--workers 2] [--max-steps N] [--knn-limit N]

It prints a `RESULT side=pytorch ...` line like benches/pytorch/moco_v2_fmnist.py, whose data
reader, kNN monitor and learning-rate plan it imports (the 60,000 training images, kNN k = 20,
T = 0.07 and k = 200, T = 0.1 against the 10,000 test images, on the class token of the online
ViT: the student / the context encoder / the anchor network, never the EMA copy).

What it mirrors (paths in this repository; "l." = line numbers as of this writing):
- Backbone: `--backbone vit-tiny` on 28-pixel images (recipes/src/recipes/common/backbone.rs,
  models/src/vit.rs): timm's VisionTransformer, patch 4 (a 7 x 7 grid), width 192, 12 blocks of
  3 heads, MLP ratio 4, qkv bias, LayerNorm eps 1e-6, class token; features = the class token
  after the final norm. The four recipes added after mae / simmim wrap it in lightly's
  MaskedVisionTransformerTIMM with `weight_initialization="skip"`,
  `pos_embed_initialization="skip"`: timm's own initialisation and a learned positional
  embedding, as ours (models/src/vit.rs `VitConfig::init`, l. 115-156: N(0, 0.02) weights,
  class token and positional embedding, all trained); ibot, dinov2 and msn build the ViT with
  `dynamic_img_size=True` so the 12-pixel local crops (a 3 x 3 grid) get the positional
  embedding resampled bicubic without antialiasing (`antialias=False`), as ours
  (`Vit::pos_embed_for`).
- Data, loader, schedule (every recipe): 60,000 // 128 = 468 steps an epoch (drop_last),
  batch 128 (each recipe's `Defaults::new(.., 128, ..)`), lr by the recipe's rule at B = 128
  (`Defaults::lr_rule`), a linear warm-up of `min(warm-up epochs, epochs)` epochs
  (recipes/src/recipes/common/prepare.rs caps it) then a cosine to 0 (`lr_at`, per step), AdamW
  with burn's defaults beta (0.9, 0.999), eps 1e-5 unless the recipe says otherwise, decay on
  every trained parameter.
- Augmentation of the added recipes: written with torchvision v2 ops after ours, per image, and
  put together with lightly's MultiViewTransform for the multi-crop recipes. Every view:
  ToDtype / 255, RandomResizedCrop (ratio (3/4, 4/3), bilinear, no antialiasing: ours,
  src/augment/crop.rs), ..., Normalize(0.286, 0.353). On 28-pixel images prepare.rs `pipeline`
  (l. 105-130, the floor at l. 113-118) raises the two global views' crop floor to 0.5 (not the
  local crops').

- MAE (recipes/src/recipes/mae.rs, src/method/mae.rs): lightly's MaskedVisionTransformerTIMM and
  MAEDecoderTIMM (2 blocks, 128 wide, 4 heads), 75 % of the patches hidden per image
  (`utils.random_token_mask`), MSE on the hidden patches against targets normalised per patch
  (mean, unbiased var + 1e-6); AdamW beta (0.9, 0.95), weight decay 0.05, eps 1e-5 (burn's
  default), lr 1.5e-4 x 128 / 256, 1 warm-up epoch capped at the epochs, then a cosine to 0.
- SimMIM (recipes/src/recipes/simmim.rs, src/method/simmim.rs): lightly's
  MaskedVisionTransformerTIMM with its mask token (`mask=`), a linear head 192 -> 16; masks of
  2 x 2-patch units on the 7 x 7 grid (the last row and column of units one patch wide),
  ceil(16 x 0.6) = 10 units hidden per image (src/method/masking.rs `UnitMask`), L1 over the
  hidden pixels; AdamW beta (0.9, 0.999), weight decay 0.05, eps 1e-5, lr 8e-4 x 128 / 512,
  2 warm-up epochs capped at the epochs, then a cosine to 0.
- MAE / SimMIM augmentation: one view, RandomResizedCrop(28, scale (0.5, 1) for MAE (the
  recipe's (0.2, 1) floored at 0.5 on 28-pixel images: prepare.rs `pipeline` l. 113-118, as a
  recorded run's config.json says; the 2026-11-26 speed measurement used (0.2, 1), which
  changes no step's cost), (0.67, 1) for SimMIM, ratio (3/4, 4/3)), flip 0.5, normalisation
  (0.286, 0.353).
  Both wrap the ViT as the other four do (`masked_vit`: timm's initialisation and a learned
  positional embedding, as ours; lightly's default would be xavier weights and a fixed 2-D
  sine-cosine embedding — the replicas used that default until 2026-11-27, which changes no
  step's cost); SimMIM's mask token is drawn from N(0, 0.02) as ours (lightly: zeros). MAE's
  decoder keeps its fixed sine-cosine table on both sides.

- I-JEPA (`--recipe ijepa`):
  - recipes/src/recipes/ijepa.rs: one view, RandomResizedCrop(28, scale (0.3, 1) -> (0.5, 1)
    by the crop floor), nothing else: no flip, no colour (`preset`, l. 32-45); lr
    1e-3 x 128 / 2048 = 6.25e-5 (`lr`, l. 48-50); 2 warm-up epochs (l. 76); AdamW weight decay
    0.04, beta (0.9, 0.999) (l. 80); predictor 2 blocks of 96, 4 heads (`config`, l. 53-58).
  - src/method/ijepa.rs (`IjepaConfig` defaults, l. 56-95): 4 target blocks of scale (0.15, 0.2),
    aspect (0.75, 1.5); one context block of scale (0.85, 1), square; min_keep 4; target
    encoder = EMA of the encoder, momentum 0.996 rising to 1 along a cosine of step / total
    steps (src/method/momentum.rs, src/method/ema.rs `cosine_momentum` l. 67-70), after each
    optimiser step (l. 514-516).
  - Masks (`block_size` l. 267-280, `place` l. 282-288, `IjepaConfig::masks` l. 293-337), here
    `ijepa_masks`: per step one target size and one context size from one uniform draw each
    (keep = floor(49 s), h = round(sqrt(keep a)), w = round(sqrt(keep / a)), clamped to
    [1, 6]); per image 4 target blocks placed anywhere (top in 0..=7-h), then the context block,
    keeping its patches outside every target block; after each failed try (fewer than 4 kept)
    one target block fewer constrains it; every list cut to the batch's shortest, row-major.
  - Encoder on the context (`encode_context` l. 379-383, src/method/masking.rs `encode_kept`
    l. 383-398): the class token carried along with the kept patches, dropped after the final
    norm: lightly's MaskedVisionTransformerTIMM.encode(idx_keep = [0, context + 1]).
  - Predictor (l. 151-164, 185-237): lightly's IJEPAPredictorTIMM(num_patches 49, depth 2,
    mlp_dim 192, predictor_embed_dim 96, heads 4, qkv bias, MLP ratio 4, LayerNorm eps 1e-6):
    192 -> 96, fixed 2-D sine-cosine positions (the same table as ours, checked to 1.2e-7), a
    zero-initialised mask token at each target patch, blocks, norm, 96 -> 192; block-major
    output.
  - Targets (`targets` l. 391-410): the EMA encoder's patch tokens after the final norm,
    F.layer_norm over the features (eps 1e-5, no affine), gathered at each block
    (`utils.apply_masks`); loss smooth L1, beta 1, mean (l. 417-443).
  - Where lightly differs, and what is followed here: lightly's IJEPAMaskCollator (the authors'
    MaskCollator) draws block tops from 0..H-h exclusive (a block never touches the last row or
    column; on 7 x 7 the 6 x 6 context block always sits at the top-left corner), accepts a
    block only with more than min_keep patches (ours: at least), and relaxes the context's
    constraint after 20 failed tries (ours: after each); its defaults (context 0.2-0.8, 2
    targets of 0.2-0.8, aspect 0.3-3) are not the paper's. The replica draws ours
    (`ijepa_masks`). lightly's example momentum rises linearly (0.996 -> 1); ours along a cosine
    (followed). lightly's IJEPATransform crops (0.2, 1) bicubic and flips; ours (0.5, 1), no flip
    (followed). The predictor's initialisation: lightly's timm blocks and nn.Linear defaults,
    a zero mask token; ours the authors' (`IjepaPredictor::new`: every linear weight and the
    mask token N(0, 0.02^2), biases 0, block l's attn.proj and mlp.fc2 divided by sqrt(2 l);
    before 2026-11-28 xavier-uniform embed / proj with xavier-uniform biases) (not matched).
    The ViT here has a class token (ours too); the authors' has none.

- iBOT (`--recipe ibot`) and DINOv2 (`--recipe dinov2`):
  - recipes/src/recipes/ibot.rs: views `multi_crop::dino_views` (l. 40); 2 warm-up epochs
    (EPOCHS / 10, l. 37, 42); AdamW weight decay 0.04, beta (0.9, 0.999) (l. 82); head output
    4096 (l. 58); DINO loss teacher temperature linspace(0.04, 0.07, 6)[epoch] for epochs 0-5
    then 0.07 (EPOCHS * 3 / 10 = 6 epochs whatever --epochs is, l. 58-63; src/loss/dino.rs
    `teacher_temp_at` l. 76-87): lightly's DINOLoss(warmup_teacher_temp 0.04, teacher_temp
    0.07, warmup_teacher_temp_epochs 6).teacher_temp_schedule; ibot lr 5e-4 x 128 / 256 =
    2.5e-4 (l. 46-49); dinov2 lr 4e-3 x sqrt(128 / 1024) = 1.41e-3 (l. 51-54), KoLeo weight 0.1
    and Sinkhorn-Knopp centring (l. 72-76).
  - recipes/src/recipes/multi_crop.rs `dino_views` (l. 71-74, 55-64): BYOL's operations, 2
    global views at 28 px, scale (0.4, 1) -> (0.5, 1) by the crop floor, and LOCAL_CROPS = 6
    (l. 43) local crops at `local_side(28)` = 12 px (src/pipeline.rs l. 261-263), scale
    SMALL_LOCAL_SCALE (0.2, 0.5) (l. 46, 62). src/pipeline.rs `preset` Byol (l. 181-207) and
    `multi_crop` (l. 222-257): flip 0.5, colour jitter (0.4, 0.4, 0.2, 0.1) p 0.8 (on one
    channel only brightness and contrast act, in torchvision as in ours), grayscale 0.2 (an
    identity on one channel), Gaussian blur kernel 3 (`kernel_for`, src/augment/blur.rs
    l. 106-109: 3 for 28 and for 12) sigma (0.1, 2) with p 1.0 on view 1, 0.1 on view 2, 0.5 on
    the local crops; solarisation (x >= 0.5 -> 1 - x) p 0.2 on view 2 only.
  - src/method/ibot.rs (`IbotConfig` defaults, l. 71-124): head hidden 2048, bottleneck 256,
    shared by [CLS] and patch tokens; last layer weight-normalised with its norm fixed at 1 and
    frozen (no update, no decay) during the first epoch (`freeze_last_layer_epochs` 1, l. 91;
    `gradients` l. 705-714): lightly's DINOProjectionHead(192, 2048, 256, 4096,
    freeze_last_layer=1, norm_last_layer=True) and `cancel_last_layer_gradients(epoch)`;
    teacher = a copy of the student (backbone, mask token, head), EMA 0.996 -> 1 along a cosine
    of step / total after each step (l. 723-727); student temperature 0.1, centre momenta 0.9
    (src/loss/dino.rs, src/loss/ibot.rs defaults); patch loss weight 1 (l. 100-101).
  - Masks (`ibot_masks` l. 292-318, after DINOv2's collate with iBOT's pred_shape "rand"), here
    `ibot_masks`: of the 2N global views (view-major) floor(2N x 0.5) = N hide patches, the
    i-th of them floor(49 u) single random patches, u uniform in the i-th of N equal slices of
    [0.1, 0.5]; the others hide none; which views hide is shuffled. The student's hidden patch
    embeddings are replaced by a zero-initialised mask token before the positional embedding
    (`IbotNetwork::tokens` l. 238-254): MaskedVisionTransformerTIMM.encode(mask=...).
  - Losses: DINO on the [CLS] outputs, every (teacher global view, other student view) pair of
    the 2 + 6 views (src/loss/dino.rs `forward` l. 99-107): lightly's DINOLoss; the patch loss
    over the hidden tokens of the same view, each image (those hiding none counted in B)
    weighing the same (src/loss/ibot.rs l. 80-148): lightly's IBOTPatchLoss with the (2N, 7, 7)
    mask; centres moved by the teacher outputs inside those losses (ibot only).
  - DINOv2 adds (ibot.rs l. 622-686): KoLeo (src/loss/koleo.rs l. 55-76) on the student's [CLS]
    features (the backbone's, before the head) of each global view, summed over the two, x 0.1:
    lightly's KoLeoLoss; and instead of the centres, targets balanced by 3 Sinkhorn-Knopp
    iterations (ibot.rs `SINKHORN_ITERATIONS`, src/loss/swav.rs `sinkhorn` l. 78-104) of
    exp((t - max t) / teacher temperature) over the 2N [CLS] outputs together and over all the
    batch's hidden tokens together; the centres are then never used or moved.
  - Where lightly differs, and what is followed here: lightly 1.6's DINOLoss and IBOTPatchLoss
    only centre (center_mode "mean"); for dinov2 the Sinkhorn-Knopp targets are computed with
    lightly's `lightly.loss.msn_loss.sinkhorn` (the same balancing: the factor 1/K it divides by
    cancels in the next normalisation) and the two cross-entropies are written here in
    lightly's formulas (`dino_cross_entropy`, `ibot_cross_entropy`). lightly's iBOT / DINOv2
    examples mask BEiT-style blocks (`random_block_mask`) where ours hides single patches
    (followed: ours); their student head has a trainable norm (iBOT: norm_last_layer=False;
    DINOv2ProjectionHead: weight_g trainable, no freezing) where ours fixes it and freezes the
    last layer for an epoch (followed); they schedule the weight decay 0.04 -> 0.4, the momentum
    0.992 -> 1, the teacher temperature per step over 30 epochs, drop path 0.1 and layer scale
    (ours: constant 0.04, 0.996 -> 1, per epoch over 6 epochs, none; followed: ours). lightly's
    DINOTransform (bicubic crops, PIL blur of radius sigma, PIL solarisation, ImageNet
    normalisation, 224 / 96 px) is not used; the views are ours.

- MSN (`--recipe msn`):
  - recipes/src/recipes/msn.rs: views `multi_crop::msn_views` (l. 55); 2 warm-up epochs (EPOCHS
    / 10); AdamW weight decay 0.04, beta (0.9, 0.999) (l. 61); lr 1.5e-4 x 128 / 64 = 3e-4
    (l. 38-41); `MsnConfig::new()` (l. 44-46).
  - recipes/src/recipes/multi_crop.rs `msn_views` (l. 76-80): SimCLR's operations (src/pipeline.rs
    `preset` SimClr l. 151-162, small images): flip 0.5, colour jitter `ColorJitter::simclr(0.5)`
    = (0.4, 0.4, 0.4, 0.1) p 0.8 (src/augment/colour.rs l. 193-201), grayscale 0.2, no blur, no
    solarisation; 2 global views at 28 px, scale (0.3, 1) -> (0.5, 1) by the crop floor; 6
    focal views at 12 px, scale (0.2, 0.5) (SMALL_LOCAL_SCALE).
  - src/method/msn.rs (`MsnConfig` defaults, l. 48-77): the first global view through the EMA
    network (target, whole, no gradient), the second and the 6 focal views through the student
    (anchors) with 15 % of their patch tokens dropped before the ViT, floor(L x 0.85) kept per
    image (src/method/masking.rs `visible_count` l. 79-81: 41 of 49, 7 of 9): lightly's
    `utils.random_token_mask(size=(B, L + 1), mask_ratio=0.15)` (the same counts) and
    MaskedVisionTransformerTIMM(idx_keep=...); projector 192 -> 2048 (BN, GELU) -> 2048 (BN,
    GELU) -> 256 (src/head.rs `MlpHeadConfig::msn` l. 86-92, hidden linears without bias):
    lightly's MSNProjectionHead(192, 2048, 256); 1024 prototypes of 256, uniform in +-1/16
    (l. 119-124): nn.Linear(256, 1024, bias=False).weight (the same distribution), trained; EMA
    of backbone and projector 0.996 -> 1 along a cosine of step / total, after each step
    (l. 355-357).
  - Loss (src/loss/msn.rs, `MsnLossConfig` defaults l. 36-55): tau 0.1, target sharpening 0.25,
    3 Sinkhorn-Knopp iterations, mean-entropy regulariser weight 1: lightly's MSNLoss(0.1, 3,
    1.0) with target_sharpen_temperature 0.25 (the same formulas; ours sharpens as a softmax at
    tau x 0.25, equal to p^4 renormalised).
  - Where lightly differs, and what is followed here: lightly's MSN example passes
    `model.prototypes.data` to the loss, so its prototypes never learn; ours trains them
    (followed: the Parameter is passed). Its example updates the EMA before the forward at a
    constant 0.996; ours after the step, 0.996 -> 1 cosine (followed). Its example's
    `seq_length` leaves out the class token, so the last patch is never dropped; here the
    sequence length includes it, as ours. lightly's MSNTransform (blur p 0.5, jitter 0.8
    strength, 10 focal views at 96 px of scale (0.05, 0.3), ImageNet normalisation) is not used;
    the views are ours. Its example builds a torchvision ViT; here the timm ViT-Tiny of the other
    recipes.

- PMSN (`--recipe pmsn`): MSN as above with the power-law prior instead of the mean-entropy
  regulariser: recipes/src/recipes/msn.rs `pmsn` (l. 49-52) sets
  `MsnLossConfig::power_law_exponent` to 0.25 (src/loss/msn.rs: R = KL(q || mean p), q_k
  proportional to k^-0.25, weight 1): lightly's PMSNLoss(0.1, 3, 1.0, power_law_exponent=0.25)
  with target_sharpen_temperature 0.25.

- MoCo v3 (`--recipe moco_v3`; ours: `recipe moco_v3 --backbone vit-tiny --batch-size 128`):
  recipes/src/recipes/moco_v3.rs — on a ViT AdamW weight decay 0.1, eps 1e-8, beta (0.9, 0.999),
  lr 1.5e-4 x 128 / 256 (`run`), 2 warm-up epochs (`defaults`), BYOL's two views
  (`PipelineConfig::byol`: crop (0.08, 1) -> (0.5, 1), jitter (0.4, 0.4, 0.2, 0.1) p 0.8,
  grayscale 0.2, blur 1.0 / 0.1, solarisation 0 / 0.2); `config`: a 3-layer projector, tau 0.2,
  heads 4096 wide, 256 out (ViT-Tiny is not a CPU-sized backbone). src/method/moco_v3.rs: the
  authors' `_build_mlp` (hidden Linear without bias -> BN -> ReLU; the projector's output BN
  without affine parameters; the predictor's output Linear with a bias, where the authors' has
  none), a momentum copy of backbone and projector (0.99 -> 1 along a cosine, after each step),
  each view through the networks on its own (per-view BN), `ctr(q1, k2) + ctr(q2, k1)` with
  `ctr = 2 tau CE(q_hat k_hat^T / tau, diag)` (src/loss/moco_v3.rs). Both sides' kNN read the
  query backbone's class token.

What differs for every recipe: the random draws (here torch generators, masks from a generator
seeded by --seed in the main process; ours StdRng keyed by (seed, step)); per-image augmentation in
DataLoader worker processes (ours is batched on the backend); small initialisation details
(timm: class token N(0, 1e-6), truncated normals; ours N(0, 0.02)). Numerics are f32 on both
sides.
"""

import time

PROCESS_START = time.perf_counter()

import argparse
import copy
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch
import torch.nn.functional as F
import torchvision
import torchvision.transforms.v2 as T
from torch import nn
from torch.utils.data import DataLoader, Dataset

import lightly
from lightly.loss import DINOLoss, IBOTPatchLoss, KoLeoLoss, MSNLoss, PMSNLoss
from lightly.loss.msn_loss import sinkhorn as lightly_sinkhorn
from lightly.models import utils
from lightly.models.modules import (
    DINOProjectionHead,
    IJEPAPredictorTIMM,
    MAEDecoderTIMM,
    MaskedVisionTransformerTIMM,
)
from lightly.models.modules.heads import MSNProjectionHead
from lightly.transforms.multi_view_transform import MultiViewTransform
from lightly.utils.scheduler import cosine_schedule
from timm.models.vision_transformer import VisionTransformer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from moco_v2_fmnist import (  # noqa: E402
    MEAN, STD, knn_evaluate, load_split, lr_at, ours_view, print_knn)

BATCH = 128
PATCH = 4
WIDTH = 192  # ViT-Tiny
# recipes/src/recipes/multi_crop.rs LOCAL_CROPS, SMALL_LOCAL_SCALE
LOCAL_CROPS = 6
SMALL_LOCAL_SCALE = (0.2, 0.5)
# prepare.rs `pipeline`: the global views' crop floor on images under 32 pixels
SMALL_IMAGE_CROP_FLOOR = 0.5


@dataclass
class Progress:
    """src/base/progress.rs: the 0-based step and epoch, and the run's total steps."""

    step: int
    epoch: int
    total_steps: int


class OneView(Dataset):
    """The images through `transform`: one view, or the list of views a MultiViewTransform makes
    (collated to a list of batches)."""

    def __init__(self, images, transform):
        self.images, self.transform = images, transform

    def __len__(self):
        return self.images.shape[0]

    def __getitem__(self, i):
        return self.transform(self.images[i])


def view(side: int, scale) -> T.Compose:
    """MAE's and SimMIM's view (unchanged since they were measured)."""
    return T.Compose([
        T.ToDtype(torch.float32, scale=True),
        T.RandomResizedCrop(side, scale=scale, ratio=(3.0 / 4.0, 4.0 / 3.0),
                            interpolation=T.InterpolationMode.BILINEAR, antialias=True),
        T.RandomHorizontalFlip(p=0.5),
        T.Normalize(MEAN, STD),
    ])


def local_side(side: int) -> int:
    """src/pipeline.rs `PipelineConfig::local_side`: side x 96 / 224 rounded, at least 8."""
    return max(math.floor(side * 96.0 / 224.0 + 0.5), 8)


def global_scale(scale):
    """prepare.rs `pipeline`: crops of at least half the image on images under 32 pixels."""
    return (max(scale[0], SMALL_IMAGE_CROP_FLOOR), scale[1])


def ijepa_view(side: int) -> T.Compose:
    """recipes/src/recipes/ijepa.rs `preset`: crop (0.3, 1) (floored), nothing else."""
    return ours_view(side, global_scale((0.3, 1.0)), flip=False)


def dino_views(side: int) -> MultiViewTransform:
    """multi_crop.rs `dino_views` on 28-pixel images: BYOL's operations, 2 global views
    (0.4, 1) -> (0.5, 1), 6 local crops of 12 px (0.2, 0.5)."""
    jitter = (0.4, 0.4, 0.2, 0.1)
    scale = global_scale((0.4, 1.0))
    common = dict(jitter=jitter, grayscale=True)
    local = ours_view(local_side(side), SMALL_LOCAL_SCALE, blur_p=0.5, **common)
    return MultiViewTransform([
        ours_view(side, scale, blur_p=1.0, **common),
        ours_view(side, scale, blur_p=0.1, solarize_p=0.2, **common),
        *([local] * LOCAL_CROPS),
    ])


def msn_views(side: int) -> MultiViewTransform:
    """multi_crop.rs `msn_views` on 28-pixel images: SimCLR's small-image operations (no blur),
    2 global views (0.3, 1) -> (0.5, 1), 6 focal views of 12 px (0.2, 0.5)."""
    common = dict(jitter=(0.4, 0.4, 0.4, 0.1), grayscale=True)
    glob = ours_view(side, global_scale((0.3, 1.0)), **common)
    local = ours_view(local_side(side), SMALL_LOCAL_SCALE, **common)
    return MultiViewTransform([glob, glob, *([local] * LOCAL_CROPS)])


def vit_tiny(side: int, dynamic_img_size: bool = False) -> VisionTransformer:
    return VisionTransformer(img_size=side, patch_size=PATCH, in_chans=1, num_classes=0,
                             embed_dim=WIDTH, depth=12, num_heads=3, mlp_ratio=4.0, qkv_bias=True,
                             global_pool="token", dynamic_img_size=dynamic_img_size)


def masked_vit(vit: VisionTransformer) -> MaskedVisionTransformerTIMM:
    """lightly's masked ViT keeping timm's initialisation and a learned positional embedding
    (ours), resampled without antialiasing for other image sizes."""
    return MaskedVisionTransformerTIMM(vit=vit, weight_initialization="skip",
                                       pos_embed_initialization="skip", antialias=False)


def momentum_at(progress: Progress, base: float = 0.996) -> float:
    """src/method/ema.rs `cosine_momentum(base, step / total)`: lightly's cosine_schedule runs
    over max_steps - 1, hence total + 1."""
    return cosine_schedule(progress.step, progress.total_steps + 1, base, 1.0)


class Replica(nn.Module):
    """A recipe's network: `loss` per step, hooks after the backward pass and after the step."""

    def after_backward(self, progress: Progress) -> None:
        pass

    def after_step(self, progress: Progress) -> None:
        pass


class Mae(Replica):
    """lightly's MAE example (examples/pytorch/mae.py) with norm_pix targets."""

    def __init__(self, vit):
        super().__init__()
        self.backbone = masked_vit(vit)
        self.sequence_length = self.backbone.sequence_length
        self.decoder = MAEDecoderTIMM(num_patches=vit.patch_embed.num_patches, patch_size=PATCH,
                                      in_chans=1, embed_dim=192, decoder_embed_dim=128,
                                      decoder_depth=2, decoder_num_heads=4, mlp_ratio=4.0,
                                      proj_drop_rate=0.0, attn_drop_rate=0.0)

    def loss(self, images, progress=None):
        b = images.shape[0]
        idx_keep, idx_mask = utils.random_token_mask(
            size=(b, self.sequence_length), mask_ratio=0.75, device=images.device)
        x_encoded = self.backbone.encode(images=images, idx_keep=idx_keep)
        x_decode = self.decoder.embed(x_encoded)
        x_masked = utils.repeat_token(self.decoder.mask_token, (b, self.sequence_length))
        x_masked = utils.set_at_index(x_masked, idx_keep, x_decode.type_as(x_masked))
        x_decoded = self.decoder.decode(x_masked)
        x_pred = self.decoder.predict(utils.get_at_index(x_decoded, idx_mask))
        target = utils.get_at_index(utils.patchify(images, PATCH), idx_mask - 1)
        mean = target.mean(dim=-1, keepdim=True)
        var = target.var(dim=-1, keepdim=True)
        target = (target - mean) / (var + 1.0e-6) ** 0.5
        return nn.functional.mse_loss(x_pred, target)


class Hpm(Mae):
    """src/method/hpm.rs (recipe mae_hpm) on lightly's MAE modules: the MAE above, a loss
    predictor of MAEDecoderTIMM's shape (1 block, 128 wide, 4 heads, one output per patch: its
    `patch_size` 1) that first reads every patch's encoding without gradient to choose the hard
    patches (the top `floor(H * s)` of the predicted losses hidden, the rest of the H hidden
    drawn at random; `s` linear from 0 to 0.5 over the epochs, `hard_share`), then the visible
    encoding of the MAE pass, trained on the order of the hidden patches' errors (`ranking_loss`:
    softplus of the predicted differences of every ordered pair, over N * H * (H - 1)), weight
    1."""

    def __init__(self, vit, epochs: int = 1):
        super().__init__(vit)
        self.loss_predictor = MAEDecoderTIMM(
            num_patches=vit.patch_embed.num_patches, patch_size=1, in_chans=1, embed_dim=192,
            decoder_embed_dim=128, decoder_depth=1, decoder_num_heads=4, mlp_ratio=4.0,
            proj_drop_rate=0.0, attn_drop_rate=0.0)
        self.epochs = epochs
        self.gen = torch.Generator().manual_seed(torch.initial_seed())  # --seed

    def predict_losses(self, x_encoded, idx_keep, b):
        lp = self.loss_predictor
        x = utils.repeat_token(lp.mask_token, (b, self.sequence_length))
        x = utils.set_at_index(x, idx_keep, lp.embed(x_encoded).type_as(x))
        return lp.predict(lp.decode(x))[:, 1:, 0]  # [b, patches]

    def loss(self, images, progress):
        b, patches = images.shape[0], self.sequence_length - 1
        every = torch.arange(self.sequence_length).expand(b, -1)
        with torch.no_grad():
            predicted = self.predict_losses(
                self.backbone.encode(images=images, idx_keep=every), every, b)
        hidden = patches - math.floor(patches * (1 - 0.75))
        hard = math.floor(hidden * 0.5 * progress.epoch / self.epochs)
        order = predicted.argsort(dim=1, descending=True, stable=True)
        rest = order[:, hard:]
        shuffled = rest.gather(1, torch.rand(rest.shape, generator=self.gen).argsort(dim=1))
        idx_mask = torch.cat([order[:, :hard], shuffled[:, : hidden - hard]], 1).sort(1).values + 1
        idx_keep = torch.cat([torch.zeros(b, 1, dtype=torch.long),
                              shuffled[:, hidden - hard:].sort(1).values + 1], 1)
        x_encoded = self.backbone.encode(images=images, idx_keep=idx_keep)
        x_decode = self.decoder.embed(x_encoded)
        x_masked = utils.repeat_token(self.decoder.mask_token, (b, self.sequence_length))
        x_masked = utils.set_at_index(x_masked, idx_keep, x_decode.type_as(x_masked))
        x_pred = self.decoder.predict(utils.get_at_index(self.decoder.decode(x_masked), idx_mask))
        target = utils.get_at_index(utils.patchify(images, PATCH), idx_mask - 1)
        target = (target - target.mean(-1, keepdim=True)) / (target.var(-1, keepdim=True)
                                                            + 1.0e-6) ** 0.5
        errors = ((x_pred - target) ** 2).mean(-1)  # [b, hidden]
        p = utils.get_at_index(
            self.predict_losses(x_encoded, idx_keep, b).unsqueeze(-1), idx_mask - 1)[..., 0]
        e = errors.detach()
        diff = p.unsqueeze(1) - p.unsqueeze(2)  # [i, j] = p_j - p_i
        higher = (e.unsqueeze(1) > e.unsqueeze(2)).float()
        lower = (e.unsqueeze(1) < e.unsqueeze(2)).float()
        ranking = (higher * F.softplus(-diff) + lower * F.softplus(diff)).sum() / (
            b * hidden * (hidden - 1))
        return errors.mean() + ranking


def unit_masks(b: int, grid: int, unit: int, ratio: float, gen) -> torch.Tensor:
    """`UnitMask::random`: [b, grid * grid] booleans, True where hidden."""
    units_side = -(-grid // unit)
    units = units_side * units_side
    hide = min(max(math.ceil(units * ratio), 1), units)
    chosen = torch.rand(b, units, generator=gen).argsort(dim=1)[:, :hide]
    hidden_units = torch.zeros(b, units, dtype=torch.bool)
    hidden_units.scatter_(1, chosen, True)
    rows = torch.arange(grid) // unit
    unit_of = (rows[:, None] * units_side + rows[None, :]).flatten()
    return hidden_units[:, unit_of]


class SimMim(Replica):
    """lightly's SimMIM example (examples/pytorch/simmim.py) with SimMIM's unit masks."""

    def __init__(self, vit):
        super().__init__()
        self.backbone = masked_vit(vit)
        # src/method/simmim.rs: the mask token drawn from N(0, 0.02), where lightly's is zeros.
        nn.init.normal_(self.backbone.mask_token, std=0.02)
        self.decoder = nn.Linear(192, PATCH * PATCH * 1)
        self.grid = vit.patch_embed.grid_size[0]
        self.gen = torch.Generator().manual_seed(torch.initial_seed())  # --seed

    def loss(self, images, progress=None):
        b = images.shape[0]
        hidden = unit_masks(b, self.grid, 2, 0.6, self.gen)
        mask = torch.cat([torch.zeros(b, 1, dtype=torch.bool), hidden], dim=1)
        x_encoded = self.backbone.encode(images=images, mask=mask)
        x_out = self.decoder(x_encoded[:, 1:])
        target = utils.patchify(images, PATCH)
        error = (x_out - target).abs() * hidden.unsqueeze(-1)
        return error.sum() / (hidden.sum() * target.shape[-1])


# ---------------------------------------------------------------------------------------------
# I-JEPA (src/method/ijepa.rs)


def rust_round(x: float) -> int:
    """f64::round for x >= 0: halves away from zero (Python's round() goes to even)."""
    return math.floor(x + 0.5)


def ijepa_masks(b: int, grid: int, gen, targets: int = 4, target_scale=(0.15, 0.2),
                target_aspect=(0.75, 1.5), context_scale=(0.85, 1.0), min_keep: int = 4):
    """`IjepaConfig::masks`: the context patches [b, K_c] and the target blocks' patches, one
    [b, K_t] per block (row-major patch indices, every list cut to the batch's shortest)."""
    patches = grid * grid

    def block_size(scale, aspect):  # `block_size`: one uniform draw for scale and aspect
        u = torch.rand(1, generator=gen).item()
        keep = math.floor(patches * (scale[0] + u * (scale[1] - scale[0])))
        a = aspect[0] + u * (aspect[1] - aspect[0])
        top = max(grid, 2) - 1
        h = min(max(rust_round(math.sqrt(keep * a)), 1), top)
        w = min(max(rust_round(math.sqrt(keep / a)), 1), top)
        return h, w

    def place(size):  # `place`: top in 0..=grid - h, left in 0..=grid - w
        h, w = size
        top = int(torch.randint(0, grid - h + 1, (1,), generator=gen))
        left = int(torch.randint(0, grid - w + 1, (1,), generator=gen))
        return [r * grid + c for r in range(top, top + h) for c in range(left, left + w)]

    target_size = block_size(target_scale, target_aspect)
    context_size = block_size(context_scale, (1.0, 1.0))
    target_lists = [[] for _ in range(targets)]
    contexts = []
    for _ in range(b):
        blocks = [place(target_size) for _ in range(targets)]
        tries = 0
        while True:
            block = place(context_size)
            binding = max(len(blocks) - tries, 0)
            taken = set().union(*blocks[:binding]) if binding else set()
            kept = [p for p in block if p not in taken]
            if len(kept) >= max(min_keep, 1) or binding == 0:
                break
            tries += 1
        contexts.append(kept)
        for lst, blk in zip(target_lists, blocks):
            lst.append(blk)

    def cut(lists):
        shortest = max(min(len(x) for x in lists), 1)
        return torch.tensor([x[:shortest] for x in lists], dtype=torch.long)

    return cut(contexts), [cut(lst) for lst in target_lists]


class IJepa(Replica):
    """lightly's I-JEPA pieces (examples/pytorch/ijepa.py, IJEPAPredictorTIMM) on the timm
    ViT-Tiny, with ours masks and momentum."""

    def __init__(self, vit):
        super().__init__()
        self.encoder = masked_vit(vit)
        self.target_encoder = copy.deepcopy(self.encoder)
        utils.deactivate_requires_grad(self.target_encoder)
        self.predictor = IJEPAPredictorTIMM(
            num_patches=vit.patch_embed.num_patches, depth=2, mlp_dim=WIDTH,
            predictor_embed_dim=96, num_heads=4, qkv_bias=True, mlp_ratio=4.0)
        self.grid = vit.patch_embed.grid_size[0]
        self.gen = torch.Generator().manual_seed(torch.initial_seed())  # --seed

    def loss(self, images, progress):
        b = images.shape[0]
        context, targets = ijepa_masks(b, self.grid, self.gen)
        with torch.no_grad():
            h = self.target_encoder.encode(images)[:, 1:]
            h = F.layer_norm(h, (h.size(-1),))
            h = utils.apply_masks(h, targets)  # [4 b, K_t, D], block-major
        keep = torch.cat([torch.zeros(b, 1, dtype=torch.long), context + 1], dim=1)
        z = self.encoder.encode(images, idx_keep=keep)[:, 1:]  # the class token dropped
        z = self.predictor(z, [context], targets)
        return F.smooth_l1_loss(z, h)

    def after_step(self, progress):
        utils.update_momentum(self.encoder, self.target_encoder, m=momentum_at(progress))


# ---------------------------------------------------------------------------------------------
# iBOT and DINOv2 (src/method/ibot.rs)


def ibot_masks(views: int, patches: int, gen, probability: float = 0.5,
               ratio=(0.1, 0.5)) -> torch.Tensor:
    """`ibot_masks`: [views, patches] booleans, True where hidden (views view-major)."""
    masked = math.floor(views * probability)
    hidden = torch.zeros(views, patches, dtype=torch.bool)
    for i in range(masked):
        width = (ratio[1] - ratio[0]) / masked
        r = ratio[0] + width * i + width * torch.rand(1, generator=gen).item()
        count = min(math.floor(patches * r), patches)
        hidden[i, torch.randperm(patches, generator=gen)[:count]] = True
    return hidden[torch.randperm(views, generator=gen)]


@torch.no_grad()
def sinkhorn_targets(teacher_out: torch.Tensor, teacher_temp: float) -> torch.Tensor:
    """DINOv2's centring (src/loss/swav.rs `sinkhorn`): 3 Sinkhorn-Knopp iterations on
    exp((t - max t) / T) over all the rows, rows summing to 1 (lightly's balancing loop)."""
    q = torch.exp((teacher_out - teacher_out.max()) / teacher_temp)
    return lightly_sinkhorn(q, iterations=3)


def dino_cross_entropy(targets, student_out, student_temp: float = 0.1) -> torch.Tensor:
    """lightly's DINOLoss with given target probabilities (src/loss/dino.rs `forward_targets`)."""
    t = torch.stack(targets)
    s = F.log_softmax(torch.stack(student_out) / student_temp, dim=-1)
    loss = -torch.einsum("tbd,sbd->ts", t, s)
    loss.fill_diagonal_(0)
    n_terms = loss.numel() - loss.diagonal().numel()
    return loss.sum() / (n_terms * t.shape[1])


def ibot_cross_entropy(targets, student_out, hidden, student_temp: float = 0.1) -> torch.Tensor:
    """lightly's IBOTPatchLoss with given target probabilities (src/loss/ibot.rs
    `forward_targets`): each image's hidden tokens weigh 1 / their count, then / images."""
    ce = -torch.sum(targets * F.log_softmax(student_out / student_temp, dim=-1), dim=-1)
    weight = (1.0 / hidden.sum(dim=1, keepdim=True).clamp(min=1.0)).expand_as(hidden)[hidden]
    return (ce * weight).sum() / hidden.shape[0]


def dino_head() -> DINOProjectionHead:
    """`IbotConfig` head: 192 -> 2048 -> 2048 -> 256, GELU, L2-normalised bottleneck, last
    layer 256 -> 4096 weight-normalised with the norm fixed at 1, frozen for 1 epoch."""
    return DINOProjectionHead(input_dim=WIDTH, hidden_dim=2048, bottleneck_dim=256,
                              output_dim=4096, batch_norm=False, freeze_last_layer=1,
                              norm_last_layer=True)


class Ibot(Replica):
    """lightly's iBOT / DINOv2 examples (examples/pytorch/ibot.py, dinov2.py) with ours masks,
    head, schedules and (dinov2) Sinkhorn-Knopp centring."""

    TEACHER_TEMP_WARMUP_EPOCHS = 6  # recipes/src/recipes/ibot.rs: EPOCHS * 3 / 10

    def __init__(self, vit, koleo_weight: float = 0.0, sinkhorn_knopp: bool = False):
        super().__init__()
        self.student = masked_vit(vit)
        self.teacher = copy.deepcopy(self.student)
        self.student_head = dino_head()
        # weight_norm modules cannot be deep-copied: a second head loaded with the student's.
        self.teacher_head = dino_head()
        self.teacher_head.load_state_dict(self.student_head.state_dict())
        utils.deactivate_requires_grad(self.teacher)
        utils.deactivate_requires_grad(self.teacher_head)
        self.dino_loss = DINOLoss(output_dim=4096, warmup_teacher_temp=0.04, teacher_temp=0.07,
                                  warmup_teacher_temp_epochs=self.TEACHER_TEMP_WARMUP_EPOCHS,
                                  student_temp=0.1, center_momentum=0.9)
        self.patch_loss = IBOTPatchLoss(output_dim=4096, teacher_temp=0.07, student_temp=0.1,
                                        center_momentum=0.9)
        self.koleo = KoLeoLoss()
        self.koleo_weight = koleo_weight
        self.sinkhorn_knopp = sinkhorn_knopp
        self.grid = vit.patch_embed.grid_size[0]
        self.gen = torch.Generator().manual_seed(torch.initial_seed())  # --seed

    def teacher_temp(self, epoch: int) -> float:
        """src/loss/dino.rs `teacher_temp_at`: lightly's linspace(0.04, 0.07, 6)[epoch]."""
        if epoch < self.TEACHER_TEMP_WARMUP_EPOCHS:
            return float(self.dino_loss.teacher_temp_schedule[epoch])
        return self.dino_loss.teacher_temp

    def loss(self, views, progress):
        g1, g2, *local_views = views
        n = g1.shape[0]
        global_views = torch.cat([g1, g2])
        hidden = ibot_masks(2 * n, self.grid * self.grid, self.gen)
        mask = torch.cat([torch.zeros(2 * n, 1, dtype=torch.bool), hidden], dim=1)
        temp = self.teacher_temp(progress.epoch)
        with torch.no_grad():
            teacher_tokens = self.teacher.encode(global_views)
            teacher_cls = self.teacher_head(teacher_tokens[:, 0])
            teacher_patch = self.teacher_head(teacher_tokens[mask])
        student_tokens = self.student.encode(global_views, mask=mask)
        student_features = student_tokens[:, 0]
        student_cls = self.student_head(student_features)
        student_patch = self.student_head(student_tokens[mask])
        student_local = self.student_head(self.student.encode(torch.cat(local_views))[:, 0])
        student_out = [*student_cls.chunk(2), *student_local.chunk(len(local_views))]
        if self.sinkhorn_knopp:
            cls_targets = sinkhorn_targets(teacher_cls, temp)
            cls_loss = dino_cross_entropy(list(cls_targets.chunk(2)), student_out)
            patch_loss = ibot_cross_entropy(sinkhorn_targets(teacher_patch, temp),
                                            student_patch, hidden)
        else:
            cls_loss = self.dino_loss(teacher_out=list(teacher_cls.chunk(2)),
                                      student_out=student_out, teacher_temp=temp)
            patch_loss = self.patch_loss(teacher_patch, student_patch,
                                         mask=hidden.view(2 * n, self.grid, self.grid),
                                         teacher_temp=temp)
        loss = cls_loss + 1.0 * patch_loss
        if self.koleo_weight > 0.0:
            koleo = sum(self.koleo(x) for x in student_features.chunk(2))
            loss = loss + self.koleo_weight * koleo
        return loss

    def after_backward(self, progress):
        self.student_head.cancel_last_layer_gradients(progress.epoch)

    def after_step(self, progress):
        m = momentum_at(progress)
        utils.update_momentum(self.student, self.teacher, m=m)
        utils.update_momentum(self.student_head, self.teacher_head, m=m)


# ---------------------------------------------------------------------------------------------
# MSN (src/method/msn.rs)


class Msn(Replica):
    """lightly's MSN example (examples/pytorch/msn.py) on the timm ViT-Tiny, prototypes trained,
    ours momentum; with `power_law` PMSN's loss (lightly's PMSNLoss) instead of MSNLoss."""

    MASK_RATIO = 0.15

    def __init__(self, vit, power_law=False):
        super().__init__()
        self.backbone = masked_vit(vit)
        self.projection_head = MSNProjectionHead(input_dim=WIDTH, hidden_dim=2048, output_dim=256)
        self.target_backbone = copy.deepcopy(self.backbone)
        self.target_projection_head = copy.deepcopy(self.projection_head)
        utils.deactivate_requires_grad(self.target_backbone)
        utils.deactivate_requires_grad(self.target_projection_head)
        self.prototypes = nn.Linear(256, 1024, bias=False).weight
        if power_law:
            self.criterion = PMSNLoss(temperature=0.1, sinkhorn_iterations=3,
                                      regularization_weight=1.0, power_law_exponent=0.25)
        else:
            self.criterion = MSNLoss(temperature=0.1, sinkhorn_iterations=3,
                                     regularization_weight=1.0)

    def forward_masked(self, images):
        b, _, h, w = images.shape
        sequence_length = (h // PATCH) * (w // PATCH) + 1  # the class token included
        idx_keep, _ = utils.random_token_mask(size=(b, sequence_length),
                                              mask_ratio=self.MASK_RATIO, device=images.device)
        return self.projection_head(self.backbone(images=images, idx_keep=idx_keep))

    def loss(self, views, progress):
        target_view, anchor_view, *focal_views = views
        with torch.no_grad():
            targets = self.target_projection_head(self.target_backbone(images=target_view))
        anchors = torch.cat([self.forward_masked(anchor_view),
                             self.forward_masked(torch.cat(focal_views))])
        return self.criterion(anchors, targets, self.prototypes, target_sharpen_temperature=0.25)

    def after_step(self, progress):
        m = momentum_at(progress)
        utils.update_momentum(self.backbone, self.target_backbone, m=m)
        utils.update_momentum(self.projection_head, self.target_projection_head, m=m)


# ---------------------------------------------------------------------------------------------
# MoCo v3 on ViT-Tiny (src/method/moco_v3.rs, recipes/src/recipes/moco_v3.rs)


def moco_v3_views(side: int) -> MultiViewTransform:
    """moco_v3.rs `defaults`: BYOL's two views (`PipelineConfig::byol`), crop (0.08, 1) ->
    (0.5, 1) on 28-pixel images, blur 1.0 / 0.1, solarisation 0 / 0.2."""
    common = dict(jitter=(0.4, 0.4, 0.2, 0.1), grayscale=True)
    scale = global_scale((0.08, 1.0))
    return MultiViewTransform([
        ours_view(side, scale, blur_p=1.0, **common),
        ours_view(side, scale, blur_p=0.1, solarize_p=0.2, **common),
    ])


def moco_v3_mlp(layers: int, d_in: int, hidden: int, d_out: int, output_bn: bool) -> nn.Sequential:
    """src/head.rs `MlpHead` as MoCo v3 builds it (the authors' `_build_mlp`): every hidden
    layer Linear without bias -> BatchNorm -> ReLU; the output Linear followed by a BatchNorm
    without affine parameters (the projector; no bias) or alone (the predictor; with a bias,
    as ours)."""
    mods = []
    for layer in range(layers - 1):
        mods += [nn.Linear(d_in if layer == 0 else hidden, hidden, bias=False),
                 nn.BatchNorm1d(hidden), nn.ReLU(inplace=True)]
    mods.append(nn.Linear(hidden, d_out, bias=not output_bn))
    if output_bn:
        mods.append(nn.BatchNorm1d(d_out, affine=False))
    return nn.Sequential(*mods)


def moco_v3_ctr(q: torch.Tensor, k: torch.Tensor, temperature: float = 0.2) -> torch.Tensor:
    """src/loss/moco_v3.rs: 2 tau CE(q_hat k_hat^T / tau, diagonal)."""
    logits = F.normalize(q, dim=1) @ F.normalize(k, dim=1).t() / temperature
    return 2.0 * temperature * F.cross_entropy(logits, torch.arange(q.shape[0]))


class MocoV3(Replica):
    """`recipe moco_v3 --backbone vit-tiny`: the class token through a 3-layer projector
    (192 -> 4096 -> 4096 -> 256) and a 2-layer predictor (256 -> 4096 -> 256), the keys from a
    momentum copy of backbone and projector (0.99 -> 1 along a cosine, after each step), each
    view through the networks on its own (per-view batch norm), ctr(q1, k2) + ctr(q2, k1) at
    tau 0.2."""

    def __init__(self, vit):
        super().__init__()
        self.backbone = vit
        self.projector = moco_v3_mlp(3, WIDTH, 4096, 256, output_bn=True)
        self.predictor = moco_v3_mlp(2, 256, 4096, 256, output_bn=False)
        self.momentum_backbone = copy.deepcopy(vit)
        self.momentum_projector = copy.deepcopy(self.projector)
        utils.deactivate_requires_grad(self.momentum_backbone)
        utils.deactivate_requires_grad(self.momentum_projector)

    def loss(self, views, progress=None):
        x1, x2 = views
        q1 = self.predictor(self.projector(self.backbone(x1)))
        q2 = self.predictor(self.projector(self.backbone(x2)))
        with torch.no_grad():
            k1 = self.momentum_projector(self.momentum_backbone(x1))
            k2 = self.momentum_projector(self.momentum_backbone(x2))
        return moco_v3_ctr(q1, k2) + moco_v3_ctr(q2, k1)

    def after_step(self, progress: Progress) -> None:
        m = momentum_at(progress, base=0.99)
        utils.update_momentum(self.backbone, self.momentum_backbone, m)
        utils.update_momentum(self.projector, self.momentum_projector, m)


RECIPES = {
    "mae": dict(model=Mae, views=lambda side: view(side, (0.5, 1.0)), lr=1.5e-4 * BATCH / 256,
                betas=(0.9, 0.95), weight_decay=0.05, warmup_epochs=1),
    "simmim": dict(model=SimMim, views=lambda side: view(side, (0.67, 1.0)),
                   lr=8e-4 * BATCH / 512, betas=(0.9, 0.999), weight_decay=0.05,
                   warmup_epochs=2),
    "ijepa": dict(model=IJepa, views=ijepa_view, lr=1e-3 * BATCH / 2048, betas=(0.9, 0.999),
                  weight_decay=0.04, warmup_epochs=2),
    "ibot": dict(model=Ibot, views=dino_views, lr=5e-4 * BATCH / 256, betas=(0.9, 0.999),
                 weight_decay=0.04, warmup_epochs=2, dynamic_img_size=True),
    "dinov2": dict(model=lambda vit: Ibot(vit, koleo_weight=0.1, sinkhorn_knopp=True),
                   views=dino_views, lr=4e-3 * math.sqrt(BATCH / 1024), betas=(0.9, 0.999),
                   weight_decay=0.04, warmup_epochs=2, dynamic_img_size=True),
    "msn": dict(model=Msn, views=msn_views, lr=1.5e-4 * BATCH / 64, betas=(0.9, 0.999),
                weight_decay=0.04, warmup_epochs=2, dynamic_img_size=True),
}
# MAE with hard patches mining: MAE's settings (recipes/src/recipes/mae.rs `hard_patches`).
RECIPES["mae_hpm"] = dict(RECIPES["mae"], model=Hpm)
# PMSN: MSN's settings, the power-law prior (one definition, so the two cannot drift apart).
RECIPES["pmsn"] = dict(RECIPES["msn"], model=lambda vit: Msn(vit, power_law=True))
# MoCo v3 on ViT-Tiny (moco_v3.rs `run`: AdamW weight decay 0.1, eps 1e-8, lr 1.5e-4 x B / 256,
# 2 warm-up epochs), at this file's batch of 128 (`recipe moco_v3 --batch-size 128`).
RECIPES["moco_v3"] = dict(model=MocoV3, views=moco_v3_views, lr=1.5e-4 * BATCH / 256,
                          betas=(0.9, 0.999), weight_decay=0.1, warmup_epochs=2, eps=1e-8)


class ClassToken(nn.Module):
    """The backbone as the kNN monitor reads it: the class token after the final norm."""

    def __init__(self, vit):
        super().__init__()
        self.vit = vit

    def forward(self, x):
        return self.vit(x)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recipe", choices=sorted(RECIPES), required=True)
    ap.add_argument("--data", type=Path, default=Path("/usr/share/datasets/fashion-mnist"))
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (main process)")
    ap.add_argument("--workers", type=int, default=2, help="DataLoader worker processes")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-steps", type=int, default=None, help="stop early (a smoke test)")
    ap.add_argument("--knn-limit", type=int, default=None, help="kNN on fewer images (a smoke test)")
    args = ap.parse_args()
    cfg = RECIPES[args.recipe]
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, lightly "
          f"{lightly.__version__}; {args.threads} threads, {args.workers} workers", flush=True)

    train_x, train_y = load_split(args.data, "train")
    test_x, test_y = load_split(args.data, "t10k")
    side = train_x.shape[2]
    loader = DataLoader(
        OneView(train_x, cfg["views"](side)), batch_size=BATCH, shuffle=True,
        drop_last=True, num_workers=args.workers, persistent_workers=args.workers > 0,
        generator=torch.Generator().manual_seed(args.seed),
    )
    batches = len(loader)
    total_steps = args.epochs * batches
    warmup_steps = min(cfg["warmup_epochs"], args.epochs) * batches
    vit = vit_tiny(side, dynamic_img_size=cfg.get("dynamic_img_size", False))
    model = cfg["model"](vit).train()
    if isinstance(model, Hpm):
        model.epochs = args.epochs  # the hard share's schedule runs over the run's epochs
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad],
                                  lr=cfg["lr"], betas=cfg["betas"], eps=cfg.get("eps", 1e-5),
                                  weight_decay=cfg["weight_decay"])
    print(f"{args.recipe}: {args.epochs} epochs x {batches} steps, batch {BATCH}, lr "
          f"{cfg['lr']:g}, ViT-Tiny patch {PATCH}", flush=True)

    step = 0
    train_start = time.perf_counter()
    train_end = train_start
    done = False
    for epoch in range(args.epochs):
        epoch_start = time.perf_counter()
        loss_sum, images = 0.0, 0
        for x in loader:
            lr = lr_at(step, total_steps, cfg["lr"], warmup_steps)
            for group in optimizer.param_groups:
                group["lr"] = lr
            progress = Progress(step=step, epoch=epoch, total_steps=total_steps)
            loss = model.loss(x, progress)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            model.after_backward(progress)
            optimizer.step()
            model.after_step(progress)
            value = loss.item()
            if not math.isfinite(value):
                raise SystemExit(f"non-finite loss {value} at step {step}")
            loss_sum += value
            images += (x[0] if isinstance(x, (list, tuple)) else x).shape[0]
            step += 1
            train_end = time.perf_counter()
            if args.max_steps is not None and step >= args.max_steps:
                done = True
                break
        seconds = time.perf_counter() - epoch_start
        print(f"epoch {epoch + 1}/{args.epochs}: mean loss {loss_sum / max(images // BATCH, 1):.4f}, "
              f"{images / seconds:.1f} images/s, {seconds:.1f} s", flush=True)
        if done:
            break
    wall = train_end - train_start
    trained = step * BATCH
    n, m = (args.knn_limit or train_x.shape[0]), (args.knn_limit or test_x.shape[0])
    knn_start = time.perf_counter()
    results = knn_evaluate(ClassToken(vit), train_x[:n], train_y[:n], test_x[:m], test_y[:m])
    knn_s = time.perf_counter() - knn_start
    print_knn(results)
    (_, _, top1, top5), (_, _, top1_200, _) = results[0], results[1]
    print(f"RESULT side=pytorch recipe={args.recipe} images_per_s={trained / wall:.2f} "
          f"wall_s={wall:.2f} knn_top1={top1:.2f} knn_top5={top5:.2f} knn200_top1={top1_200:.2f} "
          f"knn_s={knn_s:.2f} steps={step} epochs={args.epochs} threads={args.threads} "
          f"workers={args.workers} total_s={time.perf_counter() - PROCESS_START:.2f}", flush=True)


if __name__ == "__main__":
    main()
