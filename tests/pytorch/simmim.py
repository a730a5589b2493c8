#!/usr/bin/env python3
"""SimMIM's loss and gradients in float64 through lightly's own modules, for the Rust test
`methods::simmim_matches_lightly_in_f64` (tests/methods.rs).

Run from the repository root:

    pip install torch timm lightly
    python3 tests/pytorch/simmim.py

Written and run with torch 2.15.0, timm 1.0.31 and lightly 1.6.0 (CPU). The network is lightly's
SimMIM as its example builds it (examples/pytorch/simmim.py), on timm's ViT through
`MaskedVisionTransformerTIMM` (the example's torchvision ViT has no timm counterpart here):
image 8, patch 4, one channel, width 8, one block of 2 heads, MLP ratio 4, qkv bias, LayerNorm
eps 1e-6; the decoder one `nn.Linear(8, 4 * 4 * 1)`. Every trainable parameter is drawn from a
seeded normal (the mask token, the biases and the norms included).

Input: 2 images, x[n, 0, r, c] = sin(0.37 * (n * 64 + r * 8 + c) + 0.1 * n). The masks are given,
not drawn: image 0 hides its patches 0 and 2, image 1 its patches 1 and 3 (lightly's `idx_mask`
counts the class token as token 0).

The loss, as lightly's example: the encoder replaces the hidden patches' tokens by the mask token
before the positional embeddings, the decoder predicts the pixels of the hidden patches from
their encoded tokens, `nn.L1Loss` against the raw pixels (`utils.patchify`). Written: the loss and
its gradients with respect to the decoder's weight, the mask token and the patch embedding.
"""

import json
import math
import os
import sys

import torch
from lightly.models import utils
from lightly.models.modules import MaskedVisionTransformerTIMM
from timm.models.vision_transformer import VisionTransformer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mae import save_safetensors  # noqa: E402  (the minimal safetensors writer)

torch.set_default_dtype(torch.float64)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures")


def main():
    torch.manual_seed(0)
    vit = VisionTransformer(img_size=8, patch_size=4, in_chans=1, num_classes=0, embed_dim=8,
                            depth=1, num_heads=2, mlp_ratio=4.0, qkv_bias=True, global_pool="token")
    backbone = MaskedVisionTransformerTIMM(vit=vit)
    decoder = torch.nn.Linear(8, 4 * 4 * 1)
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for module in (backbone, decoder):
            for name, p in module.named_parameters():
                base = 1.0 if ("norm" in name and name.endswith("weight")) else 0.0
                p.copy_(base + 0.3 * torch.randn(p.shape, generator=gen))
    backbone.train()

    images = torch.tensor([[[[math.sin(0.37 * (n * 64 + r * 8 + c) + 0.1 * n) for c in range(8)]
                             for r in range(8)]] for n in range(2)])
    idx_mask = torch.tensor([[1, 3], [2, 4]])

    x_encoded = backbone.encode(images=images, idx_mask=idx_mask)
    x_out = decoder(utils.get_at_index(x_encoded, idx_mask))
    target = utils.get_at_index(utils.patchify(images, 4), idx_mask - 1)
    loss = torch.nn.L1Loss()(x_out, target)
    loss.backward()
    case = {
        "loss": loss.item(),
        "grad_decoder_weight": decoder.weight.grad.flatten().tolist(),
        "grad_mask_token": backbone.mask_token.grad.flatten().tolist(),
        "grad_patch_embed_weight": vit.patch_embed.proj.weight.grad.flatten().tolist(),
    }

    tensors = {f"backbone.{k}": v for k, v in vit.state_dict().items()}
    tensors["mask_token"] = backbone.mask_token
    tensors.update({f"decoder.{k}": v for k, v in decoder.state_dict().items()})
    tensors["input"] = images
    path = os.path.join(OUT, "simmim_lightly.safetensors")
    save_safetensors(tensors, path)
    with open(os.path.join(OUT, "simmim_lightly.json"), "w") as f:
        json.dump(case, f, indent=1)
    print(f"wrote {path} and simmim_lightly.json: loss {case['loss']:.12f}")


if __name__ == "__main__":
    main()
