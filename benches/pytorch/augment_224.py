#!/usr/bin/env python3
"""torchvision counterpart of `AUGMENT_SIDE=224 cargo bench --bench augment`: what a DataLoader
worker does to each image after its RandomResizedCrop(224), for MoCo v2's and SimCLR's ImageNet
pipelines, on one core.

    python3 benches/pytorch/augment_224.py [--images 64] [--repeats 5]

Two ways torchvision is used, both per image (its transforms draw one set of parameters per
call, and a DataLoader worker calls them image by image):
- `pil`: the papers' reference code (MoCo v2's main_moco.py, SimCLR's): PIL images,
  RandomHorizontalFlip, RandomApply(ColorJitter), RandomGrayscale, a Gaussian blur with
  p 0.5 (MoCo v2: PIL's ImageFilter.GaussianBlur(sigma in [0.1, 2]); SimCLR: torchvision's
  GaussianBlur(23)), ToTensor, Normalize;
- `v2`: transforms.v2 on uint8 tensors, ToDtype(float), then the same operations.
The images are 224 x 224 x 3 pseudo-random bytes, as the Rust side's; two views each. Prints
images/s (source images, two views each) for each pipeline and way.
"""
import argparse
import random
import time

import numpy as np
import torch
import torchvision
import torchvision.transforms as T1
import torchvision.transforms.v2 as T
from PIL import Image, ImageFilter

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


class PilBlur:
    """MoCo v2's GaussianBlur (main_moco.py / loader.py): PIL's filter, sigma drawn in (0.1, 2)."""

    def __init__(self, sigma=(0.1, 2.0)):
        self.sigma = sigma

    def __call__(self, x):
        return x.filter(ImageFilter.GaussianBlur(radius=random.uniform(*self.sigma)))


def jitter(strength, moco):
    if moco:
        return T1.ColorJitter(0.4, 0.4, 0.4, 0.1)
    s = strength
    return T1.ColorJitter(0.8 * s, 0.8 * s, 0.8 * s, 0.2 * s)


def pil_pipeline(moco):
    blur = PilBlur() if moco else T1.GaussianBlur(23, sigma=(0.1, 2.0))
    return T1.Compose([
        T1.RandomHorizontalFlip(),
        T1.RandomApply([jitter(1.0, moco)], p=0.8),
        T1.RandomGrayscale(p=0.2),
        T1.RandomApply([blur], p=0.5),
        T1.ToTensor(),
        T1.Normalize(MEAN, STD),
    ])


def v2_pipeline(moco):
    j = T.ColorJitter(0.4, 0.4, 0.4, 0.1) if moco else T.ColorJitter(0.8, 0.8, 0.8, 0.2)
    return T.Compose([
        T.ToDtype(torch.float32, scale=True),
        T.RandomHorizontalFlip(),
        T.RandomApply([j], p=0.8),
        T.RandomGrayscale(p=0.2),
        T.RandomApply([T.GaussianBlur(23, sigma=(0.1, 2.0))], p=0.5),
        T.Normalize(MEAN, STD),
    ])


def median_time(fn, repeats):
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(1)
    random.seed(0)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    arrays = [rng.integers(0, 256, (224, 224, 3), dtype=np.uint8) for _ in range(a.images)]
    pils = [Image.fromarray(x) for x in arrays]
    tensors = [torch.from_numpy(x).permute(2, 0, 1).contiguous() for x in arrays]
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, 1 thread, "
          f"{a.images} images of 224 px, two views each")
    for name, moco in [("moco_v2", True), ("simclr", False)]:
        for way, images, tf in [("pil", pils, pil_pipeline(moco)),
                                ("v2", tensors, v2_pipeline(moco))]:
            def views():
                return [torch.stack([tf(x) for x in images]) for _ in range(2)]
            t = median_time(views, a.repeats)
            print(f"{name} {way}: {t * 1e3:.0f} ms per batch, {a.images / t:.1f} images/s")


if __name__ == "__main__":
    main()
