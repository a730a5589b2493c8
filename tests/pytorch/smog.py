"""Values and input gradients of lightly's SMoG step in float64 (lightly 1.6's
`SMoGPrototypes`, as its example `examples/pytorch/smog.py` uses it), for tests/worked_values.rs.

Inputs (written into the fixture, so the Rust test reads rather than rebuilds them): N = 8 images,
K = 5 groups, D = 4 features. For input k (0: the online projections `x0_encoded`, 1: the online
predictions `x0_predicted`, 2: the momentum projections `x1_encoded`), image n, feature d:

    x[k][n, d] = sin(0.61 * (n * D + d) + 1.37 * k + 0.2) * (0.9 + 0.1 * d) + 0.1 * ((n + k) % 3)

and the group features (lightly's example draws them from `torch.rand`, in [0, 1)):

    g[j, d] = 0.5 + 0.45 * sin(1.9 * (j * D + d) + 0.4)

Cases: temperature 0.1 and beta 0.99 (lightly's example's); temperature 0.3 and beta 0.9; and
temperature 0.2, beta 0.5 with group 4 replaced by (0, 1, 1, 0), which no row is nearest to (it must stay).
Each case runs the example's step:

    assignments = smog.assign_groups(x1_encoded)
    group_features = smog.get_updated_group_features(x0_encoded)
    logits = smog(x0_predicted, group_features, temperature)
    loss = CrossEntropyLoss()(logits, assignments)

and records the loss, the gradients with respect to x0_encoded (through the updated groups) and
x0_predicted (row-major), the assignments and the updated group features.

Writes tests/fixtures/smog.json.

    pip install torch lightly==1.6.0
    python tests/pytorch/smog.py
"""

import json
import math
import os

import torch
from lightly.models.modules.heads import SMoGPrototypes

torch.set_default_dtype(torch.float64)
N, K, D = 8, 5, 4

CASES = [
    ("temperature 0.1, beta 0.99 (lightly's example)", 0.1, 0.99, False),
    ("temperature 0.3, beta 0.9", 0.3, 0.9, False),
    ("temperature 0.2, beta 0.5, a group no row is assigned to", 0.2, 0.5, True),
]


def inputs(k):
    return torch.tensor(
        [
            [
                math.sin(0.61 * (n * D + d) + 1.37 * k + 0.2) * (0.9 + 0.1 * d) + 0.1 * ((n + k) % 3)
                for d in range(D)
            ]
            for n in range(N)
        ]
    )


def groups(empty):
    g = torch.tensor(
        [[0.5 + 0.45 * math.sin(1.9 * (j * D + d) + 0.4) for d in range(D)] for j in range(K)]
    )
    if empty:
        g[4] = torch.tensor([0.0, 1.0, 1.0, 0.0])
    return g


def flat(t):
    return t.reshape(-1).tolist()


def main():
    xs = [inputs(k) for k in range(3)]
    out = {
        "images": N,
        "groups": K,
        "dim": D,
        "inputs": [flat(x) for x in xs],
        "cases": [],
    }
    for name, temperature, beta, empty in CASES:
        g = groups(empty)
        encoded, predicted = (xs[k].clone().requires_grad_() for k in range(2))
        momentum = xs[2].clone()
        smog = SMoGPrototypes(group_features=g.clone(), beta=beta)
        assignments = smog.assign_groups(momentum)
        group_features = smog.get_updated_group_features(encoded)
        logits = smog(predicted, group_features, temperature=temperature)
        loss = torch.nn.CrossEntropyLoss()(logits, assignments)
        loss.backward()
        online = smog.assign_groups(encoded.detach())
        out["cases"].append(
            {
                "name": name,
                "temperature": temperature,
                "beta": beta,
                "group_features": flat(g),
                "value": loss.item(),
                "grads": [flat(encoded.grad), flat(predicted.grad)],
                "assignments": assignments.tolist(),
                "online_assignments": online.tolist(),
                "updated_groups": flat(group_features.detach()),
            }
        )
        print(f"{name}: {loss.item():.15g}, targets {assignments.tolist()}, online {online.tolist()}")
    path = os.path.join(os.path.dirname(__file__), "..", "fixtures", "smog.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
