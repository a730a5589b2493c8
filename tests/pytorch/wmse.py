"""Worked values and input gradients of W-MSE's loss, in float64, from lightly's own
`WMSELoss` (lightly 1.6, torch 2.15: `Whitening2d`'s Cholesky whitening of each view's
sub-batches, `norm_mse_loss` between the views), for tests/worked_values.rs.

Inputs (the Rust test builds them the same way): N = 12 images, D = 3 features,
    z1[i, j] = sin(0.7 * (i * D + j) + 0.3) + 0.1 * i
    z2[i, j] = cos(0.45 * (i * D + j) - 0.2) + 0.3 * sin(1.3 * i * (j + 1))
(a cosine of i·D + j alone has rank 2 over the rows: the second term makes every sub-batch's
covariance positive definite).
lightly takes the views stacked, [z1; z2]. Its sub-batches come from `torch.randperm(N)` on the
global generator, one per `w_iter`: each case seeds the generator, draws the same permutations
to record them (the Rust test passes them as its orders), seeds it again and runs the loss.
Writes tests/fixtures/wmse.json: per case the settings, the orders, the value and the
gradients with respect to z1 and z2 (row-major).

    pip install torch lightly==1.6.0
    python tests/pytorch/wmse.py
"""

import json
import math
import os

import torch
from lightly.loss import WMSELoss

torch.set_default_dtype(torch.float64)
N, D = 12, 3


def inputs():
    z1 = torch.tensor(
        [[math.sin(0.7 * (i * D + j) + 0.3) + 0.1 * i for j in range(D)] for i in range(N)]
    )
    z2 = torch.tensor(
        [[math.cos(0.45 * (i * D + j) - 0.2) + 0.3 * math.sin(1.3 * i * (j + 1)) for j in range(D)]
         for i in range(N)]
    )
    return z1.requires_grad_(), z2.requires_grad_()


def case(w_size, w_iter, eps, seed):
    torch.manual_seed(seed)
    orders = [torch.randperm(N).tolist() for _ in range(w_iter)]
    torch.manual_seed(seed)
    loss_fn = WMSELoss(embedding_dim=D, w_size=w_size, w_iter=w_iter, eps=eps)
    z1, z2 = inputs()
    loss = loss_fn(torch.cat([z1, z2]))
    loss.backward()
    return {
        "name": f"W-MSE w_size={w_size} w_iter={w_iter} eps={eps}",
        "w_size": w_size,
        "w_iter": w_iter,
        "eps": eps,
        "orders": orders,
        "value": loss.item(),
        "grad_z1": z1.grad.flatten().tolist(),
        "grad_z2": z2.grad.flatten().tolist(),
    }


cases = [case(6, 1, 0.0, 1), case(12, 2, 0.0, 2), case(6, 2, 0.25, 3)]
out = os.path.join(os.path.dirname(__file__), "..", "fixtures", "wmse.json")
with open(out, "w") as f:
    json.dump({"batch": N, "dim": D, "cases": cases}, f, indent=1)
for c in cases:
    print(c["name"], c["value"])
