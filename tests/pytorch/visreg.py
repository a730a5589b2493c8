"""Values and input gradients of lightly's VISRegLoss in float64 (lightly 1.6, torch 2.15), and
the standard normal quantiles from mpmath, for tests/worked_values.rs (and the constants of
src/loss/visreg.rs's unit tests, printed at the end).

Inputs (the Rust test builds them the same way; those of tests/pytorch/ssl_losses.py): B = 6
images, D = 4 features,
    z1[i, j] = sin(0.7 * (i * D + j) + 0.3) + 0.1 * i
    z2[i, j] = cos(0.45 * (i * D + j) - 0.2) + 0.05 * j
the global views (z1, z2) and the local views of each case, made of them.

What is held fixed for the comparison, by replacing two names lightly's module uses:
- the directions: lightly draws `torch.randn(D, K)` in every call and divides each column by
  its norm; during the call `torch.randn` returns A[d, c] = cos(0.9 * (d * K + c) + 0.1) (LeJEPA's
  fixed directions in ssl_losses.py), which lightly then normalises as it would its draw;
- the quantiles: lightly takes the positions i / (N + 1) and Normal(0, 1).icdf in float32 and
  casts them to the input's dtype (a relative error of ~6e-8); its `Normal` is replaced by one
  that rebuilds the positions in float64 and takes torch's float64 icdf (the same formula,
  sqrt(2) * erfinv(2p - 1)), so that the comparison is of the computation rather than of
  float32 rounding. The value with lightly's own float32 quantiles is written too
  (`value_float32_quantiles`).

Writes tests/fixtures/visreg.json: for each case the settings, the value, the four terms and the
gradients with respect to z1 and z2 (row-major); and the quantile grids Phi^-1(n / (N + 1)),
n = 1 .. N, for a few N from mpmath at 60 digits.

    pip install torch lightly==1.6.0 mpmath
    python tests/pytorch/visreg.py
"""

import json
import math
import os
from unittest import mock

import mpmath
import torch
from lightly.loss import VISRegLoss
from lightly.loss import visreg_loss

torch.set_default_dtype(torch.float64)
mpmath.mp.dps = 60
B, D = 6, 4


def inputs():
    z1 = torch.tensor(
        [[math.sin(0.7 * (i * D + j) + 0.3) + 0.1 * i for j in range(D)] for i in range(B)]
    )
    z2 = torch.tensor(
        [[math.cos(0.45 * (i * D + j) - 0.2) + 0.05 * j for j in range(D)] for i in range(B)]
    )
    return z1, z2


def directions(k):
    """The fixed directions before lightly's normalisation."""
    return torch.tensor([[math.cos(0.9 * (d * k + c) + 0.1) for c in range(k)] for d in range(D)])


class Float64Normal:
    """lightly's `Normal(loc=0.0, scale=1.0)`, its icdf taken in float64 at the positions
    i / (N + 1) rebuilt in float64 (lightly hands it the float32 ones)."""

    def __init__(self, loc, scale):
        self.normal = torch.distributions.Normal(
            torch.tensor(float(loc), dtype=torch.float64),
            torch.tensor(float(scale), dtype=torch.float64),
        )

    def icdf(self, positions):
        n = positions.numel()
        exact = torch.arange(1, n + 1, dtype=torch.float64) / (n + 1)
        assert positions.dtype == torch.float32
        assert torch.equal(exact.to(torch.float32), positions), "lightly's positions changed"
        return self.normal.icdf(exact)


LOCALS = {
    "0.5 z1 + 0.3 z2": lambda a, b: 0.5 * a + 0.3 * b,
    "z1 * z2": lambda a, b: a * b,
}


def run(config, k, locals_, float64_quantiles):
    """lightly's VISRegLoss(**config) on the global views (z1, z2) and `locals_`, along the
    directions of `directions(k)`: the components and the inputs' gradients."""
    z1, z2 = inputs()
    z1.requires_grad_(True)
    z2.requires_grad_(True)
    loss_fn = VISRegLoss(num_slices=k, **config)

    def randn(*size, device=None, dtype=None):
        assert tuple(size) == (D, k), size
        return directions(k).to(dtype=dtype)

    local = [LOCALS[name](z1, z2) for name in locals_]
    local_proj = torch.stack(local) if local else torch.zeros(0, B, D)
    patches = [mock.patch.object(torch, "randn", randn)]
    if float64_quantiles:
        patches.append(mock.patch.object(visreg_loss, "Normal", Float64Normal))
    with patches[0]:
        if float64_quantiles:
            with patches[1]:
                out = loss_fn.forward_components(
                    local_proj=local_proj, global_proj=torch.stack([z1, z2])
                )
        else:
            out = loss_fn.forward_components(
                local_proj=local_proj, global_proj=torch.stack([z1, z2])
            )
    out.total.backward()
    return out, z1.grad, z2.grad


def case(name, config, k, locals_):
    out, g1, g2 = run(config, k, locals_, float64_quantiles=True)
    shipped, _, _ = run(config, k, locals_, float64_quantiles=False)
    return {
        "name": name,
        "config": config,
        "num_slices": k,
        "locals": locals_,
        "value": out.total.item(),
        "invariance": out.pred.item(),
        "scale": out.scale.item(),
        "shape": out.shape.item(),
        "center": out.center.item(),
        "grad_z1": g1.flatten().tolist(),
        "grad_z2": g2.flatten().tolist(),
        "value_float32_quantiles": shipped.total.item(),
    }


cases = [
    case("defaults K=5, one local view", {}, 5, ["0.5 z1 + 0.3 z2"]),
    case(
        "lambda=0.6 weights 2/0.5/3 eps=1e-3 K=3, two local views",
        {
            "lambda_param": 0.6,
            "lambda_scale": 2.0,
            "lambda_shape": 0.5,
            "lambda_center": 3.0,
            "eps": 1e-3,
        },
        3,
        ["0.5 z1 + 0.3 z2", "z1 * z2"],
    ),
    case("lambda=0.3 K=4, no local view", {"lambda_param": 0.3}, 4, []),
]


def quantile(p):
    return mpmath.sqrt(2) * mpmath.erfinv(2 * mpmath.mpf(p) - 1)


grids = {
    str(n): [float(quantile(mpmath.mpf(i) / (n + 1))) for i in range(1, n + 1)]
    for n in (2, 6, 7, 128, 1000)
}

# torch's float64 icdf (the comparison's quantiles) against mpmath on the cases' grid.
torch_grid = Float64Normal(0.0, 1.0).icdf(
    (torch.arange(1, B + 1, dtype=torch.float64) / (B + 1)).to(torch.float32)
)
torch_error = max(abs(float(t) - q) for t, q in zip(torch_grid, grids[str(B)]))

out = os.path.join(os.path.dirname(__file__), "..", "fixtures", "visreg.json")
with open(out, "w") as f:
    json.dump({"batch": B, "dim": D, "cases": cases, "quantiles": grids}, f, indent=1)

for c in cases:
    print(
        f"{c['name']:58s} {c['value']:.15f}  (lightly's float32 quantiles: "
        f"{c['value_float32_quantiles']:.15f}, {abs(c['value'] - c['value_float32_quantiles']):.1e} apart)"
    )
print(f"torch's float64 icdf against mpmath at N = {B}: {torch_error:.1e}")
# The constants of src/loss/visreg.rs's unit test of the quantile function.
for p in (1e-300, 1e-20, 1e-10, 1e-5, 0.02, 0.1, 1.0 / 3.0, 0.5, 0.7, 0.975, 0.999, 2.0 / 3.0):
    with mpmath.workdps(700):  # 2p - 1 must not round to -1 at p = 1e-300
        print(f"Phi^-1({p!r}) = {float(quantile(p))!r}")
