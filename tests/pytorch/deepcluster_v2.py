"""Values and input gradients of solo-learn's DeepCluster v2 loss in float64, and one k-means
case, for tests/worked_values.rs.

The reference functions below are written from solo-learn's source at commit
9187ea39c2c3f43c455ab06664d2b019a9802954 (solo-learn is not installed here):
- `deepclusterv2_loss_func`: solo/losses/deepclusterv2.py (cross-entropy of the prototypes'
  scores / temperature against the assignments repeated for every view, ignore_index=-1, mean
  over the heads);
- the projections' normalisation and scores: solo/methods/deepclusterv2.py (`forward`:
  z = F.normalize(projector(feats)); p = z @ prototype.weight.T per head; `training_step`:
  preds stacked P x V x N x C);
- `cluster_memory`: solo/utils/kmeans.py on one process (world_size 1), the initial centroids
  the rows `INIT` of the memory bank instead of `torch.randperm(...)[:K]`.

Inputs (written into the fixture): N = 4 images, D = 5 features, two views:
    y[v][n, d] = sin(0.71 * (n * D + d) + 1.13 * v + 0.3) * (0.8 + 0.1 * d) + 0.05 * n
Heads of K = 3 and 5 prototypes: c[h][k, d] = sin(0.37 * (k * D + d) + 2.1 * h + 0.7),
normalised by rows. Assignments (per head, N): "all" [[0, 2, 1, 2], [4, 0, 3, 1]]; "some"
[[2, -1, 0, -1], [-1, 1, 1, -1]] (unassigned images left out). Cases: "all" at 0.1, "some" at
0.1 and 0.3. For each: the value and the gradients with respect to both views' projector
outputs y (row-major).

k-means: 10 rows of D = 5, e[m, d] = sin(0.53 * (m * D + d) + 0.2) + 0.3 * (m % 3), normalised;
K = 3 from rows INIT = [0, 4, 7], 10 iterations: the centroids and the assignments.

Writes tests/fixtures/deepcluster_v2.json.

    pip install torch
    python tests/pytorch/deepcluster_v2.py
"""

import json
import math
import os

import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)
N, D, KS = 4, 5, [3, 5]
INIT = [0, 4, 7]
ASSIGNMENTS = {
    "all": [[0, 2, 1, 2], [4, 0, 3, 1]],
    "some": [[2, -1, 0, -1], [-1, 1, 1, -1]],
}


def deepclusterv2_loss_func(outputs, assignments, temperature=0.1):
    # solo/losses/deepclusterv2.py
    loss = 0
    for h in range(outputs.size(0)):
        scores = outputs[h].view(-1, outputs.size(-1)) / temperature
        targets = assignments[h].repeat(outputs.size(1))
        loss += F.cross_entropy(scores, targets, ignore_index=-1)
    return loss / outputs.size(0)


def kmeans(embeddings, init, iters):
    # solo/utils/kmeans.py, cluster_memory, one process, one head
    centroids = embeddings[init].clone()
    k = len(init)
    for n_iter in range(iters + 1):
        dot_products = embeddings @ centroids.t()
        _, assignments = dot_products.max(dim=1)
        if n_iter == iters:
            break
        counts = torch.zeros(k)
        sums = torch.zeros(k, embeddings.size(1))
        for j in range(k):
            rows = (assignments == j).nonzero().flatten()
            if len(rows) > 0:
                sums[j] = embeddings[rows].sum(0)
                counts[j] = len(rows)
        mask = counts > 0
        centroids[mask] = sums[mask] / counts[mask].unsqueeze(1)
        centroids = F.normalize(centroids, dim=1, p=2)
    return centroids, assignments


def flat(t):
    return [float(v) for v in t.flatten()]


def main():
    ys = [
        torch.tensor(
            [
                [
                    math.sin(0.71 * (n * D + d) + 1.13 * v + 0.3) * (0.8 + 0.1 * d) + 0.05 * n
                    for d in range(D)
                ]
                for n in range(N)
            ]
        )
        for v in range(2)
    ]
    protos = [
        F.normalize(
            torch.tensor(
                [[math.sin(0.37 * (k * D + d) + 2.1 * h + 0.7) for d in range(D)] for k in range(K)]
            ),
            dim=1,
        )
        for h, K in enumerate(KS)
    ]
    out = {
        "images": N,
        "dim": D,
        "heads": KS,
        "inputs": [flat(y) for y in ys],
        "prototypes": [flat(c) for c in protos],
        "assignments": ASSIGNMENTS,
        "cases": [],
    }
    for name, assignments, temperature in [
        ("all_0.1", "all", 0.1),
        ("some_0.1", "some", 0.1),
        ("some_0.3", "some", 0.3),
    ]:
        leaves = [y.clone().requires_grad_() for y in ys]
        z = [F.normalize(y) for y in leaves]
        # training_step stacks the heads' scores P x V x 1 x N x C; heads of different K cannot
        # be stacked, so the loss function runs per head (P = 1) and the heads are averaged,
        # which is its own loop's sum / P.
        value = 0
        for h, c in enumerate(protos):
            preds = torch.stack([(z[0] @ c.t()).unsqueeze(0), (z[1] @ c.t()).unsqueeze(0)], dim=1)
            a = torch.tensor([ASSIGNMENTS[assignments][h]])
            value = value + deepclusterv2_loss_func(preds, a, temperature)
        value = value / len(protos)
        value.backward()
        out["cases"].append(
            {
                "name": name,
                "assignments": assignments,
                "temperature": temperature,
                "value": value.item(),
                "grads": [flat(leaf.grad) for leaf in leaves],
            }
        )
        print(f"{name}: {value.item():.15g}")
    rows = F.normalize(
        torch.tensor(
            [[math.sin(0.53 * (m * D + d) + 0.2) + 0.3 * (m % 3) for d in range(D)] for m in range(10)]
        ),
        dim=1,
    )
    centroids, assigned = kmeans(rows, INIT, 10)
    out["kmeans"] = {
        "rows": flat(rows),
        "init": INIT,
        "iters": 10,
        "centroids": flat(centroids),
        "assignments": [int(a) for a in assigned],
    }
    print("kmeans assignments:", [int(a) for a in assigned])
    path = os.path.join(os.path.dirname(__file__), "..", "fixtures", "deepcluster_v2.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
