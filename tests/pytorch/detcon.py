"""Values and input gradients of lightly's DetConBLoss and DetConSLoss in float64 (lightly 1.6),
for tests/worked_values.rs.

Inputs (written into the fixture, so the Rust test reads rather than rebuilds them): B = 3
images, M = 4 mask slots per view, D = 5 features. For input k (0, 1: the two views' predictions,
or DetConS's projections; 2, 3: the two views' targets), image b, slot m, feature d:

    x[k][b, m, d] = sin(0.71 * ((b * M + m) * D + d) + 1.13 * k + 0.3) * (0.8 + 0.1 * d) + 0.05 * m

Mask ids (per view, B x M):
    "same":      every image's slots hold regions 0, 1, 2, 3 in both views (lightly's example:
                 `torch.arange(num_cls)` for both views);
    "repeated":  regions repeated within a view, regions present in one view only, and the
                 second view's slots in another order:
                 view 0 [[0, 1, 2, 3], [0, 0, 1, 2], [5, 6, 7, 8]]
                 view 1 [[3, 2, 1, 0], [2, 1, 1, 4], [8, 8, 9, 9]]
    "disjoint":  the last image's two views share no region (its rows weigh nothing):
                 view 0 [[0, 1, 2, 3], [1, 1, 2, 2], [0, 1, 2, 3]]
                 view 1 [[0, 1, 2, 3], [2, 1, 0, 1], [4, 5, 6, 7]]

Cases: DetConBLoss at the default temperature (0.1) on "same" and "repeated", at 0.3 on
"disjoint"; DetConSLoss at 0.1 on "repeated" and at 0.5 on "disjoint" (its two inputs are x[0]
and x[1]). Both with gather_distributed=False (one process). For each: the value and the
gradients with respect to every input (row-major).

Writes tests/fixtures/detcon.json.

    pip install torch lightly==1.6.0
    python tests/pytorch/detcon.py
"""

import json
import math
import os

import torch
from lightly.loss import DetConBLoss, DetConSLoss

torch.set_default_dtype(torch.float64)
B, M, D = 3, 4, 5

MASKS = {
    "same": ([[0, 1, 2, 3]] * 3, [[0, 1, 2, 3]] * 3),
    "repeated": (
        [[0, 1, 2, 3], [0, 0, 1, 2], [5, 6, 7, 8]],
        [[3, 2, 1, 0], [2, 1, 1, 4], [8, 8, 9, 9]],
    ),
    "disjoint": (
        [[0, 1, 2, 3], [1, 1, 2, 2], [0, 1, 2, 3]],
        [[0, 1, 2, 3], [2, 1, 0, 1], [4, 5, 6, 7]],
    ),
}

CASES = [
    ("DetConB, temperature 0.1, same regions", "B", 0.1, "same"),
    ("DetConB, temperature 0.1, repeated and absent regions", "B", 0.1, "repeated"),
    ("DetConB, temperature 0.3, an image with no shared region", "B", 0.3, "disjoint"),
    ("DetConS, temperature 0.1, repeated and absent regions", "S", 0.1, "repeated"),
    ("DetConS, temperature 0.5, an image with no shared region", "S", 0.5, "disjoint"),
]


def inputs(k):
    return torch.tensor(
        [
            [
                [
                    math.sin(0.71 * ((b * M + m) * D + d) + 1.13 * k + 0.3) * (0.8 + 0.1 * d) + 0.05 * m
                    for d in range(D)
                ]
                for m in range(M)
            ]
            for b in range(B)
        ]
    )


def flat(t):
    return t.reshape(-1).tolist()


def main():
    xs = [inputs(k) for k in range(4)]
    out = {
        "images": B,
        "slots": M,
        "dim": D,
        "inputs": [flat(x) for x in xs],
        "masks": {name: [sum(v, []) for v in views] for name, views in MASKS.items()},
        "cases": [],
    }
    for name, variant, temperature, masks in CASES:
        leaves = [x.clone().requires_grad_() for x in xs]
        m0, m1 = (torch.tensor(v) for v in MASKS[masks])
        if variant == "B":
            loss_fn = DetConBLoss(temperature=temperature, gather_distributed=False)
            value = loss_fn(leaves[0], leaves[1], leaves[2], leaves[3], m0, m1)
            used = 4
        else:
            loss_fn = DetConSLoss(temperature=temperature, gather_distributed=False)
            value = loss_fn(leaves[0], leaves[1], m0, m1)
            used = 2
        value.backward()
        out["cases"].append(
            {
                "name": name,
                "variant": variant,
                "temperature": temperature,
                "masks": masks,
                "value": value.item(),
                "grads": [flat(leaf.grad) for leaf in leaves[:used]],
            }
        )
        print(f"{name}: {value.item():.15g}")
    path = os.path.join(os.path.dirname(__file__), "..", "fixtures", "detcon.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
