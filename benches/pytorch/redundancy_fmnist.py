"""Barlow Twins and VICReg with lightly + PyTorch on Fashion-MNIST: the replica of the Rust
recipes, for the side-by-side kNN and images/s of the method table (benches/README.md).

    recipe barlow_twins --dataset fashion-mnist --data-dir /usr/share/datasets/fashion-mnist --epochs 3
    recipe vicreg       --dataset fashion-mnist --data-dir /usr/share/datasets/fashion-mnist --epochs 3

Usage:

    python3 benches/pytorch/redundancy_fmnist.py --recipe barlow_twins|vicreg [--epochs 3]

It prints a `RESULT side=pytorch ...` line like benches/pytorch/moco_v2_fmnist.py, whose data
reader, small ResNet, kNN monitor and learning-rate plan it imports (the same settings: the
60,000 training images, kNN k = 20, T = 0.07 and k = 200, T = 0.1 against the 10,000 test
images).

What it mirrors (paths in this repository):
- Recipes: recipes/src/recipes/redundancy.rs: batch 128, lr 0.3 x 128 / 256 = 0.15, 2 warm-up
  epochs capped at the epochs, then a cosine to 0 (src/optim/schedule.rs; `lr_at`).
- Network: the CPU default backbone (`SmallResNet`, 64-d features) and a three-layer projector
  [2048, 2048, 2048] with BatchNorm + ReLU after the first two layers: lightly's
  BarlowTwinsProjectionHead / VICRegProjectionHead (src/method/{barlow_twins,vicreg}.rs with
  `MlpHeadConfig::new(64, 2048, 2048).with_num_layers(3)`: hidden linear layers without bias,
  the last with one, as lightly's heads).
- Losses: lightly's BarlowTwinsLoss(lambda_param=5e-3) x 0.1 (the recipe's `scale`, solo-learn's
  `scale_loss`) and VICRegLoss() (25 / 25 / 1, eps 1e-4); equal to ours in float64
  (tests/pytorch/ssl_losses.py).
- Optimiser: lightly's LARS with the recipe's settings (src/optim/lars.rs `LarsConfig`: momentum
  0.9, eta 0.02, weight decay 1e-4, eps 1e-8; 1-D parameters - biases and BatchNorm - excluded
  from the trust ratio and the weight decay: here the group with weight_decay 0, which lightly's
  LARS leaves unscaled). The same update rule, step for step.
- Augmentation: `PipelineConfig::byol(28, 1)` as the recipe's config.json records it, per image
  on floats in [0, 1]: resized crop of scale (0.5, 1) (the recipes' floor on 28-pixel images),
  ratio (3/4, 4/3); flip 0.5; colour jitter (0.4, 0.4, 0.2, 0.1) with p 0.8 (saturation and hue
  do nothing to one channel); grayscale p 0.2 (nothing to one channel); blur 3x3 with
  sigma in (0.1, 2), p 1.0 on view 1 and 0.1 on view 2; solarisation at 0.5, p 0 and 0.2;
  normalisation (0.286, 0.353).

What differs: the random draws; per-image augmentation in DataLoader worker processes (ours is
batched on the backend).
"""

import time

PROCESS_START = time.perf_counter()

import argparse
import math
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch
import torchvision
import torchvision.transforms.v2 as T
from torch import nn
from torch.utils.data import DataLoader

import lightly
from lightly.loss import BarlowTwinsLoss, VICRegLoss
from lightly.models.modules import BarlowTwinsProjectionHead
from lightly.models.modules.heads import VICRegProjectionHead
from lightly.utils.lars import LARS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from moco_v2_fmnist import (  # noqa: E402  (the shared pieces of the MoCo replica)
    MEAN,
    STD,
    SmallResNet,
    TwoViews,
    knn_evaluate,
    load_split,
    lr_at,
    print_knn,
)

BATCH = 128
PROJECTOR = 2048
RECIPES = {
    "barlow_twins": dict(head=BarlowTwinsProjectionHead, loss=lambda: BarlowTwinsLoss(5e-3),
                         scale=0.1),
    "vicreg": dict(head=VICRegProjectionHead, loss=lambda: VICRegLoss(), scale=1.0),
}
LR = 0.3 * BATCH / 256
WARMUP_EPOCHS = 2


class TwoTransforms(TwoViews):
    """The two views of an image through their own transforms (BYOL's asymmetric views)."""

    def __init__(self, images, first, second):
        super().__init__(images, first)
        self.second = second

    def __getitem__(self, i):
        img = self.images[i]
        return self.transform(img), self.second(img)


def byol_view(side: int, blur_p: float, solarize_p: float) -> T.Compose:
    return T.Compose([
        T.ToDtype(torch.float32, scale=True),
        T.RandomResizedCrop(side, scale=(0.5, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0),
                            interpolation=T.InterpolationMode.BILINEAR, antialias=True),
        T.RandomHorizontalFlip(p=0.5),
        T.RandomApply([T.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8),
        T.RandomGrayscale(p=0.2),
        T.RandomApply([T.GaussianBlur(3, sigma=(0.1, 2.0))], p=blur_p),
        T.RandomSolarize(threshold=0.5, p=solarize_p),
        T.Normalize(MEAN, STD),
    ])


class Model(nn.Module):
    def __init__(self, head):
        super().__init__()
        self.backbone = SmallResNet(in_channels=1, width=8)
        self.projection_head = head(self.backbone.feature_dim, PROJECTOR, PROJECTOR)

    def forward(self, x):
        return self.projection_head(self.backbone(x))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recipe", choices=sorted(RECIPES), required=True)
    ap.add_argument("--data", type=Path, default=Path("/usr/share/datasets/fashion-mnist"))
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (main process)")
    ap.add_argument("--workers", type=int, default=2, help="DataLoader worker processes")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-steps", type=int, default=None, help="stop early (a smoke test)")
    args = ap.parse_args()
    cfg = RECIPES[args.recipe]
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, lightly "
          f"{lightly.__version__}; {args.threads} threads, {args.workers} workers", flush=True)

    train_x, train_y = load_split(args.data, "train")
    test_x, test_y = load_split(args.data, "t10k")
    side = train_x.shape[2]
    dataset = TwoTransforms(train_x, byol_view(side, 1.0, 0.0), byol_view(side, 0.1, 0.2))
    loader = DataLoader(
        dataset, batch_size=BATCH, shuffle=True, drop_last=True, num_workers=args.workers,
        persistent_workers=args.workers > 0, generator=torch.Generator().manual_seed(args.seed),
    )
    batches = len(loader)
    total_steps = args.epochs * batches
    warmup_steps = min(WARMUP_EPOCHS, args.epochs) * batches

    model = Model(cfg["head"]).train()
    criterion = cfg["loss"]()
    decayed = [p for p in model.parameters() if p.ndim > 1]
    excluded = [p for p in model.parameters() if p.ndim <= 1]
    optimizer = LARS(
        [dict(params=decayed, weight_decay=1e-4), dict(params=excluded, weight_decay=0.0)],
        lr=LR, momentum=0.9, trust_coefficient=0.02, eps=1e-8,
    )
    print(f"{args.recipe}: {args.epochs} epochs x {batches} steps, batch {BATCH}, lr {LR:g} "
          f"({min(WARMUP_EPOCHS, args.epochs)} warm-up epochs), LARS, projector "
          f"[{PROJECTOR}, {PROJECTOR}, {PROJECTOR}]", flush=True)

    step = 0
    train_start = time.perf_counter()
    train_end = train_start
    done = False
    for epoch in range(args.epochs):
        epoch_start = time.perf_counter()
        loss_sum, images = 0.0, 0
        for x1, x2 in loader:
            lr = lr_at(step, total_steps, LR, warmup_steps)
            for group in optimizer.param_groups:
                group["lr"] = lr
            loss = criterion(model(x1), model(x2)) * cfg["scale"]
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            value = loss.item()
            if not math.isfinite(value):
                raise SystemExit(f"non-finite loss {value} at step {step}")
            loss_sum += value
            images += x1.shape[0]
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
    knn_start = time.perf_counter()
    results = knn_evaluate(model.backbone, train_x, train_y, test_x, test_y)
    knn_s = time.perf_counter() - knn_start
    print_knn(results)
    (_, _, top1, top5), (_, _, top1_200, _) = results[0], results[1]
    print(f"RESULT side=pytorch recipe={args.recipe} images_per_s={trained / wall:.2f} "
          f"wall_s={wall:.2f} knn_top1={top1:.2f} knn_top5={top5:.2f} knn200_top1={top1_200:.2f} "
          f"knn_s={knn_s:.2f} steps={step} epochs={args.epochs} threads={args.threads} "
          f"workers={args.workers} total_s={time.perf_counter() - PROCESS_START:.2f}", flush=True)


if __name__ == "__main__":
    main()
