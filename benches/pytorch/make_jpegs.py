"""Writes ImageNet-like JPEGs for the streaming loader's benchmarks (benches/README.md, "Streaming
image loader"): a folder of class sub-folders (torchvision's ImageFolder layout) of 500 x 375 RGB
JPEGs whose statistics resemble photographs, so that their decoding costs what ImageNet's does.

Each image is 1/f ("pink") noise per channel, the power spectrum of natural images, with a few
filled shapes for hard edges, saved at JPEG quality 90 with 4:2:0 chroma subsampling (libjpeg's
default). The script prints the files' mean size so that a run can say what it measured on:
2,000 images at seed 0 come out at 67.8 KiB each (the issue's ImageNet-like files: about 74 KB).

    python3 benches/pytorch/make_jpegs.py OUT_DIR --images 2000 --classes 10 [--seed 0]
"""

import argparse
import os

import numpy as np
from PIL import Image, ImageDraw


def pink_noise(rng, h, w, alpha):
    """A field with power spectrum 1 / f^alpha, scaled to 0..255."""
    fy = np.fft.fftfreq(h)[:, None]
    fx = np.fft.rfftfreq(w)[None, :]
    f = np.sqrt(fx * fx + fy * fy)
    f[0, 0] = 1.0
    spectrum = (rng.standard_normal(f.shape) + 1j * rng.standard_normal(f.shape)) / f ** (alpha / 2)
    spectrum[0, 0] = 0.0
    field = np.fft.irfft2(spectrum, s=(h, w))
    field -= field.min()
    field /= max(field.max(), 1e-12)
    return field * 255.0


def image(rng, h=375, w=500):
    alpha = rng.uniform(1.6, 2.2)
    pixels = np.stack([pink_noise(rng, h, w, alpha) for _ in range(3)], axis=-1)
    # Correlate the channels as photographs are (mostly luminance variation).
    luma = pixels.mean(axis=-1, keepdims=True)
    pixels = 0.6 * luma + 0.4 * pixels
    img = Image.fromarray(pixels.clip(0, 255).astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(img)
    for _ in range(rng.integers(2, 6)):
        x0, y0 = rng.integers(0, w), rng.integers(0, h)
        x1, y1 = x0 + rng.integers(20, 200), y0 + rng.integers(20, 200)
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        if rng.random() < 0.5:
            draw.ellipse([x0, y0, x1, y1], fill=colour)
        else:
            draw.rectangle([x0, y0, x1, y1], fill=colour)
    return img


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--images", type=int, default=2000)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quality", type=int, default=90)
    a = p.parse_args()
    rng = np.random.default_rng(a.seed)
    total = 0
    for i in range(a.images):
        cls = f"n{i % a.classes:08d}"
        os.makedirs(os.path.join(a.out, cls), exist_ok=True)
        path = os.path.join(a.out, cls, f"img_{i:07d}.JPEG")
        image(rng).save(path, "JPEG", quality=a.quality, subsampling="4:2:0")
        total += os.path.getsize(path)
    print(f"{a.images} images in {a.classes} classes under {a.out}: mean {total / a.images / 1024:.1f} KiB")


if __name__ == "__main__":
    main()
