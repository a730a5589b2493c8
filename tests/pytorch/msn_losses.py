"""Worked values and gradients of the MSN and PMSN losses in float64, from lightly's own
implementations (lightly 1.6, torch 2.15), for tests/worked_values.rs.

N = 4 images, V = 3 anchor views of each (view-major rows), D = 5, K = 6 prototypes:
    anchors[r, j]    = sin(0.37 * (r * D + j) + 0.1) + 0.2 * cos(1.1 * r)
    targets[i, j]    = cos(0.29 * (i * D + j) - 0.4)
    prototypes[k, j] = 0.5 * sin(0.61 * (k * D + j) + 0.7)
Cases: MSN (mean-entropy prior) with 3 and 0 Sinkhorn iterations, regularisation weight 1 and
0.5; PMSN (power law, exponent 0.25 and 0.5). Each case's value and its gradients (row-major)
with respect to the anchors and the prototypes (the prototypes reach the loss through the
anchors' assignments only: the targets' are computed without gradient).
Writes tests/fixtures/msn_losses.json.

    pip install torch lightly==1.6.0
    python tests/pytorch/msn_losses.py
"""

import json
import math
import os

import torch
from lightly.loss import MSNLoss, PMSNLoss

torch.set_default_dtype(torch.float64)
N, V, D, K = 4, 3, 5, 6


def rows(f, n, d):
    return torch.tensor([[f(r, r * d + j) for j in range(d)] for r in range(n)])


cases = []
settings = [
    ("msn iterations=3 weight=1", MSNLoss(sinkhorn_iterations=3, regularization_weight=1.0)),
    ("msn iterations=0 weight=0.5", MSNLoss(sinkhorn_iterations=0, regularization_weight=0.5)),
    ("pmsn iterations=3 weight=1 exponent=0.25",
     PMSNLoss(sinkhorn_iterations=3, regularization_weight=1.0, power_law_exponent=0.25)),
    ("pmsn iterations=3 weight=0.5 exponent=0.5",
     PMSNLoss(sinkhorn_iterations=3, regularization_weight=0.5, power_law_exponent=0.5)),
]
for name, loss_fn in settings:
    anchors = rows(lambda r, e: math.sin(0.37 * e + 0.1) + 0.2 * math.cos(1.1 * r), V * N, D)
    anchors.requires_grad_(True)
    targets = rows(lambda r, e: math.cos(0.29 * e - 0.4), N, D)
    prototypes = rows(lambda r, e: 0.5 * math.sin(0.61 * e + 0.7), K, D).requires_grad_(True)
    loss = loss_fn(anchors, targets, prototypes)
    loss.backward()
    cases.append({
        "name": name,
        "value": loss.item(),
        "anchors_grad": anchors.grad.flatten().tolist(),
        "prototypes_grad": prototypes.grad.flatten().tolist(),
    })

out = os.path.join(os.path.dirname(__file__), "..", "fixtures", "msn_losses.json")
with open(out, "w") as f:
    json.dump({"batch": N, "views": V, "dim": D, "prototypes": K, "cases": cases}, f, indent=1)
for c in cases:
    print(f"{c['name']:48s} {c['value']:.12f}")
