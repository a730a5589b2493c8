"""Seven of the method table's newer rows with lightly + PyTorch on Fashion-MNIST: the replicas
of the Rust recipes `frossl`, `wmse`, `macl`, `directclr`, `mmcr`, `emp_ssl` and `nnsiam`, for
the side-by-side kNN and images/s of one epoch (issue 69 item 3; benches/table_fmnist.sh runs both
sides, benches/README.md "The rest of the method table against its references").

    recipe NAME --dataset fashion-mnist --data-dir /usr/share/datasets/fashion-mnist --epochs 1

Usage:

    python3 benches/pytorch/table_fmnist.py --recipe NAME [--epochs 1] [--threads 2]
        [--workers 2] [--data /usr/share/datasets/fashion-mnist] [--seed 0]
        [--max-steps N] [--knn-subset N]

`--max-steps N` stops after N steps (a smoke test; the learning-rate and momentum plans stay the
full run's) and `--knn-subset N` scores the kNN on the first N training and N test images only.
It prints one line per epoch (the first steps' losses too, as the Rust progress shows them), the
kNN accuracies and a last machine-readable line

    RESULT side=pytorch recipe=... images_per_s=... wall_s=... knn_top1=... knn_top5=...
        knn200_top1=... knn_s=... steps=... epochs=... threads=... workers=... total_s=...

measured as benches/pytorch/moco_v2_fmnist.py's (whose data reader, kNN monitor, learning-rate
plan, cosine momentum, view pipeline and small ResNet it imports): images_per_s = steps x batch
(images, not views or patches: the Rust epochs.csv's `images_per_s` counts the batch's images
too) over the training wall time, kNN excluded; knn_top1 at k = 20, T = 0.07, knn200_top1 at
k = 200, T = 0.1, the 60,000 training images as the bank and the 10,000 test images as queries.

Why these: of the recently added methods (SupCon, NNBYOL, NNSiam, VIbCReg, W-MSE, ReSSL, MMCR,
MACL, FroSSL, DirectCLR, EMP-SSL, VICRegL, DetCon) the first six are the ones whose loss lightly
1.6 ships as a class (`WMSELoss`, `FroSSLLoss`, `MACLLoss`, `DirectCLRLoss`, `MMCRLoss`, and
EMP-SSL's `tcr_loss` / `invariance_loss`), whose recipe runs on the CPU default backbone as it
is, and that need no dense machinery (VICRegL's and DetCon's local features / region masks would
have to be rebuilt here around a feature map; they are left for a later replica). MMCR's loss
diverged on both sides before its outputs were normalised (below), so NNSiam is a seventh, with lightly's SimSiam heads and
negative cosine and solo-learn's nearest-neighbour search, for six one-epoch results.

Shared by all six (paths in this repository)
--------------------------------------------

- Backbone: the CPU default of the Rust recipes, `small-2x`
  (recipes/src/recipes/common/backbone.rs `BackboneChoice::default_for_backend` -> `Small2x`:
  `ResNetConfig::new(Basic, [1, 1, 1, 1]).with_base_width(16)`, `default_stem` -> `Stride2`,
  `default_pooled_grid` -> 2 on 28-pixel images; models/src/resnet.rs: stem = 3x3 stride-2 conv
  pad 1 without bias + BN + ReLU, no max pool; stages 16, 32, 64, 128 channels at strides
  1, 2, 2, 2 (maps 14, 14, 7, 4, 2); the last 2x2 map average-pooled to a 2x2 grid and flattened
  channel-major (models/src/layers.rs `grid_avg_pool`): 512 features). Here `Small2xResNet`:
  moco_v2_fmnist.py's `SmallResNet` (torchvision's ResNet and BasicBlock) at width 16 with the
  stem's conv replaced by the 3x3/2 one (re-initialised with torchvision's kaiming_normal_
  fan-out, as the rest), `maxpool` an identity and `avgpool` AdaptiveAvgPool2d(2); torchvision's
  `torch.flatten(x, 1)` gives the same channel-major order. (The Rust side's `banded_stem` is a
  faster kernel for the same convolution.)
- Heads: src/head.rs `MlpHeadConfig` (hidden Linear layers without bias, each followed by
  BatchNorm1d (eps 1e-5, momentum 0.1) and ReLU; the output Linear with a bias unless
  `output_bias` is false) = lightly's ProjectionHead layout (`use_bias = not batch_norm`).
  Initial weights are drawn from the same distributions (torch's Linear default = burn's
  KaimingUniform with gain 1/sqrt 3), not the same values.
- Two-view methods (`ProjectedPair` in src/method/projected_pair.rs, SimCLR in
  src/method/simclr.rs): each view through the network as its own batch of 128
  (`forward_grouped`: BatchNorm statistics per view), as two calls here.
- Schedule: src/optim/schedule.rs `WarmupCosine::lr_at` (moco_v2_fmnist.py `lr_at`): linear
  warm-up over the recipe's warm-up epochs capped at the epochs
  (recipes/src/recipes/common/prepare.rs), then a cosine to 0, set before every step.
- Data and augmentation: the IDX files (src/data/idx.rs), drop_last batches shuffled every
  epoch; each view through moco_v2_fmnist.py's `ours_view` (src/pipeline.rs `ViewConfig` order:
  RandomResizedCrop bilinear without antialiasing, flip 0.5, colour jitter p 0.8, grayscale 0.2,
  blur 3x3 sigma (0.1, 2), solarisation at 0.5, normalisation (0.286, 0.353)), per image in the
  DataLoader workers. On 28-pixel images the Rust recipes raise the two global views' crop floor
  to 0.5 (prepare.rs `pipeline`: `scale.0.max(0.5).min(scale.1)`); the local crops (MMCR's extra
  views, EMP-SSL's extra patches) keep the preset's scale.
- kNN: moco_v2_fmnist.py `knn_evaluate` on the backbone's 512 features (BN running statistics),
  after the last epoch.

Per recipe: what it mirrors, and what differs
---------------------------------------------

frossl (recipes/src/recipes/redundancy.rs `frossl`, `frossl_config`, `lars`, `defaults`;
src/method/frossl.rs; src/loss/frossl.rs):
  batch 128, lr 0.15 (0.3 x 128 / 256), 2 warm-up epochs capped at 1 (a one-epoch run warms up
  all the way: lr = 0.15 (s + 1) / 468); LARS momentum 0.9, eta 0.02, weight decay 1e-4,
  eps 1e-8, 1-D parameters (biases, BN) excluded from the trust ratio and the decay (src/optim/
  lars.rs; lightly's LARS with those in a weight-decay-0 group, as redundancy_fmnist.py);
  projector 512 -> 2048 (BN, ReLU) -> 2048 (`MlpHeadConfig::new(512, 2048, 2048)
  .with_num_layers(2)`: lightly's VICRegProjectionHead(512, 2048, 2048, num_layers=2));
  loss lightly's FroSSLLoss(invariance_weight=1.0)([z1, z2]) (equal to ours in float64,
  tests/pytorch/ssl_losses.py); views `PipelineConfig::byol(28, 1)`: crop (0.08 -> 0.5, 1),
  flip, jitter (0.4, 0.4, 0.2, 0.1) p 0.8, grayscale 0.2, blur p 1.0 / 0.1, solarisation
  p 0 / 0.2. Differs: nothing but the random draws.

wmse (redundancy.rs `wmse`, `wmse_config`, `wmse_preset`; src/method/wmse.rs;
src/loss/wmse.rs):
  batch 128, Adam lr 2e-3 (not scaled), 2 warm-up epochs capped at 1 (lr = 2e-3 (s + 1) / 468),
  weight decay 1e-6 added to every gradient (burn's `WeightDecayConfig`: L2, as torch's Adam
  `weight_decay`), betas (0.9, 0.999) and burn's default eps 1e-5 (burn-optim 0.21 `AdamConfig`;
  its `eps * sqrt(1 - beta2^t)` added to sqrt(v) is torch's eps added to sqrt(v_hat)): here
  torch.optim.Adam(lr, betas=(0.9, 0.999), eps=1e-5, weight_decay=1e-6); projector
  512 -> 1024 (BN, ReLU) -> 64 with an output bias (`MlpHeadConfig::new(512, 1024, 64)`:
  `mlp_head` below, lightly's ProjectionHead with those two blocks); loss lightly's WMSELoss(embedding_dim=64, w_size=128) on [z1; z2]
  (one sub-batch of 128 per view per step, w_iter 1, eps 0, Cholesky whitening, 2 - 2 cos;
  equal to ours in float64 with the same orders, tests/pytorch/wmse.py); views `wmse_preset`:
  SimCLR's with crop (0.2 -> 0.5, 1), jitter (0.8, 0.8, 0.8, 0.2) p 0.8, grayscale 0.2, no
  blur, no solarisation, flip. Differs: the sub-batch order (ours from (seed, step), lightly's
  torch.randperm; at one sub-batch per view the order changes nothing but rounding).

macl (recipes/src/recipes/simclr.rs `macl`, `defaults`, `train`; src/method/simclr.rs;
src/loss/macl.rs):
  batch 128, lr 0.3, no warm-up, cosine to 0; SGD momentum 0.9, dampening 0, weight decay 5e-4
  on every parameter (src/optim/sgd.rs `SgdConfig::new()`: torch.optim.SGD); projector
  512 -> 2048 (BN, ReLU) -> 128 with an output bias and no output BN (`MlpHeadConfig::simclr`:
  `mlp_head` below; lightly's SimCLRProjectionHead(512, 2048, 128) would add a BatchNorm1d after
  the output layer, which ours does not have, so it is not used); loss lightly's MACLLoss(temperature=0.1, alpha=0.5, A_0=0.0)(z1, z2) (equal to
  ours in float64, tests/pytorch/ssl_losses.py); views `PipelineConfig::simclr(28, 1)` on a small
  image: crop (0.08 -> 0.5, 1), flip, jitter (0.4, 0.4, 0.4, 0.1) p 0.8 (strength 0.5),
  grayscale 0.2, no blur. Differs: nothing but the random draws. (Ours logs the step's
  temperature, `macl_temperature`; not here.)

directclr (recipes/src/recipes/directclr.rs; src/method/directclr.rs `Unprojected`;
src/loss/directclr.rs):
  the simclr recipe's settings: batch 128, lr 0.3, no warm-up, SGD momentum 0.9, weight decay
  5e-4, `PipelineConfig::simclr` views as macl; no projector: the backbone's 512 features, of
  which the loss reads the first d0 = 64 (the first 16 channels' 2x2 grids); loss lightly's
  DirectCLRLoss(loss_dim=64, temperature=0.5)(r1, r2) (NT-Xent; equal to ours in float64,
  tests/pytorch/ssl_losses.py). Differs: nothing but the random draws.

mmcr (recipes/src/recipes/mmcr.rs `views`, `defaults`, `run`; src/method/mmcr.rs;
src/loss/mmcr.rs; src/method/momentum.rs, ema.rs):
  batch 128, lr 0.06, no warm-up, cosine to 0; plain SGD (momentum 0, weight decay 0); online
  projector 512 -> 512 (BN, ReLU) -> 512 (BN, ReLU) -> 128 without any bias
  (`with_num_layers(3).with_output_bias(false)`: lightly's MMCRProjectionHead(512, 512, 128,
  num_layers=2, use_bias=False)); a momentum copy of backbone and projector (deepcopy, no
  gradient, in training mode: batch statistics), updated after every optimiser step on the
  trainable parameters with m = 1 - (1 - 0.996)(1 + cos(pi s / total)) / 2 (lightly's
  update_momentum with moco_v2_fmnist.py's `cosine_momentum_at`); k = 8 views of every image,
  each through the online and the momentum network as its own batch of 128 (ours: one call per
  view); loss lightly's MMCRLoss(lmda=5e-3) on the [B, 8, 128] stacks of outputs projected onto
  the unit sphere (the paper's, as ours since `MmcrConfig::normalize`; lightly's example leaves
  them as they are; the loss equal to ours in float64, tests/pytorch/ssl_losses.py); views: BYOL's first view without
  blur (crop (0.08, 1), flip, jitter (0.4, 0.4, 0.2, 0.1) p 0.8, grayscale 0.2, solarisation
  p 0) for all eight, with the small-image floor on the first two (crop (0.5, 1)) and not on the
  six local crops (0.08, 1), all at 28 px. Differs: ours takes the SVDs on the host in f64
  (nalgebra), here torch.linalg.svd in f32 with autograd's backward; ours updates the momentum
  copy after every step along the cosine (lightly's example: before each step, once an epoch).
  Before the outputs were normalised (lightly's example), both sides' losses fell without bound,
  the centroids' nuclear norm growing with the outputs' scale: -172 at the first step, about
  -4e11 at the 40th here, -1.1e26 at step 99, and step 100 stopped on `linalg.svd` of
  non-finite values.

emp_ssl (recipes/src/recipes/emp_ssl.rs `patches`, `defaults`, `run`; src/method/emp_ssl.rs;
src/loss/emp_ssl.rs):
  batch 100 (600 steps an epoch), lr 0.3, no warm-up, cosine to 0 over the run (the recipe's
  own 2 epochs; --epochs 1 here and there); LARS with Nesterov momentum 0.9, eta 0.005, weight
  decay 1e-4, eps 1e-8, 1-D parameters excluded (lightly's LARS(nesterov=True)); projector
  512 -> 4096 (BN, ReLU) -> 4096 (BN, ReLU) -> 1024 with an output bias
  (`MlpHeadConfig::new(512, 4096, 1024).with_num_layers(3)`: `mlp_head`, lightly's
  ProjectionHead with those three blocks), its output L2-normalised (`EmpSsl::embed`); 20 patches of every image:
  the two global ones through the network as one batch of 200, the 18 others as one batch of
  1800 (src/method/ssl_method.rs `Views::through`: BN statistics per group, as here); every
  patch a square crop of a quarter of the image (scale (0.25, 0.25), ratio 1: 14x14 px) resized
  to 28, flip, jitter (0.4, 0.4, 0.4, 0.2) p 0.8, grayscale 0.2, blur p 0.1, solarisation p 0.1
  (the small-image floor leaves the quarter crops as they are). Loss: the paper's
  -R + 200 * invariance, written with lightly's own `tcr_loss(z, eps=0.2)` and
  `invariance_loss(z)` (lightly.loss.emp_ssl_loss) as tests/pytorch/emp_ssl.py does: lightly's
  EMPSSLLoss class returns +R + 200 * invariance, the sign the paper and the authors' code
  (tsb0601/EMP-SSL `loss.py`) do not have, and minimising it collapses the embeddings, so the
  class itself is not used. `tcr_loss` is called one view at a time and the views' values
  averaged (what `tcr_loss` does over the stack), because the batched log-determinant's backward
  fails on this CPU build of torch 2.15 (oneMKL "SLASWP" errors, then "Pivots given to lu_solve
  must all be greater or equal to 1", for [20, 1024, 1024]; one view at a time passes). Ours
  takes each view's log-determinant in the B x B form (100 x 100: the same value as lightly's
  1024 x 1024 one, by Sylvester's identity). Differs: nothing else but the random draws.

nnsiam (recipes/src/recipes/nnsiam.rs `defaults`, `config`, `run`; recipes/src/recipes/
simsiam.rs `defaults`, `preset`; recipes/src/recipes/nnclr.rs `SUPPORT_SET`; src/method/
nnsiam.rs; src/method/simsiam.rs `init`, `forward_to`; src/method/queue.rs `neighbours_of_pair`,
`nearest`, `commit`; src/head.rs `simsiam_projector`):
  batch 128, lr 0.06, no warm-up, cosine to 0; SGD momentum 0.9, weight decay 5e-4 on every
  parameter; projector 512 -> 2048 (BN, ReLU) -> 2048 (BN, ReLU) -> 2048 with an affine-free
  output BatchNorm and no output bias (lightly's SimSiamProjectionHead(512, 2048, 2048), the
  same layout); predictor 2048 -> 512 (BN, ReLU) -> 2048 with an output bias (lightly's
  SimSiamPredictionHead(2048, 512, 2048)); each view through the network as its own batch; a
  support set of 16,384 unit keys (normalised standard Gaussians at the start: lightly's
  MemoryBankModule((16384, 2048)) as the buffer); each view's L2-normalised, detached
  projection replaced by its nearest key by cosine (solo-learn's `find_nn`, as
  tests/pytorch/method_zoo_losses.py: argmax of z @ queue^T) in the set as it was before the
  step; loss = D(p1, NN(z2)) / 2 + D(p2, NN(z1)) / 2 with lightly's NegativeCosineSimilarity
  (solo-learn's `simsiam_loss_func`; equal to ours in float64 in that test); after the
  optimiser step the first view's 128 normalised projections replace the oldest keys (FIFO,
  128 steps a turn); views `simsiam::preset`: MoCo v2's without blur below 96 px, crop
  (0.2 -> 0.5, 1), flip, jitter (0.4, 0.4, 0.4, 0.1) p 0.8, grayscale 0.2. Differs: nothing but
  the random draws (the initial keys among them).

Where the two sides knowingly differ (all of them): the random streams (weights, batch order,
augmentation draws: the same distributions, different values; losses and accuracies agree only
statistically); ours augments whole batches with tensor ops on the training thread, here each
image is augmented by torchvision v2 in DataLoader worker processes; burn's Flex backend on
rayon threads against torch's `--threads` intra-op threads (OMP_WAIT_POLICY=PASSIVE); ours
writes steps.csv / epochs.csv, a progress bar and a checkpoint (outside the per-epoch images/s).
"""

import time

PROCESS_START = time.perf_counter()

import argparse
import copy
import math
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch
import torch.nn.functional as F
import torchvision
import torchvision.transforms.v2 as T
from torch import nn
from torch.utils.data import DataLoader, Dataset

import lightly
from lightly.loss import (
    DirectCLRLoss,
    FroSSLLoss,
    MACLLoss,
    MMCRLoss,
    NegativeCosineSimilarity,
    WMSELoss,
)
from lightly.loss.emp_ssl_loss import invariance_loss, tcr_loss
from lightly.models.modules.heads import (
    MMCRProjectionHead,
    ProjectionHead,
    SimSiamPredictionHead,
    SimSiamProjectionHead,
    VICRegProjectionHead,
)
from lightly.models.modules.memory_bank import MemoryBankModule
from lightly.models.utils import deactivate_requires_grad, update_momentum
from lightly.utils.lars import LARS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from moco_v2_fmnist import (  # noqa: E402  (the shared pieces of the MoCo replica)
    MEAN,
    STD,
    SmallResNet,
    cosine_momentum_at,
    knn_evaluate,
    load_split,
    lr_at,
    ours_view,
    print_knn,
)


# ---------------------------------------------------------------------------------------------
# The CPU default backbone, `small-2x`.


class Small2xResNet(SmallResNet):
    """`--backbone small-2x` (the Rust CPU default): one BasicBlock per stage at widths 16, 32,
    64, 128, the 3x3 stride-2 stem without max pool (`Stem::Stride2`), the last map pooled to a
    2x2 grid and flattened channel-major: 512 features on 28-pixel images."""

    def __init__(self, in_channels: int = 1, width: int = 16, grid: int = 2):
        super().__init__(in_channels=in_channels, width=width)
        self.conv1 = nn.Conv2d(in_channels, width, kernel_size=3, stride=2, padding=1, bias=False)
        nn.init.kaiming_normal_(self.conv1.weight, mode="fan_out", nonlinearity="relu")
        self.maxpool = nn.Identity()
        self.avgpool = nn.AdaptiveAvgPool2d(grid)
        self.feature_dim = 8 * width * grid * grid


# ---------------------------------------------------------------------------------------------
# Views (src/pipeline.rs presets as the recipes change them, on 28-pixel images).

SIDE = 28
FLOOR = (0.5, 1.0)  # prepare.rs `pipeline`: the global views' crop floor below 32 px


def byol_views():
    """`PipelineConfig::byol(28, 1)` with the floor: (view 1, view 2)."""
    jitter = (0.4, 0.4, 0.2, 0.1)
    return [ours_view(SIDE, FLOOR, jitter=jitter, grayscale=True, blur_p=1.0, solarize_p=0.0),
            ours_view(SIDE, FLOOR, jitter=jitter, grayscale=True, blur_p=0.1, solarize_p=0.2)]


def simclr_views():
    """`PipelineConfig::simclr(28, 1)` (small: jitter strength 0.5, no blur) with the floor."""
    v = ours_view(SIDE, FLOOR, jitter=(0.4, 0.4, 0.4, 0.1), grayscale=True)
    return [v, v]


def wmse_views():
    """redundancy.rs `wmse_preset`: crop (0.2, 1) -> floor (0.5, 1), jitter (0.8, 0.8, 0.8, 0.2)."""
    v = ours_view(SIDE, FLOOR, jitter=(0.8, 0.8, 0.8, 0.2), grayscale=True)
    return [v, v]


def simsiam_views():
    """simsiam.rs `preset`: `PipelineConfig::moco_v2(28, 1)` without its blur (below 96 px), the
    floor: crop (0.2 -> 0.5, 1), flip, jitter (0.4, 0.4, 0.4, 0.1) p 0.8, grayscale 0.2."""
    v = ours_view(SIDE, FLOOR, jitter=(0.4, 0.4, 0.4, 0.1), grayscale=True)
    return [v, v]


def mmcr_views():
    """mmcr.rs `views`: BYOL's first view without blur, 2 global (floored) + 6 local (0.08, 1)."""
    jitter = (0.4, 0.4, 0.2, 0.1)
    glob = ours_view(SIDE, FLOOR, jitter=jitter, grayscale=True)
    local = ours_view(SIDE, (0.08, 1.0), jitter=jitter, grayscale=True)
    return [glob, glob] + [local] * 6


def emp_ssl_views():
    """emp_ssl.rs `patches`: 20 square quarter-size crops at full size, all alike."""
    patch = T.Compose([
        T.ToDtype(torch.float32, scale=True),
        T.RandomResizedCrop(SIDE, scale=(0.25, 0.25), ratio=(1.0, 1.0),
                            interpolation=T.InterpolationMode.BILINEAR, antialias=False),
        T.RandomHorizontalFlip(p=0.5),
        T.RandomApply([T.ColorJitter(0.4, 0.4, 0.4, 0.2)], p=0.8),
        T.RandomGrayscale(p=0.2),
        T.RandomApply([T.GaussianBlur(3, sigma=(0.1, 2.0))], p=0.1),
        T.RandomSolarize(threshold=0.5, p=0.1),
        T.Normalize(MEAN, STD),
    ])
    return [patch] * 20


class ManyViews(Dataset):
    """Every image through each of `transforms` (one view per transform)."""

    def __init__(self, images: torch.Tensor, transforms):
        self.images, self.transforms = images, transforms

    def __len__(self):
        return self.images.shape[0]

    def __getitem__(self, i):
        img = self.images[i]
        return tuple(t(img) for t in self.transforms)


# ---------------------------------------------------------------------------------------------
# Models and steps.


class Projected(nn.Module):
    """Backbone + projector (src/method/encoder.rs `Projected`); `head` None: the backbone alone
    (DirectCLR's `Unprojected`)."""

    def __init__(self, head):
        super().__init__()
        self.backbone = Small2xResNet()
        d = self.backbone.feature_dim
        self.projection_head = head(d) if head is not None else nn.Identity()

    def forward(self, x):
        return self.projection_head(self.backbone(x))


class Predicted(nn.Module):
    """Backbone + projector + predictor (src/method/encoder.rs `Predicted`): (z, p)."""

    def __init__(self, projector, predictor):
        super().__init__()
        self.backbone = Small2xResNet()
        self.projection_head = projector(self.backbone.feature_dim)
        self.prediction_head = predictor

    def forward(self, x):
        z = self.projection_head(self.backbone(x))
        return z, self.prediction_head(z)


def mlp_head(d: int, hidden: int, out: int, num_layers: int = 2) -> ProjectionHead:
    """src/head.rs `MlpHeadConfig::new(d, hidden, out).with_num_layers(num_layers)`: hidden
    Linear layers without bias + BatchNorm1d + ReLU, the output Linear with a bias and no
    BatchNorm, in lightly's ProjectionHead. (lightly's SimCLRProjectionHead is not this: it puts
    a BatchNorm1d after its output layer, which ours does not have.)"""
    dims = [d] + [hidden] * (num_layers - 1)
    blocks = [(i, o, nn.BatchNorm1d(o), nn.ReLU(), False) for i, o in zip(dims, dims[1:])]
    return ProjectionHead(blocks + [(dims[-1], out, None, None, True)])


def lars(params_model, lr, weight_decay, eta, nesterov=False):
    """src/optim/lars.rs with `exclude_bias_and_norm`: 1-D parameters in a weight-decay-0 group,
    which lightly's LARS leaves out of the trust ratio."""
    decayed = [p for p in params_model if p.ndim > 1]
    excluded = [p for p in params_model if p.ndim <= 1]
    return LARS([dict(params=decayed, weight_decay=weight_decay),
                 dict(params=excluded, weight_decay=0.0)],
                lr=lr, momentum=0.9, trust_coefficient=eta, eps=1e-8, nesterov=nesterov)


def sgd(params_model, lr, momentum=0.9, weight_decay=5e-4):
    """src/optim/sgd.rs (`SgdConfig::new()`: momentum 0.9, weight decay 5e-4 on everything)."""
    return torch.optim.SGD(params_model, lr=lr, momentum=momentum, weight_decay=weight_decay)


class Method:
    """One recipe: its network(s), loss and step. `loss(views, progress)` returns the loss."""

    def __init__(self, name: str):
        self.name = name
        self.momentum_model = None
        if name == "frossl":
            self.model = Projected(lambda d: VICRegProjectionHead(d, 2048, 2048, num_layers=2))
            self.criterion = FroSSLLoss(invariance_weight=1.0)
        elif name == "wmse":
            self.model = Projected(lambda d: mlp_head(d, 1024, 64))
            self.criterion = WMSELoss(embedding_dim=64, w_size=128, w_iter=1, eps=0.0)
        elif name == "macl":
            self.model = Projected(lambda d: mlp_head(d, 2048, 128))
            self.criterion = MACLLoss(temperature=0.1, alpha=0.5, A_0=0.0)
        elif name == "directclr":
            self.model = Projected(None)
            self.criterion = DirectCLRLoss(loss_dim=64, temperature=0.5)
        elif name == "mmcr":
            self.model = Projected(
                lambda d: MMCRProjectionHead(d, 512, 128, num_layers=2, use_bias=False))
            self.momentum_model = copy.deepcopy(self.model)
            deactivate_requires_grad(self.momentum_model)
            self.criterion = MMCRLoss(lmda=5e-3)
        elif name == "nnsiam":
            self.model = Predicted(lambda d: SimSiamProjectionHead(d, 2048, 2048),
                                   SimSiamPredictionHead(2048, 512, 2048))
            self.criterion = NegativeCosineSimilarity()
            # src/method/queue.rs `KeyQueue`: 16,384 unit keys (normalised Gaussians at the
            # start), FIFO of the batch's 128 first-view projections per step
            self.support = MemoryBankModule(size=(16384, 2048), feature_dim_first=False)
            self.staged = None
        elif name == "emp_ssl":
            self.model = Projected(lambda d: mlp_head(d, 4096, 1024, num_layers=3))
            self.criterion = None  # -tcr_loss + 200 * invariance_loss (see the docstring)
        else:
            raise ValueError(name)
        self.model.train()

    def loss(self, views):
        m, name = self.model, self.name
        if name in ("macl", "directclr"):
            return self.criterion(m(views[0]), m(views[1]))
        if name == "frossl":
            return self.criterion([m(views[0]), m(views[1])])
        if name == "wmse":
            return self.criterion(torch.cat([m(views[0]), m(views[1])]))
        if name == "mmcr":
            # Outputs on the unit sphere (the paper's; ours: MmcrConfig::normalize, default true).
            online = nn.functional.normalize(torch.stack([m(x) for x in views], dim=1), dim=-1)
            with torch.no_grad():
                momentum = nn.functional.normalize(
                    torch.stack([self.momentum_model(x) for x in views], dim=1), dim=-1
                )
            return self.criterion(online, momentum)
        if name == "nnsiam":  # src/method/nnsiam.rs, simsiam.rs `forward_to`, queue.rs
            (z1, p1), (z2, p2) = m(views[0]), m(views[1])
            z1, z2 = F.normalize(z1.detach(), dim=1), F.normalize(z2.detach(), dim=1)
            bank = self.support.bank.detach()  # [16384, 2048], as it was before this step
            nn1 = bank[(z1 @ bank.t()).argmax(dim=1)]
            nn2 = bank[(z2 @ bank.t()).argmax(dim=1)]
            self.staged = z1  # enqueued after the step (`KeyQueue::commit`)
            return 0.5 * (self.criterion(p1, nn2) + self.criterion(p2, nn1))
        if name == "emp_ssl":
            n = views[0].shape[0]
            glob = F.normalize(m(torch.cat(views[:2])), dim=1).split(n)
            local = F.normalize(m(torch.cat(views[2:])), dim=1).split(n)
            z = torch.stack(list(glob) + list(local))  # [20, B, 1024]
            # lightly's tcr_loss one view at a time, then the mean over the views: the value of
            # tcr_loss(z) (0.5 * the mean of the views' log-determinants); the batched call's
            # backward fails on this CPU build (torch 2.15 + oneMKL: "Pivots given to lu_solve
            # must all be greater or equal to 1" on [20, 1024, 1024], while one view passes).
            tcr = torch.stack([tcr_loss(z[v : v + 1], eps=0.2) for v in range(z.shape[0])]).mean()
            return -tcr + 200.0 * invariance_loss(z)
        raise ValueError(name)

    @torch.no_grad()
    def after_step(self, step: int, total: int):
        if getattr(self, "staged", None) is not None:  # nnsiam: the support set's FIFO
            self.support._dequeue_and_enqueue(self.staged)
            self.staged = None
        if self.momentum_model is not None:  # mmcr: src/method/momentum.rs `update`
            update_momentum(self.model, self.momentum_model,
                            cosine_momentum_at(0.996, step / total))


# Per recipe: batch, peak lr, warm-up epochs, views, optimiser (a function of the parameters and
# the lr); the Rust file each comes from is in the docstring.
RECIPES = {
    "frossl": dict(batch=128, lr=0.3 * 128 / 256, warmup=2, views=byol_views,
                   optimizer=lambda p, lr: lars(p, lr, 1e-4, 0.02),
                   desc="LARS (eta 0.02, wd 1e-4), projector [2048, 2048], FroSSLLoss(1.0)"),
    "wmse": dict(batch=128, lr=2e-3, warmup=2, views=wmse_views,
                 optimizer=lambda p, lr: torch.optim.Adam(p, lr=lr, betas=(0.9, 0.999), eps=1e-5,
                                                          weight_decay=1e-6),
                 desc="Adam (eps 1e-5, wd 1e-6), projector [1024] -> 64, WMSELoss(w_size 128)"),
    "macl": dict(batch=128, lr=0.3, warmup=0, views=simclr_views,
                 optimizer=lambda p, lr: sgd(p, lr),
                 desc="SGD (0.9, wd 5e-4), projector [2048] -> 128, MACLLoss(0.1, 0.5, 0)"),
    "directclr": dict(batch=128, lr=0.3, warmup=0, views=simclr_views,
                      optimizer=lambda p, lr: sgd(p, lr),
                      desc="SGD (0.9, wd 5e-4), no projector, DirectCLRLoss(64, 0.5)"),
    "mmcr": dict(batch=128, lr=0.06, warmup=0, views=mmcr_views,
                 optimizer=lambda p, lr: sgd(p, lr, momentum=0.0, weight_decay=0.0),
                 desc="plain SGD, projector [512, 512] -> 128 no bias, momentum 0.996 -> 1, "
                      "8 views, MMCRLoss(5e-3)"),
    "nnsiam": dict(batch=128, lr=0.06, warmup=0, views=simsiam_views,
                   optimizer=lambda p, lr: sgd(p, lr),
                   desc="SGD (0.9, wd 5e-4), SimSiam projector [2048, 2048] -> 2048 (affine-free "
                        "BN) and predictor [512] -> 2048, support set 16384, -cos to the NN"),
    "emp_ssl": dict(batch=100, lr=0.3, warmup=0, views=emp_ssl_views,
                    optimizer=lambda p, lr: lars(p, lr, 1e-4, 0.005, nesterov=True),
                    desc="LARS Nesterov (eta 0.005, wd 1e-4), projector [4096, 4096] -> 1024, "
                         "20 patches, -TCR(0.2) + 200 inv"),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recipe", choices=sorted(RECIPES), required=True)
    ap.add_argument("--data", type=Path, default=Path("/usr/share/datasets/fashion-mnist"))
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads (main process)")
    ap.add_argument("--workers", type=int, default=2, help="DataLoader worker processes")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-steps", type=int, default=None,
                    help="stop after this many steps (a smoke test; the plans stay the full run's)")
    ap.add_argument("--knn-subset", type=int, default=None,
                    help="kNN on the first N training and N test images only (a smoke test)")
    ap.add_argument("--print-steps", type=int, default=5,
                    help="print the loss of the first N steps (default 5)")
    args = ap.parse_args()
    cfg = RECIPES[args.recipe]
    batch = cfg["batch"]
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, lightly "
          f"{lightly.__version__}; {args.threads} threads, {args.workers} workers", flush=True)

    train_x, train_y = load_split(args.data, "train")
    test_x, test_y = load_split(args.data, "t10k")
    assert tuple(train_x.shape[1:]) == (1, SIDE, SIDE), f"expected 1x28x28, got {train_x.shape}"
    knn_data = (train_x, train_y, test_x, test_y)
    if args.knn_subset is not None:
        n = args.knn_subset
        knn_data = (train_x[:n], train_y[:n], test_x[:n], test_y[:n])

    views = cfg["views"]()
    loader = DataLoader(
        ManyViews(train_x, views), batch_size=batch, shuffle=True, drop_last=True,
        num_workers=args.workers, persistent_workers=args.workers > 0,
        generator=torch.Generator().manual_seed(args.seed),
    )
    batches = len(loader)
    total_steps = args.epochs * batches
    warmup_epochs = min(cfg["warmup"], args.epochs)
    warmup_steps = warmup_epochs * batches

    method = Method(args.recipe)
    optimizer = cfg["optimizer"](list(method.model.parameters()), cfg["lr"])
    n_params = sum(p.numel() for p in method.model.parameters())
    print(f"{args.recipe}: {args.epochs} epochs x {batches} steps, batch {batch}, {len(views)} "
          f"views, lr {cfg['lr']:g} ({warmup_epochs} warm-up epochs), backbone small-2x "
          f"({method.model.backbone.feature_dim} features; {n_params} trainable parameters), "
          f"{cfg['desc']}", flush=True)

    step = 0
    done = False
    train_start = time.perf_counter()
    train_end = train_start
    for epoch in range(args.epochs):
        epoch_start = time.perf_counter()
        loss_sum, images, lr = 0.0, 0, 0.0
        for xs in loader:
            lr = lr_at(step, total_steps, cfg["lr"], warmup_steps)
            for group in optimizer.param_groups:
                group["lr"] = lr
            loss = method.loss(list(xs))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            value = loss.item()
            if not math.isfinite(value):
                raise SystemExit(f"non-finite loss {value} at step {step}")
            method.after_step(step, total_steps)
            if step < args.print_steps:
                print(f"step {step}: loss {value:.6f}, lr {lr:.6g}", flush=True)
            loss_sum += value
            images += xs[0].shape[0]
            step += 1
            train_end = time.perf_counter()
            if args.max_steps is not None and step >= args.max_steps:
                done = True
                break
        seconds = time.perf_counter() - epoch_start
        steps_in_epoch = images // batch
        print(f"epoch {epoch + 1}/{args.epochs}: mean loss {loss_sum / max(steps_in_epoch, 1):.4f}, "
              f"lr {lr:.5f}, {images / seconds:.1f} images/s, {seconds:.1f} s"
              + (f" ({steps_in_epoch} steps, --max-steps)" if done else ""), flush=True)
        if done:
            break
    wall = train_end - train_start
    trained = step * batch
    knn_start = time.perf_counter()
    results = knn_evaluate(method.model.backbone, *knn_data)
    knn_s = time.perf_counter() - knn_start
    print(f"done: {step} steps, {trained / wall:.1f} images/s, training {wall:.1f} s, kNN "
          f"{knn_s:.1f} s (bank {knn_data[0].shape[0]}, queries {knn_data[2].shape[0]})",
          flush=True)
    print_knn(results)
    (_, _, top1, top5), (_, _, top1_200, _) = results[0], results[1]
    print(f"RESULT side=pytorch recipe={args.recipe} images_per_s={trained / wall:.2f} "
          f"wall_s={wall:.2f} knn_top1={top1:.2f} knn_top5={top5:.2f} knn200_top1={top1_200:.2f} "
          f"knn_s={knn_s:.2f} steps={step} epochs={args.epochs} batch={batch} "
          f"threads={args.threads} workers={args.workers} "
          f"total_s={time.perf_counter() - PROCESS_START:.2f}", flush=True)


if __name__ == "__main__":
    main()
