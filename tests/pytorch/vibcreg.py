"""Worked values and gradients of VIbCReg's loss and of IterNorm, in float64, for
tests/worked_values.rs.

Both are solo-learn's code as its repository writes it (vturrisi/solo-learn, solo/losses/vibcreg.py
with solo/losses/vicreg.py's `invariance_loss` and `variance_loss`, and solo/utils/whitening.py's
`iterative_normalization_py`, whose backward is written by hand), copied below without the
`gather` calls (one process) and without `IterNorm`'s cast to float32 (`custom_fwd`), so that the
comparison is in float64.

Inputs (the Rust test builds them the same way): N = 6 images,
    a[i, j] = sin(0.7 * (i * D + j) + 0.3) + 0.1 * i            (D = 4: the loss's z1)
    b[i, j] = cos(0.45 * (i * D + j) - 0.2) + 0.05 * j          (D = 4: the loss's z2)
    x[i, j] = sin(0.53 * (i * D + j) + 0.1) * (1 + 0.25 * j) + 0.2 * i   (D = 8 and 12)
    y[i, j] = cos(0.29 * (i * D + j) - 0.4) + 0.1 * j           (the evaluation batch)
    r[i, j] = sin(1.3 * (i * D + j))                             (the weights of sum(out * r))

    pip install torch
    python tests/pytorch/vibcreg.py
"""

import json
import math
import os

import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)
N = 6


def matrix(d, f):
    return torch.tensor([[f(i, j) for j in range(d)] for i in range(N)])


def invariance_loss(z1, z2):
    return F.mse_loss(z1, z2)


def variance_loss(z1, z2):
    eps = 1e-4
    std_z1 = torch.sqrt(z1.var(dim=0) + eps)
    std_z2 = torch.sqrt(z2.var(dim=0) + eps)
    std_loss = torch.mean(F.relu(1 - std_z1)) + torch.mean(F.relu(1 - std_z2))
    return std_loss


def covariance_loss(z1, z2):
    norm_z1 = z1 - z1.mean(dim=0)
    norm_z2 = z2 - z2.mean(dim=0)
    norm_z1 = F.normalize(norm_z1, p=2, dim=0)
    norm_z2 = F.normalize(norm_z2, p=2, dim=0)
    fxf_cov_z1 = torch.mm(norm_z1.T, norm_z1)
    fxf_cov_z2 = torch.mm(norm_z2.T, norm_z2)
    fxf_cov_z1.fill_diagonal_(0.0)
    fxf_cov_z2.fill_diagonal_(0.0)
    cov_loss = (fxf_cov_z1**2).mean() + (fxf_cov_z2**2).mean()
    return cov_loss


def vibcreg_loss_func(z1, z2, sim_loss_weight=25.0, var_loss_weight=25.0, cov_loss_weight=200.0):
    sim_loss = invariance_loss(z1, z2)
    var_loss = variance_loss(z1, z2)
    cov_loss = covariance_loss(z1, z2)
    loss = sim_loss_weight * sim_loss + var_loss_weight * var_loss + cov_loss_weight * cov_loss
    return loss


class iterative_normalization_py(torch.autograd.Function):
    @staticmethod
    def forward(ctx, *args):
        X, running_mean, running_wmat, nc, ctx.T, eps, momentum, training = args
        ctx.g = X.size(1) // nc
        x = X.transpose(0, 1).contiguous().view(ctx.g, nc, -1)
        _, d, m = x.size()
        saved = []
        if training:
            mean = x.mean(-1, keepdim=True)
            xc = x - mean
            saved.append(xc)
            P = [None] * (ctx.T + 1)
            P[0] = torch.eye(d).to(X).expand(ctx.g, d, d)
            Sigma = torch.baddbmm(beta=eps, input=P[0], alpha=1.0 / m, batch1=xc,
                                  batch2=xc.transpose(1, 2))
            rTr = (Sigma * P[0]).sum((1, 2), keepdim=True).reciprocal_()
            saved.append(rTr)
            Sigma_N = Sigma * rTr
            saved.append(Sigma_N)
            for k in range(ctx.T):
                P[k + 1] = torch.baddbmm(beta=1.5, input=P[k], alpha=-0.5,
                                         batch1=torch.matrix_power(P[k], 3), batch2=Sigma_N)
            saved.extend(P)
            wm = P[ctx.T].mul_(rTr.sqrt())
            running_mean.copy_(momentum * mean + (1.0 - momentum) * running_mean)
            running_wmat.copy_(momentum * wm + (1.0 - momentum) * running_wmat)
        else:
            xc = x - running_mean
            wm = running_wmat
        xn = wm.matmul(xc)
        Xn = xn.view(X.size(1), X.size(0), *X.size()[2:]).transpose(0, 1).contiguous()
        ctx.save_for_backward(*saved)
        return Xn

    @staticmethod
    def backward(ctx, *grad_outputs):
        (grad,) = grad_outputs
        saved = ctx.saved_tensors
        if len(saved) == 0:
            return None, None, None, None, None, None, None, None
        xc = saved[0]
        rTr = saved[1]
        sn = saved[2].transpose(-2, -1)
        P = saved[3:]
        g, d, m = xc.size()
        g_ = grad.transpose(0, 1).contiguous().view_as(xc)
        g_wm = g_.matmul(xc.transpose(-2, -1))
        g_P = g_wm * rTr.sqrt()
        wm = P[ctx.T]
        g_sn = 0
        for k in range(ctx.T, 1, -1):
            P[k - 1].transpose_(-2, -1)
            P2 = P[k - 1].matmul(P[k - 1])
            g_sn += P2.matmul(P[k - 1]).matmul(g_P)
            g_tmp = g_P.matmul(sn)
            g_P.baddbmm_(beta=1.5, alpha=-0.5, batch1=g_tmp, batch2=P2)
            g_P.baddbmm_(beta=1, alpha=-0.5, batch1=P2, batch2=g_tmp)
            g_P.baddbmm_(beta=1, alpha=-0.5, batch1=P[k - 1].matmul(g_tmp), batch2=P[k - 1])
        g_sn += g_P
        g_tr = ((-sn.matmul(g_sn) + g_wm.transpose(-2, -1).matmul(wm)) * P[0]).sum(
            (1, 2), keepdim=True) * P[0]
        g_sigma = (g_sn + g_sn.transpose(-2, -1) + 2.0 * g_tr) * (-0.5 / m * rTr)
        g_x = torch.baddbmm(wm.matmul(g_ - g_.mean(-1, keepdim=True)), g_sigma, xc)
        grad_input = (
            g_x.view(grad.size(1), grad.size(0), *grad.size()[2:]).transpose(0, 1).contiguous())
        return grad_input, None, None, None, None, None, None, None


def channels_for(num_features, num_groups):
    """IterNorm's __init__: the group rule."""
    num_channels = (num_features - 1) // num_groups + 1
    num_groups = num_features // num_channels
    while num_features % num_channels != 0:
        num_channels //= 2
        num_groups = num_features // num_channels
    return num_groups, num_channels


loss_cases = []
for weights in [(25.0, 25.0, 200.0), (1.0, 3.0, 0.5)]:
    a = matrix(4, lambda i, j: math.sin(0.7 * (i * 4 + j) + 0.3) + 0.1 * i)
    b = matrix(4, lambda i, j: math.cos(0.45 * (i * 4 + j) - 0.2) + 0.05 * j)
    # A scaled-down copy too, so that the variance hinge is active.
    for scale in [1.0, 0.3]:
        z1, z2 = (a * scale).requires_grad_(True), (b * scale).requires_grad_(True)
        loss = vibcreg_loss_func(z1, z2, *weights)
        loss.backward()
        loss_cases.append({"weights": list(weights), "scale": scale, "value": loss.item(),
                           "grad_z1": z1.grad.flatten().tolist(),
                           "grad_z2": z2.grad.flatten().tolist()})

whitening_cases = []
for features, asked in [(8, 2), (12, 8)]:
    groups, channels = channels_for(features, asked)
    x = matrix(features, lambda i, j: math.sin(0.53 * (i * features + j) + 0.1)
               * (1 + 0.25 * j) + 0.2 * i).requires_grad_(True)
    y = matrix(features, lambda i, j: math.cos(0.29 * (i * features + j) - 0.4) + 0.1 * j)
    r = matrix(features, lambda i, j: math.sin(1.3 * (i * features + j)))
    running_mean = torch.zeros(groups, channels, 1)
    running_wm = torch.eye(channels).expand(groups, channels, channels).clone()
    out = iterative_normalization_py.apply(x, running_mean, running_wm, channels, 5, 1e-5, 0.1,
                                           True)
    (out * r).sum().backward()
    evaluated = iterative_normalization_py.apply(y, running_mean, running_wm, channels, 5, 1e-5,
                                                 0.1, False)
    whitening_cases.append({"features": features, "groups_asked": asked, "groups": groups,
                            "channels": channels, "output": out.flatten().tolist(),
                            "grad_x": x.grad.flatten().tolist(),
                            "running_mean": running_mean.flatten().tolist(),
                            "running_whitening": running_wm.flatten().tolist(),
                            "evaluated": evaluated.flatten().tolist()})

out = os.path.join(os.path.dirname(__file__), "..", "fixtures", "vibcreg.json")
with open(out, "w") as f:
    json.dump({"batch": N, "loss_cases": loss_cases, "whitening_cases": whitening_cases}, f,
              indent=1)
for case in loss_cases:
    print(f"loss {case['weights']} x{case['scale']}: {case['value']:.12f}")
for case in whitening_cases:
    print(f"IterNorm {case['features']} features: {case['groups']} x {case['channels']}")
