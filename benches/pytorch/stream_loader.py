"""torchvision's side of benches/stream_loader.rs: ImageFolder + RandomResizedCrop + RandomHorizontalFlip
+ PILToTensor (bytes, as the Rust loader hands over bytes) through a DataLoader, on the same folder
of JPEGs (benches/pytorch/make_jpegs.py). Prints one line of JSON like the Rust bench.

    python3 benches/pytorch/stream_loader.py /tmp/jpegs --size 224 --workers 1 --images 2000

`--workers 0` decodes on the main process (one core); `--workers N` uses N worker processes.
A folder of WebDataset shards (`recipe pack`'s train/) is read with `webdataset` (shuffled shards,
a shuffle buffer of `--buffer` samples, PIL decoding, the same transforms), as its docs show.
The peak memory is the main process's plus the largest worker's (ru_maxrss of the children).
"""

import argparse
import glob
import json
import os
import resource
import time

import torch
from torchvision import datasets, transforms


def main():
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--images", type=int, default=None)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--buffer", type=int, default=2000)
    a = p.parse_args()
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    tf = transforms.Compose([
        transforms.RandomResizedCrop(a.size),
        transforms.RandomHorizontalFlip(),
        transforms.PILToTensor(),
    ])
    shards = sorted(glob.glob(os.path.join(a.root, "*.tar")))
    if shards:
        import webdataset as wds
        total = sum(s["samples"] for s in json.load(open(os.path.join(a.root, "index.json")))["shards"])
        ds = (wds.WebDataset(shards, shardshuffle=len(shards), empty_check=False,
                             nodesplitter=wds.split_by_node, workersplitter=wds.split_by_worker)
              .shuffle(a.buffer).decode("pil").to_tuple("jpg", "cls").map_tuple(tf, lambda c: c))
        images = min(a.images or total, total)
        dl = torch.utils.data.DataLoader(ds.batched(a.batch, partial=False), batch_size=None,
                                         num_workers=a.workers,
                                         prefetch_factor=2 if a.workers else None)
    else:
        ds = datasets.ImageFolder(a.root, transform=tf)
        images = min(a.images or len(ds), len(ds))
        dl = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True,
                                         num_workers=a.workers, drop_last=True,
                                         prefetch_factor=2 if a.workers else None)
    batches = images // a.batch
    seen, first, checksum = 0, None, 0
    start = time.perf_counter()
    for i, (x, _) in enumerate(dl):
        if i == batches:
            break
        if first is None:
            first = time.perf_counter() - t0
        checksum += int(x.sum())
        seen += x.shape[0]
    seconds = time.perf_counter() - start
    peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            + resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
    print(json.dumps({"side": "webdataset" if shards else "torchvision", "size": a.size, "workers": a.workers, "images": seen,
                      "images_per_s": round(seen / seconds, 1), "first_batch_s": round(first, 3),
                      "peak_rss_mib": round(peak, 1), "checksum": checksum}))


if __name__ == "__main__":
    main()
