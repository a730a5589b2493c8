"""Values and input gradients of lightly's VICRegLLoss in float64 (lightly 1.6, torch 2.15), for
tests/worked_values.rs.

Inputs (written into the fixture, so the Rust test reads rather than rebuilds them): N = 6
images; two global views, each with a global projection of D = 4 features, a 3 x 3 map of local
projections of E = 3 features and a 3 x 3 grid of locations; two local views with 2 x 2 maps and
grids. For view v (0, 1 global; 2, 3 local), image n, position p = r * W + c of its H x W map:

    global[v][n, d]        = sin(0.83 * (n * D + d) + 0.61 * v + 0.2) * (0.6 + 0.15 * v) + 0.05 * d
    local[v][n, r, c, e]   = cos(0.57 * ((n * P + p) * E + e) + 0.93 * v) * (0.7 + 0.1 * e) + 0.04 * n
    grid[v][n, r, c]       = (x, y), x = 3.1 * c + 1.7 * sin(1.3 * (n * P + p) + v) + 0.9 * v,
                                     y = 2.9 * r + 1.3 * cos(0.7 * (n * P + p) + 2 * v)

Continuous grids and features, so that no two distances tie: the nearest neighbours lightly's
`torch.topk` picks are then the only ones (on tied distances its order is unspecified).

Cases: lightly's defaults (lambda, mu, nu = 25, 25, 1, alpha 0.75, eps 1e-4, num_matches (20, 4))
with the two local views and without them (`local_view_features=None`); other settings (10, 15,
2, alpha 0.6, eps 1e-3, num_matches (5, 2)) with the local views; num_matches (3, 9) (the second
capped at the 4 positions of a local view's map, and at the 9 of a global one). For each: the
value, lightly's global and local losses (`_global_loss`, `_local_loss`: the loss is
alpha * global + (1 - alpha) * local), and the gradients with respect to every view's global and
local projections (row-major).

Writes tests/fixtures/vicregl.json.

    pip install torch lightly==1.6.0
    python tests/pytorch/vicregl.py
"""

import json
import math
import os

import torch
from lightly.loss import VICRegLLoss

torch.set_default_dtype(torch.float64)
N, D, E = 6, 4, 3
SHAPES = [(3, 3), (3, 3), (2, 2), (2, 2)]  # two global views, two local views


def view_inputs(v):
    h, w = SHAPES[v]
    p_count = h * w
    g = torch.tensor(
        [
            [math.sin(0.83 * (n * D + d) + 0.61 * v + 0.2) * (0.6 + 0.15 * v) + 0.05 * d for d in range(D)]
            for n in range(N)
        ]
    )
    local = torch.tensor(
        [
            [
                [
                    [
                        math.cos(0.57 * ((n * p_count + r * w + c) * E + e) + 0.93 * v) * (0.7 + 0.1 * e)
                        + 0.04 * n
                        for e in range(E)
                    ]
                    for c in range(w)
                ]
                for r in range(h)
            ]
            for n in range(N)
        ]
    )
    grid = torch.tensor(
        [
            [
                [
                    [
                        3.1 * c + 1.7 * math.sin(1.3 * (n * p_count + r * w + c) + v) + 0.9 * v,
                        2.9 * r + 1.3 * math.cos(0.7 * (n * p_count + r * w + c) + 2 * v),
                    ]
                    for c in range(w)
                ]
                for r in range(h)
            ]
            for n in range(N)
        ]
    )
    return g, local, grid


CASES = [
    ("defaults, 2 global + 2 local views", {}, True),
    ("defaults, 2 global views", {}, False),
    (
        "10/15/2, alpha 0.6, eps 1e-3, matches (5, 2), 2 + 2 views",
        dict(lambda_param=10.0, mu_param=15.0, nu_param=2.0, alpha=0.6, eps=1e-3, num_matches=(5, 2)),
        True,
    ),
    ("matches (3, 9), 2 + 2 views", dict(num_matches=(3, 9)), True),
]


def flat(t):
    return t.reshape(-1).tolist()


def main():
    inputs = [view_inputs(v) for v in range(4)]
    out = {
        "images": N,
        "global_dim": D,
        "local_dim": E,
        "views": [
            {"map": list(SHAPES[v]), "global": flat(g), "local": flat(l), "grid": flat(grid)}
            for v, (g, l, grid) in enumerate(inputs)
        ],
        "cases": [],
    }
    for name, config, with_locals in CASES:
        loss_fn = VICRegLLoss(**config)
        leaves = [(g.clone().requires_grad_(), l.clone().requires_grad_(), grid) for g, l, grid in inputs]
        features = [(g, l) for g, l, _ in leaves]
        grids = [grid for _, _, grid in leaves]
        count = 4 if with_locals else 2
        global_features, global_grids = features[:2], grids[:2]
        local_features = features[2:] if with_locals else None
        local_grids = grids[2:] if with_locals else None
        value = loss_fn(
            global_view_features=global_features,
            global_view_grids=global_grids,
            local_view_features=local_features,
            local_view_grids=local_grids,
        )
        with torch.no_grad():
            global_loss = loss_fn._global_loss(global_features, local_features)
            local_loss = loss_fn._local_loss(global_features, global_grids, local_features, local_grids)
        value.backward()
        out["cases"].append(
            {
                "name": name,
                "config": {k: list(v) if isinstance(v, tuple) else v for k, v in config.items()},
                "local_views": with_locals,
                "value": value.item(),
                "global_loss": global_loss.item(),
                "local_loss": local_loss.item(),
                "grad_global": [flat(g.grad) for g, _, _ in leaves[:count]],
                "grad_local": [flat(l.grad) for _, l, _ in leaves[:count]],
            }
        )
        print(f"{name}: {value.item():.15g} (global {global_loss.item():.15g}, local {local_loss.item():.15g})")
    path = os.path.join(os.path.dirname(__file__), "..", "fixtures", "vicregl.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
