"""Worked values and input gradients of the non-contrastive, decoupled, model-aware, FroSSL,
DirectCLR, LeJEPA and MMCR losses, in float64, from lightly's own implementations (lightly 1.6,
torch 2.15), for tests/worked_values.rs.

Inputs (the Rust test builds them the same way): B = 6 images, D = 4 features,
    z1[i, j] = sin(0.7 * (i * D + j) + 0.3) + 0.1 * i
    z2[i, j] = cos(0.45 * (i * D + j) - 0.2) + 0.05 * j
Writes tests/fixtures/ssl_losses.json: for each loss and setting, the value and the gradients
with respect to z1 and z2 (row-major).

    pip install torch lightly==1.6.0
    python tests/pytorch/ssl_losses.py
"""

import json
import math
import os

import torch
from lightly.loss import (
    BarlowTwinsLoss,
    DCLLoss,
    DCLWLoss,
    DirectCLRLoss,
    FroSSLLoss,
    LeJEPALoss,
    MACLLoss,
    MMCRLoss,
    VICRegLoss,
)

torch.set_default_dtype(torch.float64)
B, D = 6, 4


def inputs():
    z1 = torch.tensor(
        [[math.sin(0.7 * (i * D + j) + 0.3) + 0.1 * i for j in range(D)] for i in range(B)]
    )
    z2 = torch.tensor(
        [[math.cos(0.45 * (i * D + j) - 0.2) + 0.05 * j for j in range(D)] for i in range(B)]
    )
    return z1, z2


def case(name, loss_fn):
    z1, z2 = inputs()
    z1.requires_grad_(True)
    z2.requires_grad_(True)
    loss = loss_fn(z1, z2)
    loss.backward()
    return {
        "name": name,
        "value": loss.item(),
        "grad_z1": z1.grad.flatten().tolist(),
        "grad_z2": z2.grad.flatten().tolist(),
    }


cases = [
    case("barlow_twins lambda=5e-3", BarlowTwinsLoss(lambda_param=5e-3)),
    case("barlow_twins lambda=0.1", BarlowTwinsLoss(lambda_param=0.1)),
    case("vicreg 25/25/1 eps=1e-4", VICRegLoss()),
    case("vicreg 1/2/3 eps=1e-4", VICRegLoss(lambda_param=1.0, mu_param=2.0, nu_param=3.0)),
    case("dcl tau=0.1", DCLLoss(temperature=0.1)),
    case("dcl tau=0.5", DCLLoss(temperature=0.5)),
    case("dclw tau=0.1 sigma=0.5", DCLWLoss(temperature=0.1, sigma=0.5)),
    case("dclw tau=0.5 sigma=2", DCLWLoss(temperature=0.5, sigma=2.0)),
    case("macl tau=0.1 alpha=0.5 a0=0", MACLLoss()),
    case("macl tau=0.5 alpha=1 a0=0.3", MACLLoss(temperature=0.5, alpha=1.0, A_0=0.3)),
    # FroSSL takes a list of views. B = 6 > D = 4: the D x D covariance.
    case("frossl w=1", lambda a, b: FroSSLLoss()([a, b])),
    case("frossl w=0.3", lambda a, b: FroSSLLoss(invariance_weight=0.3)([a, b])),
    # DirectCLR reads the first loss_dim of the D = 4 columns: the rest get no gradient.
    case("directclr d0=3 tau=0.5", DirectCLRLoss(loss_dim=3)),
    case("directclr d0=2 tau=0.2", DirectCLRLoss(loss_dim=2, temperature=0.2)),
]


def slices(k):
    """LeJEPA's directions, fixed for the comparison (lightly draws them with torch.randn):
    A[d, c] = cos(0.9 * (d * k + c) + 0.1), each column divided by its norm."""
    a = torch.tensor([[math.cos(0.9 * (d * k + c) + 0.1) for c in range(k)] for d in range(D)])
    return a / a.norm(dim=0)


def lejepa(k, **kwargs):
    """LeJEPALoss with global views (z1, z2) and one local view 0.5 z1 + 0.3 z2, along the
    directions of slices(k)."""
    loss = LeJEPALoss(sigreg_num_vectors=k, **kwargs)
    loss.sigreg._generate_unit_vectors = lambda device, dtype, num_features: slices(k)
    # lightly builds its knots, phi and weights in float32 (linspace(..., dtype=float32)) and
    # casts them to the input's dtype; rebuilt here in float64 by its own formulas, so that the
    # comparison is of the computation rather than of float32 rounding (3e-9 relative).
    sig = loss.sigreg
    knots = sig.t.numel()
    t = torch.linspace(0, float(sig.t[-1]), knots, dtype=torch.float64)
    dt = float(sig.t[-1]) / (knots - 1)
    weights = torch.full((knots,), 2 * dt, dtype=torch.float64)
    weights[[0, -1]] = dt
    window = torch.exp(-t.square() / 2.0)
    sig.t, sig.phi, sig.weights = t, window, weights * window

    def f(a, b):
        return loss(global_proj=torch.stack([a, b]), local_proj=(0.5 * a + 0.3 * b)[None])

    return f


cases += [
    case("lejepa lambda=0.05 K=5", lejepa(5)),
    case(
        "lejepa lambda=0.5 knots=5 tmax=2 K=3",
        lejepa(3, lambda_param=0.5, sigreg_knots=5, sigreg_t_max=2.0),
    ),
]


def mmcr(lmda):
    """MMCRLoss on k = 2 views: online (z1, z2), momentum (z1² − 0.4 z2, z1 * z2) without
    gradient (lightly's example detaches the momentum network's outputs). Not linear in the
    online views, so that every image's 4 x 4 matrix has full rank (at a zero singular value the
    nuclear norm has no derivative, and the two SVDs' subgradients differ)."""
    z1, z2 = inputs()
    momentum = torch.stack([z1 * z1 - 0.4 * z2, z1 * z2], dim=1)
    z1.requires_grad_(True)
    z2.requires_grad_(True)
    loss = MMCRLoss(lmda=lmda)(torch.stack([z1, z2], dim=1), momentum)
    loss.backward()
    return {"name": f"mmcr lambda={lmda}", "value": loss.item(),
            "grad_z1": z1.grad.flatten().tolist(), "grad_z2": z2.grad.flatten().tolist()}


mmcr_cases = [mmcr(5e-3), mmcr(0.5)]
out = os.path.join(os.path.dirname(__file__), "..", "fixtures", "ssl_losses.json")
with open(out, "w") as f:
    json.dump({"batch": B, "dim": D, "cases": cases, "mmcr_cases": mmcr_cases}, f, indent=1)
for c in cases + mmcr_cases:
    print(f"{c['name']:28s} {c['value']:.12f}")
