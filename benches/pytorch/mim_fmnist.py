"""MAE and SimMIM with lightly + PyTorch on Fashion-MNIST: the replica of the Rust recipes, for
the side-by-side kNN and images/s of the method table (benches/README.md, benches/mim.sh).

    recipe mae    --dataset fashion-mnist --data-dir /usr/share/datasets/fashion-mnist --epochs 1
    recipe simmim --dataset fashion-mnist --data-dir /usr/share/datasets/fashion-mnist --epochs 1

Usage:

    python3 benches/pytorch/mim_fmnist.py --recipe mae|simmim [--epochs 1]

It prints a `RESULT side=pytorch ...` line like benches/pytorch/moco_v2_fmnist.py, whose data
reader, kNN monitor and learning-rate plan it imports (the 60,000 training images, kNN k = 20,
T = 0.07 and k = 200, T = 0.1 against the 10,000 test images, on the class token).

What it mirrors (paths in this repository):
- Backbone: `--backbone vit-tiny` on 28-pixel images (recipes/src/recipes/common/backbone.rs,
  models/src/vit.rs): timm's VisionTransformer, patch 4 (a 7 x 7 grid), width 192, 12 blocks of
  3 heads, MLP ratio 4, qkv bias, LayerNorm eps 1e-6, class token; features = the class token
  after the final norm.
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
- Augmentation: one view, RandomResizedCrop(28, scale (0.2, 1) for MAE, (0.67, 1) for SimMIM,
  ratio (3/4, 4/3)), flip 0.5, normalisation (0.286, 0.353), as the recipes' config.json records.

What differs: the random draws; per-image augmentation in DataLoader worker processes (ours is
batched on the backend); lightly initialises the ViT its way (timm's init plus sine-cosine
positional embeddings), ours with burn's initialisers.
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
from torch.utils.data import DataLoader, Dataset

import lightly
from lightly.models import utils
from lightly.models.modules import MAEDecoderTIMM, MaskedVisionTransformerTIMM
from timm.models.vision_transformer import VisionTransformer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from moco_v2_fmnist import MEAN, STD, knn_evaluate, load_split, lr_at, print_knn  # noqa: E402

BATCH = 128
PATCH = 4


class OneView(Dataset):
    def __init__(self, images, transform):
        self.images, self.transform = images, transform

    def __len__(self):
        return self.images.shape[0]

    def __getitem__(self, i):
        return self.transform(self.images[i])


def view(side: int, scale) -> T.Compose:
    return T.Compose([
        T.ToDtype(torch.float32, scale=True),
        T.RandomResizedCrop(side, scale=scale, ratio=(3.0 / 4.0, 4.0 / 3.0),
                            interpolation=T.InterpolationMode.BILINEAR, antialias=True),
        T.RandomHorizontalFlip(p=0.5),
        T.Normalize(MEAN, STD),
    ])


def vit_tiny(side: int) -> VisionTransformer:
    return VisionTransformer(img_size=side, patch_size=PATCH, in_chans=1, num_classes=0,
                             embed_dim=192, depth=12, num_heads=3, mlp_ratio=4.0, qkv_bias=True,
                             global_pool="token")


class Mae(nn.Module):
    """lightly's MAE example (examples/pytorch/mae.py) with norm_pix targets."""

    def __init__(self, vit):
        super().__init__()
        self.backbone = MaskedVisionTransformerTIMM(vit=vit)
        self.sequence_length = self.backbone.sequence_length
        self.decoder = MAEDecoderTIMM(num_patches=vit.patch_embed.num_patches, patch_size=PATCH,
                                      in_chans=1, embed_dim=192, decoder_embed_dim=128,
                                      decoder_depth=2, decoder_num_heads=4, mlp_ratio=4.0,
                                      proj_drop_rate=0.0, attn_drop_rate=0.0)

    def loss(self, images):
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


class SimMim(nn.Module):
    """lightly's SimMIM example (examples/pytorch/simmim.py) with SimMIM's unit masks."""

    def __init__(self, vit):
        super().__init__()
        self.backbone = MaskedVisionTransformerTIMM(vit=vit)
        self.decoder = nn.Linear(192, PATCH * PATCH * 1)
        self.grid = vit.patch_embed.grid_size[0]
        self.gen = torch.Generator().manual_seed(0)

    def loss(self, images):
        b = images.shape[0]
        hidden = unit_masks(b, self.grid, 2, 0.6, self.gen)
        mask = torch.cat([torch.zeros(b, 1, dtype=torch.bool), hidden], dim=1)
        x_encoded = self.backbone.encode(images=images, mask=mask)
        x_out = self.decoder(x_encoded[:, 1:])
        target = utils.patchify(images, PATCH)
        error = (x_out - target).abs() * hidden.unsqueeze(-1)
        return error.sum() / (hidden.sum() * target.shape[-1])


RECIPES = {
    "mae": dict(model=Mae, scale=(0.2, 1.0), lr=1.5e-4 * BATCH / 256, betas=(0.9, 0.95),
                warmup_epochs=1),
    "simmim": dict(model=SimMim, scale=(0.67, 1.0), lr=8e-4 * BATCH / 512, betas=(0.9, 0.999),
                   warmup_epochs=2),
}


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
        OneView(train_x, view(side, cfg["scale"])), batch_size=BATCH, shuffle=True,
        drop_last=True, num_workers=args.workers, persistent_workers=args.workers > 0,
        generator=torch.Generator().manual_seed(args.seed),
    )
    batches = len(loader)
    total_steps = args.epochs * batches
    warmup_steps = min(cfg["warmup_epochs"], args.epochs) * batches
    vit = vit_tiny(side)
    model = cfg["model"](vit).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], betas=cfg["betas"],
                                  eps=1e-5, weight_decay=0.05)
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
            loss = model.loss(x)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            value = loss.item()
            if not math.isfinite(value):
                raise SystemExit(f"non-finite loss {value} at step {step}")
            loss_sum += value
            images += x.shape[0]
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
