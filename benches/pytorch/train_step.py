#!/usr/bin/env python3
"""The work of benches/train_step.rs and `recipe bench_step` (recipes/src/recipes/bench_step.rs)
in PyTorch: one training step of SimCLR, MoCo v2, BYOL and SimSiam with ResNet-18 (CIFAR stem)
on fixed views, on the CPU (default) or a CUDA GPU.

    python3 benches/pytorch/train_step.py [--device cpu|cuda] [--threads 2] [--batch 128]
        [--image-size 32] [--precision f32|bf16|f16] [--compile] [--no-tf32]
        [--iters 3 | --steps N] [--warmup N] [--json] [--count-ops] [--memory]
        [--width-divisor N] [method ...]

Same networks and heads as the Rust methods (defaults of SimClrConfig, MoCoConfig::moco_v2,
ByolConfig, SimSiamConfig): forward of both views, the loss, backward, SGD (momentum 0.9,
weight decay 5e-4), then the EMA / queue update. Views are fixed pseudo-random images, the same
values as `recipe bench_step`'s (a multiplicative hash of the index and the seed; augmentation
is timed separately).

Timing, two modes:
- default (`--iters N`, the CPU comparison of benches/README.md): `--warmup` step(s) (default 1),
  then N steps each timed on its own (the device synchronised after each); the median.
- `--steps N` (the semantics of `recipe bench_step`): `--warmup` steps (default 5), synchronise
  (`torch.cuda.synchronize()` on cuda), then N steps timed together, synchronise;
  ms_per_step = total / N. The warm-up time (warmup_s) absorbs `--compile`'s compilation.

`--precision bf16|f16` is PyTorch's mixed precision: `torch.autocast(device, dtype)` around the
forward and the loss, f32 master weights, gradients and optimizer state, and for f16 a
`torch.amp.GradScaler`. The Rust side's `--precision bf16` instead makes every tensor bf16
(weights, activations, gradients, optimizer state: burn 0.21 has no autocast), so the comparison
is "each framework's half-precision mode", not the same arithmetic. f32 is plain f32 with
PyTorch's defaults on cuda (cuDNN convolutions may use TF32, matmuls not); `--no-tf32` turns
TF32 off for both. On cuda, cudnn.benchmark is on (kernels tuned during the warm-up, as burn's
autotune is).

`--compile` wraps the model's loss computation (`model.loss`, the forward of both views and the
loss) in `torch.compile` (default mode); backward goes through the compiled graph (AOTAutograd),
the SGD step and the EMA / queue update stay eager. If compiling or running a method fails, its
line carries an "error" field and the next method runs.

`--count-ops` (the counterpart of `recipe bench_step --count-kernels`, issue 66): after the
timing, one more step under `torch.profiler` (CPU activity; CUDA too on cuda): `ops_per_step`,
the ATen operators the step called from Python's level (top-level `aten::` events: what an eager
framework dispatches, each at least one kernel on a GPU), `leaf_ops_per_step` (operators that call
no other: the ones that compute), `ops_by_name` (top level, most called first), and on cuda
`kernels_per_step` (CUDA kernel launches) and `kernels_by_name`.

`--memory` (the counterpart of `recipe bench_step`'s `memory_mib`, issue 66): one more step with
the bytes of live tensors read at the end of the forward pass, the backward pass and the
optimiser step, and their peak over the step (`memory_mib`: between_steps, after_forward,
after_backward, after_optimiser, peak). On cuda from the caching allocator's counters
(memory_allocated, max_memory_allocated); on the CPU from torch.profiler's record of every
allocation and free (step_memory says how).

`--width-divisor N` (the host's share of a step, issue 66): every layer's channels and features
divided by N (ResNet-18's 64..512 channels, the heads' 2048 / 4096 / 128 / 256 features, MoCo's
queue width), the same layers in the same order, so the step dispatches the same operators
(`--count-ops` says so) on tensors too small to cost anything. On the CPU with `--threads 1` the
step's time is then PyTorch's own work per operator: Python, the dispatcher, autograd, the
optimiser's loop and the CPU kernels' set-up, which a CUDA step also does on its host before
each launch. Every record carries `cpu_ms_per_step`, the process's CPU time per timed step (all
threads), for that comparison with `recipe bench_step`'s.

`--json` prints one JSON line per method with the fields of `recipe bench_step` (method,
backend "pytorch-eager" / "pytorch-compile", precision, batch_size, image_size, steps, warmup_s,
ms_per_step, images_per_s, first_loss, last_loss) plus peak_alloc_mib / peak_reserved_mib
(torch.cuda.max_memory_allocated / max_memory_reserved over the method, NaN on the CPU), device
and torch. Otherwise one line of text per method: ms/step and source images/s.
"""

import argparse
import contextlib
import copy
import gc
import json
import math
import os
import statistics
import sys
import time
import traceback

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np
import torch
import torch.nn.functional as F
import torchvision
from torch import nn


# `--width-divisor`: every layer's channels and features are divided by it (1: the real widths).
WIDTH_DIVISOR = 1


def narrowed(module):
    """`module` (the backbone) with every convolution and batch norm WIDTH_DIVISOR times
    narrower (an image's 3 channels kept), in place; the layers and their order unchanged. The
    heads' linear layers are narrowed by `mlp`."""
    d = WIDTH_DIVISOR
    for name, child in module.named_children():
        if isinstance(child, nn.Conv2d):
            c_in = child.in_channels if child.in_channels == 3 else child.in_channels // d
            new = nn.Conv2d(c_in, child.out_channels // d, child.kernel_size, child.stride,
                            child.padding, bias=child.bias is not None)
        elif isinstance(child, nn.BatchNorm2d):
            new = nn.BatchNorm2d(child.num_features // d)
        else:
            narrowed(child)
            continue
        setattr(module, name, new)
    return module


def resnet18_cifar():
    m = torchvision.models.resnet18()
    m.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    m.maxpool = nn.Identity()
    m.fc = nn.Identity()
    return narrowed(m) if WIDTH_DIVISOR > 1 else m


def mlp(dims, bn=True, last_bn=False):
    """Linear (+BN) + ReLU layers, a plain linear output (the heads of src/head.rs)."""
    dims = [d // WIDTH_DIVISOR for d in dims]
    layers = []
    for a, b in zip(dims[:-2], dims[1:-1]):
        layers += [nn.Linear(a, b, bias=not bn)] + ([nn.BatchNorm1d(b)] if bn else []) + [nn.ReLU()]
    layers.append(nn.Linear(dims[-2], dims[-1]))
    if last_bn:
        layers.append(nn.BatchNorm1d(dims[-1]))
    return nn.Sequential(*layers)


def nt_xent(z1, z2, t=0.5):
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    n = z1.shape[0]
    sim = z @ z.t() / t
    sim.fill_diagonal_(float("-inf"))
    target = torch.cat([torch.arange(n, 2 * n, device=z.device), torch.arange(0, n, device=z.device)])
    return F.cross_entropy(sim, target)


class SimClr(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone, self.head = resnet18_cifar(), mlp([512, 2048, 128])

    def loss(self, x1, x2):
        return nt_xent(self.head(self.backbone(x1)), self.head(self.backbone(x2)))

    def after_step(self):
        pass


class MoCo(nn.Module):
    def __init__(self, m=0.999, t=0.2, queue=4096):
        super().__init__()
        self.backbone, self.head = resnet18_cifar(), mlp([512, 2048, 128], bn=False)
        self.key = copy.deepcopy(nn.Sequential(self.backbone, self.head))
        for p in self.key.parameters():
            p.requires_grad = False
        self.m, self.t = m, t
        self.register_buffer("queue", F.normalize(torch.randn(queue, 128 // WIDTH_DIVISOR), dim=1))
        self.ptr, self.pending = 0, None

    def loss(self, x1, x2):
        q = F.normalize(self.head(self.backbone(x1)), dim=1)
        with torch.no_grad():
            k = F.normalize(self.key(x2), dim=1)
        pos = (q * k).sum(1, keepdim=True)
        neg = q @ self.queue.t()
        logits = torch.cat([pos, neg], 1) / self.t
        self.pending = k
        return F.cross_entropy(logits, torch.zeros(q.shape[0], dtype=torch.long, device=q.device))

    @torch.no_grad()
    def after_step(self):
        online = list(self.backbone.parameters()) + list(self.head.parameters())
        for pk, pq in zip(self.key.parameters(), online):
            pk.mul_(self.m).add_(pq, alpha=1 - self.m)
        n = self.pending.shape[0]
        self.queue[self.ptr : self.ptr + n] = self.pending
        self.ptr = (self.ptr + n) % self.queue.shape[0]


class Byol(nn.Module):
    def __init__(self, m=0.99):
        super().__init__()
        self.backbone = resnet18_cifar()
        self.projector = mlp([512, 4096, 256])
        self.predictor = mlp([256, 4096, 256])
        self.target = copy.deepcopy(nn.Sequential(self.backbone, self.projector))
        for p in self.target.parameters():
            p.requires_grad = False
        self.m = m

    def loss(self, x1, x2):
        p1 = self.predictor(self.projector(self.backbone(x1)))
        p2 = self.predictor(self.projector(self.backbone(x2)))
        with torch.no_grad():
            z1, z2 = self.target(x1), self.target(x2)
        cos = lambda p, z: (F.normalize(p, dim=1) * F.normalize(z, dim=1)).sum(1).mean()
        return 4 - 2 * cos(p1, z2) - 2 * cos(p2, z1)

    @torch.no_grad()
    def after_step(self):
        online = list(self.backbone.parameters()) + list(self.projector.parameters())
        for pt, po in zip(self.target.parameters(), online):
            pt.mul_(self.m).add_(po, alpha=1 - self.m)


class SimSiam(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = resnet18_cifar()
        self.projector = mlp([512, 2048, 2048, 2048], last_bn=True)
        self.predictor = mlp([2048, 512, 2048])

    def loss(self, x1, x2):
        z1 = self.projector(self.backbone(x1))
        z2 = self.projector(self.backbone(x2))
        p1, p2 = self.predictor(z1), self.predictor(z2)
        d = lambda p, z: -F.cosine_similarity(p, z.detach(), dim=1).mean()
        return 0.5 * d(p1, z2) + 0.5 * d(p2, z1)

    def after_step(self):
        pass


METHODS = {"simclr": SimClr, "moco_v2": MoCo, "byol": Byol, "simsiam": SimSiam}


METHODS = {"simclr": SimClr, "moco_v2": MoCo, "byol": Byol, "simsiam": SimSiam}
DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}


def views(n, side, seed, device):
    """`recipe bench_step`'s views: value i = ((i ^ (seed << 40)) * 0x9E3779B97F4A7C15 mod 2^64
    >> 40) / 2^24, in [0, 1)."""
    i = np.arange(n * 3 * side * side, dtype=np.uint64)
    h = (i ^ np.uint64(seed << 40)) * np.uint64(0x9E3779B97F4A7C15)
    v = (h >> np.uint64(40)).astype(np.float32) / np.float32(1 << 24)
    return torch.from_numpy(v.reshape(n, 3, side, side)).to(device)


def time_method(name, args, device, x1, x2):
    """Builds the method, runs the warm-up and the timed steps; returns the result's fields."""
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    model = METHODS[name]().to(device).train()
    opt = torch.optim.SGD(
        [p for p in model.parameters() if p.requires_grad],
        lr=0.05, momentum=0.9, weight_decay=5e-4,
    )
    loss_fn = torch.compile(model.loss) if args.compile else model.loss
    if args.precision == "f32":
        amp = contextlib.nullcontext
    else:
        amp = lambda: torch.autocast(device.type, dtype=DTYPES[args.precision])
    scaler = torch.amp.GradScaler(device.type) if args.precision == "f16" else None

    def step():
        with amp():
            loss = loss_fn(x1, x2)
        opt.zero_grad()
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        model.after_step()
        return loss.detach()

    losses = []
    started = time.perf_counter()
    for _ in range(args.warmup):
        losses.append(step())
    sync()
    warmup_s = time.perf_counter() - started
    cpu_started = time.process_time()
    if args.steps is not None:
        timed = time.perf_counter()
        for _ in range(args.steps):
            losses.append(step())
        sync()
        seconds = (time.perf_counter() - timed) / args.steps
        steps = args.steps
    else:
        times = []
        for _ in range(args.iters):
            t0 = time.perf_counter()
            losses.append(step())
            sync()
            times.append(time.perf_counter() - t0)
        seconds = statistics.median(times)
        steps = args.iters
    cpu_ms_per_step = (time.process_time() - cpu_started) * 1e3 / steps
    counts = count_ops(step, device) if args.count_ops else {}
    if args.memory:
        counts["run_peaks"], counts["memory_mib"] = step_memory(model, opt, loss_fn, x1, x2, device)
    first_loss = losses[0].float().item() if losses else math.nan
    last_loss = losses[-1].float().item() if losses else math.nan
    return dict(
        steps=steps,
        warmup_s=warmup_s,
        ms_per_step=seconds * 1e3,
        cpu_ms_per_step=cpu_ms_per_step,
        images_per_s=args.batch / seconds,
        first_loss=first_loss,
        last_loss=last_loss,
        **counts,
    )


def step_memory(model, opt, loss_fn, x1, x2, device):
    """One more step (two on the CPU) with the bytes of live tensors read at the end of each phase, the
    counterpart of `recipe bench_step`'s `memory_mib` (issue 66, item 3). On cuda the caching
    allocator's counters (torch.cuda.memory_allocated at each phase's end, max_memory_allocated
    over the step). On the CPU, where PyTorch keeps no such counter, torch.profiler's record of
    every allocation and free (profile_memory=True, kineto's events) over the step, added in time order to the
    bytes of what lives between steps (parameters, buffers, the previous step's gradients, the
    optimiser's state, the views): the same quantity, allocation by allocation, except that CPU
    kernels (oneDNN) need other scratch space than cuDNN's."""
    from torch.profiler import ProfilerActivity, profile, record_function

    mib = lambda b: round(b / 2**20, 1)

    def phases(mark):
        with record_function("phase_forward"):
            loss = loss_fn(x1, x2)
        mark()
        with record_function("phase_backward"):
            opt.zero_grad()
            loss.backward()
        mark()
        with record_function("phase_optimiser"):
            opt.step()
            model.after_step()
        mark()

    run_peaks = {}
    if device.type == "cuda":
        torch.cuda.synchronize()
        # The run's peaks so far, for main's peak_alloc_mib / peak_reserved_mib, before the reset
        # that makes max_memory_allocated this step's.
        run_peaks = dict(
            alloc=torch.cuda.max_memory_allocated(device),
            reserved=torch.cuda.max_memory_reserved(device),
        )
        torch.cuda.reset_peak_memory_stats(device)
        marks = [torch.cuda.memory_allocated(device)]

        def mark():
            torch.cuda.synchronize()
            marks.append(torch.cuda.memory_allocated(device))

        phases(mark)
        peak = torch.cuda.max_memory_allocated(device)
    else:
        # Two steps profiled, the second measured: the profiler records no free of a block
        # allocated before it started (the previous step's gradients, freed by zero_grad).
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            phases(lambda: None)
            storages = {}
            for t in (
                list(model.parameters())
                + list(model.buffers())
                + [p.grad for p in model.parameters() if p.grad is not None]
                + [v for st in opt.state.values() for v in st.values() if torch.is_tensor(v)]
                + [x1, x2]
            ):
                storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            live = sum(storages.values())
            with record_function("measured_step"):
                phases(lambda: None)
        # The allocator's events (name "[memory]", signed bytes) are kineto's raw events.
        events = prof.profiler.kineto_results.events()
        begin = max(e.start_ns() for e in events if e.name() == "measured_step")
        changes = sorted(
            (e.start_ns(), e.nbytes())
            for e in events
            if e.name() == "[memory]" and e.start_ns() >= begin
        )
        ends = sorted(e.end_ns() for e in events if e.name().startswith("phase_"))[-3:]
        marks, peak, total, i = [live], live, live, 0
        for end in ends:
            while i < len(changes) and changes[i][0] <= end:
                total += changes[i][1]
                peak = max(peak, total)
                i += 1
            marks.append(total)
    return run_peaks, dict(
        between_steps=mib(marks[0]),
        after_forward=mib(marks[1]),
        after_backward=mib(marks[2]),
        after_optimiser=mib(marks[3]),
        peak=mib(peak),
    )


def count_ops(step, device):
    """One step under torch.profiler: its operators and (on cuda) kernels, by name."""
    from collections import Counter
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        step()
        if device.type == "cuda":
            torch.cuda.synchronize()
    events = prof.events()
    aten = [e for e in events if e.name.startswith("aten::") and e.device_type.name == "CPU"]

    def top_level(e):
        parent = e.cpu_parent
        while parent is not None:
            if parent.name.startswith("aten::"):
                return False
            parent = parent.cpu_parent
        return True

    top = Counter(e.name for e in aten if top_level(e))
    leaves = [e for e in aten if not any(c.name.startswith("aten::") for c in e.cpu_children)]
    out = dict(
        ops_per_step=sum(top.values()),
        leaf_ops_per_step=len(leaves),
        ops_by_name=top.most_common(),
    )
    if device.type == "cuda":
        kernels = Counter(e.name for e in events if e.device_type.name == "CUDA")
        out["kernels_per_step"] = sum(kernels.values())
        out["kernels_by_name"] = kernels.most_common(40)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--threads", type=int, default=None,
                    help="intra-op CPU threads (default 2 on cpu, PyTorch's default on cuda)")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--image-size", type=int, default=32)
    ap.add_argument("--precision", choices=["f32", "bf16", "f16"], default="f32")
    ap.add_argument("--compile", action="store_true", help="torch.compile the loss computation")
    ap.add_argument("--no-tf32", action="store_true", help="no TF32 in cuDNN and matmuls")
    ap.add_argument("--iters", type=int, default=3,
                    help="steps timed one by one, median (when --steps is not given)")
    ap.add_argument("--steps", type=int, default=None,
                    help="steps timed together after the warm-up (recipe bench_step's --steps)")
    ap.add_argument("--warmup", type=int, default=None,
                    help="steps before the timing (default 5 with --steps, else 1)")
    ap.add_argument("--json", action="store_true", help="one JSON line per method")
    ap.add_argument("--memory", action="store_true",
                    help="one more step with the live tensors' bytes read at each phase's end "
                         "(memory_mib)")
    ap.add_argument("--count-ops", action="store_true",
                    help="one more step under torch.profiler: operators (and CUDA kernels) by name")
    ap.add_argument("--width-divisor", type=int, default=1,
                    help="every layer's channels and features divided by this (a power of two "
                         "up to 64): the same operators on tiny tensors, the host's share")
    ap.add_argument("methods", nargs="*", metavar="method",
                    help=f"{' | '.join(METHODS)} (default: all four)")
    args = ap.parse_args()
    args.methods = args.methods or list(METHODS)
    unknown = [m for m in args.methods if m not in METHODS]
    if unknown:
        ap.error(f"unknown method(s) {unknown}: choose from {list(METHODS)}")
    if args.warmup is None:
        args.warmup = 5 if args.steps is not None else 1
    if args.memory and args.precision != "f32":
        ap.error("--memory measures an f32 step (its step runs without autocast)")
    if (args.steps if args.steps is not None else args.iters) < 1 or args.batch < 2:
        ap.error("--steps / --iters must be at least 1 and --batch at least 2")
    if args.width_divisor not in (1, 2, 4, 8, 16, 32, 64):
        ap.error("--width-divisor must be a power of two from 1 to 64 (the narrowest layer, "
                 "the projection's 128 features, keeps 2)")
    global WIDTH_DIVISOR
    WIDTH_DIVISOR = args.width_divisor
    device = torch.device(args.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            ap.error("--device cuda: torch.cuda.is_available() is False")
        torch.backends.cudnn.benchmark = True
        if args.no_tf32:
            torch.backends.cudnn.allow_tf32 = False
            torch.backends.cuda.matmul.allow_tf32 = False
        device_name = torch.cuda.get_device_name(device)
    else:
        device_name = "cpu"
    threads = args.threads if args.threads is not None else (2 if device.type == "cpu" else None)
    if threads is not None:
        torch.set_num_threads(threads)
    backend = "pytorch-compile" if args.compile else "pytorch-eager"
    torch.manual_seed(0)
    x1 = views(args.batch, args.image_size, 1, device)
    x2 = views(args.batch, args.image_size, 2, device)
    print(
        f"torch {torch.__version__}, {device_name}, {torch.get_num_threads()} threads, "
        f"batch {args.batch}, {args.image_size}x{args.image_size}, {args.precision}, {backend}",
        file=sys.stderr if args.json else sys.stdout,
        flush=True,
    )
    for name in args.methods:
        record = dict(
            method=name,
            backend=backend,
            precision=args.precision,
            batch_size=args.batch,
            image_size=args.image_size,
            width_divisor=args.width_divisor,
        )
        if device.type == "cuda":
            gc.collect()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        try:
            record.update(time_method(name, args, device, x1, x2))
        except Exception as e:  # a failed compile (or an out-of-memory) ends this method only
            traceback.print_exc(file=sys.stderr)
            record["error"] = f"{type(e).__name__}: {e}"[:2000]
        run_peaks = record.pop("run_peaks", None) or {}
        if device.type == "cuda":
            # Over the whole method: the peaks before --memory's step reset them, and after.
            alloc = max(torch.cuda.max_memory_allocated(device), run_peaks.get("alloc", 0))
            reserved = max(torch.cuda.max_memory_reserved(device), run_peaks.get("reserved", 0))
            record["peak_alloc_mib"] = alloc / 2**20
            record["peak_reserved_mib"] = reserved / 2**20
        else:
            record["peak_alloc_mib"] = record["peak_reserved_mib"] = math.nan
        record["device"] = device_name
        record["torch"] = torch.__version__
        if args.json:
            print(json.dumps(record), flush=True)
        elif "error" in record:
            print(f"{name:10s} error: {record['error'].splitlines()[0]}", flush=True)
        else:
            print(
                f"{name:10s} {record['ms_per_step']:9.1f} ms/step  "
                f"{record['images_per_s']:7.2f} images/s",
                flush=True,
            )
        if args.compile:
            torch._dynamo.reset()


if __name__ == "__main__":
    main()
