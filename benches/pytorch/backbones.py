#!/usr/bin/env python3
"""The work of benches/backbones.rs in PyTorch: forward + backward at batch 64 on the CPU.

    python3 benches/pytorch/backbones.py [--threads 2] [--batch 64] [--iters 5] [--profile] [name ...]

torch 2.15.0 / torchvision 0.29.2, CPU. Same networks as the Rust bench (torchvision's classes;
ResNets with the CIFAR stem, WRN in the layout of models/src/wide_resnet.rs), training mode,
loss = mean of the pooled features, one backward pass; prints images/s (median of --iters timed
steps after one warm-up step).
"""

import argparse
import os
import statistics
import time

# On a shared machine OpenMP's default spin-waiting collapses under oversubscription (LeNet:
# 175 images/s instead of 3500 with 2 threads); passive waiting is what rayon does in burn.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch
import torchvision
from torch import nn
from torchvision.models import resnet as tv_resnet


class Features(nn.Module):
    """Pooled features of a torchvision classifier (its head left out)."""

    def __init__(self, model, kind):
        super().__init__()
        self.model, self.kind = model, kind

    def forward(self, x):
        m = self.model
        if self.kind == "resnet":
            x = m.maxpool(m.relu(m.bn1(m.conv1(x))))
            x = m.layer4(m.layer3(m.layer2(m.layer1(x))))
            return torch.flatten(m.avgpool(x), 1)
        if self.kind == "vgg":
            return m.features(x).mean(dim=(2, 3))
        return torch.flatten(m.avgpool(m.features(x)), 1)


def cifar_resnet(ctor):
    m = ctor()
    m.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    m.maxpool = nn.Identity()
    return Features(m, "resnet")


class WideBlock(nn.Module):
    def __init__(self, cin, cout, stride, drop):
        super().__init__()
        self.bn1, self.conv1 = nn.BatchNorm2d(cin), nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn2, self.conv2 = nn.BatchNorm2d(cout), nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.drop = nn.Dropout(drop)
        self.shortcut = nn.Conv2d(cin, cout, 1, stride, 0, bias=False) if cin != cout else None

    def forward(self, x):
        pre = torch.relu(self.bn1(x))
        res = self.shortcut(pre) if self.shortcut is not None else x
        y = torch.relu(self.bn2(self.conv1(pre)))
        return self.conv2(self.drop(y)) + res


class WideResNet(nn.Module):
    def __init__(self, depth, k, drop=0.3):
        super().__init__()
        n = (depth - 4) // 6
        layers, cin = [], 16
        for width, stride in [(16 * k, 1), (32 * k, 2), (64 * k, 2)]:
            for i in range(n):
                layers.append(WideBlock(cin, width, stride if i == 0 else 1, drop))
                cin = width
        self.conv1, self.blocks, self.bn = nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.Sequential(*layers), nn.BatchNorm2d(cin)

    def forward(self, x):
        return torch.relu(self.bn(self.blocks(self.conv1(x)))).mean(dim=(2, 3))


class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 6, 5, padding=2), nn.Conv2d(6, 16, 5)
        self.fc1, self.fc2 = nn.Linear(400, 120), nn.Linear(120, 84)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.max_pool2d(torch.relu(self.conv2(x)), 2)
        return torch.relu(self.fc2(torch.relu(self.fc1(torch.flatten(x, 1)))))


M = torchvision.models
MODELS = {
    "resnet18_cifar": (lambda: cifar_resnet(M.resnet18), (3, 32, 32)),
    "resnet34_cifar": (lambda: cifar_resnet(M.resnet34), (3, 32, 32)),
    "resnet50_cifar": (lambda: cifar_resnet(M.resnet50), (3, 32, 32)),
    "efficientnet_b0": (lambda: Features(M.efficientnet_b0(), "pool"), (3, 32, 32)),
    "efficientnet_b1": (lambda: Features(M.efficientnet_b1(), "pool"), (3, 32, 32)),
    "mobilenet_v3_large": (lambda: Features(M.mobilenet_v3_large(), "pool"), (3, 32, 32)),
    "mobilenet_v3_small": (lambda: Features(M.mobilenet_v3_small(), "pool"), (3, 32, 32)),
    "wrn_16_8": (lambda: WideResNet(16, 8), (3, 32, 32)),
    "wrn_28_10": (lambda: WideResNet(28, 10), (3, 32, 32)),
    "vgg16_bn": (lambda: Features(M.vgg16_bn(), "vgg"), (3, 32, 32)),
    "lenet5": (LeNet, (1, 28, 28)),
}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--profile", action="store_true", help="print torch.profiler's op table for one step")
    p.add_argument("names", nargs="*")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, {a.threads} threads, batch {a.batch}")
    for name in a.names or MODELS:
        ctor, shape = MODELS[name]
        model = ctor().train()
        x = torch.randn(a.batch, *shape)
        times = []
        for i in range(a.iters + 1):
            t = time.perf_counter()
            model.zero_grad(set_to_none=True)
            model(x).mean().backward()
            if i > 0:
                times.append(time.perf_counter() - t)
        dt = statistics.median(times)
        print(f"{name:20s} {a.batch / dt:8.1f} images/s  ({dt * 1000:.0f} ms/step)", flush=True)
        if a.profile:
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CPU]) as prof:
                model.zero_grad(set_to_none=True)
                model(x).mean().backward()
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))


if __name__ == "__main__":
    main()
