"""The CPU backbone's capacity, measured in PyTorch: the small ResNet of `--backbone small` (one
basic block per stage, widths 8-16-32-64, ImageNet or CIFAR stem, global average pooling) trained
with labels on the full Fashion-MNIST, Adam 1e-3, batch 128, no augmentation, 2 epochs, one
thread; test top-1 after each epoch.

    python3 benches/pytorch/supervised_small_fmnist.py imagenet [cifar]

It tells whether the network could beat the raw pixels' kNN (85.69 %) at all: a self-supervised
representation on it cannot be expected to do better than the network trained with labels.
"""
import gzip, numpy as np, torch, torch.nn as nn, torch.nn.functional as F, time, sys
torch.set_num_threads(1); torch.manual_seed(0)
def load(p, off): return np.frombuffer(gzip.open(p).read(), np.uint8, offset=off)
d='/usr/share/datasets/fashion-mnist/'
xtr=load(d+'train-images-idx3-ubyte.gz',16).reshape(-1,1,28,28).astype(np.float32)/255; ytr=load(d+'train-labels-idx1-ubyte.gz',8).astype(np.int64)
xte=load(d+'t10k-images-idx3-ubyte.gz',16).reshape(-1,1,28,28).astype(np.float32)/255; yte=load(d+'t10k-labels-idx1-ubyte.gz',8).astype(np.int64)
m,s=0.286,0.353; xtr=(xtr-m)/s; xte=(xte-m)/s
xtr,ytr,xte,yte=map(torch.tensor,(xtr,ytr,xte,yte))
class Block(nn.Module):
    def __init__(s,i,o,st):
        super().__init__(); s.c1=nn.Conv2d(i,o,3,st,1,bias=False); s.b1=nn.BatchNorm2d(o); s.c2=nn.Conv2d(o,o,3,1,1,bias=False); s.b2=nn.BatchNorm2d(o)
        s.sc=nn.Sequential() if st==1 and i==o else nn.Sequential(nn.Conv2d(i,o,1,st,bias=False),nn.BatchNorm2d(o))
    def forward(s,x): return F.relu(s.b2(s.c2(F.relu(s.b1(s.c1(x)))))+s.sc(x))
def net(w, stem):
    L=[nn.Conv2d(1,w,7,2,3,bias=False),nn.BatchNorm2d(w),nn.ReLU(),nn.MaxPool2d(3,2,1)] if stem=='imagenet' else [nn.Conv2d(1,w,3,1,1,bias=False),nn.BatchNorm2d(w),nn.ReLU()]
    c=w
    for i,o in enumerate([w,2*w,4*w,8*w]): L.append(Block(c,o,1 if i==0 else 2)); c=o
    L+= [nn.AdaptiveAvgPool2d(1),nn.Flatten(),nn.Linear(c,10)]
    return nn.Sequential(*L)
for stem in sys.argv[1:]:
    torch.manual_seed(0); model=net(8,stem); opt=torch.optim.Adam(model.parameters(),1e-3)
    t=time.time()
    for ep in range(2):
        model.train(); perm=torch.randperm(60000)
        for i in range(0,60000,128):
            idx=perm[i:i+128]; loss=F.cross_entropy(model(xtr[idx]),ytr[idx]); opt.zero_grad(); loss.backward(); opt.step()
        model.eval()
        with torch.no_grad(): acc=(model(xte).argmax(1)==yte).float().mean().item()
        print(stem, 'epoch',ep+1,'test',round(100*acc,2),'loss',round(loss.item(),3), round(time.time()-t),'s', flush=True)
