#!/usr/bin/env python3
"""torchvision counterpart of benches/augment.rs: the two-view MoCo v2 pipeline (small-image
variant) on a batch of 256 32x32 RGB images, on the CPU.

    pip install torch torchvision
    python3 benches/pytorch/augment.py [--threads 2]

Recorded with torch 2.15.0, torchvision 0.29.2. torchvision's v2 transforms draw one set of random
parameters per call, so per-sample randomness (what the Rust pipeline does) means one call per
image, as a DataLoader worker would do; the "batched" line applies one call to the whole batch
(the same crop, jitter, ... for all 256 images) and is shown as a lower bound on the cost.
"""
import argparse
import time

import torch
import torchvision
import torchvision.transforms.v2 as T

N = 256
MEAN, STD = [0.4914, 0.4822, 0.4465], [0.2470, 0.2435, 0.2616]


def pipeline():
    return T.Compose([
        T.ToDtype(torch.float32, scale=True),
        T.RandomResizedCrop(32, scale=(0.2, 1.0)),
        T.RandomHorizontalFlip(),
        T.RandomApply([T.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8),
        T.RandomGrayscale(p=0.2),
        T.RandomApply([T.GaussianBlur(3, sigma=(0.1, 2.0))], p=0.5),
        T.Normalize(MEAN, STD),
    ])


def timeit(fn, repeats):
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    batch = torch.randint(0, 256, (N, 3, 32, 32), dtype=torch.uint8)
    tf = pipeline()

    def per_sample():
        v1 = torch.stack([tf(img) for img in batch])
        v2 = torch.stack([tf(img) for img in batch])
        return v1, v2

    def batched():
        return tf(batch), tf(batch)

    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, "
          f"{args.threads} threads")
    for name, fn in [("per-sample (one call per image)", per_sample),
                     ("batched (same params for the batch)", batched)]:
        t = timeit(fn, args.repeats)
        print(f"{name}: {t * 1e3:.1f} ms per batch of {N} (two views), {N / t:.0f} images/s")


if __name__ == "__main__":
    main()
