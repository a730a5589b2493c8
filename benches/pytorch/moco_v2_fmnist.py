#!/usr/bin/env python3
"""The PyTorch + lightly side of a throughput comparison: the work of

    recipe moco_v2 --data-dir /usr/share/datasets/fashion-mnist --epochs 3     # --recipe moco_v2
    recipe light_moco --data-dir /usr/share/datasets/fashion-mnist --epochs 3  # --recipe light_moco

in torch 2.15 / torchvision 0.29 / lightly 1.6, on the CPU (the Rust CPU build's default
backbone `small`) or on a GPU (`--device cuda --backbone resnet18`: the Rust GPU builds' default
backbone, ResNet-18 with the CIFAR stem).

    python3 benches/pytorch/moco_v2_fmnist.py [--recipe moco_v2|light_moco] [--epochs 3]
        [--threads 2] [--workers 2] [--data /usr/share/datasets/fashion-mnist] [--seed 0]
        [--device cpu|cuda] [--backbone small|resnet18] [--batch 128]
        [--max-steps N] [--knn-subset N] [--knn-at-init]

    # the GPU comparison (8 DataLoader workers augmenting on the CPU):
    python3 benches/pytorch/moco_v2_fmnist.py --device cuda --backbone resnet18 --workers 8

Options added for the GPU: `--device cuda` puts the model, the queue and every batch on the GPU
(batches copied from pinned memory, DataLoader `pin_memory=True`, `non_blocking=True`; the kNN
features are computed and the votes counted there too) and synchronises the GPU before every
clock read; the augmentation stays in the DataLoader worker processes on the CPU (torchvision v2
transforms, one image at a time): that is the "torchvision DataLoader" side of the comparison.
`--backbone resnet18`: see "Backbone" below; the projector's hidden width follows the feature
width (512) for moco_v2 as for small; light_moco with resnet18 takes the recipe's ResNet-18
settings (weight decay 1e-4, cosine momentum). `--batch`: images per step (default 128, both
recipes'); moco_v2's lr stays 0.06, light_moco's follows it (0.2 x batch / 512), and an epoch
is 60000 // batch steps. PyTorch's own GPU defaults are kept: cudnn.benchmark off, cuDNN
convolutions allowed to use TF32 (`torch.backends.cudnn.allow_tf32`, default True; matmuls stay
full f32); the header line prints these settings.

lightly is optional: without it (`ImportError`) the script uses small plain-torch equivalents
written in this file (`TorchMoCoProjectionHead`, `TorchMemoryBankModule`, `TorchNTXentLoss`
(its memory-bank branch), `torch_deactivate_requires_grad`, `torch_update_momentum`,
`torch_knn_predict`), each written from the definition of the lightly piece it stands for, with
the same random draws in the same order (the projector's two Linear layers, the bank's one
`torch.randn`), so a run with the same seed starts from the same weights and queue either way.
benches/pytorch/check_lightly_fallbacks.py compares them with lightly's on random inputs in f32:
the InfoNCE loss agrees to 1e-6 (values near 8), its gradient to 1e-10, the rest exactly.
The header line says which was used: "lightly 1.6.0" or "lightly absent: plain-torch
equivalents". (One difference of no numerical consequence: the fallback's queue pointer is a
Python int, lightly's a tensor read back every step, a GPU synchronisation on cuda.)

Prints one line per epoch, the kNN accuracies, and a last machine-readable line

    RESULT side=pytorch recipe=... images_per_s=... wall_s=... knn_top1=... ... device=...
        backbone=... batch=... peak_alloc_mib=... peak_reserved_mib=...

images_per_s = training images processed (steps x batch) / wall_s; wall_s = from the first batch
request (the first DataLoader iterator, which starts the worker processes) to the end of the
last step, kNN excluded. knn_s is the final kNN evaluation, images_per_s_incl_knn divides by
wall_s + knn_s (what the Rust recipe's "done in ... images/s" line measures, less its
checkpoint write), total_s is the whole process (imports and data loading included).
knn_top1/knn_top5 are percentages at k = 20, T = 0.07; knn200_* at k = 200, T = 0.1 (the Rust
monitor scores both settings, so both are computed here). peak_alloc_mib / peak_reserved_mib:
`torch.cuda.max_memory_allocated()` / `max_memory_reserved()` over the whole process (training
and kNN) in MiB on cuda, nan on the CPU.

What it mirrors (paths in this repository). Everything but the recipe-specific settings is
shared by both recipes; the moco_v2 settings come first, light_moco's differences from them in
the section after.

- Recipe: recipes/src/recipes/moco_v2.rs (`defaults`: batch 128, lr 0.06, warm-up 0 epochs;
  `MoCoConfig::moco_v2().with_momentum(0.99).with_queue_size(4096)`, `SgdConfig::new()`), run by
  recipes/src/recipes/common.rs (`prepare`, `pipeline`, `run`, `BackboneChoice::Small`).
- Backbone: models/src/resnet.rs (`ResNetConfig::new(Basic, [1,1,1,1]).with_base_width(8)`,
  ImageNet stem: 7x7/2 conv pad 3 no bias + BN + ReLU + 3x3/2 max pool pad 1; stages 8, 16, 32,
  64 channels, stride 1, 2, 2, 2 on the first block's first 3x3 conv, 1x1/2 conv + BN shortcut
  when the shape changes; no zero-init of the last BN), models/src/layers.rs (BN eps 1e-5,
  momentum 0.1, unbiased running variance, weight 1 / bias 0; conv Kaiming normal fan-out with
  ReLU gain; global average pool), 1 input channel, 64-d features. Here: torchvision's `ResNet`
  with `BasicBlock, [1, 1, 1, 1]`, its stem and stages rebuilt at widths 8-64 with its own
  `_make_layer` and init loop, `fc` = identity.
  `--backbone resnet18` (the Rust default on GPU backends, `BackboneChoice::
  default_for_backend`): recipes/src/recipes/common/backbone.rs `ResNetConfig::resnet18()
  .with_stem(Cifar).with_in_channels(1)` (CIFAR stem by default for ResNet-18,
  `default_stem`): models/src/resnet.rs basic blocks [2, 2, 2, 2], widths 64-512, stem 3x3/1 conv
  pad 1 no bias + BN + ReLU, no max pool, zero_init_residual false, 512-d features. Here:
  torchvision's `ResNet(BasicBlock, [2, 2, 2, 2])` (= `resnet18()`) with conv1 replaced by
  Conv2d(1, 64, 3, 1, 1, bias=False), maxpool and fc by identities. Initialisation: ours draws
  every convolution from N(0, 2 / fan_out) with fan_out = out_channels / groups x k x k (burn's
  `Initializer::KaimingNormal { gain: sqrt 2, fan_out_only: true }`, layers.rs `conv_init`), BN
  weight 1, bias 0; torchvision's init loop is the same (kaiming_normal_, mode fan_out, ReLU
  gain: std sqrt(2 / (out_channels x k x k)); BN 1 / 0). The two fan-outs differ only for
  grouped convolutions (torch does not divide by the groups), and ResNet-18 has none. The one
  trap is on this side: the replaced conv1 would keep nn.Conv2d's default init
  (kaiming_uniform_, a = sqrt 5, fan-in) since torchvision's loop ran in the constructor, so it
  is re-initialised here with torchvision's kaiming_normal_ fan-out. (torchvision also draws
  the 7x7 conv1 and the 512 x 1000 fc it builds and drops: a different position in the random
  stream only; the draws differ from ours anyway.)
- Method: src/method/moco.rs (query = online backbone + projector on view 1, key = momentum
  encoder on view 2 in training mode, i.e. batch statistics, no shuffle-BN; not symmetric;
  InfoNCE against a 4096-key queue initialised with normalised Gaussian keys, the step's keys
  enqueued after the loss; EMA of the trainable parameters only, m = 0.99 constant, after the
  optimiser step), src/method/ema.rs, src/method/queue.rs, src/loss/info_nce.rs (q and k
  L2-normalised, logits [q.k+, q.queue] / 0.2, mean cross-entropy), src/head.rs (MoCo v2
  projector Linear(64, 64) + ReLU + Linear(64, 128), both with bias, no BN; Linear(512, 512)
  + ReLU + Linear(512, 128) on resnet18). Here: lightly's `MoCoProjectionHead(64, 64, 128)`,
  `NTXentLoss(temperature=0.2, memory_bank_size=(4096, 128))` (same logits, queue and FIFO),
  `deactivate_requires_grad`, `update_momentum` (or their plain-torch equivalents, above).
- Optimiser and schedule: src/optim/sgd.rs (PyTorch's SGD: momentum 0.9, dampening 0, no
  Nesterov, weight decay 5e-4 added to the gradient of every trainable parameter, BN and biases
  included), src/optim/schedule.rs + `TrainConfig::schedule` in src/train/mod.rs (per step:
  lr(s) = 0.06 * 0.5 * (1 + cos(pi * s / total)), total = epochs * 468, no warm-up, final lr 0,
  first step at 0.06), src/train/mod.rs (`run_epochs`, `train_step`: one loss read-back per step).
- Data: src/data/idx.rs (IDX files, raw or .gz), src/data/loader.rs (shuffle every epoch,
  drop_last = true, so 60000 // 128 = 468 steps per epoch; 2 workers, 2 batches prefetched
  each), pixels / 255.
- Augmentation: `PipelineConfig::moco_v2(28, 1)` in src/augment/pipeline.rs with the small-image
  crop floor of common.rs `pipeline` (28 < 32: scale (0.2, 1) -> (0.5, 1)); the same pipeline
  for both views, per image: RandomResizedCrop(28, scale (0.5, 1), ratio (3/4, 4/3), bilinear;
  crops are never larger than 28 so antialiasing never applies, src/augment/crop.rs), horizontal
  flip p 0.5 (flip.rs), colour jitter (0.4, 0.4, 0.4, 0.1) with p 0.8 in a random order
  (colour.rs: on one channel only brightness and contrast change anything; saturation, hue and
  grayscale are identities, in torchvision as in ours), grayscale p 0.2 (identity on one
  channel), Gaussian blur kernel 3 (`RandomGaussianBlur::kernel_for(28)`), sigma in (0.1, 2),
  p 0.5, reflect padding (blur.rs), normalisation mean 0.2860, std 0.3530 (normalize.rs).
- kNN: src/eval/monitor.rs, src/eval/knn.rs, src/eval/features.rs: the backbone's 64-d features
  (not the projector) in inference mode (BN running statistics), images / 255 then normalised as
  the views, batches of 256; the bank is the 60,000 training images, the queries the 10,000 test
  images; features L2-normalised; the k most cosine-similar bank features vote with weight
  exp(sim / T); settings (k 20, T 0.07) and (k 200, T 0.1); top-1 and top-5. Here: lightly's
  `knn_predict` (or `torch_knn_predict`) on chunks of 256 queries. Run once at the end (the
  Rust trainer's last epoch, `knn_every` 5 > 3 epochs); `--knn-at-init` adds the Rust recipe's
  evaluation before training (outside its timer too).

light_moco (`--recipe light_moco`): MoCo v2's network, data, augmentation, backbone, loader
and kNN monitor as above, with these settings (line numbers as of this writing):

- With `--backbone resnet18` (light_moco.rs `weight_decay`, `method_config`): weight decay 1e-4
  instead of 1e-5, and the key-encoder momentum rises along a cosine from 0.99 to 1
  (src/method/ema.rs `cosine_momentum`: m = 1 - 0.01 (1 + cos(pi s / total)) / 2 at step s,
  0-based, src/method/momentum.rs `momentum_at`); everything below is for `small`.
- Recipe: recipes/src/recipes/light_moco.rs `defaults` (l. 68-82): batch 128 (`BATCH_SIZE`,
  l. 38), preset `PipelineConfig::moco_v2` (l. 75), warm-up `WARMUP_EPOCHS` = 5 (l. 40);
  `train` (l. 91-102) with the CPU default backbone `small` (`BackboneChoice::
  default_for_backend`, recipes/src/recipes/common.rs l. 87-93).
- Learning rate: `lr_for_batch(128)` = 0.2 * 128 / 512 = 0.05 (light_moco.rs l. 33-48, applied
  in `train` l. 92-94 when no --lr is given).
- Warm-up: common.rs `prepare` caps the recipe's warm-up at the epochs (l. 781:
  `defaults.warmup_epochs.min(settings.epochs)`), so a 3-epoch run warms up for all 3 epochs:
  src/optim/schedule.rs `WarmupCosine::lr_at` (l. 100-115) with warmup_steps = total_steps =
  3 * 468 = 1404 (src/train/mod.rs `TrainConfig::schedule`, l. 127-133) gives
  lr(s) = 0.05 * (s + 1) / 1404 at every step s: 3.56e-5 at the first step, 0.05 at the last,
  and the cosine part is never reached. (With more than 5 epochs: 5 * 468 warm-up steps, then
  the cosine to 0 over the rest.) `lr_at` below is the same function for both recipes.
- Optimiser: `SgdConfig::new().with_weight_decay(weight_decay(Small))` (light_moco.rs l. 51-57,
  98-100): SGD momentum 0.9, dampening 0, no Nesterov, weight decay 1e-5 (not ResNet-18's 1e-4)
  on every trainable parameter (src/optim/sgd.rs l. 23-33, 109-120): torch.optim.SGD.
- Method: `MoCoConfig::light_moco().with_cosine_momentum(false).with_queue_size(4096)`
  (light_moco.rs `method_config` l. 61-65, src/method/moco.rs l. 94-100): projector
  Linear(64, 2048) + ReLU + Linear(2048, 128), both with bias, no BN (moco.rs l. 96-97, 119-121;
  src/head.rs l. 86-108): lightly's `MoCoProjectionHead(64, 2048, 128)`; key-encoder momentum
  m = 0.99 constant (moco.rs l. 54-58, `momentum_at` l. 228-234: the cosine rise to 1 is for
  ResNet-18 only, light_moco.rs l. 63), EMA of the trainable parameters after the optimiser
  step (`after_step` l. 328-334, src/method/ema.rs l. 40-52): lightly's `update_momentum`;
  symmetric (moco.rs l. 98, `forward` l. 301-313): k2 = f_k(x2), q1 = f_q(x1), k1 = f_k(x1),
  q2 = f_q(x2) in that order, four separate forward passes of 128 images (the key encoder in
  training mode, batch statistics, no shuffle-BN), keys L2-normalised;
  loss = SoftNCE(q1, k2, queue) + SoftNCE(q2, k1, queue) (a sum, not a mean) against the queue
  as it was before the step; then the 256 keys [k1; k2] are enqueued (`keys_per_step` = 2B,
  l. 135-141; src/method/queue.rs `enqueue` l. 108-123: FIFO, 4096 / 256 = 16 steps per turn;
  initial keys: normalised standard Gaussians, l. 55-64): lightly's `MemoryBankModule((4096,
  128), feature_dim_first=False)` (same initialisation, same FIFO, returns the bank as it was
  before the update).
- SoftNCE (src/loss/soft_nce.rs; written here as `SoftNCELoss`, lightly has no SoftNCE):
  `SoftNceLossConfig::new()` defaults (l. 63-83): tau = 0.1, alpha = 0.8, K = 20,
  `SoftNceWeights::LinearDecay`, `AlphaSchedule::Static` (alpha constant over the whole run:
  `Static` is `SchedulerConfig::Constant { value: alpha }`, l. 50-53; `Incremental`, a cosine
  from 1 to alpha, is not what the recipe uses). q and k L2-normalised, k and the queue detached
  (src/loss/info_nce.rs `QueueSimilarities::new` l. 56-79); s+ = q.k, s_j = q.queue_j; the
  target puts alpha on the positive and beta_1 >= ... >= beta_K on the K queue keys most similar
  to the query (rank 1 = most similar), with linear decay
  beta_r = 2 (K - r) / ((K - 1) K) * (1 - alpha), r = 1..K (`negative_weights` l. 150-160; they
  sum to 1 - alpha, beta_K = 0), every other queue key 0. The loss per row is
  -sum(target * log_softmax([s+, s_1..s_4096] / tau)) = logsumexp([s+, s] / tau)
  - alpha s+ / tau - sum_r beta_r v_r / tau, with v_r the r-th largest s_j (`forward`
  l. 169-213, the log-sum-exp of info_nce.rs l. 90-102), averaged over the 128 rows. The
  selection of the K nearest keys carries no gradient; the gradient flows through s+, every s_j
  (the log-sum-exp) and the K selected v_r, as in ours.
- Augmentation: `PipelineConfig::moco_v2(28, 1)` (src/augment/pipeline.rs l. 143-158, 207-209)
  with common.rs's small-image crop floor (l. 698-710, scale (0.2, 1) -> (0.5, 1)): the same
  `view_transform` as moco_v2.
- Epochs and kNN: `--epochs 3` (the recipe's own default is 20, l. 71); kNN only after the last
  epoch (`--knn-every` default 5, common.rs l. 402-403; benches/throughput.sh passes 0).

Where the two sides knowingly differ:

- Random streams: ours draws the batch order from a seeded StdRng per epoch and every
  augmentation parameter from a StdRng keyed by (seed, step); here torch's generators (main
  process and DataLoader workers). Same distributions, different draws, so losses and kNN
  accuracies agree only statistically. Initial weights and the queue's initial keys differ the
  same way (same distributions).
- Where augmentation runs: ours gathers bytes on loader threads and augments the whole batch
  on the training thread with batched tensor ops (burn's thread pool), between steps; here each
  image is augmented by a torchvision v2 call in the DataLoader worker processes (one torch
  thread each), overlapping the training step. This is the usual way each framework is used,
  and part of what the comparison measures.
- Threads: burn's Flex backend runs on rayon (one thread per core); torch here uses
  `--threads` intra-op threads (2) with OMP_WAIT_POLICY=PASSIVE, plus the worker processes.
- On a GPU: ours augments the batch on the GPU (the same batched tensor ops on the GPU backend),
  here the DataLoader workers augment on the CPU and the batches are copied to the GPU; PyTorch's
  cuDNN convolutions may run in TF32 (its default), burn's in f32.
- Bookkeeping: ours writes steps.csv / epochs.csv rows and a progress bar, a checkpoint at the
  end and plots afterwards; none of that is done here (the checkpoint write falls inside the
  Rust "done in" time, not inside its per-epoch images/s).
- Numerics: burn computes BN, bilinear sampling, blur and the InfoNCE log-sum-exp with its own
  kernels (f32 throughout on both sides); results agree to rounding, not bit for bit.
- kNN ties: ours takes argmax / a descending sort of the vote totals, lightly an argsort; they
  can only differ on exactly tied totals.
- light_moco's SoftNCE is written here, not taken from lightly (which has none). Ours finds the K
  nearest queue keys with a chunked selection (soft_nce.rs `top_k_indices_and_max`, l. 251-291:
  the same K keys, exactly) and recomputes their similarities from the K selected queue rows;
  here `torch.topk` on the [128, 4096] similarities. Same keys, same values and gradients; the
  order among exactly equal similarities may differ, which changes nothing unless the two tied
  keys have different beta (a tie between distinct float similarities essentially never occurs).
  Ours shifts the log-sum-exp by a detached row maximum; torch.logsumexp shifts the same way
  internally (equal to rounding).
- light_moco's two queries go through the online encoder as two batches of 128 on both sides
  (BatchNorm statistics per view, as ours); they are not concatenated into one batch of 256,
  which would be faster here but change the BN statistics.
"""

import time

PROCESS_START = time.perf_counter()

import argparse
import copy
import gzip
import math
import os
from pathlib import Path

# On a shared machine OpenMP's default spin-waiting collapses under oversubscription (see
# benches/pytorch/backbones.py); passive waiting is what rayon does in burn.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np
import torch
import torch.nn.functional as F
import torchvision
import torchvision.transforms.v2 as T
from torch import nn
from torch.utils.data import DataLoader, Dataset
from torchvision.models.resnet import BasicBlock, ResNet


# ---------------------------------------------------------------------------------------------
# Plain-torch equivalents of the lightly 1.6 pieces used below, written from their definitions
# (not copied). Used when lightly is not installed; benches/pytorch/check_lightly_fallbacks.py
# checks that they give lightly's numbers (same seed, same random draws in the same order).


class TorchMoCoProjectionHead(nn.Module):
    """Stands for lightly's `MoCoProjectionHead(input_dim, hidden_dim, output_dim)` as used here
    (2 layers, batch_norm False): Linear(d, h) + ReLU + Linear(h, out), both with bias, no BN,
    in an `nn.Sequential` named `layers` (the same parameters, created in the same order)."""

    def __init__(self, input_dim: int, hidden_dim: int, output_dim: int):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(input_dim, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, output_dim)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class TorchMemoryBankModule(nn.Module):
    """Stands for lightly's `MemoryBankModule(size=(n, d), feature_dim_first=...)`: a FIFO of n
    keys of d values, initialised with standard Gaussian rows (one `torch.randn((n, d))` draw)
    each L2-normalised, the write pointer at 0. `forward(keys, update=True)` returns
    (keys, a detached copy of the bank as it was before this call: [d, n] if feature_dim_first,
    else [n, d]) and then writes the (detached) keys at the pointer: rows ptr..ptr+b, the
    pointer moving on by b; when ptr + b reaches n, only the first n - ptr keys are written
    (rows ptr..n; the rest of the batch is dropped, as lightly does) and the pointer returns
    to 0."""

    def __init__(self, size, feature_dim_first: bool = True):
        super().__init__()
        n, d = size
        self.size = (n, d)
        self.feature_dim_first = feature_dim_first
        self.register_buffer("bank", F.normalize(torch.randn((n, d)), dim=-1), persistent=False)
        self.ptr = 0  # a Python int: no device read-back per step (lightly keeps a tensor)

    def forward(self, output: torch.Tensor, labels=None, update: bool = False):
        bank = self.bank.clone().detach()
        if self.feature_dim_first:
            bank = bank.t()
        if update:
            self._dequeue_and_enqueue(output)
        return output, bank

    @torch.no_grad()
    def _dequeue_and_enqueue(self, keys: torch.Tensor) -> None:
        n, b, ptr = self.size[0], keys.shape[0], self.ptr
        if ptr + b >= n:
            self.bank[ptr:] = keys[: n - ptr].detach()
            self.ptr = 0
        else:
            self.bank[ptr : ptr + b] = keys.detach()
            self.ptr = ptr + b


class TorchNTXentLoss(nn.Module):
    """Stands for lightly's `NTXentLoss(temperature, memory_bank_size=(n, d))`, its memory-bank
    branch only (the one MoCo uses): q = normalise(out0), k = normalise(out1); the bank as it
    was before the call (its `TorchMemoryBankModule` is made in the constructor, so its draw
    comes at the same point of the random stream as lightly's); k enqueued when q requires a
    gradient; logits [q.k, q.bank] / T with the positive at index 0; mean cross-entropy."""

    def __init__(self, temperature: float = 0.5, memory_bank_size=(4096, 128)):
        super().__init__()
        if abs(temperature) < 1e-8:
            raise ValueError(f"Illegal temperature: abs({temperature}) < 1e-8")
        self.memory_bank = TorchMemoryBankModule(size=memory_bank_size, feature_dim_first=True)
        self.temperature = temperature

    def forward(self, out0: torch.Tensor, out1: torch.Tensor) -> torch.Tensor:
        q = F.normalize(out0, dim=1)
        k = F.normalize(out1, dim=1)
        k, negatives = self.memory_bank(k, update=q.requires_grad)  # negatives: [d, n]
        positive = (q * k).sum(dim=1, keepdim=True)  # [B, 1]
        logits = torch.cat([positive, q @ negatives.to(q.device)], dim=1) / self.temperature
        labels = torch.zeros(q.shape[0], dtype=torch.long, device=q.device)
        return F.cross_entropy(logits, labels)


def torch_deactivate_requires_grad(model: nn.Module) -> None:
    """Stands for lightly's `deactivate_requires_grad`: no gradient for any parameter."""
    for p in model.parameters():
        p.requires_grad = False


@torch.no_grad()
def torch_update_momentum(model: nn.Module, model_ema: nn.Module, m: float) -> None:
    """Stands for lightly's `update_momentum`: p_ema = m * p_ema + (1 - m) * p, parameter by
    parameter (buffers such as BN running statistics untouched)."""
    ema = list(model_ema.parameters())
    torch._foreach_mul_(ema, m)
    torch._foreach_add_(ema, list(model.parameters()), alpha=1.0 - m)


@torch.no_grad()
def torch_knn_predict(feature, feature_bank, feature_labels, num_classes: int,
                      knn_k: int = 200, knn_t: float = 0.1) -> torch.Tensor:
    """Stands for lightly's `knn_predict` (feature [B, D], feature_bank [D, N], labels [N]):
    the k most similar bank columns (dot products) vote for their label with weight
    exp(sim / T) (a one-hot [B*k, C] scattered from the labels, weighted and summed over the
    k); returns the classes sorted by descending score, [B, C] (argsort, as lightly)."""
    sim = feature @ feature_bank  # [B, N]
    weight, index = sim.topk(k=knn_k, dim=-1)  # [B, k]
    labels = torch.gather(feature_labels.expand(feature.shape[0], -1), dim=-1, index=index)
    weight = (weight / knn_t).exp()
    one_hot = torch.zeros(feature.shape[0] * knn_k, num_classes, device=labels.device)
    one_hot = one_hot.scatter(dim=-1, index=labels.reshape(-1, 1), value=1.0)
    scores = (one_hot.view(feature.shape[0], knn_k, num_classes) * weight.unsqueeze(-1)).sum(1)
    return scores.argsort(dim=-1, descending=True)


try:
    import lightly
    from lightly.loss import NTXentLoss
    from lightly.models.modules import MoCoProjectionHead
    from lightly.models.modules.memory_bank import MemoryBankModule
    from lightly.models.utils import deactivate_requires_grad, update_momentum
    from lightly.utils.benchmarking import knn_predict

    LIGHTLY = f"lightly {lightly.__version__}"
except ImportError:
    lightly = None
    NTXentLoss = TorchNTXentLoss
    MoCoProjectionHead = TorchMoCoProjectionHead
    MemoryBankModule = TorchMemoryBankModule
    deactivate_requires_grad = torch_deactivate_requires_grad
    update_momentum = torch_update_momentum
    knn_predict = torch_knn_predict
    LIGHTLY = "lightly absent: plain-torch equivalents"

# Shared by both recipes (recipes/src/recipes/{moco_v2,light_moco}.rs, src/method/moco.rs)
BATCH = 128  # the default of --batch
MOMENTUM_SGD = 0.9
EMA_MOMENTUM = 0.99
QUEUE = 4096
OUT_DIM = 128
# Per recipe. hidden_dim None: the backbone's feature width (MoCo v2's MLP). lr: a function of
# the batch size; weight_decay and cosine_momentum: functions of the backbone.
RECIPES = {
    # recipes/src/recipes/moco_v2.rs: lr 0.06 whatever the batch, no warm-up, SgdConfig::new()
    # (wd 5e-4), MoCoConfig::moco_v2() (InfoNCE, tau 0.2, not symmetric, m 0.99 constant) on
    # every backbone.
    "moco_v2": dict(lr=lambda batch: 0.06, warmup_epochs=0,
                    weight_decay=lambda backbone: 5e-4, hidden_dim=None,
                    temperature=0.2, symmetric=False, soft_nce=None,
                    cosine_momentum=lambda backbone: False),
    # recipes/src/recipes/light_moco.rs: lr 0.2 * batch / 512 (`lr_for_batch`), 5 warm-up epochs
    # (capped at the epochs), wd 1e-4 on ResNet-18 and 1e-5 otherwise (`weight_decay`),
    # MoCoConfig::light_moco() (head 2048, symmetric SoftNCE with tau 0.1, alpha 0.8, K 20,
    # linear-decay weights, static alpha), m 0.99 rising along a cosine to 1 on ResNet-18 only
    # (`method_config`).
    "light_moco": dict(lr=lambda batch: 0.2 * batch / 512, warmup_epochs=5,
                       weight_decay=lambda backbone: 1e-4 if backbone == "resnet18" else 1e-5,
                       hidden_dim=2048, temperature=0.1, symmetric=True,
                       soft_nce=dict(alpha=0.8, top_k=20, weights="linear_decay"),
                       cosine_momentum=lambda backbone: backbone == "resnet18"),
}
# src/augment/normalize.rs
MEAN, STD = [0.2860], [0.3530]
# src/eval/monitor.rs
KNN_SETTINGS = [(20, 0.07), (200, 0.1)]
KNN_BATCH = 256


# ---------------------------------------------------------------------------------------------
# Data: IDX files (src/data/idx.rs), raw or gzip.


def read_idx(path: Path) -> np.ndarray:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    magic = int.from_bytes(raw[0:4], "big")
    if magic >> 8 != 0x08:
        raise ValueError(f"{path}: not an IDX file of unsigned bytes (magic {magic:#x})")
    ndim = magic & 0xFF
    dims = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    return data[: int(np.prod(dims))].reshape(dims)


def find(data_dir: Path, stem: str) -> Path:
    for name in (stem, stem + ".gz"):
        if (data_dir / name).is_file():
            return data_dir / name
    raise FileNotFoundError(f"{data_dir}: neither {stem} nor {stem}.gz")


def load_split(data_dir: Path, prefix: str):
    images = read_idx(find(data_dir, f"{prefix}-images-idx3-ubyte"))
    labels = read_idx(find(data_dir, f"{prefix}-labels-idx1-ubyte"))
    # [N, 28, 28] uint8 -> [N, 1, 28, 28] (one channel, as the Rust ImageArray)
    return torch.from_numpy(images.copy()).unsqueeze(1), torch.from_numpy(labels.astype(np.int64))


def view_transform(side: int) -> T.Compose:
    """`PipelineConfig::moco_v2(28, 1)` with common.rs's crop floor, per image, on floats in [0, 1]."""
    return T.Compose([
        T.ToDtype(torch.float32, scale=True),  # HostBatch::to_device: / 255
        T.RandomResizedCrop(side, scale=(0.5, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0),
                            interpolation=T.InterpolationMode.BILINEAR, antialias=True),
        T.RandomHorizontalFlip(p=0.5),
        T.RandomApply([T.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8),
        T.RandomGrayscale(p=0.2),
        T.RandomApply([T.GaussianBlur(3, sigma=(0.1, 2.0))], p=0.5),
        T.Normalize(MEAN, STD),
    ])


class TwoViews(Dataset):
    def __init__(self, images: torch.Tensor, transform):
        self.images, self.transform = images, transform

    def __len__(self):
        return self.images.shape[0]

    def __getitem__(self, i):
        img = self.images[i]
        return self.transform(img), self.transform(img)


# ---------------------------------------------------------------------------------------------
# Backbone: the `small` ResNet of recipes/src/recipes/common.rs / models/src/resnet.rs.


class SmallResNet(ResNet):
    """torchvision's ResNet(BasicBlock, [1, 1, 1, 1]) with the stem and stages rebuilt at widths
    w, 2w, 4w, 8w (w = 8) for `in_channels` input channels; returns the 8w pooled features."""

    def __init__(self, in_channels: int = 1, width: int = 8, layers=(1, 1, 1, 1)):
        super().__init__(BasicBlock, list(layers))
        self.inplanes = width
        self.conv1 = nn.Conv2d(in_channels, width, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.layer1 = self._make_layer(BasicBlock, width, layers[0])
        self.layer2 = self._make_layer(BasicBlock, 2 * width, layers[1], stride=2)
        self.layer3 = self._make_layer(BasicBlock, 4 * width, layers[2], stride=2)
        self.layer4 = self._make_layer(BasicBlock, 8 * width, layers[3], stride=2)
        self.fc = nn.Identity()
        self.feature_dim = 8 * width
        # torchvision's init loop again, for the rebuilt layers (zero_init_residual = False)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)


class CifarResNet18(ResNet):
    """`--backbone resnet18` (the Rust GPU default): recipes/src/recipes/common/backbone.rs
    `ResNetConfig::resnet18().with_stem(Cifar).with_in_channels(1)`, i.e. torchvision's
    resnet18 (BasicBlock, [2, 2, 2, 2], widths 64-512, zero_init_residual False) with the CIFAR
    stem: conv1 = 3x3/1 conv pad 1 no bias on `in_channels` channels, no max pool, fc =
    identity; returns the 512 pooled features."""

    def __init__(self, in_channels: int = 1):
        super().__init__(BasicBlock, [2, 2, 2, 2])  # torchvision's resnet18(weights=None)
        self.conv1 = nn.Conv2d(in_channels, 64, kernel_size=3, stride=1, padding=1, bias=False)
        # torchvision's init of the convolution it replaces (a fresh nn.Conv2d would otherwise
        # keep PyTorch's default kaiming_uniform_(a=sqrt(5)), fan-in)
        nn.init.kaiming_normal_(self.conv1.weight, mode="fan_out", nonlinearity="relu")
        self.maxpool = nn.Identity()
        self.fc = nn.Identity()
        self.feature_dim = 512


BACKBONES = {
    "small": lambda: SmallResNet(in_channels=1, width=8),
    "resnet18": lambda: CifarResNet18(in_channels=1),
}


class MoCoV2(nn.Module):
    """src/method/moco.rs with `MoCoConfig::moco_v2().with_momentum(0.99).with_queue_size(4096)`
    (`hidden_dim` None: the feature width), or Light-MoCo's network, the same with a 2048-wide
    hidden layer (`MoCoConfig::light_moco()`, `hidden_dim` 2048)."""

    def __init__(self, hidden_dim=None, backbone: str = "small"):
        super().__init__()
        self.backbone = BACKBONES[backbone]()
        d = self.backbone.feature_dim
        hidden = d if hidden_dim is None else hidden_dim
        self.projection_head = MoCoProjectionHead(d, hidden, OUT_DIM)  # no BN
        self.backbone_momentum = copy.deepcopy(self.backbone)
        self.projection_head_momentum = copy.deepcopy(self.projection_head)
        deactivate_requires_grad(self.backbone_momentum)
        deactivate_requires_grad(self.projection_head_momentum)

    def forward(self, x):
        return self.projection_head(self.backbone(x))

    @torch.no_grad()
    def forward_momentum(self, x):
        return self.projection_head_momentum(self.backbone_momentum(x))

    def online_parameters(self):
        return list(self.backbone.parameters()) + list(self.projection_head.parameters())

    @torch.no_grad()
    def update_momentum(self, m: float):
        update_momentum(self.backbone, self.backbone_momentum, m)
        update_momentum(self.projection_head, self.projection_head_momentum, m)


class SoftNCELoss(nn.Module):
    """SoftNCE of src/loss/soft_nce.rs (Light-MoCo, Lin et al. 2022, eq. 2), written here: lightly
    has no SoftNCE. Static alpha, `weights` "linear_decay" (the default) or "average".

    Per row: -sum(target * log_softmax([q.k+, q.queue] / tau)) with the target alpha on the
    positive, beta_r on the r-th most similar queue key (r = 1..K) and 0 elsewhere, computed as
    logsumexp(logits) - alpha * q.k+ / tau - sum_r beta_r * v_r / tau; the mean over rows."""

    def __init__(self, temperature=0.1, alpha=0.8, top_k=20, weights="linear_decay"):
        super().__init__()
        if not (0.0 < alpha <= 1.0) or top_k < 1 or temperature <= 0.0:
            raise ValueError(f"SoftNCE: tau {temperature}, alpha {alpha}, K {top_k}")
        self.temperature, self.alpha, self.top_k = temperature, alpha, top_k
        k = float(top_k)
        if weights == "linear_decay":  # SoftNceWeights::LinearDecay
            if top_k < 2:
                raise ValueError("SoftNCE: linear-decay weights need K >= 2")
            beta = [2.0 * (k - r) / ((k - 1.0) * k) * (1.0 - alpha) for r in range(1, top_k + 1)]
        elif weights == "average":  # SoftNceWeights::Average
            beta = [(1.0 - alpha) / k] * top_k
        else:
            raise ValueError(f"SoftNCE: unknown weights {weights!r}")
        # `negative_weights` in f64, then an f32 tensor, as ours
        self.register_buffer("beta", torch.tensor(beta, dtype=torch.float64).float())

    def forward(self, q: torch.Tensor, k: torch.Tensor, queue: torch.Tensor) -> torch.Tensor:
        """q, k: [B, D] (normalised here, k detached); queue: [N, D] unit keys (detached)."""
        tau = self.temperature
        q = F.normalize(q, dim=1)
        k = F.normalize(k.detach(), dim=1)
        queue = queue.detach()
        positive = (q * k).sum(dim=1)  # [B]
        negatives = q @ queue.t()  # [B, N]
        log_partition = torch.logsumexp(torch.cat([positive.unsqueeze(1), negatives], 1) / tau, 1)
        if self.alpha >= 1.0:  # plain InfoNCE
            return (log_partition - positive / tau).mean()
        nearest = negatives.topk(self.top_k, dim=1, largest=True, sorted=True).values  # [B, K]
        soft = (nearest * self.beta).sum(dim=1)
        return (log_partition - positive * (self.alpha / tau) - soft / tau).mean()


def ours_view(size: int, scale, flip: bool = True, jitter=None, grayscale: bool = False,
              blur_p: float = 0.0, solarize_p: float = 0.0) -> T.Compose:
    """One `ViewConfig` of src/pipeline.rs, in its order: crop (bilinear, no antialiasing, as
    src/augment/crop.rs), flip 0.5, colour jitter with p 0.8 (random order), grayscale 0.2,
    Gaussian blur kernel 3 sigma (0.1, 2) (reflect padding), solarisation at 0.5, normalisation."""
    ops = [
        T.ToDtype(torch.float32, scale=True),
        T.RandomResizedCrop(size, scale=scale, ratio=(3.0 / 4.0, 4.0 / 3.0),
                            interpolation=T.InterpolationMode.BILINEAR, antialias=False),
    ]
    if flip:
        ops.append(T.RandomHorizontalFlip(p=0.5))
    if jitter is not None:
        ops.append(T.RandomApply([T.ColorJitter(*jitter)], p=0.8))
    if grayscale:
        ops.append(T.RandomGrayscale(p=0.2))
    if blur_p > 0.0:
        ops.append(T.RandomApply([T.GaussianBlur(3, sigma=(0.1, 2.0))], p=blur_p))
    if solarize_p > 0.0:
        ops.append(T.RandomSolarize(threshold=0.5, p=solarize_p))
    ops.append(T.Normalize(MEAN, STD))
    return T.Compose(ops)


def cosine_momentum_at(base: float, progress: float) -> float:
    """src/method/ema.rs `cosine_momentum`: m(p) = 1 - (1 - base) (1 + cos(pi p)) / 2,
    p clamped to [0, 1]: base at the first step, rising to 1 at the end."""
    p = min(max(progress, 0.0), 1.0)
    return 1.0 - (1.0 - base) * (1.0 + math.cos(math.pi * p)) / 2.0


def lr_at(step: int, total: int, base_lr: float, warmup: int = 0) -> float:
    """src/optim/schedule.rs `WarmupCosine::lr_at` with final lr 0: linear warm-up from
    base_lr / warmup to base_lr over the first `warmup` steps, then a cosine to 0 at `total`."""
    if step < warmup:
        return base_lr * (step + 1) / warmup
    span = max(total - warmup, 1)
    progress = min((step - warmup) / span, 1.0)
    return base_lr * 0.5 * (1.0 + math.cos(math.pi * progress))


# ---------------------------------------------------------------------------------------------
# kNN monitor (src/eval/monitor.rs, knn.rs, features.rs).


@torch.no_grad()
def features_of(backbone: nn.Module, images: torch.Tensor, device=None) -> torch.Tensor:
    """The backbone's features of uint8 `images`, batches of 256, on `device` (default: the
    images' device; the uint8 batches are copied there before the conversion to floats)."""
    norm = T.Normalize(MEAN, STD)
    out = []
    for start in range(0, images.shape[0], KNN_BATCH):
        x = images[start : start + KNN_BATCH]
        if device is not None:
            x = x.to(device, non_blocking=True)
        x = x.float().div_(255.0)
        out.append(backbone(norm(x)))
    return torch.cat(out)


@torch.no_grad()
def knn_evaluate(backbone, train_x, train_y, test_x, test_y, num_classes=10, device=None):
    """kNN accuracies of the backbone's features; `device` None: where the tensors are (the
    CPU), else the images are fed to the backbone there and the votes are counted there."""
    was_training = backbone.training
    backbone.eval()
    bank = F.normalize(features_of(backbone, train_x, device), dim=1)
    queries = F.normalize(features_of(backbone, test_x, device), dim=1)
    backbone.train(was_training)
    if device is not None:
        train_y, test_y = train_y.to(device), test_y.to(device)
    bank_t = bank.t().contiguous()
    results = []
    for k, t in KNN_SETTINGS:
        k = min(k, bank.shape[0])
        top1 = top5 = 0
        for start in range(0, queries.shape[0], KNN_BATCH):
            q = queries[start : start + KNN_BATCH]
            y = test_y[start : start + KNN_BATCH]
            pred = knn_predict(q, bank_t, train_y, num_classes, knn_k=k, knn_t=t)
            top1 += (pred[:, 0] == y).sum().item()
            top5 += (pred[:, : min(5, num_classes)] == y.unsqueeze(1)).any(dim=1).sum().item()
        n = queries.shape[0]
        results.append((k, t, 100.0 * top1 / n, 100.0 * top5 / n))
    return results


def print_knn(results, prefix="kNN"):
    for k, t, top1, top5 in results:
        print(f"{prefix} (k = {k}, T = {t}): top-1 {top1:.2f}%, top-5 {top5:.2f}%", flush=True)


# ---------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recipe", choices=sorted(RECIPES), default="moco_v2",
                    help="which Rust recipe to replicate (default moco_v2)")
    ap.add_argument("--data", type=Path, default=Path("/usr/share/datasets/fashion-mnist"))
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads (main process)")
    ap.add_argument("--workers", type=int, default=2, help="DataLoader worker processes")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="where the model, queue and batches live (augmentation stays in the "
                         "DataLoader workers on the CPU); default cpu")
    ap.add_argument("--backbone", choices=sorted(BACKBONES), default="small",
                    help="small (the Rust CPU default) or resnet18 with the CIFAR stem (the Rust "
                         "GPU default); default small")
    ap.add_argument("--batch", type=int, default=BATCH,
                    help=f"images per step (default {BATCH}, the recipes' batch)")
    ap.add_argument("--max-steps", type=int, default=None,
                    help="stop after this many steps (a smoke test; the lr plan stays the full run's)")
    ap.add_argument("--knn-subset", type=int, default=None,
                    help="kNN on the first N training and N test images only (a smoke test)")
    ap.add_argument("--knn-at-init", action="store_true",
                    help="also score the untrained backbone before training, as the Rust recipe does")
    args = ap.parse_args()
    cfg = RECIPES[args.recipe]
    batch_size = args.batch
    if batch_size < 2:
        raise SystemExit(f"--batch {batch_size}: must be at least 2")
    base_lr = cfg["lr"](batch_size)
    weight_decay = cfg["weight_decay"](args.backbone)
    cosine_momentum = cfg["cosine_momentum"](args.backbone)
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch.cuda.is_available() is False")
    device = torch.device(args.device)

    def clock() -> float:
        """time.perf_counter() after the GPU's queued work has finished (on cuda)."""
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, {LIGHTLY}; "
          f"{args.threads} threads, {args.workers} workers, "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}", flush=True)
    if cuda:
        print(f"device: {torch.cuda.get_device_name(device)} (CUDA {torch.version.cuda}, cuDNN "
              f"{torch.backends.cudnn.version()}; cudnn.benchmark "
              f"{torch.backends.cudnn.benchmark}, cudnn.allow_tf32 "
              f"{torch.backends.cudnn.allow_tf32}, matmul.allow_tf32 "
              f"{torch.backends.cuda.matmul.allow_tf32})", flush=True)

    train_x, train_y = load_split(args.data, "train")
    test_x, test_y = load_split(args.data, "t10k")
    side, channels = train_x.shape[2], train_x.shape[1]
    assert channels == 1 and side == 28, f"expected 1x28x28 images, got {tuple(train_x.shape[1:])}"
    print(f"data: {train_x.shape[0]} training, {test_x.shape[0]} test images from {args.data}",
          flush=True)
    knn_train_x, knn_train_y, knn_test_x, knn_test_y = train_x, train_y, test_x, test_y
    if args.knn_subset is not None:
        n = args.knn_subset
        knn_train_x, knn_train_y = train_x[:n], train_y[:n]
        knn_test_x, knn_test_y = test_x[:n], test_y[:n]

    dataset = TwoViews(train_x, view_transform(side))
    generator = torch.Generator().manual_seed(args.seed)
    loader = DataLoader(
        dataset, batch_size=batch_size, shuffle=True, drop_last=True, num_workers=args.workers,
        persistent_workers=args.workers > 0, prefetch_factor=2 if args.workers > 0 else None,
        generator=generator, pin_memory=cuda,
    )
    batches = len(loader)  # 60000 // 128 = 468 (drop_last, src/data/loader.rs num_batches)
    total_steps = args.epochs * batches
    # common.rs `prepare`: the recipe's warm-up capped at the epochs
    warmup_epochs = min(cfg["warmup_epochs"], args.epochs)
    warmup_steps = warmup_epochs * batches

    # built on the CPU (the same random draws on either device), then moved
    model = MoCoV2(hidden_dim=cfg["hidden_dim"], backbone=args.backbone).train()
    tau = cfg["temperature"]
    if cfg["soft_nce"] is None:
        criterion = NTXentLoss(temperature=tau, memory_bank_size=(QUEUE, OUT_DIM))
        queue = None
    else:
        criterion = SoftNCELoss(temperature=tau, **cfg["soft_nce"])
        # src/method/queue.rs: normalised Gaussian keys, FIFO of 2B = 256 keys per step
        queue = MemoryBankModule(size=(QUEUE, OUT_DIM), feature_dim_first=False).to(device)
    model.to(device)
    criterion.to(device)  # NTXentLoss's memory bank; SoftNCE's weights
    optimizer = torch.optim.SGD(model.online_parameters(), lr=base_lr, momentum=MOMENTUM_SGD,
                                weight_decay=weight_decay)
    n_params = sum(p.numel() for p in model.online_parameters())
    soft = cfg["soft_nce"]
    loss_desc = (f"InfoNCE tau {tau}" if soft is None else
                 f"symmetric SoftNCE tau {tau} alpha {soft['alpha']} K {soft['top_k']} "
                 f"{soft['weights']}")
    print(f"{args.recipe}: {args.epochs} epochs x {batches} steps, batch {batch_size}, lr "
          f"{base_lr:g} ({warmup_epochs} warm-up epochs), weight decay {weight_decay:g}, backbone "
          f"{args.backbone} ({n_params} trainable parameters with the projector), queue {QUEUE}, "
          f"{loss_desc}, m {EMA_MOMENTUM}{' rising to 1 (cosine)' if cosine_momentum else ''}, "
          f"device {args.device}", flush=True)
    knn_device = device if cuda else None

    if args.knn_at_init:
        t = clock()
        res = knn_evaluate(model.backbone, knn_train_x, knn_train_y, knn_test_x, knn_test_y,
                           device=knn_device)
        print_knn(res, "kNN at initialisation")
        print(f"  ({clock() - t:.1f} s)", flush=True)

    step = 0
    done = False
    train_start = clock()
    train_end = train_start
    for epoch in range(args.epochs):
        epoch_start = clock()
        loss_sum, images, lr = 0.0, 0, 0.0
        for x1, x2 in loader:
            if cuda:
                x1 = x1.to(device, non_blocking=True)
                x2 = x2.to(device, non_blocking=True)
            lr = lr_at(step, total_steps, base_lr, warmup_steps)
            for group in optimizer.param_groups:
                group["lr"] = lr
            if queue is None:  # moco_v2
                k = model.forward_momentum(x2)  # key encoder, training-mode BN, no gradient
                q = model(x1)
                loss = criterion(q, k)  # normalises q and k; negatives = the queue; enqueues k
            else:  # light_moco: MoCo::forward with symmetric SoftNCE, in ours' order
                k2 = F.normalize(model.forward_momentum(x2), dim=1)
                q1 = model(x1)
                k1 = F.normalize(model.forward_momentum(x1), dim=1)
                q2 = model(x2)
                # the queue before this step; [k1; k2] enqueued (ours: after the step)
                _, negatives = queue(torch.cat([k1, k2]), update=True)
                loss = criterion(q1, k2, negatives) + criterion(q2, k1, negatives)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            loss_value = loss.item()  # the Rust trainer's one read-back per step
            if not math.isfinite(loss_value):
                raise SystemExit(f"non-finite loss {loss_value} at step {step}")
            # after the step, as MoCo::after_step (src/method/momentum.rs `momentum_at`: the
            # cosine rise at progress step / total_steps, step the 0-based index of this step)
            m = cosine_momentum_at(EMA_MOMENTUM, step / total_steps) if cosine_momentum \
                else EMA_MOMENTUM
            model.update_momentum(m)
            loss_sum += loss_value
            images += x1.shape[0]
            step += 1
            train_end = clock()
            if args.max_steps is not None and step >= args.max_steps:
                done = True
                break
        seconds = clock() - epoch_start
        steps_in_epoch = images // batch_size
        print(f"epoch {epoch + 1}/{args.epochs}: mean loss {loss_sum / max(steps_in_epoch, 1):.4f}, "
              f"lr {lr:.5f}, {images / seconds:.1f} images/s, {seconds:.1f} s"
              + (f" ({steps_in_epoch} steps, --max-steps)" if done else ""), flush=True)
        if done:
            break
    wall = train_end - train_start
    trained_images = step * batch_size

    knn_start = clock()
    results = knn_evaluate(model.backbone, knn_train_x, knn_train_y, knn_test_x, knn_test_y,
                           device=knn_device)
    knn_s = clock() - knn_start
    print(f"done: {step} steps, {trained_images / wall:.1f} images/s, training {wall:.1f} s, "
          f"kNN {knn_s:.1f} s (bank {knn_train_x.shape[0]}, queries {knn_test_x.shape[0]})",
          flush=True)
    print_knn(results)
    total = clock() - PROCESS_START
    print(f"total process time {total:.1f} s", flush=True)
    if cuda:  # the whole process: training and kNN
        mib = 1024.0 * 1024.0
        peak_alloc = torch.cuda.max_memory_allocated(device) / mib
        peak_reserved = torch.cuda.max_memory_reserved(device) / mib
        print(f"GPU memory: peak allocated {peak_alloc:.1f} MiB, peak reserved "
              f"{peak_reserved:.1f} MiB", flush=True)
    else:
        peak_alloc = peak_reserved = float("nan")
    (k20, t20, top1, top5), (_, _, top1_200, top5_200) = results[0], results[1]
    print(
        f"RESULT side=pytorch recipe={args.recipe} images_per_s={trained_images / wall:.2f} "
        f"wall_s={wall:.2f} "
        f"knn_top1={top1:.2f} knn_top5={top5:.2f} knn200_top1={top1_200:.2f} "
        f"knn200_top5={top5_200:.2f} knn_s={knn_s:.2f} "
        f"images_per_s_incl_knn={trained_images / (wall + knn_s):.2f} steps={step} "
        f"images={trained_images} epochs={args.epochs} threads={args.threads} "
        f"workers={args.workers} total_s={total:.2f} device={args.device} "
        f"backbone={args.backbone} batch={batch_size} peak_alloc_mib={peak_alloc:.1f} "
        f"peak_reserved_mib={peak_reserved:.1f}",
        flush=True,
    )


if __name__ == "__main__":
    main()
