#!/usr/bin/env python3
"""Records torchvision's outputs of the colour operations on fixed inputs.

Writes tests/fixtures/colour_ops.json, read by tests/augment.rs (parity, tolerance 1e-4).

Run from the repository root:
    pip install torch torchvision
    python3 tests/pytorch/colour_ops.py

Recorded with torch 2.15.0 and torchvision 0.29.2 (the versions are also written into the
fixture). Uses torchvision.transforms.v2.functional on float32 tensors in [0, 1].

Each operation gets one parameter per sample (two samples per input): the expected output of
sample n is torchvision's function applied to sample n alone with its own parameter.
"""
import json
import math
import os

import numpy as np
import torch
import torchvision
import torchvision.transforms.v2.functional as F


def rgb_input():
    g = torch.Generator().manual_seed(1234)
    x = torch.rand(2, 3, 5, 6, generator=g)
    # Edge cases: gray pixels (r = g = b), saturated and black pixels, each channel the maximum,
    # ties between channels, values exactly 0, 0.5 and 1.
    x[0, :, 0, 0] = torch.tensor([0.3, 0.3, 0.3])
    x[0, :, 0, 1] = torch.tensor([1.0, 1.0, 1.0])
    x[0, :, 0, 2] = torch.tensor([0.0, 0.0, 0.0])
    x[0, :, 0, 3] = torch.tensor([0.9, 0.2, 0.1])
    x[0, :, 0, 4] = torch.tensor([0.1, 0.9, 0.2])
    x[0, :, 0, 5] = torch.tensor([0.2, 0.1, 0.9])
    x[1, :, 0, 0] = torch.tensor([0.7, 0.7, 0.2])
    x[1, :, 0, 1] = torch.tensor([0.7, 0.2, 0.7])
    x[1, :, 0, 2] = torch.tensor([0.2, 0.7, 0.7])
    x[1, :, 0, 3] = torch.tensor([0.5, 0.25, 1.0])
    x[1, :, 0, 4] = torch.tensor([1.0, 0.0, 0.5])
    return x


def gray_input():
    g = torch.Generator().manual_seed(99)
    return torch.rand(2, 1, 4, 5, generator=g)


def values(t):
    """Shortest decimal strings that read back as exactly these float32 values."""
    return [float(np.format_float_positional(v, unique=True, trim="-"))
            for v in t.detach().numpy().astype(np.float32).flatten()]


def per_sample(fn, x, params):
    return torch.stack([fn(x[n], p) for n, p in enumerate(params)])


def entry(op, inp, params, out):
    return {"op": op, "input": inp, "params": params, "output": values(out),
            "shape": list(out.shape)}


def main():
    x = rgb_input()
    xg = gray_input()
    inputs = {
        "rgb": {"shape": list(x.shape), "data": values(x)},
        "gray": {"shape": list(xg.shape), "data": values(xg)},
    }
    ops = []
    for name, t in [("rgb", x), ("gray", xg)]:
        for params in ([0.0, 0.5], [1.0, 1.7]):
            ops.append(entry("brightness", name, params,
                             per_sample(lambda im, f: F.adjust_brightness(im, f), t, params)))
        for params in ([0.0, 0.3], [1.0, 1.9]):
            ops.append(entry("contrast", name, params,
                             per_sample(lambda im, f: F.adjust_contrast(im, f), t, params)))
        for params in ([0.0, 0.4], [1.0, 2.5]):
            ops.append(entry("saturation", name, params,
                             per_sample(lambda im, f: F.adjust_saturation(im, f), t, params)))
        for params in ([-0.5, -0.23], [0.0, 0.11], [0.37, 0.5]):
            ops.append(entry("hue", name, params,
                             per_sample(lambda im, f: F.adjust_hue(im, f), t, params)))
        ops.append(entry("grayscale", name, [],
                         F.rgb_to_grayscale(t, num_output_channels=t.shape[1])))
        for params in ([0.5, 0.75], [0.2, 1.0]):
            ops.append(entry("solarize", name, params,
                             per_sample(lambda im, th: F.solarize(im, th), t, params)))
        for k, params in [(3, [0.1, 0.8]), (3, [1.5, 2.0]), (5, [0.6, 1.3])]:
            out = per_sample(lambda im, s: F.gaussian_blur(im, [k, k], [s, s]), t, params)
            e = entry("blur", name, params, out)
            e["kernel_size"] = k
            ops.append(e)
    mean, std = [0.4914, 0.4822, 0.4465], [0.2470, 0.2435, 0.2616]
    e = entry("normalize", "rgb", [], F.normalize(x, mean, std))
    e["mean"], e["std"] = mean, std
    ops.append(e)
    e = entry("normalize", "gray", [], F.normalize(xg, [0.2860], [0.3530]))
    e["mean"], e["std"] = [0.2860], [0.3530]
    ops.append(e)
    fixture = {
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "inputs": inputs,
        "ops": ops,
    }
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "..", "fixtures", "colour_ops.json")
    with open(path, "w") as f:
        json.dump(fixture, f, separators=(",", ":"))
    print(f"wrote {os.path.normpath(path)}: {len(ops)} cases")


if __name__ == "__main__":
    main()
