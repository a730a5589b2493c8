"""Values and gradients of solo-learn's All4One objective in float64, for tests/worked_values.rs.

solo-learn is not installed here; the pieces below are written out from its source at commit
9187ea39c2c3f43c455ab06664d2b019a9802954:
- `nnclr_loss_func`: solo/losses/nnclr.py (one process: `gather` is the identity, rank 0);
- `get_emb`, `PositionalEncoding1D`, `PositionalEncodingPermute1D`, `Summer`:
  solo/utils/positional_encodings.py. Its `inv_freq` is computed in float32
  (`torch.arange(...).float()`); here in float64, as the Rust code computes it (the float32 table
  differs by ~1e-8);
- `off_diagonal` and the objective: solo/methods/all4one.py, `training_step` (the lines after
  the projections: nearest neighbours `find_nn` by `topk(5)` of the momentum projections against
  the queue, the "shift operation", the feature term, the transformer's first token, the two
  NNCLR terms and `0.5 * att + 0.5 * nnclr + 0.5 * feature`), and `dequeue_and_enqueue` (the
  first view's momentum projections are what the queue takes).
The transformer is solo-learn's `nn.TransformerEncoder(nn.TransformerEncoderLayer(d_model=D,
nhead=8, dim_feedforward=2D, batch_first=True, dropout=0.1), num_layers=3)` with its dropout set
to 0 (training mode, so torch takes its general path), and every parameter of its three layers
drawn from a seeded normal (norm weights 1 + 0.3 N(0, 1), the rest 0.3 N(0, 1)), so that the
layers differ (solo-learn's start identical: a deep copy) and a mix-up of layers shows.

Inputs (written into the fixture): N = 4 images, projection width D = 16, a queue of Q = 12
unit rows, k = 5 neighbours:

    z[v][n, d]  = sin(0.71 * (n * D + d) + 1.3 * v + 0.2) * (0.8 + 0.02 * d) + 0.1 * n
    p[v][n, d]  = cos(0.53 * (n * D + d) + 0.9 * v + 0.4) + 0.05 * d
    q[v][n, d]  = sin(0.37 * (n * D + d) + 2.1 * v + 0.1) * 1.2 - 0.03 * n   (predictor2's)
    mz[v]       = normalize(sin(0.61 * (n * D + d) + 0.7 * v + 1.1) + 0.2 * cos(1.7 * d))  (rows)
    queue[j, d] = normalize(sin(0.43 * (j * D + d) + 0.5) + 0.1 * j)  (rows)

with z, p, q the online projections, predictions and second predictions of the two views (the
gradient leaves) and mz the momentum projections (no gradient). Writes: the three terms and the
total; the gradients with respect to z, p, q and every transformer parameter; the neighbours'
queue indices per view (descending similarity); the positional table [5, D]; the rows the queue
takes.

Writes tests/fixtures/all4one.json.

    pip install torch
    python tests/pytorch/all4one.py
"""

import json
import math
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)
N, D, Q, K, HEADS, TEMPERATURE = 4, 16, 12, 5, 8, 0.2


def nnclr_loss_func(nn_, p, temperature=0.1):
    # solo/losses/nnclr.py, one process
    nn_ = F.normalize(nn_, dim=-1)
    p = F.normalize(p, dim=-1)
    logits = nn_ @ p.T / temperature
    n = nn_.size(0)
    labels = torch.arange(0, n)
    return F.cross_entropy(logits, labels)


def get_emb(sin_inp):
    emb = torch.stack((sin_inp.sin(), sin_inp.cos()), dim=-1)
    return torch.flatten(emb, -2, -1)


class PositionalEncoding1D(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.org_channels = channels
        channels = int(np.ceil(channels / 2) * 2)
        self.channels = channels
        # solo-learn: torch.arange(0, channels, 2).float(); float64 here (see the docstring)
        inv_freq = 1.0 / (10000 ** (torch.arange(0, channels, 2).double() / channels))
        self.register_buffer("inv_freq", inv_freq)
        self.cached_penc = None

    def forward(self, tensor):
        if self.cached_penc is not None and self.cached_penc.shape == tensor.shape:
            return self.cached_penc
        self.cached_penc = None
        batch_size, x, orig_ch = tensor.shape
        pos_x = torch.arange(x, device=tensor.device).type(self.inv_freq.type())
        sin_inp_x = torch.einsum("i,j->ij", pos_x, self.inv_freq)
        emb_x = get_emb(sin_inp_x)
        emb = torch.zeros((x, self.channels), device=tensor.device).type(tensor.type())
        emb[:, : self.channels] = emb_x
        self.cached_penc = emb[None, :, :orig_ch].repeat(batch_size, 1, 1)
        return self.cached_penc


class PositionalEncodingPermute1D(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.penc = PositionalEncoding1D(channels)

    def forward(self, tensor):
        tensor = tensor.permute(0, 2, 1)
        enc = self.penc(tensor)
        return enc.permute(0, 2, 1)


class Summer(nn.Module):
    def __init__(self, penc):
        super().__init__()
        self.penc = penc

    def forward(self, tensor):
        penc = self.penc(tensor)
        assert tensor.size() == penc.size()
        return tensor + penc


def off_diagonal(x):
    n, m = x.shape
    assert n == m
    return x.flatten()[:-1].view(n - 1, n + 1)[:, 1:].flatten()


def table(f, rows):
    return torch.tensor([[f(n, d) for d in range(D)] for n in range(rows)])


def flat(t):
    return [float(v) for v in t.detach().flatten()]


def main():
    z = [table(lambda n, d: math.sin(0.71 * (n * D + d) + 1.3 * v + 0.2) * (0.8 + 0.02 * d) + 0.1 * n, N) for v in range(2)]
    p = [table(lambda n, d: math.cos(0.53 * (n * D + d) + 0.9 * v + 0.4) + 0.05 * d, N) for v in range(2)]
    q = [table(lambda n, d: math.sin(0.37 * (n * D + d) + 2.1 * v + 0.1) * 1.2 - 0.03 * n, N) for v in range(2)]
    mz = [
        F.normalize(table(lambda n, d: math.sin(0.61 * (n * D + d) + 0.7 * v + 1.1) + 0.2 * math.cos(1.7 * d), N), dim=1)
        for v in range(2)
    ]
    queue = F.normalize(table(lambda j, d: math.sin(0.43 * (j * D + d) + 0.5) + 0.1 * j, Q), dim=1)

    layer = nn.TransformerEncoderLayer(d_model=D, nhead=HEADS, dim_feedforward=D * 2, batch_first=True, dropout=0.0)
    transformer = nn.TransformerEncoder(layer, num_layers=3, enable_nested_tensor=False)
    gen = torch.Generator().manual_seed(69)
    with torch.no_grad():
        for name, param in transformer.named_parameters():
            noise = torch.randn(param.shape, generator=gen)
            if ".norm" in name and name.endswith("weight"):
                param.copy_(1.0 + 0.3 * noise)
            else:
                param.copy_(0.3 * noise)
    transformer.train()
    pos_enc = Summer(PositionalEncodingPermute1D(K))

    z1, z2 = (t.clone().requires_grad_() for t in z)
    p1, p2 = (t.clone().requires_grad_() for t in p)
    p1_2, p2_2 = (t.clone().requires_grad_() for t in q)
    momentum_z1, momentum_z2 = mz

    def find_nn(zz):
        # solo/methods/all4one.py find_nn (no_grad)
        with torch.no_grad():
            _, idx = (zz @ queue.T).topk(K, dim=1)
            return queue[idx], idx

    nn1, idx1 = find_nn(momentum_z1)
    nn2, idx2 = find_nn(momentum_z2)
    trans_emb1 = pos_enc(nn1)
    trans_emb2 = pos_enc(nn2)
    strange1 = pos_enc(torch.cat((p1_2.unsqueeze(1), nn1), 1)[:, :K, :])
    strange2 = pos_enc(torch.cat((p2_2.unsqueeze(1), nn2), 1)[:, :K, :])
    penc = pos_enc.penc(nn1)[0]

    p1_norm_feat = F.normalize(momentum_z1, dim=0)
    p2_norm_feat = F.normalize(momentum_z2, dim=0)
    z1_norm_feat = F.normalize(z1, dim=0)
    z2_norm_feat = F.normalize(z2, dim=0)
    corr_matrix_1_feat = p1_norm_feat.T @ z2_norm_feat
    corr_matrix_2_feat = p2_norm_feat.T @ z1_norm_feat
    on_diag_feat = (
        (
            torch.diagonal(corr_matrix_1_feat).add(-1).pow(2).mean()
            + torch.diagonal(corr_matrix_2_feat).add(-1).pow(2).mean()
        )
        * 0.5
    ).sqrt()
    off_diag_feat = (
        (off_diagonal(corr_matrix_1_feat).pow(2).mean() + off_diagonal(corr_matrix_2_feat).pow(2).mean()) * 0.5
    ).sqrt()

    rich_emb1 = transformer(trans_emb1)[:, 0, :]
    rich_emb2 = transformer(trans_emb2)[:, 0, :]
    strange_emb1 = transformer(strange1)[:, 0, :]
    strange_emb2 = transformer(strange2)[:, 0, :]

    att_nnclr_loss = nnclr_loss_func(rich_emb1, strange_emb2) / 2 + nnclr_loss_func(rich_emb2, strange_emb1) / 2
    nnclr_loss = (
        nnclr_loss_func(nn1[:, 0, :], p2, temperature=TEMPERATURE) / 2
        + nnclr_loss_func(nn2[:, 0, :], p1, temperature=TEMPERATURE) / 2
    )
    feature_loss = (0.5 * on_diag_feat + 0.5 * off_diag_feat) * 10
    total = 0.5 * att_nnclr_loss + 0.5 * nnclr_loss + 0.5 * feature_loss
    total.backward()

    out = {
        "images": N,
        "dim": D,
        "queue_size": Q,
        "neighbours": K,
        "heads": HEADS,
        "temperature": TEMPERATURE,
        "z": [flat(t) for t in z],
        "p": [flat(t) for t in p],
        "q": [flat(t) for t in q],
        "momentum_z": [flat(t) for t in mz],
        "queue": flat(queue),
        "transformer": {name: flat(param) for name, param in transformer.named_parameters()},
        "positional_table": flat(penc),
        "neighbour_indices": [[int(i) for i in idx.flatten()] for idx in (idx1, idx2)],
        "centroid_loss": att_nnclr_loss.item(),
        "neighbour_loss": nnclr_loss.item(),
        "feature_loss": feature_loss.item(),
        "on_diagonal": on_diag_feat.item(),
        "off_diagonal": off_diag_feat.item(),
        "loss": total.item(),
        "grad_z": [flat(t.grad) for t in (z1, z2)],
        "grad_p": [flat(t.grad) for t in (p1, p2)],
        "grad_q": [flat(t.grad) for t in (p1_2, p2_2)],
        "grad_transformer": {name: flat(param.grad) for name, param in transformer.named_parameters()},
        # dequeue_and_enqueue(momentum_z1, ...): the queue's rows 0..N after the step
        "enqueued": flat(momentum_z1),
    }
    print(
        f"centroid {att_nnclr_loss.item():.15g} neighbour {nnclr_loss.item():.15g} "
        f"feature {feature_loss.item():.15g} total {total.item():.15g}"
    )
    print("neighbours", out["neighbour_indices"])
    path = os.path.join(os.path.dirname(__file__), "..", "fixtures", "all4one.json")
    with open(path, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
