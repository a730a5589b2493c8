#!/usr/bin/env python3
"""Export a small timm Vision Transformer, an input batch and timm's features for the Rust parity
test (models/tests/parity.rs, `vit_matches_timm`).

Run from the repository root:

    pip install torch timm
    python3 tests/pytorch/export_vit.py

Written and run with torch 2.15.0 and timm 1.0.31 (CPU). It writes tests/fixtures/vit_timm.safetensors
holding

* timm's state_dict under its own keys (what `import::load_torchvision` reads for the ViT),
* `input` (2x3x16x16) and `expected.features`: the class token after the final norm
  (`forward_head(forward_features(x), pre_logits=True)`, global_pool "token");
* `input_large` (2x3x24x24) and `expected.features_large`: the same network on a 6x6 patch grid,
  its positional embeddings resized by F.interpolate(bicubic, align_corners=False) without
  antialiasing (the Rust model's rule; timm's `resample_abs_pos_embed` antialiases).

The network is timm's own `VisionTransformer` at reduced size: image 16, patch 4, width 32,
depth 2, 4 heads, MLP ratio 4, qkv bias, LayerNorm eps 1e-6, no classifier. Every LayerNorm
weight and bias is randomised (the defaults 1 and 0 would hide a swapped pair).
"""

import os
import sys

import torch
import torch.nn.functional as F
from timm.models.vision_transformer import VisionTransformer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export_backbones import OUT, save_safetensors  # noqa: E402


def main():
    torch.manual_seed(0)
    model = VisionTransformer(img_size=16, patch_size=4, in_chans=3, num_classes=0, embed_dim=32,
                              depth=2, num_heads=4, mlp_ratio=4.0, qkv_bias=True,
                              global_pool="token").eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3 + (1.0 if name.endswith("weight") else 0.0))
            if name in ("cls_token", "pos_embed"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    x = torch.randn(2, 3, 16, 16, generator=gen)
    big = torch.randn(2, 3, 24, 24, generator=gen)
    with torch.no_grad():
        features = model.forward_head(model.forward_features(x), pre_logits=True)
        # The 6x6 grid: positional embeddings resized without antialiasing.
        pos = model.pos_embed
        cls, grid = pos[:, :1], pos[:, 1:]
        d = grid.shape[-1]
        grid = grid.reshape(1, 4, 4, d).permute(0, 3, 1, 2)
        grid = F.interpolate(grid, size=(6, 6), mode="bicubic", align_corners=False, antialias=False)
        grid = grid.permute(0, 2, 3, 1).reshape(1, 36, d)
        tokens = model.patch_embed.proj(big).flatten(2).transpose(1, 2)
        tokens = torch.cat([model.cls_token.expand(2, -1, -1), tokens], 1) + torch.cat([cls, grid], 1)
        tokens = model.norm(model.blocks(tokens))
        features_large = tokens[:, 0]
    tensors = dict(model.state_dict())
    tensors["input"] = x
    tensors["expected.features"] = features
    tensors["input_large"] = big
    tensors["expected.features_large"] = features_large
    path = os.path.join(OUT, "vit_timm.safetensors")
    save_safetensors(tensors, path)
    print(f"wrote {path}: {os.path.getsize(path)} bytes; keys: {sorted(model.state_dict())[:6]} ...")


if __name__ == "__main__":
    main()
