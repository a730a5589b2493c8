"""The cores' single-precision GEMM peak as PyTorch's CPU BLAS reaches it: the best of several
square f32 matrix products, in GFLOP/s (2·n³ per product). benches/README.md sets the training
step's achieved "GFLOP/s" (direct-convolution count) against this number.

    python3 benches/pytorch/gemm_peak.py --threads 2
"""

import argparse
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048, 4096])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    for n in args.sizes:
        a = torch.randn(n, n)
        b = torch.randn(n, n)
        c = torch.empty(n, n)
        torch.mm(a, b, out=c)  # warm-up
        best = float("inf")
        for _ in range(args.repeats):
            start = time.perf_counter()
            torch.mm(a, b, out=c)
            best = min(best, time.perf_counter() - start)
        print(f"n = {n:5d}: {2 * n**3 / best / 1e9:7.1f} GFLOP/s (best of {args.repeats})")
    print(f"torch {torch.__version__}, {args.threads} threads")


if __name__ == "__main__":
    main()
