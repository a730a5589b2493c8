#!/usr/bin/env python3
"""The work of benches/train_step.rs in PyTorch: one training step of SimCLR, MoCo v2, BYOL and
SimSiam with ResNet-18 (CIFAR stem) at batch 128 on 32×32 images, on the CPU.

    python3 benches/pytorch/train_step.py [--threads 2] [--batch 128] [--iters 3] [method ...]

Same networks and heads as the Rust methods (defaults of SimClrConfig, MoCoConfig::moco_v2,
ByolConfig, SimSiamConfig): forward of both views, the loss, backward, SGD (momentum 0.9,
weight decay 5e-4), then the EMA / queue update. Views are fixed random tensors (augmentation
is timed separately). Prints source images/s (median of --iters timed steps after one warm-up).
"""

import argparse
import copy
import os
import statistics
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch
import torch.nn.functional as F
import torchvision
from torch import nn


def resnet18_cifar():
    m = torchvision.models.resnet18()
    m.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    m.maxpool = nn.Identity()
    m.fc = nn.Identity()
    return m


def mlp(dims, bn=True, last_bn=False):
    """Linear (+BN) + ReLU layers, a plain linear output (the heads of src/head.rs)."""
    layers = []
    for a, b in zip(dims[:-2], dims[1:-1]):
        layers += [nn.Linear(a, b, bias=not bn)] + ([nn.BatchNorm1d(b)] if bn else []) + [nn.ReLU()]
    layers.append(nn.Linear(dims[-2], dims[-1]))
    if last_bn:
        layers.append(nn.BatchNorm1d(dims[-1]))
    return nn.Sequential(*layers)


def nt_xent(z1, z2, t=0.5):
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    n = z1.shape[0]
    sim = z @ z.t() / t
    sim.fill_diagonal_(float("-inf"))
    target = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)])
    return F.cross_entropy(sim, target)


class SimClr(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone, self.head = resnet18_cifar(), mlp([512, 2048, 128])

    def loss(self, x1, x2):
        return nt_xent(self.head(self.backbone(x1)), self.head(self.backbone(x2)))

    def after_step(self):
        pass


class MoCo(nn.Module):
    def __init__(self, m=0.999, t=0.2, queue=4096):
        super().__init__()
        self.backbone, self.head = resnet18_cifar(), mlp([512, 2048, 128], bn=False)
        self.key = copy.deepcopy(nn.Sequential(self.backbone, self.head))
        for p in self.key.parameters():
            p.requires_grad = False
        self.m, self.t = m, t
        self.register_buffer("queue", F.normalize(torch.randn(queue, 128), dim=1))
        self.ptr, self.pending = 0, None

    def loss(self, x1, x2):
        q = F.normalize(self.head(self.backbone(x1)), dim=1)
        with torch.no_grad():
            k = F.normalize(self.key(x2), dim=1)
        pos = (q * k).sum(1, keepdim=True)
        neg = q @ self.queue.t()
        logits = torch.cat([pos, neg], 1) / self.t
        self.pending = k
        return F.cross_entropy(logits, torch.zeros(q.shape[0], dtype=torch.long))

    @torch.no_grad()
    def after_step(self):
        online = list(self.backbone.parameters()) + list(self.head.parameters())
        for pk, pq in zip(self.key.parameters(), online):
            pk.mul_(self.m).add_(pq, alpha=1 - self.m)
        n = self.pending.shape[0]
        self.queue[self.ptr : self.ptr + n] = self.pending
        self.ptr = (self.ptr + n) % self.queue.shape[0]


class Byol(nn.Module):
    def __init__(self, m=0.99):
        super().__init__()
        self.backbone = resnet18_cifar()
        self.projector = mlp([512, 4096, 256])
        self.predictor = mlp([256, 4096, 256])
        self.target = copy.deepcopy(nn.Sequential(self.backbone, self.projector))
        for p in self.target.parameters():
            p.requires_grad = False
        self.m = m

    def loss(self, x1, x2):
        p1 = self.predictor(self.projector(self.backbone(x1)))
        p2 = self.predictor(self.projector(self.backbone(x2)))
        with torch.no_grad():
            z1, z2 = self.target(x1), self.target(x2)
        cos = lambda p, z: (F.normalize(p, dim=1) * F.normalize(z, dim=1)).sum(1).mean()
        return 4 - 2 * cos(p1, z2) - 2 * cos(p2, z1)

    @torch.no_grad()
    def after_step(self):
        online = list(self.backbone.parameters()) + list(self.projector.parameters())
        for pt, po in zip(self.target.parameters(), online):
            pt.mul_(self.m).add_(po, alpha=1 - self.m)


class SimSiam(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = resnet18_cifar()
        self.projector = mlp([512, 2048, 2048, 2048], last_bn=True)
        self.predictor = mlp([2048, 512, 2048])

    def loss(self, x1, x2):
        z1 = self.projector(self.backbone(x1))
        z2 = self.projector(self.backbone(x2))
        p1, p2 = self.predictor(z1), self.predictor(z2)
        d = lambda p, z: -F.cosine_similarity(p, z.detach(), dim=1).mean()
        return 0.5 * d(p1, z2) + 0.5 * d(p2, z1)

    def after_step(self):
        pass


METHODS = {"simclr": SimClr, "moco_v2": MoCo, "byol": Byol, "simsiam": SimSiam}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("methods", nargs="*", default=list(METHODS))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    x1 = torch.rand(args.batch, 3, 32, 32)
    x2 = torch.rand(args.batch, 3, 32, 32)
    print(f"torch {torch.__version__}, {args.threads} threads, batch {args.batch}")
    for name in args.methods:
        model = METHODS[name]().train()
        opt = torch.optim.SGD(
            [p for p in model.parameters() if p.requires_grad],
            lr=0.05, momentum=0.9, weight_decay=5e-4,
        )
        times = []
        for i in range(args.iters + 1):
            t0 = time.perf_counter()
            loss = model.loss(x1, x2)
            opt.zero_grad()
            loss.backward()
            opt.step()
            model.after_step()
            if i > 0:
                times.append(time.perf_counter() - t0)
        t = statistics.median(times)
        print(f"{name:10s} {t * 1000:9.1f} ms/step  {args.batch / t:7.2f} images/s")


if __name__ == "__main__":
    main()
