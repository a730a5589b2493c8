"""Recomputes, in float64, every worked value of docs/methods.md#worked-values (numpy + scipy):
the numbers tests/worked_values.rs asserts to 1e-5.

Run: python3 tests/pytorch/worked_values.py. Each block names the public code whose behaviour it mirrors.
"""
import numpy as np
from scipy import linalg
np.set_printoptions(precision=6, suppress=True)

def unit(deg):
    a = np.deg2rad(deg); return np.array([np.cos(a), np.sin(a)])

def logsumexp(x, axis=-1):
    m = x.max(axis=axis, keepdims=True)
    return (m + np.log(np.exp(x - m).sum(axis=axis, keepdims=True))).squeeze(axis)

def ce(logits, labels):
    return np.mean(logsumexp(logits, 1) - logits[np.arange(len(labels)), labels])

# ---------- 1. Curricular contrastive loss (HElenZWHU/CurricularContrastive image/CurricularLoss.py) ----------
def curricular_loss(out1, out2, tau, t_prev, momentum, lam):
    B = out1.shape[0]
    out = np.concatenate([out1, out2]); S = np.clip(out @ out.T, -1, 1)
    pos = np.concatenate([np.diag(S[:B, B:]), np.diag(S[B:, :B])])[:, None]   # row order of pos_mask
    t = momentum * t_prev + (1 - momentum) * pos.mean()                       # update BEFORE use
    offdiag = ~np.eye(2 * B, dtype=bool)
    C = S[offdiag].reshape(2 * B, 2 * B - 1)
    label = np.array([i + B - 1 for i in range(B)] + [i for i in range(B)])
    mask = C > pos                                      # strict; positive column itself never masked
    w = np.where(mask, C + t, 0.0)
    reg = 0.5 * lam * np.sum(np.where(w > 1, w, 0.0) ** 2, axis=1)
    C2 = np.where(mask, C * (t + C), C)
    loss = ce(C2 / tau, label) + reg.sum()               # note: reg summed over 2B anchors, CE averaged
    return loss, t, ce(C2 / tau, label), reg.sum()

out1 = np.stack([unit(0), unit(90)]); out2 = np.stack([unit(50), unit(125)])
for t_prev in [0.0, 0.8]:
    L, t, ce_part, reg = curricular_loss(out1, out2, 0.5, t_prev, 0.999, 1e-3)
    print(f"[curric] t_prev={t_prev}: t_new={t:.6f} CE={ce_part:.6f} reg={reg:.8f} loss={L:.6f}")
# plain NT-Xent on same data for comparison
B=2; out=np.concatenate([out1,out2]); S=out@out.T; C=S[~np.eye(4,dtype=bool)].reshape(4,3)
print(f"[curric] plain NT-Xent (tau=0.5) = {ce(C/0.5, np.array([1,2,0,1])):.6f}")

# ---------- 1b. CurricularFace head (HuangYG123/CurricularFace head/metrics.py) ----------
def curricularface_logits(cos, labels, t_prev, s=64.0, m=0.5, alpha=0.01):
    cos = np.clip(cos.copy(), -1, 1)
    tl = cos[np.arange(len(labels)), labels][:, None]
    sin = np.sqrt(1 - tl ** 2)
    ctm = tl * np.cos(m) - sin * np.sin(m)
    mask = cos > ctm
    final_t = np.where(tl > np.cos(np.pi - m), ctm, tl - np.sin(np.pi - m) * m)
    t = tl.mean() * alpha + (1 - alpha) * t_prev
    cos = np.where(mask, cos * (t + cos), cos)
    cos[np.arange(len(labels)), labels] = final_t[:, 0]
    return cos * s, t
cosm = np.array([[0.8, 0.75, 0.1], [0.3, 0.5, 0.6]]); lab = np.array([0, 1])
for t_prev in [0.0, 0.5]:
    lg, t = curricularface_logits(cosm, lab, t_prev)
    print(f"[cface] t_prev={t_prev}: t_new={t:.6f}\n logits/s=\n{lg/64}\n CE={ce(lg, lab):.6f}")

# ---------- 2. HCL (joshr17/HCL image/main.py criterion) ----------
def hcl(out1, out2, tau, tau_plus, beta, estimator='hard'):
    B = out1.shape[0]; out = np.concatenate([out1, out2])
    neg = np.exp(out @ out.T / tau)
    mask = np.ones((B, 2 * B), bool)
    for i in range(B): mask[i, i] = False; mask[i, i + B] = False
    mask = np.concatenate([mask, mask])
    neg = neg[mask].reshape(2 * B, -1)
    pos = np.exp(np.sum(out1 * out2, -1) / tau); pos = np.concatenate([pos, pos])
    if estimator == 'hard':
        N = 2 * B - 2
        imp = np.exp(beta * np.log(neg))
        rw = (imp * neg).sum(-1) / imp.mean(-1)
        Ng = (-tau_plus * N * pos + rw) / (1 - tau_plus)
        Ng = np.maximum(Ng, N * np.e ** (-1 / tau))
    else:
        Ng = neg.sum(-1)
    return np.mean(-np.log(pos / (pos + Ng)))
h1 = np.stack([unit(0), unit(90), unit(200)]); h2 = np.stack([unit(30), unit(100), unit(180)])
print(f"[hcl] B=3 tau=0.5: easy={hcl(h1,h2,0.5,0,0,'easy'):.6f} debiased(beta0,tau+0.1)={hcl(h1,h2,0.5,0.1,0.0):.6f} hard(beta1,tau+0.1)={hcl(h1,h2,0.5,0.1,1.0):.6f} hard(beta1,tau+0)={hcl(h1,h2,0.5,0.0,1.0):.6f}")

# ---------- 3. Magnet loss (paper eq.5) vs tf-magnet-loss / SPL-ADVisE code (variance**2) ----------
def magnet(r, classes, m, d, alpha=1.0, square_var=False):
    clusters = np.repeat(np.arange(m), d)
    mu = np.stack([r[clusters == c].mean(0) for c in range(m)])
    cost = ((r[:, None, :] - mu[None]) ** 2).sum(-1)          # (MD, M)
    intra = cost[np.arange(len(r)), clusters]
    var = intra.sum() / (len(r) - 1)
    norm = -1 / (2 * var ** 2) if square_var else -1 / (2 * var)
    num = np.exp(norm * intra - alpha)
    cc = classes[::d]
    diff = classes[:, None] != cc[None]
    den = (diff * np.exp(norm * cost)).sum(1)
    eps = 1e-8
    losses = np.maximum(0, -np.log(num / (den + eps) + eps))
    return losses.mean(), losses, var
r = np.array([[0., 0.], [2., 0.], [1., 0.], [3., 0.]]); cls = np.array([0, 0, 1, 1])
Lp, lp, var = magnet(r, cls, 2, 2)
Lc, lc, _ = magnet(r, cls, 2, 2, square_var=True)
print(f"[magnet] sigma^2={var:.6f} paper: L={Lp:.6f} per-ex={lp}  code(var**2): L={Lc:.6f} per-ex={lc}")

# ---------- 4. SPLD ----------
def spld_select(losses, groups, lam, gamma):
    sel = np.zeros(len(losses), bool)
    for g in np.unique(groups):
        idx = np.where(groups == g)[0]
        order = idx[np.argsort(losses[idx], kind='stable')]
        for r_, i in enumerate(order, start=1):
            sel[i] = losses[i] < lam + gamma / (np.sqrt(r_) + np.sqrt(r_ - 1))
    return sel
Ls = np.array([0.05, 0.9, 0.2, 0.3, 0.5, 0.25, 0.7, 0.1]); G = np.array([0, 0, 0, 0, 0, 1, 1, 1])
print("[spld] thresholds lam=0.1,gamma=0.5 r=1..5:", [round(0.1 + 0.5 / (np.sqrt(r_) + np.sqrt(r_ - 1)), 6) for r_ in range(1, 6)])
print("[spld] selected:", spld_select(Ls, G, 0.1, 0.5).astype(int))
print("[spld] gamma=0 (plain SPL):", spld_select(Ls, G, 0.1, 0.0).astype(int))

# ---------- 5. Frechet distance ----------
def fid_scipy(mu1, s1, mu2, s2):
    covmean = linalg.sqrtm(s1 @ s2)
    return float(((mu1 - mu2) ** 2).sum() + np.trace(s1) + np.trace(s2) - 2 * np.trace(covmean).real)
def fid_eigvals(mu1, s1, mu2, s2):
    return float(((mu1 - mu2) ** 2).sum() + np.trace(s1) + np.trace(s2) - 2 * np.sqrt(np.linalg.eigvals(s1 @ s2).astype(complex)).real.sum())
def fid_sym(mu1, s1, mu2, s2):
    w, V = np.linalg.eigh(s1); r1 = (V * np.sqrt(np.clip(w, 0, None))) @ V.T
    M = r1 @ s2 @ r1; ev = np.clip(np.linalg.eigvalsh((M + M.T) / 2), 0, None)
    return float(((mu1 - mu2) ** 2).sum() + np.trace(s1) + np.trace(s2) - 2 * np.sqrt(ev).sum())
def ns_sqrt(A, iters=100):
    n = A.shape[0]; nrm = np.linalg.norm(A, 'fro'); Y = A / nrm; I = np.eye(n); Z = np.eye(n)
    for _ in range(iters):
        T = 0.5 * (3 * I - Z @ Y); Y = Y @ T; Z = T @ Z
    return Y * np.sqrt(nrm)
def fid_ns(mu1, s1, mu2, s2):
    return float(((mu1 - mu2) ** 2).sum() + np.trace(s1) + np.trace(s2) - 2 * np.trace(ns_sqrt(s1 @ s2)))
cases = {
  'A: I vs 4I, mu diff (1,1)': (np.zeros(2), np.eye(2), np.ones(2), 4 * np.eye(2)),
  'B: [[2,1],[1,2]] vs diag(1,3), same mu': (np.zeros(2), np.array([[2., 1], [1, 2]]), np.zeros(2), np.diag([1., 3])),
  'C: 1-D N(1,4) vs N(3,1)': (np.array([1.]), np.array([[4.]]), np.array([3.]), np.array([[1.]])),
  'D: identical': (np.array([1., 2]), np.array([[2., 1], [1, 2]]), np.array([1., 2]), np.array([[2., 1], [1, 2]])),
}
for k, (a, b, c, d) in cases.items():
    print(f"[fid] {k}: scipy={fid_scipy(a,b,c,d):.9f} eig={fid_eigvals(a,b,c,d):.9f} sym={fid_sym(a,b,c,d):.9f} NS={fid_ns(a,b,c,d):.9f}")
print("[fid] closed form case B: 8 - 2*sqrt(14) =", 8 - 2 * np.sqrt(14))

# ---------- 7. SoftNCE ----------
def soft_ce(logits, target):
    return np.mean(-(target * (logits - logsumexp(logits, 1)[:, None])).sum(1))
def softnce_linear(l_pos, l_neg, T, K, alpha):
    logits = np.concatenate([l_pos[:, None], l_neg], 1) / T
    tgt = np.zeros_like(logits); tgt[:, 0] = alpha
    order = np.argsort(-l_neg, 1, kind='stable')[:, :K]
    k = np.arange(1, K + 1); w = 2 * (K - k) / ((K - 1) * K) * (1 - alpha)
    for i in range(len(l_pos)): tgt[i, order[i] + 1] = w
    return soft_ce(logits, tgt), w
def softnce_code(l_pos, l_neg, T, nn_pos, smooth, strategy):
    logits = np.concatenate([l_pos[:, None], l_neg], 1) / T
    tgt = np.zeros_like(logits); tgt[:, 0] = 1 - smooth
    order = np.argsort(-l_neg, 1, kind='stable')
    if strategy == 1:
        for i in range(len(l_pos)): tgt[i, order[i, :nn_pos] + 1] = smooth / nn_pos
    return soft_ce(logits, tgt)
lpos = np.array([0.6]); lneg = np.array([[0.5, -0.2, 0.7, 0.1, 0.0]])
L, w = softnce_linear(lpos, lneg, 0.1, 3, 0.8)
print(f"[softnce] linear K=3 alpha=0.8 weights={w} loss={L:.6f}; InfoNCE={ce(np.concatenate([lpos[:,None],lneg],1)/0.1, np.array([0])):.6f}; code strategy1 nn_pos=3 smooth=0.2: {softnce_code(lpos,lneg,0.1,3,0.2,1):.6f}")
K=20; k=np.arange(1,K+1); w20 = 2*(K-k)/((K-1)*K)*0.2
print(f"[softnce] K=20 alpha=0.8: w1={w20[0]:.6f} w2={w20[1]:.6f} w19={w20[18]:.6f} w20={w20[19]:.6f} sum={w20.sum():.6f}")

# ---------- 6. MixCo (Lee-Gihun/MixCo-Mixup-Contrast moco/models/encoder.py) ----------
# B=2 -> one mixed query; keys k1,k2 (other view), queue of 2 negatives
qmix = unit(20); k1 = unit(0); k2 = unit(90); queue = np.stack([unit(200), unit(45)])
lam = 0.7
logits_mix = np.concatenate([[qmix @ k1, qmix @ k2], queue @ qmix])[None] / 0.05
tgt = np.array([[lam, 1 - lam, 0, 0]])
print(f"[mixco] soft CE (tau_mix=0.05, lam=0.7) = {soft_ce(logits_mix, tgt):.6f}")
