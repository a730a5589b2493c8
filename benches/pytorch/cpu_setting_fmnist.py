"""Issue 39, item 1: looking for a CPU setting where self-supervision beats the raw pixels on
Fashion-MNIST. A screen in PyTorch (no rebuild per variant): SimCLR or MoCo v3 on the full
60,000 training images with a configurable small ResNet, batched augmentation on the tensors,
kNN (k = 20, T = 0.07, weighted vote as `recipe`'s monitor) of the backbone's features on the
10,000 test images after every epoch.

    python3 benches/pytorch/cpu_setting_fmnist.py --arch s2:16,32,64,128 --epochs 10

`--arch STEM:W1,W2,...`: STEM `in` (7x7 stride 2 + max pool: `--backbone small`'s), `s1` (3x3
stride 1: the CIFAR stem), `s2` (3x3 stride 2, no pooling); one basic block per width (`xN`
after a width: N blocks), the first at stride 1, the others at stride 2; global average pooling.
Prints one line per epoch: kNN top-1, loss, seconds, images/s.
"""
import argparse, gzip, math, time
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument('--arch', default='in:8,16,32,64')
p.add_argument('--method', default='simclr', choices=['simclr', 'mocov3', 'byol'])
p.add_argument('--epochs', type=int, default=10)
p.add_argument('--batch', type=int, default=256)
p.add_argument('--lr', type=float, default=2e-3)
p.add_argument('--wd', type=float, default=1e-4)
p.add_argument('--tau', type=float, default=0.2)
p.add_argument('--crop-min', type=float, default=0.5)
p.add_argument('--jitter', type=float, default=0.4)
p.add_argument('--erase', type=float, default=0.0)
p.add_argument('--proj', default='512,128')
p.add_argument('--threads', type=int, default=2)
p.add_argument('--seed', type=int, default=0)
p.add_argument('--budget', type=float, default=1e9, help='stop after this many seconds')
p.add_argument('--train', type=int, default=60000)
p.add_argument('--pool', type=int, default=1, help='features: average pooling to POOL x POOL, flattened')
a = p.parse_args()
torch.set_num_threads(a.threads); torch.manual_seed(a.seed)

def load(f, off): return np.frombuffer(gzip.open('/usr/share/datasets/fashion-mnist/' + f).read(), np.uint8, offset=off)
xtr = torch.tensor(load('train-images-idx3-ubyte.gz', 16).reshape(-1, 1, 28, 28).astype(np.float32) / 255)[:a.train]
ytr = torch.tensor(load('train-labels-idx1-ubyte.gz', 8).astype(np.int64))[:a.train]
xte = torch.tensor(load('t10k-images-idx3-ubyte.gz', 16).reshape(-1, 1, 28, 28).astype(np.float32) / 255)
yte = torch.tensor(load('t10k-labels-idx1-ubyte.gz', 8).astype(np.int64))
MEAN, STD = 0.286, 0.353

class Block(nn.Module):
    def __init__(s, i, o, st):
        super().__init__()
        s.c1 = nn.Conv2d(i, o, 3, st, 1, bias=False); s.b1 = nn.BatchNorm2d(o)
        s.c2 = nn.Conv2d(o, o, 3, 1, 1, bias=False); s.b2 = nn.BatchNorm2d(o)
        s.sc = nn.Sequential() if st == 1 and i == o else nn.Sequential(nn.Conv2d(i, o, 1, st, bias=False), nn.BatchNorm2d(o))
    def forward(s, x): return F.relu(s.b2(s.c2(F.relu(s.b1(s.c1(x))))) + s.sc(x))

def backbone(spec):
    stem, ws = spec.split(':')
    stages = []
    for w in ws.split(','):
        n = 1
        if 'x' in w: w, n = w.split('x'); n = int(n)
        stages.append((int(w), n))
    w0 = stages[0][0]
    L = {'in': [nn.Conv2d(1, w0, 7, 2, 3, bias=False), nn.BatchNorm2d(w0), nn.ReLU(), nn.MaxPool2d(3, 2, 1)],
         's1': [nn.Conv2d(1, w0, 3, 1, 1, bias=False), nn.BatchNorm2d(w0), nn.ReLU()],
         's2': [nn.Conv2d(1, w0, 3, 2, 1, bias=False), nn.BatchNorm2d(w0), nn.ReLU()]}[stem]
    c = w0
    for i, (w, n) in enumerate(stages):
        for j in range(n):
            L.append(Block(c, w, 2 if (i > 0 and j == 0) else 1)); c = w
    L += [nn.AdaptiveAvgPool2d(a.pool), nn.Flatten()]
    return nn.Sequential(*L), c * a.pool * a.pool

def mlp(dims, last_bn=True):
    L = []
    for i in range(len(dims) - 1):
        L.append(nn.Linear(dims[i], dims[i + 1], bias=False))
        if i < len(dims) - 2: L += [nn.BatchNorm1d(dims[i + 1]), nn.ReLU()]
        elif last_bn: L.append(nn.BatchNorm1d(dims[i + 1], affine=False))
    return nn.Sequential(*L)

def augment(x):
    n = x.shape[0]
    area = torch.empty(n).uniform_(a.crop_min, 1.0)
    logr = torch.empty(n).uniform_(math.log(3 / 4), math.log(4 / 3))
    r = torch.exp(logr)
    sx = torch.sqrt(area * r).clamp(max=1.0); sy = torch.sqrt(area / r).clamp(max=1.0)
    tx = (torch.rand(n) * 2 - 1) * (1 - sx); ty = (torch.rand(n) * 2 - 1) * (1 - sy)
    flip = torch.where(torch.rand(n) < 0.5, -1.0, 1.0)
    theta = torch.zeros(n, 2, 3)
    theta[:, 0, 0] = sx * flip; theta[:, 0, 2] = tx; theta[:, 1, 1] = sy; theta[:, 1, 2] = ty
    grid = F.affine_grid(theta, x.shape, align_corners=False)
    x = F.grid_sample(x, grid, mode='bilinear', padding_mode='zeros', align_corners=False)
    if a.jitter > 0:
        on = (torch.rand(n, 1, 1, 1) < 0.8).float()
        b = 1 + (torch.rand(n, 1, 1, 1) * 2 - 1) * a.jitter
        c = 1 + (torch.rand(n, 1, 1, 1) * 2 - 1) * a.jitter
        m = x.mean(dim=(2, 3), keepdim=True)
        j = ((x * b - m * b) * c + m * b).clamp(0, 1)
        x = on * j + (1 - on) * x
    if a.erase > 0:
        on = torch.rand(n) < a.erase
        hs = (torch.rand(n) * 10 + 4).long(); ws = (torch.rand(n) * 10 + 4).long()
        ys = (torch.rand(n) * (28 - hs)).long(); xs = (torch.rand(n) * (28 - ws)).long()
        yy = torch.arange(28).view(1, 28, 1); xx = torch.arange(28).view(1, 1, 28)
        mask = (yy >= ys.view(-1, 1, 1)) & (yy < (ys + hs).view(-1, 1, 1)) & (xx >= xs.view(-1, 1, 1)) & (xx < (xs + ws).view(-1, 1, 1)) & on.view(-1, 1, 1)
        x = x.masked_fill(mask.unsqueeze(1), 0.0)
    return (x - MEAN) / STD

net, dim = backbone(a.arch)
pd = [int(v) for v in a.proj.split(',')]
proj = mlp([dim] + pd)
params = list(net.parameters()) + list(proj.parameters())
if a.method in ('mocov3', 'byol'):
    pred = mlp([pd[-1], pd[0], pd[-1]], last_bn=False); params += list(pred.parameters())
    import copy
    tnet, tproj = copy.deepcopy(net), copy.deepcopy(proj)
    for q in list(tnet.parameters()) + list(tproj.parameters()): q.requires_grad_(False)
opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=a.wd)
steps_per_epoch = a.train // a.batch
total = steps_per_epoch * a.epochs
warm = steps_per_epoch
def lr_at(s): return a.lr * (s / warm if s < warm else 0.5 * (1 + math.cos(math.pi * (s - warm) / max(1, total - warm))))

def nt_xent(z1, z2, tau):
    z = F.normalize(torch.cat([z1, z2]), dim=1); n = z1.shape[0]
    sim = z @ z.t() / tau; sim.fill_diagonal_(-1e9)
    tgt = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)])
    return F.cross_entropy(sim, tgt)
def infonce(q, k, tau):
    q = F.normalize(q, dim=1); k = F.normalize(k, dim=1)
    return 2 * tau * F.cross_entropy(q @ k.t() / tau, torch.arange(q.shape[0]))

@torch.no_grad()
def features(x):
    net.eval(); out = torch.cat([net((x[i:i + 1000] - MEAN) / STD) for i in range(0, len(x), 1000)]); net.train(); return F.normalize(out, dim=1)
@torch.no_grad()
def knn(k=20, T=0.07):
    ftr, fte = features(xtr), features(xte); correct = 0
    for i in range(0, len(fte), 500):
        s = fte[i:i + 500] @ ftr.t(); w, idx = s.topk(k, dim=1); w = (w / T).exp()
        votes = torch.zeros(len(w), 10).scatter_add_(1, ytr[idx], w)
        correct += (votes.argmax(1) == yte[i:i + 500]).sum().item()
    return 100 * correct / len(fte)

print(vars(a), 'backbone MACs/params:', sum(q.numel() for q in net.parameters()), flush=True)
print('epoch 0 knn', knn(), flush=True)
t0 = time.time(); step = 0
for ep in range(a.epochs):
    perm = torch.randperm(a.train); te = time.time()
    for i in range(steps_per_epoch):
        for g in opt.param_groups: g['lr'] = lr_at(step)
        x = xtr[perm[i * a.batch:(i + 1) * a.batch]]
        v1, v2 = augment(x), augment(x)
        if a.method == 'simclr':
            loss = nt_xent(proj(net(v1)), proj(net(v2)), a.tau)
        else:
            m = 1 - (1 - 0.99) * (math.cos(math.pi * step / total) + 1) / 2
            with torch.no_grad():
                for o, t in zip(list(net.parameters()) + list(proj.parameters()), list(tnet.parameters()) + list(tproj.parameters())): t.mul_(m).add_(o.detach(), alpha=1 - m)
                k1, k2 = tproj(tnet(v1)), tproj(tnet(v2))
            q1, q2 = pred(proj(net(v1))), pred(proj(net(v2)))
            if a.method == 'mocov3': loss = infonce(q1, k2, a.tau) + infonce(q2, k1, a.tau)
            else: loss = 4 - 2 * (F.normalize(q1, dim=1) * F.normalize(k2, dim=1)).sum(1).mean() - 2 * (F.normalize(q2, dim=1) * F.normalize(k1, dim=1)).sum(1).mean()
        opt.zero_grad(); loss.backward(); opt.step(); step += 1
        if time.time() - t0 > a.budget: break
    dt = time.time() - te
    print(f'epoch {ep + 1} knn {knn():.2f} loss {loss.item():.3f} epoch_s {dt:.0f} total_s {time.time() - t0:.0f} img/s {(i + 1) * a.batch / dt:.0f}', flush=True)
    if time.time() - t0 > a.budget: break
