#!/usr/bin/env python3
"""Export torchvision backbones, an input batch and PyTorch's features for the Rust parity tests.

Run from the repository root:

    pip install torch torchvision safetensors   # or numpy: the file is written by hand below
    python3 tests/pytorch/export_backbones.py

Written and run with torch 2.15.0 and torchvision 0.29.2 (CPU). It writes, for each model, one
safetensors file in tests/fixtures/ (each well under 1 MB) holding

* the torchvision state_dict under its own keys (what `import::load_torchvision` reads),
* `input`: the image batch,
* `expected.eval.features` / `expected.eval.logits`: pooled features and head output in eval mode,
* `expected.train.features`: pooled features in train mode (batch statistics),
* `expected.after_train.<key>`: every BatchNorm running_mean / running_var after that one
  train-mode forward (PyTorch updates the running variance with the unbiased batch variance).

To keep the files small the networks are torchvision's own classes at reduced width:

* ResNet-18 with the CIFAR stem (3x3 conv, stride 1, no max-pool), base width 4 instead of 64
  (torchvision's BasicBlock and `_make_layer`), 10 classes, input 4x3x32x32;
* EfficientNet-B0 table at width 0.25, depth 0.25, stochastic depth 0 (it is random in training),
  10 classes, input 4x3x32x32;
* MobileNet-V3-Large table at width 0.125, 10 classes, input 4x3x32x32;
* the `small-2x` shape (one BasicBlock per stage, a 3x3 stride-2 stem without max-pool:
  `Stem::Stride2`) at base width 4, one input channel, 10 classes, input 4x1x28x28.

All BatchNorm affine parameters and running statistics are randomised (the defaults would make
eval-mode BN an identity and hide mistakes).
"""

import json
import os
import struct

import torch
import torchvision
from torch import nn
from torchvision.models import efficientnet as tv_eff
from torchvision.models import mobilenetv3 as tv_mnv3
from torchvision.models import resnet as tv_resnet

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures")


def save_safetensors(tensors, path):
    """Minimal safetensors writer (little-endian, header = JSON), to avoid another dependency."""
    header = {}
    blobs = []
    offset = 0
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        dtype = {torch.float32: "F32", torch.int64: "I64"}[t.dtype]
        data = t.numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def randomise_bn(model, gen):
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            c = m.num_features
            with torch.no_grad():
                m.weight.copy_(torch.rand(c, generator=gen) + 0.5)
                m.bias.copy_(torch.randn(c, generator=gen) * 0.2)
                m.running_mean.copy_(torch.randn(c, generator=gen) * 0.2)
                m.running_var.copy_(torch.rand(c, generator=gen) + 0.5)


def export(name, model, features_fn, head_fn, x):
    gen = torch.Generator().manual_seed(1)
    randomise_bn(model, gen)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    model.eval()
    with torch.no_grad():
        feats_eval = features_fn(model, x)
        logits_eval = head_fn(model, feats_eval)
    model.train()
    with torch.no_grad():
        feats_train = features_fn(model, x)
    after = {
        f"expected.after_train.{k}": v.clone()
        for k, v in model.state_dict().items()
        if k.endswith("running_mean") or k.endswith("running_var")
    }
    tensors = dict(state)
    tensors["input"] = x
    tensors["expected.eval.features"] = feats_eval
    tensors["expected.eval.logits"] = logits_eval
    tensors["expected.train.features"] = feats_train
    tensors.update(after)
    path = os.path.join(OUT, f"{name}.safetensors")
    save_safetensors(tensors, path)
    print(f"{path}: {os.path.getsize(path)} bytes, features {tuple(feats_eval.shape)}")


def resnet18_cifar(width, blocks=2, stem_stride=1, channels=3):
    """torchvision's ResNet-18 with a 3x3 stem of stride `stem_stride` and no max-pool (the
    CIFAR stem at stride 1), base width `width`, `blocks` BasicBlocks per stage."""
    m = tv_resnet.resnet18(num_classes=10)
    m.conv1 = nn.Conv2d(channels, width, kernel_size=3, stride=stem_stride, padding=1, bias=False)
    m.bn1 = nn.BatchNorm2d(width)
    m.maxpool = nn.Identity()
    m.inplanes = width
    block = tv_resnet.BasicBlock
    m.layer1 = m._make_layer(block, width, blocks)
    m.layer2 = m._make_layer(block, 2 * width, blocks, stride=2)
    m.layer3 = m._make_layer(block, 4 * width, blocks, stride=2)
    m.layer4 = m._make_layer(block, 8 * width, blocks, stride=2)
    m.fc = nn.Linear(8 * width, 10)
    return m


def resnet_features(m, x):
    x = m.maxpool(m.relu(m.bn1(m.conv1(x))))
    x = m.layer4(m.layer3(m.layer2(m.layer1(x))))
    return torch.flatten(m.avgpool(x), 1)


def pooled_features(m, x):
    return torch.flatten(m.avgpool(m.features(x)), 1)


def main():
    print("torch", torch.__version__, "torchvision", torchvision.__version__)
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(0)

    m = resnet18_cifar(4)
    export("resnet18_cifar_w4", m, resnet_features, lambda m, f: m.fc(f), torch.randn(4, 3, 32, 32))

    torch.manual_seed(0)
    setting, last = tv_eff._efficientnet_conf("efficientnet_b0", width_mult=0.25, depth_mult=0.25)
    m = tv_eff.EfficientNet(setting, 0.2, stochastic_depth_prob=0.0, num_classes=10, last_channel=last)
    export("efficientnet_b0_w025_d025", m, pooled_features, lambda m, f: m.classifier(f), torch.randn(4, 3, 32, 32))

    torch.manual_seed(0)
    setting, last = tv_mnv3._mobilenet_v3_conf("mobilenet_v3_large", width_mult=0.125)
    m = tv_mnv3.MobileNetV3(setting, last, num_classes=10)
    export("mobilenet_v3_large_w0125", m, pooled_features, lambda m, f: m.classifier(f), torch.randn(4, 3, 32, 32))

    torch.manual_seed(0)
    m = resnet18_cifar(4, blocks=1, stem_stride=2, channels=1)
    export("resnet10_stride2_w4", m, resnet_features, lambda m, f: m.fc(f), torch.randn(4, 1, 28, 28))


if __name__ == "__main__":
    main()
