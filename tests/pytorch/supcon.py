"""Values and input gradients of solo-learn's SupCon loss in float64, for tests/worked_values.rs.

solo-learn trains SupCon (solo/methods/supcon.py) with `simclr_loss_func(z, indexes=targets,
temperature)` of solo/losses/simclr.py, `z` every crop's projections concatenated and `targets`
the labels repeated once per crop. The function is written out below as solo-learn writes it,
with its two distributed pieces made explicit arguments: `gathered_z` / `gathered_indexes`
(solo-learn's `gather(z)`, `gather(indexes)`: every process's rows in rank order) and `rank`
(`get_rank()`). On one process they are `z`, `indexes` and 0.

Inputs (the Rust test builds them the same way; those of tests/pytorch/method_zoo_losses.py):
N = 6 images, D = 4 features, views
    a[i, j] = sin(0.7 * (i * D + j) + 0.3) + 0.1 * i
    b[i, j] = cos(0.45 * (i * D + j) - 0.2) + 0.05 * j
    c[i, j] = sin(0.31 * (i * D + j) + 1.1) - 0.2 * j
labels [0, 1, 0, 2, 1, 0] (a class of three images, one of two, one of one), repeated per view.

Cases: two views (a, b) at tau 0.1, 0.2 and 0.5; three views (a, b, c: multi-crop) at 0.2; and
the second of two processes of the two-view batch at 0.2 (its anchors rows 6..12 of [a; b], its
candidates all 12 rows and labels, rank 1). The gradients are with respect to the views a, b
(and c), through every path (a row is an anchor and a candidate).

Writes tests/fixtures/supcon.json.

    pip install torch
    python tests/pytorch/supcon.py
"""

import json
import math
import os

import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)
N, D = 6, 4
LABELS = [0, 1, 0, 2, 1, 0]


def simclr_loss_func(z, indexes, temperature, gathered_z, gathered_indexes, rank):
    """solo-learn's simclr_loss_func (solo/losses/simclr.py), `gather` and `get_rank` made
    arguments (the caller normalises the gathered rows, as solo-learn gathers normalised z)."""
    z = F.normalize(z, dim=-1)

    sim = torch.exp(torch.einsum("if, jf -> ij", z, gathered_z) / temperature)

    indexes = indexes.unsqueeze(0)
    gathered_indexes = gathered_indexes.unsqueeze(0)
    # positives
    pos_mask = indexes.t() == gathered_indexes
    pos_mask[:, z.size(0) * rank :].fill_diagonal_(0)
    # negatives
    neg_mask = indexes.t() != gathered_indexes

    pos = torch.sum(sim * pos_mask, 1)
    neg = torch.sum(sim * neg_mask, 1)
    loss = -(torch.mean(torch.log(pos / (pos + neg))))
    return loss


def matrix(f):
    return torch.tensor([[f(i, j) for j in range(D)] for i in range(N)])


def views():
    return [
        matrix(lambda i, j: math.sin(0.7 * (i * D + j) + 0.3) + 0.1 * i),
        matrix(lambda i, j: math.cos(0.45 * (i * D + j) - 0.2) + 0.05 * j),
        matrix(lambda i, j: math.sin(0.31 * (i * D + j) + 1.1) - 0.2 * j),
    ]


cases = []
for count, tau, rank in [(2, 0.1, None), (2, 0.2, None), (2, 0.5, None), (3, 0.2, None),
                         (2, 0.2, 1)]:
    xs = [v.requires_grad_(True) for v in views()[:count]]
    z = torch.cat(xs)
    targets = torch.tensor(LABELS).repeat(count)
    if rank is None:
        loss = simclr_loss_func(z, targets, tau, F.normalize(z, dim=-1), targets, 0)
        name = f"{count} views tau={tau}"
    else:
        rows = slice(rank * N, (rank + 1) * N)
        loss = simclr_loss_func(z[rows], targets[rows], tau, F.normalize(z, dim=-1), targets,
                                rank)
        name = f"{count} views tau={tau} rank={rank} of 2"
    loss.backward()
    case = {"name": name, "views": count, "temperature": tau, "value": loss.item(),
            "grads": [x.grad.flatten().tolist() for x in xs]}
    if rank is not None:
        case["rank"] = rank
    cases.append(case)
    print(name, loss.item())

out = os.path.join(os.path.dirname(__file__), "..", "fixtures", "supcon.json")
with open(out, "w") as f:
    json.dump({"images": N, "dim": D, "labels": LABELS, "cases": cases}, f, indent=1)
    f.write("\n")
