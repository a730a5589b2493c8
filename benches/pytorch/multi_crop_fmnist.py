"""SwAV and DINO with lightly + PyTorch on Fashion-MNIST: the replica of the Rust recipes, for the
side-by-side kNN and images/s of the method table (benches/README.md).

    recipe swav --dataset fashion-mnist --data-dir /usr/share/datasets/fashion-mnist --epochs 3
    recipe dino --dataset fashion-mnist --data-dir /usr/share/datasets/fashion-mnist --epochs 3

Usage:

    python3 benches/pytorch/multi_crop_fmnist.py --recipe swav|dino [--epochs 3] [--local-crops 6]

It prints a `RESULT side=pytorch ...` line like benches/pytorch/moco_v2_fmnist.py, whose data
reader, small ResNet, kNN monitor and learning-rate plan it imports (the 60,000 training images,
kNN k = 20, T = 0.07 and k = 200, T = 0.1 against the 10,000 test images).

What it mirrors (paths in this repository):
- Recipes: recipes/src/recipes/multi_crop.rs: batch 128, lr 0.6 x 128 / 256 = 0.3 (SwAV) and
  0.3 x 128 / 256 = 0.15 (DINO), 2 warm-up epochs capped at the epochs, then a cosine to 0
  (src/optim/schedule.rs); LARS (momentum 0.9, eta 0.02, weight decay 1e-6, eps 1e-8; 1-D
  parameters excluded from the trust ratio and the decay) as benches/pytorch/redundancy_fmnist.py.
- Multi-crop (src/pipeline.rs `PipelineConfig::multi_crop`, the recipe's scales on 28-pixel
  images): two global crops of 28 px, scale (0.5, 1); `--local-crops` local crops of 12 px,
  scale (0.2, 0.5); ratio (3/4, 4/3), bilinear without antialiasing (src/augment/crop.rs).
  SwAV: SimCLR's small-image operations on every crop (flip 0.5, jitter (0.4, 0.4, 0.4, 0.1)
  p 0.8, grayscale 0.2, no blur). DINO: BYOL's (jitter (0.4, 0.4, 0.2, 0.1) p 0.8, grayscale
  0.2, blur 3x3 sigma (0.1, 2) p 1.0 / 0.1 on the global views and 0.5 on the local crops,
  solarisation p 0.2 on the second global view). Normalisation (0.286, 0.353).
  Crops of one resolution go through the networks together (the authors' multi-crop forward,
  src/method/{swav,dino}.rs).
- SwAV (src/method/swav.rs): lightly's SwaVProjectionHead(64, 2048, 128), 3000 prototypes
  without bias (the paper's; lightly's SwaVPrototypes has a bias, replaced here), normalised
  before every step (ours: after every step and at initialisation: the same values), frozen for
  the first epoch (lightly's n_steps_frozen_prototypes = one epoch of steps); lightly's SwaVLoss
  (temperature 0.1, 3 Sinkhorn iterations at eps 0.05); no queue.
- DINO (src/method/dino.rs): lightly's DINOProjectionHead(64, 2048, 256, 4096) (GELU, no BN,
  weight-normalised last layer with gain 1) for student and teacher, last layer frozen for the
  first epoch (cancel_last_layer_gradients); lightly's DINOLoss with teacher temperature
  linspace(0.04, 0.07, 6)[epoch], student 0.1, centre momentum 0.9; teacher momentum
  1 - (1 - 0.996)(1 + cos(pi step / total)) / 2 after every step (src/method/ema.rs); the
  teacher in training mode as the student (its batch norms use the batch).

What differs: the random draws and the initialisation; per-image augmentation in DataLoader
worker processes (ours is batched on the backend).
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
import torchvision
import torchvision.transforms.v2 as T
from torch import nn
from torch.utils.data import DataLoader, Dataset

import lightly
from lightly.loss import DINOLoss, SwaVLoss
from lightly.models.modules import DINOProjectionHead, SwaVProjectionHead, SwaVPrototypes
from lightly.models.utils import deactivate_requires_grad, update_momentum
from lightly.utils.lars import LARS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from moco_v2_fmnist import (  # noqa: E402  (the shared pieces of the MoCo replica)
    MEAN,
    STD,
    SmallResNet,
    knn_evaluate,
    load_split,
    lr_at,
    ours_view,
    print_knn,
)

BATCH = 128
WARMUP_EPOCHS = 2
LOCAL_SIDE = 12
GLOBAL_SCALE = (0.5, 1.0)
LOCAL_SCALE = (0.2, 0.5)
LR = {"swav": 0.6 * BATCH / 256, "dino": 0.3 * BATCH / 256}


def crop_view(side, scale, jitter, blur_p=0.0, solarize_p=0.0):
    """A multi-crop view: crop, flip, colour jitter and grayscale, then blur / solarisation."""
    return ours_view(side, scale, flip=True, jitter=jitter, grayscale=True, blur_p=blur_p,
                     solarize_p=solarize_p)


def transforms(recipe, side, locals_):
    if recipe == "swav":
        j = (0.4, 0.4, 0.4, 0.1)
        g = crop_view(side, GLOBAL_SCALE, j)
        return [g, g] + [crop_view(LOCAL_SIDE, LOCAL_SCALE, j)] * locals_
    j = (0.4, 0.4, 0.2, 0.1)
    return ([crop_view(side, GLOBAL_SCALE, j, blur_p=1.0),
             crop_view(side, GLOBAL_SCALE, j, blur_p=0.1, solarize_p=0.2)]
            + [crop_view(LOCAL_SIDE, LOCAL_SCALE, j, blur_p=0.5)] * locals_)


class MultiCrop(Dataset):
    def __init__(self, images, views):
        self.images, self.views = images, views

    def __len__(self):
        return self.images.shape[0]

    def __getitem__(self, i):
        img = self.images[i]
        return [v(img) for v in self.views]


class SwaV(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = SmallResNet(in_channels=1, width=8)
        self.projection_head = SwaVProjectionHead(self.backbone.feature_dim, 2048, 128)
        self.prototypes = SwaVPrototypes(128, 3000)
        self.prototypes.heads[0] = nn.Linear(128, 3000, bias=False)

    def scores(self, x):
        z = nn.functional.normalize(self.projection_head(self.backbone(x)), dim=1)
        return self.prototypes(z)


class Dino(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = SmallResNet(in_channels=1, width=8)
        self.head = DINOProjectionHead(self.backbone.feature_dim, 2048, 256, 4096,
                                       freeze_last_layer=1)
        self.teacher_backbone = copy.deepcopy(self.backbone)
        self.teacher_head = DINOProjectionHead(self.backbone.feature_dim, 2048, 256, 4096)
        self.teacher_head.load_state_dict(self.head.state_dict())
        deactivate_requires_grad(self.teacher_backbone)
        deactivate_requires_grad(self.teacher_head)

    def student(self, x):
        return self.head(self.backbone(x))

    def teacher(self, x):
        return self.teacher_head(self.teacher_backbone(x))


def split(x, parts):
    return list(x.chunk(parts))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recipe", choices=["swav", "dino"], required=True)
    ap.add_argument("--data", type=Path, default=Path("/usr/share/datasets/fashion-mnist"))
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--local-crops", type=int, default=6)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (main process)")
    ap.add_argument("--workers", type=int, default=2, help="DataLoader worker processes")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-steps", type=int, default=None, help="stop early (a smoke test)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, lightly "
          f"{lightly.__version__}; {args.threads} threads, {args.workers} workers", flush=True)

    train_x, train_y = load_split(args.data, "train")
    test_x, test_y = load_split(args.data, "t10k")
    side = train_x.shape[2]
    views = transforms(args.recipe, side, args.local_crops)
    loader = DataLoader(
        MultiCrop(train_x, views), batch_size=BATCH, shuffle=True, drop_last=True,
        num_workers=args.workers, persistent_workers=args.workers > 0,
        generator=torch.Generator().manual_seed(args.seed),
    )
    batches = len(loader)
    total_steps = args.epochs * batches
    warmup_steps = min(WARMUP_EPOCHS, args.epochs) * batches
    base_lr = LR[args.recipe]

    model = (SwaV() if args.recipe == "swav" else Dino()).train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    decayed = [p for p in trainable if p.ndim > 1]
    excluded = [p for p in trainable if p.ndim <= 1]
    optimizer = LARS(
        [dict(params=decayed, weight_decay=1e-6), dict(params=excluded, weight_decay=0.0)],
        lr=base_lr, momentum=0.9, trust_coefficient=0.02, eps=1e-8,
    )
    if args.recipe == "swav":
        criterion = SwaVLoss(temperature=0.1, sinkhorn_iterations=3, sinkhorn_epsilon=0.05)
    else:
        criterion = DINOLoss(output_dim=4096, warmup_teacher_temp=0.04, teacher_temp=0.07,
                             warmup_teacher_temp_epochs=6, student_temp=0.1,
                             center_momentum=0.9)
        temps = torch.linspace(0.04, 0.07, 6).tolist()
    print(f"{args.recipe}: {args.epochs} epochs x {batches} steps, batch {BATCH}, lr {base_lr:g} "
          f"({min(WARMUP_EPOCHS, args.epochs)} warm-up epochs), LARS, 2 global + "
          f"{args.local_crops} local crops", flush=True)

    step = 0
    train_start = time.perf_counter()
    train_end = train_start
    done = False
    for epoch in range(args.epochs):
        epoch_start = time.perf_counter()
        loss_sum, images = 0.0, 0
        for crops in loader:
            lr = lr_at(step, total_steps, base_lr, warmup_steps)
            for group in optimizer.param_groups:
                group["lr"] = lr
            n = crops[0].shape[0]
            globals_ = torch.cat(crops[:2])
            locals_ = torch.cat(crops[2:]) if len(crops) > 2 else None
            if args.recipe == "swav":
                model.prototypes.normalize()
                frozen = epoch < 1
                model.prototypes.requires_grad_(not frozen)
                high = split(model.scores(globals_), 2)
                low = split(model.scores(locals_), len(crops) - 2) if locals_ is not None else []
                loss = criterion(high, low)
            else:
                with torch.no_grad():
                    teacher = split(model.teacher(globals_), 2)
                student = split(model.student(globals_), 2)
                if locals_ is not None:
                    student += split(model.student(locals_), len(crops) - 2)
                loss = criterion(teacher, student, teacher_temp=temps[min(epoch, 5)])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if args.recipe == "dino":
                model.head.cancel_last_layer_gradients(epoch)
            optimizer.step()
            if args.recipe == "dino":
                m = 1.0 - (1.0 - 0.996) * (1.0 + math.cos(math.pi * step / total_steps)) / 2.0
                update_momentum(model.backbone, model.teacher_backbone, m)
                update_momentum(model.head, model.teacher_head, m)
            value = loss.item()
            if not math.isfinite(value):
                raise SystemExit(f"non-finite loss {value} at step {step}")
            loss_sum += value
            images += n
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
          f"workers={args.workers} local_crops={args.local_crops} "
          f"total_s={time.perf_counter() - PROCESS_START:.2f}", flush=True)


if __name__ == "__main__":
    main()
