"""Worked values and input gradients of the SwAV and DINO losses, in float64, from lightly's own
implementations (lightly 1.6, torch 2.15), for tests/worked_values.rs.

Inputs (the Rust test builds them the same way): N = 5 images, K = 4 prototypes / outputs,
2 global views and 2 local crops; view v (0, 1 global; 2, 3 local) has
    x_v[i, j] = 0.9 * sin(0.37 * (i * K + j) + 0.8 * v + 0.1)
SwAV reads them as prototype scores; the queue case adds, for each global view g, Q = 3 rows
    q_g[i, j] = 0.9 * cos(0.29 * (i * K + j) + 0.5 * g).
DINO reads them as the student's outputs; the teacher's outputs on the global views are
    t_g[i, j] = 2 * cos(0.53 * (i * K + j) - 0.4 * g)
and the centre c[j] = 0.1 * j - 0.15.
Writes tests/fixtures/multi_crop_losses.json: the Sinkhorn codes of x_0, each case's value and
its gradients with respect to every view (row-major), and DINO's updated centre.

    pip install torch lightly==1.6.0
    python tests/pytorch/multi_crop_losses.py
"""

import json
import math
import os

import torch
from lightly.loss import DINOLoss, SwaVLoss
from lightly.loss.swav_loss import sinkhorn

torch.set_default_dtype(torch.float64)
N, K, V = 5, 4, 4


def view(v):
    return torch.tensor(
        [[0.9 * math.sin(0.37 * (i * K + j) + 0.8 * v + 0.1) for j in range(K)] for i in range(N)]
    )


def queue(g):
    return torch.tensor(
        [[0.9 * math.cos(0.29 * (i * K + j) + 0.5 * g) for j in range(K)] for i in range(3)]
    )


def teacher(g):
    return torch.tensor(
        [[2.0 * math.cos(0.53 * (i * K + j) - 0.4 * g) for j in range(K)] for i in range(N)]
    )


def center():
    return torch.tensor([[[0.1 * j - 0.15 for j in range(K)]]])


def views(n_views):
    xs = [view(v).requires_grad_(True) for v in range(n_views)]
    return xs


def result(name, loss, xs, **extra):
    loss.backward()
    out = {"name": name, "value": loss.item(), "grads": [x.grad.flatten().tolist() for x in xs]}
    out.update(extra)
    return out


cases = []
for n_views, iters, eps, tau, use_queue in [
    (2, 3, 0.05, 0.1, False),
    (4, 3, 0.05, 0.1, False),
    (4, 3, 0.05, 0.1, True),
    (3, 5, 0.3, 0.2, False),
]:
    xs = views(n_views)
    loss_fn = SwaVLoss(temperature=tau, sinkhorn_iterations=iters, sinkhorn_epsilon=eps)
    q = [queue(g) for g in range(2)] if use_queue else None
    loss = loss_fn(xs[:2], xs[2:], q)
    name = f"swav views={n_views} iters={iters} eps={eps} tau={tau} queue={use_queue}"
    cases.append(result(name, loss, xs))

for n_views, t_temp, s_temp, m in [(2, 0.04, 0.1, 0.9), (4, 0.04, 0.1, 0.9), (4, 0.07, 0.2, 0.5)]:
    xs = views(n_views)
    loss_fn = DINOLoss(
        output_dim=K, warmup_teacher_temp=t_temp, teacher_temp=t_temp, student_temp=s_temp,
        center_momentum=m,
    )
    loss_fn.center.data = center()
    loss = loss_fn([teacher(0), teacher(1)], xs, teacher_temp=t_temp)
    name = f"dino views={n_views} teacher_temp={t_temp} student_temp={s_temp} momentum={m}"
    cases.append(result(name, loss, xs, center=loss_fn.center.flatten().tolist()))

codes = sinkhorn(view(0), iterations=3, epsilon=0.05).flatten().tolist()
out = os.path.join(os.path.dirname(__file__), "..", "fixtures", "multi_crop_losses.json")
with open(out, "w") as f:
    json.dump({"images": N, "dim": K, "sinkhorn_codes": codes, "cases": cases}, f, indent=1)
for c in cases:
    print(f"{c['name']:64s} {c['value']:.12f}")
