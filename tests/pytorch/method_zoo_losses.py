"""Worked values and input gradients of the NNCLR, TiCo and MoCo v3 losses, in float64, for
tests/worked_values.rs.

NNCLR: the paper's loss (Dwibedi et al. 2021, eq. 2; solo-learn's `nnclr_loss_func`) written
out in PyTorch: cross-entropy of the normalised neighbours against the normalised predictions,
targets on the diagonal; lightly has no such loss (its NNCLR example trains with NT-Xent).
TiCo: lightly 1.6's `TiCoLoss`, called twice so that the second call reads the running
covariance the first one left.
MoCo v3: the authors' `contrastive_loss` (Chen, Xie & He 2021, Algorithm 1 and their
moco-v3/moco/builder.py) written out in PyTorch: cross-entropy of the normalised queries against
the normalised keys over temperature, labels `arange(N) + offset`, times 2 tau; the offset case
takes the last 3 queries against all 6 keys (a second replica's view of a global batch).

Inputs (the Rust test builds them the same way): N = 6 images, D = 4 features,
    a[i, j] = sin(0.7 * (i * D + j) + 0.3) + 0.1 * i
    b[i, j] = cos(0.45 * (i * D + j) - 0.2) + 0.05 * j
    c[i, j] = sin(0.31 * (i * D + j) + 1.1) - 0.2 * j      (TiCo's first call: z_a = c, z_b = b)

    pip install torch lightly==1.6.0
    python tests/pytorch/method_zoo_losses.py
"""

import json
import math
import os

import torch
import torch.nn.functional as F
from lightly.loss import TiCoLoss

torch.set_default_dtype(torch.float64)
N, D = 6, 4


def matrix(f):
    return torch.tensor([[f(i, j) for j in range(D)] for i in range(N)])


def a():
    return matrix(lambda i, j: math.sin(0.7 * (i * D + j) + 0.3) + 0.1 * i)


def b():
    return matrix(lambda i, j: math.cos(0.45 * (i * D + j) - 0.2) + 0.05 * j)


def c():
    return matrix(lambda i, j: math.sin(0.31 * (i * D + j) + 1.1) - 0.2 * j)


cases = []
for tau in [0.1, 0.5]:
    nn, p = a(), b().requires_grad_(True)
    logits = F.normalize(nn, dim=1) @ F.normalize(p, dim=1).T / tau
    loss = F.cross_entropy(logits, torch.arange(N))
    loss.backward()
    cases.append({"name": f"nnclr tau={tau}", "value": loss.item(),
                  "grad_b": p.grad.flatten().tolist()})

for beta, rho in [(0.9, 20.0), (0.5, 3.0)]:
    loss_fn = TiCoLoss(beta=beta, rho=rho)
    loss_fn(c(), b())
    za, zb = a().requires_grad_(True), b().requires_grad_(True)
    loss = loss_fn(za, zb)
    loss.backward()
    cases.append({"name": f"tico beta={beta} rho={rho}", "value": loss.item(),
                  "grad_a": za.grad.flatten().tolist(), "grad_b": zb.grad.flatten().tolist(),
                  "covariance": loss_fn.C.flatten().tolist()})

for tau, offset in [(0.2, 0), (1.0, 0), (0.2, 3)]:
    q = a()[offset:].clone().requires_grad_(True)
    k = b()
    logits = F.normalize(q, dim=1) @ F.normalize(k, dim=1).T / tau
    labels = torch.arange(q.shape[0]) + offset
    loss = F.cross_entropy(logits, labels) * (2 * tau)
    loss.backward()
    cases.append({"name": f"moco_v3 tau={tau} offset={offset}", "value": loss.item(),
                  "grad_a": q.grad.flatten().tolist()})

out = os.path.join(os.path.dirname(__file__), "..", "fixtures", "method_zoo_losses.json")
with open(out, "w") as f:
    json.dump({"batch": N, "dim": D, "cases": cases}, f, indent=1)
for case in cases:
    print(f"{case['name']:24s} {case['value']:.12f}")
