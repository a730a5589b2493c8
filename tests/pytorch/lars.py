"""Four steps of solo-learn's LARS in float64, for tests/ema_and_optimisers.rs.

solo-learn (solo/utils/lars.py at 9187ea3, itself PyTorch Lightning Bolts' LARS with `clip_lr`
and `exclude_bias_n_norm` added) steps each parameter p with gradient g as written out in
`solo_lars_step` below (its `step`, one parameter, dampening 0): where p is a matrix (or
`exclude_bias_n_norm` is off) and both norms are non-zero,
    r = eta * |p| / (|g| + wd * |p| + eps),   clip_lr: r = min(r / lr, 1),
    d = (g + wd * p) * r;
otherwise d = g (no weight decay either); then PyTorch's momentum (Nesterov optional) and
p -= lr * step. solo-learn's recipes all set clip_lr, eta 0.02, exclude_bias_n_norm.

Inputs: a matrix W [3, 4], W[i, j] = sin(0.7 * (4 i + j) + 0.3) + 0.2; a bias b [4],
b[j] = 0.5 - 0.1 j; a matrix Z [2, 3], Z[i, j] = cos(0.4 * (3 i + j)); at step t (0..4) the
gradients gW[i, j] = cos(0.45 * (4 i + j) - 0.2 + t) * 0.3 ** t, gb[j] = 0.1 * (j + 1) - 0.05 t,
gZ = cos(0.9 * (3 i + j) + t) except at t = 1, where it is zero (a frozen step: no decay).
Learning rates per step: 0.5, 0.05, 0.0 (warm-up's first step), 0.3 — with eta 0.02 and these
norms the clipped ratio is below 1 at some steps and clipped at others.

Cases: clip_lr on and off (momentum 0.9, wd 0.01, eps 1e-8, exclude_bias_n_norm), and clip_lr
with Nesterov. Writes tests/fixtures/lars.json: each case's parameters after every step.

    pip install torch
    python tests/pytorch/lars.py
"""

import json
import math
import os

import torch

torch.set_default_dtype(torch.float64)
LRS = [0.5, 0.05, 0.0, 0.3]
ETA, WD, EPS, MOMENTUM = 0.02, 0.01, 1e-8, 0.9


def solo_lars_step(p, g, buf, lr, clip_lr, nesterov, exclude_bias_n_norm=True):
    """One parameter's step of solo-learn's LARS.step (dampening 0); returns (p, buf)."""
    d_p = g
    p_norm = torch.norm(p)
    g_norm = torch.norm(g)
    if p.ndim != 1 or not exclude_bias_n_norm:
        if p_norm != 0 and g_norm != 0:
            lars_lr = p_norm / (g_norm + p_norm * WD + EPS)
            lars_lr *= ETA
            if clip_lr:
                lars_lr = min(lars_lr / lr, 1) if lr != 0 else 1.0
            d_p = d_p.add(p, alpha=WD)
            d_p = d_p * lars_lr
    if buf is None:
        buf = d_p.clone()
    else:
        buf = buf * MOMENTUM + d_p
    step = d_p + MOMENTUM * buf if nesterov else buf
    return p - lr * step, buf


def initial():
    w = torch.tensor([[math.sin(0.7 * (4 * i + j) + 0.3) + 0.2 for j in range(4)] for i in range(3)])
    b = torch.tensor([0.5 - 0.1 * j for j in range(4)])
    z = torch.tensor([[math.cos(0.4 * (3 * i + j)) for j in range(3)] for i in range(2)])
    return {"w": w, "b": b, "z": z}


def grads(t):
    gw = torch.tensor([[math.cos(0.45 * (4 * i + j) - 0.2 + t) * 0.3**t for j in range(4)]
                       for i in range(3)])
    gb = torch.tensor([0.1 * (j + 1) - 0.05 * t for j in range(4)])
    if t == 1:
        gz = torch.zeros(2, 3)
    else:
        gz = torch.tensor([[math.cos(0.9 * (3 * i + j) + t) for j in range(3)] for i in range(2)])
    return {"w": gw, "b": gb, "z": gz}


def run(clip_lr, nesterov):
    params = initial()
    bufs = {k: None for k in params}
    steps = []
    for t, lr in enumerate(LRS):
        g = grads(t)
        for k in params:
            params[k], bufs[k] = solo_lars_step(params[k], g[k], bufs[k], lr, clip_lr, nesterov)
        steps.append({k: v.flatten().tolist() for k, v in params.items()})
    return steps


def main():
    out = {
        "lrs": LRS,
        "eta": ETA, "weight_decay": WD, "eps": EPS, "momentum": MOMENTUM,
        "initial": {k: v.flatten().tolist() for k, v in initial().items()},
        "grads": [{k: v.flatten().tolist() for k, v in grads(t).items()} for t in range(len(LRS))],
        "cases": [
            {"clip_lr": c, "nesterov": n, "steps": run(c, n)}
            for c, n in [(True, False), (False, False), (True, True)]
        ],
    }
    path = os.path.join(os.path.dirname(__file__), "..", "fixtures", "lars.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print("wrote", os.path.normpath(path))


if __name__ == "__main__":
    main()
