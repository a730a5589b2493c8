"""Worked values and input gradients of EMP-SSL's loss, in float64, from lightly's own pieces
(lightly 1.6, torch 2.15: `lightly.loss.emp_ssl_loss.tcr_loss` and `invariance_loss`), for
tests/worked_values.rs.

lightly's `EMPSSLLoss` returns `tcr_loss + inv_coef * invariance_loss`: it adds the total coding
rate, which the paper and the authors' code (tsb0601/EMP-SSL, `loss.py` returns `-R`) subtract,
so that minimising lightly's loss collapses the embeddings. The reference here is the paper's
`-tcr_loss + inv_coef * invariance_loss`, from lightly's two functions.

Inputs (the Rust test builds them the same way): V = 3 views of B images with D features,
    z_v[i, j] = sin(0.7 * (i * D + j) + 0.3 + 0.9 * v) + 0.1 * i + 0.05 * v * j
for (B, D) = (6, 4) (the D x D form of the coding rate) and (4, 6) (the B x B form). Writes
tests/fixtures/emp_ssl.json: per case the sizes and weights, the value and each view's gradient
(row-major).

    pip install torch lightly==1.6.0
    python tests/pytorch/emp_ssl.py
"""

import json
import math
import os

import torch
from lightly.loss.emp_ssl_loss import invariance_loss, tcr_loss

torch.set_default_dtype(torch.float64)
V = 3


def views(b, d):
    return [
        torch.tensor(
            [[math.sin(0.7 * (i * d + j) + 0.3 + 0.9 * v) + 0.1 * i + 0.05 * v * j
              for j in range(d)] for i in range(b)]
        ).requires_grad_()
        for v in range(V)
    ]


def case(b, d, eps, inv_coef):
    z = views(b, d)
    stacked = torch.stack(z)
    loss = -tcr_loss(stacked, eps=eps) + inv_coef * invariance_loss(stacked)
    loss.backward()
    return {
        "name": f"EMP-SSL B={b} D={d} eps={eps} inv_coef={inv_coef}",
        "batch": b,
        "dim": d,
        "tcr_eps": eps,
        "inv_coef": inv_coef,
        "value": loss.item(),
        "grads": [v.grad.flatten().tolist() for v in z],
    }


cases = [case(6, 4, 0.2, 200.0), case(4, 6, 0.2, 200.0), case(6, 4, 0.5, 3.0)]
out = os.path.join(os.path.dirname(__file__), "..", "fixtures", "emp_ssl.json")
with open(out, "w") as f:
    json.dump({"views": V, "cases": cases}, f, indent=1)
for c in cases:
    print(c["name"], c["value"])
