#!/usr/bin/env python3
"""Write the keys and shapes of full-size torchvision state_dicts, for the import key-mapping test.

    python3 tests/pytorch/export_state_dict_keys.py

torch 2.15.0 / torchvision 0.29.2. Writes tests/fixtures/torchvision_state_dict_keys.json:
{model: {key: shape}} for resnet18, resnet50, efficientnet_b0, efficientnet_b1 and
mobilenet_v3_large with their 1000-class heads (no weights: the full files would be 20-100 MB).
models/tests/import_keys.rs checks that every key maps onto a tensor of the same shape in our
model or head and that every tensor of ours is covered.
"""

import json
import os

import torch
import torchvision

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "torchvision_state_dict_keys.json")


def main():
    print("torch", torch.__version__, "torchvision", torchvision.__version__)
    m = torchvision.models
    out = {}
    for name in ["resnet18", "resnet50", "efficientnet_b0", "efficientnet_b1", "mobilenet_v3_large"]:
        sd = getattr(m, name)().state_dict()
        out[name] = {k: list(v.shape) for k, v in sd.items()}
    with open(OUT, "w") as f:
        json.dump(out, f, indent=0, sort_keys=True)
    print(OUT, os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main()
