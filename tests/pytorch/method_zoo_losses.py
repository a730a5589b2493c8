"""Worked values and input gradients of the NNCLR, TiCo and MoCo v3 losses, in float64, for
tests/worked_values.rs.

NNCLR: the paper's loss (Dwibedi et al. 2021, eq. 2; solo-learn's `nnclr_loss_func`) written
out in PyTorch: cross-entropy of the normalised neighbours against the normalised predictions,
targets on the diagonal; lightly has no such loss (its NNCLR example trains with NT-Xent).
TiCo: lightly 1.6's `TiCoLoss`, called twice so that the second call reads the running
covariance the first one left.
NNSiam and NNBYOL: solo-learn's `simsiam_loss_func` / `byol_loss_func` against the nearest
neighbours (its methods' `find_nn`) of the other view's projections in a support set of 12 unit
rows, support[k, j] = normalise_j(sin(0.23 * (k * D + j) + 0.5) + 0.1 * j), with p1 = b, p2 = c,
z1 = a, z2 = flip_rows(a) + 0.3 c; NNSiam averages the two orderings, NNBYOL sums them.
ReSSL: solo-learn's `ressl_loss_func` on q = a, k = c (normalised, as its method does) against
the same support set as the queue, at (tau_q, tau_k) = (0.1, 0.04) and (0.2, 0.1).
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



# NNSiam and NNBYOL: solo-learn's functions as its repository writes them
# (solo/losses/simsiam.py, solo/losses/byol.py, and the `find_nn` of solo/methods/nnsiam.py and
# nnbyol.py), on a support set of K unit rows; the projections z are normalised before the
# lookup, as both methods do.
def simsiam_loss_func(p, z):
    return -F.cosine_similarity(p, z.detach(), dim=-1).mean()


def byol_loss_func(p, z):
    return 2 - 2 * F.cosine_similarity(p, z.detach(), dim=-1).mean()


def find_nn(queue, z):
    idx = (z @ queue.T).max(dim=1)[1]
    return idx, queue[idx]


K = 12
support = F.normalize(
    torch.tensor([[math.sin(0.23 * (k * D + j) + 0.5) + 0.1 * j for j in range(D)]
                  for k in range(K)]), dim=1)
support_set_cases = []
for name in ["nnsiam", "nnbyol"]:
    p1, p2 = b().requires_grad_(True), c().requires_grad_(True)
    z1, z2 = F.normalize(a(), dim=-1), F.normalize(a().flip(0) + 0.3 * c(), dim=-1)
    idx1, nn1 = find_nn(support, z1)
    idx2, nn2 = find_nn(support, z2)
    if name == "nnsiam":
        loss = simsiam_loss_func(p1, nn2) / 2 + simsiam_loss_func(p2, nn1) / 2
    else:
        loss = byol_loss_func(p1, nn2) + byol_loss_func(p2, nn1)
    loss.backward()
    support_set_cases.append({"name": name, "value": loss.item(),
                            "neighbours_1": idx1.tolist(), "neighbours_2": idx2.tolist(),
                            "grad_p1": p1.grad.flatten().tolist(),
                            "grad_p2": p2.grad.flatten().tolist()})



# ReSSL: solo-learn's `ressl_loss_func` (solo/losses/ressl.py) as its repository writes it, on
# the method's normalised projections (solo/methods/ressl.py normalises q and k in `forward`),
# q = a, k = c, the queue the support set above.
def ressl_loss_func(q, k, queue, temperature_q=0.1, temperature_k=0.04):
    logits_q = torch.einsum("nc,kc->nk", [q, queue])
    logits_k = torch.einsum("nc,kc->nk", [k, queue])
    loss = -torch.sum(
        F.softmax(logits_k.detach() / temperature_k, dim=1)
        * F.log_softmax(logits_q / temperature_q, dim=1),
        dim=1,
    ).mean()
    return loss


for tau_q, tau_k in [(0.1, 0.04), (0.2, 0.1)]:
    q = a().requires_grad_(True)
    loss = ressl_loss_func(F.normalize(q, dim=1), F.normalize(c(), dim=1), support.clone(),
                           tau_q, tau_k)
    loss.backward()
    support_set_cases.append({"name": f"ressl tau_q={tau_q} tau_k={tau_k}", "value": loss.item(),
                            "grad_q": q.grad.flatten().tolist()})

out = os.path.join(os.path.dirname(__file__), "..", "fixtures", "method_zoo_losses.json")
with open(out, "w") as f:
    json.dump({"batch": N, "dim": D, "cases": cases, "support_size": K,
               "support": support.flatten().tolist(), "support_set_cases": support_set_cases},
              f, indent=1)
for case in cases + support_set_cases:
    print(f"{case['name']:24s} {case['value']:.12f}")
