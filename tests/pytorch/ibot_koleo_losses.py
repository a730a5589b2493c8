"""Worked values and input gradients of the iBOT patch loss and the KoLeo regulariser, in
float64, from lightly's own implementations (lightly 1.6, torch 2.15), for
tests/worked_values.rs.

iBOT: B = 3 images on a 2 x 2 token grid, K = 5 outputs. The mask hides tokens 0 and 3 of
image 0, token 2 of image 1 and none of image 2 (an image without hidden tokens counts in B).
The M = 3 hidden tokens' rows, in image order, are
    s[r, j] = 0.8 * sin(0.41 * (r * K + j) + 0.3)     (the student's)
    t[r, j] = 1.7 * cos(0.23 * (r * K + j) - 0.2)     (the teacher's)
and the centre c[j] = 0.05 * j - 0.1.
KoLeo: N = 6 rows of D = 4, x[i, j] = sin(0.7 * (i * D + j) + 0.25) + 0.3 * cos(1.3 * i * j);
a second case with rows 4 and 5 equal (a zero nearest-neighbour distance: eps decides).
Writes tests/fixtures/ibot_koleo_losses.json: each case's value, its gradient (row-major) with
respect to the student's rows / x, and the iBOT patch centre after the update.

    pip install torch lightly==1.6.0
    python tests/pytorch/ibot_koleo_losses.py
"""

import json
import math
import os

import torch
from lightly.loss import KoLeoLoss
from lightly.loss.ibot_loss import IBOTPatchLoss

torch.set_default_dtype(torch.float64)
B, K, M = 3, 5, 3


def rows(f, n, k):
    return torch.tensor([[f(r * k + j) for j in range(k)] for r in range(n)])


mask = torch.zeros(B, 2, 2, dtype=torch.bool)
mask[0, 0, 0] = True
mask[0, 1, 1] = True
mask[1, 1, 0] = True
cases = []
for t_temp, s_temp, m in [(0.04, 0.1, 0.9), (0.07, 0.2, 0.5)]:
    student = rows(lambda e: 0.8 * math.sin(0.41 * e + 0.3), M, K).requires_grad_(True)
    teacher = rows(lambda e: 1.7 * math.cos(0.23 * e - 0.2), M, K)
    loss_fn = IBOTPatchLoss(output_dim=K, teacher_temp=t_temp, student_temp=s_temp,
                            center_momentum=m)
    loss_fn.center.center = torch.tensor([[0.05 * j - 0.1 for j in range(K)]])
    loss = loss_fn(teacher, student, mask)
    loss.backward()
    cases.append({
        "name": f"ibot teacher_temp={t_temp} student_temp={s_temp} momentum={m}",
        "value": loss.item(),
        "grad": student.grad.flatten().tolist(),
        "center": loss_fn.center.value.flatten().tolist(),
    })

N, D = 6, 4
for duplicate in [False, True]:
    x = torch.tensor([[math.sin(0.7 * (i * D + j) + 0.25) + 0.3 * math.cos(1.3 * i * j)
                       for j in range(D)] for i in range(N)])
    if duplicate:
        x[5] = x[4]
    x.requires_grad_(True)
    loss = KoLeoLoss()(x)
    loss.backward()
    cases.append({
        "name": f"koleo duplicate={duplicate}",
        "value": loss.item(),
        "grad": x.grad.flatten().tolist(),
    })

out = os.path.join(os.path.dirname(__file__), "..", "fixtures", "ibot_koleo_losses.json")
with open(out, "w") as f:
    json.dump({"cases": cases}, f, indent=1)
for c in cases:
    print(f"{c['name']:56s} {c['value']:.12f}")
