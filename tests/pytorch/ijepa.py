#!/usr/bin/env python3
"""I-JEPA's loss and gradients in float64 through lightly's own modules, for the Rust test
`methods::ijepa_matches_lightly_in_f64` (tests/methods.rs).

Run from the repository root:

    pip install torch timm lightly
    python3 tests/pytorch/ijepa.py

Written and run with torch 2.15.0, timm 1.0.31 and lightly 1.6.0 (CPU). The networks: lightly's
`MaskedVisionTransformerTIMM` around timm's `VisionTransformer` (image 12, patch 4, one channel,
width 8, one block of 2 heads, MLP ratio 4, qkv bias, LayerNorm eps 1e-6) as the context encoder,
the same weights as the target encoder (the EMA copy at the start), and lightly's
`IJEPAPredictorTIMM` (9 patches, width 8, one block of 2 heads); every trainable parameter is
drawn from a seeded normal (mask token, biases and norms included). The predictor's fixed
sine-cosine positions (filled by lightly in float32) are replaced by the authors' table in float64
and written for the Rust side to compare its own.

Input: 2 images, x[n, 0, r, c] = sin(0.37 * (n * 144 + r * 12 + c) + 0.1 * n) on a 3 x 3 patch
grid. The blocks are given: the contexts keep patches [0, 1, 2, 5] and [3, 4, 6, 8]; the two target
blocks are [7, 8] / [0, 1] and [3, 6] / [2, 5] (image 0 / image 1).

The loss, as lightly's I-JEPA example: the encoder on the context (the class token kept, as
`idx_keep` 0), the class token dropped, the predictor on the context tokens and the target
blocks; the target encoder's patch tokens layer-normalised (`F.layer_norm`, no affine) and
gathered per block (`utils.apply_masks`); `F.smooth_l1_loss`. Written: the loss and its gradients
with respect to the predictor's mask token and input layer, the encoder's patch embedding and its
class token.
"""

import json
import math
import os

import numpy as np
import torch
import torch.nn.functional as F
from lightly.models import utils
from lightly.models.modules import MaskedVisionTransformerTIMM
from lightly.models.modules.ijepa_timm import IJEPAPredictorTIMM
from timm.models.vision_transformer import VisionTransformer

from mae import save_safetensors, sincos_2d

torch.set_default_dtype(torch.float64)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures")


def main():
    torch.manual_seed(0)
    vit = VisionTransformer(img_size=12, patch_size=4, in_chans=1, num_classes=0, embed_dim=8,
                            depth=1, num_heads=2, mlp_ratio=4.0, qkv_bias=True, global_pool="token")
    # Wrapped before the weights are drawn: the wrapper initialises the ViT's weights.
    encoder = MaskedVisionTransformerTIMM(vit=vit)
    predictor = IJEPAPredictorTIMM(num_patches=9, depth=1, mlp_dim=8, predictor_embed_dim=8,
                                   num_heads=2)
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for module in (vit, predictor):
            for name, p in module.named_parameters():
                if not p.requires_grad:
                    continue  # the predictor's fixed sine-cosine positions
                base = 1.0 if ("norm" in name and name.endswith("weight")) else 0.0
                p.copy_(base + 0.3 * torch.randn(p.shape, generator=gen))
    exact = torch.from_numpy(sincos_2d(8, 3)[1:]).unsqueeze(0)
    assert torch.allclose(predictor.decoder.pos_embed, exact, atol=1e-7)
    with torch.no_grad():
        predictor.decoder.pos_embed.copy_(exact)
    target_vit = VisionTransformer(img_size=12, patch_size=4, in_chans=1, num_classes=0,
                                   embed_dim=8, depth=1, num_heads=2, mlp_ratio=4.0,
                                   qkv_bias=True, global_pool="token")
    target = MaskedVisionTransformerTIMM(vit=target_vit)
    target_vit.load_state_dict(vit.state_dict())

    images = torch.tensor([[[[math.sin(0.37 * (n * 144 + r * 12 + c) + 0.1 * n)
                              for c in range(12)] for r in range(12)]] for n in range(2)])
    context = torch.tensor([[0, 1, 2, 5], [3, 4, 6, 8]])
    blocks = [torch.tensor([[7, 8], [0, 1]]), torch.tensor([[3, 6], [2, 5]])]

    with torch.no_grad():
        h = target.encode(images)[:, 1:]
        h = F.layer_norm(h, (h.size(-1),))
        h = utils.apply_masks(h, blocks)
        h = utils.repeat_interleave_batch(h, 2, repeat=1)
    idx_keep = torch.cat([torch.zeros(2, 1, dtype=torch.long), context + 1], dim=1)
    z = encoder.encode(images, idx_keep=idx_keep)[:, 1:]
    z = predictor(z, context, blocks)
    loss = F.smooth_l1_loss(z, h)
    loss.backward()
    cases = {
        "loss": loss.item(),
        "grad_mask_token": predictor.decoder.mask_token.grad.flatten().tolist(),
        "grad_predictor_embed_weight": predictor.predictor_embed.weight.grad.flatten().tolist(),
        "grad_patch_embed_weight": vit.patch_embed.proj.weight.grad.flatten().tolist(),
        "grad_cls_token": vit.cls_token.grad.flatten().tolist(),
        "predictor_pos_embed": predictor.decoder.pos_embed.flatten().tolist(),
    }
    tensors = {f"backbone.{k}": v for k, v in vit.state_dict().items()}
    tensors.update({f"predictor.{k}": v for k, v in predictor.state_dict().items()})
    tensors["input"] = images
    path = os.path.join(OUT, "ijepa_lightly.safetensors")
    save_safetensors(tensors, path)
    with open(os.path.join(OUT, "ijepa_lightly.json"), "w") as f:
        json.dump(cases, f, indent=1)
    print(f"wrote {path} and ijepa_lightly.json: loss {cases['loss']:.12f}")


if __name__ == "__main__":
    main()
