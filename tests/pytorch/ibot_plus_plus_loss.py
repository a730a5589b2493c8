"""Worked values and input gradients of the iBOT++ patch loss (TIPSv2, 2026,
https://arxiv.org/abs/2604.12012, as lightly's docstring cites it), in float64, from lightly's
own implementation (`IBOTPlusPlusPatchLoss`, lightly 1.6, torch 2.15), for
tests/worked_values.rs.

B = 4 images on a 2 x 3 token grid (N = 6 tokens each), K = 5 outputs. The mask hides
tokens 0, 3 and 4 of image 0, token 2 of image 1, none of image 2 (its masked term is 0, its
visible term the mean over all six tokens) and all six of image 3 (its visible term is 0). Every
token's outputs, image-major then token-major, are
    s[r, j] = 0.8 * sin(0.41 * (r * K + j) + 0.3)     (the student's)
    t[r, j] = 1.7 * cos(0.23 * (r * K + j) - 0.2)     (the teacher's)
for r = b * N + p, and the centre is c[j] = 0.05 * j - 0.1. lightly takes the full outputs
(B, N, K) and the mask (B, H, W); the Rust side takes the hidden tokens' rows and the visible
tokens' rows (each in image order) and gets the same gradient through its row selection.
Writes tests/fixtures/ibot_plus_plus_loss.json: the mask (per image, the hidden token indices),
each case's value, its gradient (row-major over the B * N rows) with respect to the student's
outputs, and the patch centre after the update (lightly's: the mean over all B * N tokens).

    pip install torch lightly==1.6.0
    python tests/pytorch/ibot_plus_plus_loss.py
"""

import json
import math
import os

import torch
from lightly.loss.ibot_loss import IBOTPlusPlusPatchLoss

torch.set_default_dtype(torch.float64)
B, H, W, K = 4, 2, 3, 5
N = H * W
HIDDEN = [[0, 3, 4], [2], [], list(range(N))]


def rows(f, n, k):
    return torch.tensor([[f(r * k + j) for j in range(k)] for r in range(n)])


mask = torch.zeros(B, N, dtype=torch.bool)
for b, tokens in enumerate(HIDDEN):
    mask[b, tokens] = True
mask = mask.view(B, H, W)
cases = []
for t_temp, s_temp, m, w in [(0.04, 0.1, 0.9, 1.0), (0.07, 0.2, 0.5, 0.35)]:
    student = rows(lambda e: 0.8 * math.sin(0.41 * e + 0.3), B * N, K)
    student = student.view(B, N, K).requires_grad_(True)
    teacher = rows(lambda e: 1.7 * math.cos(0.23 * e - 0.2), B * N, K).view(B, N, K)
    loss_fn = IBOTPlusPlusPatchLoss(output_dim=K, teacher_temp=t_temp, student_temp=s_temp,
                                    center_momentum=m)
    loss_fn.center.center = torch.tensor([[0.05 * j - 0.1 for j in range(K)]])
    loss = loss_fn(teacher, student, mask=mask, visible_loss_weight=w)
    loss.backward()
    cases.append({
        "name": f"ibot++ teacher_temp={t_temp} student_temp={s_temp} momentum={m} "
                f"visible_loss_weight={w}",
        "value": loss.item(),
        "grad": student.grad.flatten().tolist(),
        "center": loss_fn.center.value.flatten().tolist(),
    })

out = os.path.join(os.path.dirname(__file__), "..", "fixtures", "ibot_plus_plus_loss.json")
with open(out, "w") as f:
    json.dump({"images": B, "tokens": N, "outputs": K, "hidden": HIDDEN, "cases": cases}, f,
              indent=1)
for c in cases:
    print(f"{c['name']:80s} {c['value']:.12f}")
