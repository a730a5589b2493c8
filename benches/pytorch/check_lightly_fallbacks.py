#!/usr/bin/env python3
"""Checks moco_v2_fmnist.py's plain-torch stand-ins against lightly 1.6 (needs lightly installed).

    python3 benches/pytorch/check_lightly_fallbacks.py

Same seed, random inputs, float32 on the CPU: the projection head (weights drawn in the same
order, outputs), NTXentLoss with its memory bank (initial bank, loss, gradient and bank after
each of 40 steps, batch 128 and batch 100, whose keys do not divide the 4096 rows), the
MemoryBankModule as light_moco uses it (feature_dim_first False, 256 keys per step),
update_momentum, deactivate_requires_grad and knn_predict (k 20 / T 0.07 and k 200 / T 0.1).
Prints the largest differences; exits 1 if one is above 1e-5 or a kNN ranking differs.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import moco_v2_fmnist as m  # noqa: E402

if m.lightly is None:
    raise SystemExit("lightly is not installed: nothing to compare with")

from lightly.loss import NTXentLoss  # noqa: E402
from lightly.models.modules import MoCoProjectionHead  # noqa: E402
from lightly.models.modules.memory_bank import MemoryBankModule  # noqa: E402
from lightly.models.utils import deactivate_requires_grad, update_momentum  # noqa: E402
from lightly.utils.benchmarking import knn_predict  # noqa: E402

TOL = 1e-5
diffs = {}


def record(name, a, b):
    d = (a.detach().double() - b.detach().double()).abs().max().item() if a.numel() else 0.0
    diffs[name] = max(diffs.get(name, 0.0), d)


torch.set_num_threads(1)

# Projection head: same draws, same outputs.
for d, h in ((64, 64), (64, 2048), (512, 512)):
    torch.manual_seed(0)
    ref = MoCoProjectionHead(d, h, 128)
    torch.manual_seed(0)
    ours = m.TorchMoCoProjectionHead(d, h, 128)
    for (_, p), (_, q) in zip(ref.named_parameters(), ours.named_parameters(), strict=True):
        record("head weights", p, q)
    x = torch.randn(128, d)
    record("head output", ref(x), ours(x))

# NTXentLoss with a memory bank (moco_v2): loss, gradient, bank.
for batch in (128, 100):
    torch.manual_seed(1)
    ref = NTXentLoss(temperature=0.2, memory_bank_size=(4096, 128))
    torch.manual_seed(1)
    ours = m.TorchNTXentLoss(temperature=0.2, memory_bank_size=(4096, 128))
    record("bank init", ref.memory_bank.bank, ours.memory_bank.bank)
    gen = torch.Generator().manual_seed(2)
    for step in range(40):  # > 4096 / 128 = 32 steps: the pointer wraps
        q = torch.randn(batch, 128, generator=gen)
        k = torch.randn(batch, 128, generator=gen)
        q1 = q.clone().requires_grad_(True)
        q2 = q.clone().requires_grad_(True)
        l1, l2 = ref(q1, k), ours(q2, k)
        l1.backward()
        l2.backward()
        record("NTXent loss", l1, l2)
        record("NTXent grad", q1.grad, q2.grad)
        record("bank after step", ref.memory_bank.bank, ours.memory_bank.bank)
        if int(ref.memory_bank.bank_ptr) != ours.memory_bank.ptr:
            diffs["bank pointer"] = float("inf")
    # no gradient: the bank stays as it is
    with torch.no_grad():
        l1, l2 = ref(q, k), ours(q, k)
    record("NTXent loss", l1, l2)
    record("bank after step", ref.memory_bank.bank, ours.memory_bank.bank)

# MemoryBankModule as light_moco uses it: [n, d] out, 2B keys per step.
torch.manual_seed(3)
ref = MemoryBankModule(size=(4096, 128), feature_dim_first=False)
torch.manual_seed(3)
ours = m.TorchMemoryBankModule(size=(4096, 128), feature_dim_first=False)
gen = torch.Generator().manual_seed(4)
for step in range(20):  # 16 steps per turn
    keys = F.normalize(torch.randn(256, 128, generator=gen), dim=1)
    _, n1 = ref(keys, update=True)
    _, n2 = ours(keys, update=True)
    record("queue negatives", n1, n2)

# update_momentum and deactivate_requires_grad.
torch.manual_seed(5)
online = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(4, 3))
torch.manual_seed(6)
ema1 = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(4, 3))
torch.manual_seed(6)
ema2 = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(4, 3))
deactivate_requires_grad(ema1)
m.torch_deactivate_requires_grad(ema2)
if any(p.requires_grad for p in ema2.parameters()):
    diffs["requires_grad left on"] = float("inf")
for _ in range(3):
    update_momentum(online, ema1, 0.99)
    m.torch_update_momentum(online, ema2, 0.99)
for p1, p2 in zip(ema1.parameters(), ema2.parameters(), strict=True):
    record("update_momentum", p1, p2)

# knn_predict: identical rankings.
torch.manual_seed(7)
bank = F.normalize(torch.randn(5000, 64), dim=1)
labels = torch.randint(0, 10, (5000,))
queries = F.normalize(torch.randn(1000, 64), dim=1)
mismatches = 0
for k, t in m.KNN_SETTINGS:
    for start in range(0, 1000, 256):
        q = queries[start : start + 256]
        p1 = knn_predict(q, bank.t().contiguous(), labels, 10, knn_k=k, knn_t=t)
        p2 = m.torch_knn_predict(q, bank.t().contiguous(), labels, 10, knn_k=k, knn_t=t)
        mismatches += (p1 != p2).sum().item()

bad = False
for name, d in diffs.items():
    flag = "" if d <= TOL else "  <-- above 1e-5"
    bad |= d > TOL
    print(f"{name:>22}: max |difference| {d:.3e}{flag}")
print(f"{'knn_predict':>22}: {mismatches} ranked labels differ (of {2 * 1000 * 10})")
bad |= mismatches > 0
print("FAIL" if bad else "OK: the fallbacks give lightly's numbers")
sys.exit(1 if bad else 0)
