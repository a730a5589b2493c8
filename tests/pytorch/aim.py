#!/usr/bin/env python3
"""AIM's loss and gradients in float64 through lightly's own modules, for the Rust test
`methods::aim_matches_lightly_in_f64` (tests/methods.rs).

Run from the repository root:

    pip install torch timm lightly
    python3 tests/pytorch/aim.py

Written and run with torch 2.15.0, timm 1.0.31 and lightly 1.6.0 (CPU). The network is lightly's
AIM as its example builds it (examples/pytorch/aim.py), made tiny:
`MaskedCausalVisionTransformer` (image 16, patch 4, three channels, width 16, two blocks of 2
heads, MLP ratio 4, qkv bias, no class token, `no_embed_class=True`, LayerNorm eps 1e-6) and
`AIMPredictionHead` (width 32, two blocks, MLP ratio 4, no biases, torch's LayerNorm eps 1e-5,
48 = 3 * 4 * 4 outputs per patch). Two departures from the example, both so that the network
is the one the Rust side trains:
- the example passes `global_pool="avg"`, for which timm replaces the trunk's final LayerNorm by
  an identity (the norm moves to `fc_norm`, used only when pooling); here `fc_norm=False` keeps
  the final norm in `forward_features`, as our ViT always applies it;
- the example fills `pos_embed` with a frozen 2-D sine-cosine table; here it is drawn and
  trained like every other parameter (our ViT keeps the backbone's own positions).
Every trainable parameter is drawn from a seeded normal (the biases and the norms included, so
that none is a zero or a one that would hide a swapped pair).

Input: 3 images, x[n, c, r, q] = sin(0.37 * (n * 768 + c * 256 + r * 16 + q) + 0.1 * n), with
gradient. The prefix lengths are given, not drawn; lightly's mask (`random_prefix_mask`'s rule)
is True at the positions >= the prefix.

As lightly's example: the trunk's features under the prefix-causal mask, the positional
embedding added again (`vit._pos_embed`), the head, and the targets `utils.patchify(images, 4)`
normalised by `utils.normalize_mean_var` (each patch by its mean and unbiased variance,
eps 1e-6), computed from the images detached (the example's images carry no gradient; here the
input gradient is the network's only). Two losses of the same network:
- "lightly" (prefixes 0, 6, 14): the example's `nn.MSELoss()(predictions, targets)`: the
  prediction at every position against the patch at the same position;
- "paper" (prefixes 1, 6, 15): the paper's (§3): the prediction at position k against patch
  k + 1, on the non-prefix patches only (k + 1 >= S), each image's squared errors averaged over
  its K - S patches and their pixels, then over the images.
Written: both losses and their gradients with respect to the input, the patch embedding, the
positional embeddings, the first block's qkv weight and the head's first and last layers; the
weights (safetensors, our names for the head; the ViT's `pos_embed` with a zero class-token row
prepended and a zero `cls_token`, which our ViT has and AIM does not use).
"""

import json
import math
import os
import struct

import torch
from lightly.models import utils
from lightly.models.modules import AIMPredictionHead, MaskedCausalVisionTransformer

torch.set_default_dtype(torch.float64)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures")
HEAD_BLOCKS = 2


def save_safetensors(tensors, path):
    """Minimal safetensors writer (little-endian, header = JSON), float64 tensors."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        data = t.detach().contiguous().cpu().numpy().tobytes()
        header[name] = {"dtype": "F64", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def head_key(key):
    """lightly's `AIMPredictionHead` keys (one `Sequential`) in our `AimHead`'s names."""
    _, index, rest = key.split(".", 2)
    index = int(index)
    if index == 0:
        return f"head.embed.{rest}"
    if index <= HEAD_BLOCKS:
        return f"head.blocks.{index - 1}.{rest}"
    if index == HEAD_BLOCKS + 1:
        return f"head.norm.{rest}"
    return f"head.pred.{rest}"


def main():
    torch.manual_seed(0)
    vit = MaskedCausalVisionTransformer(
        img_size=16, patch_size=4, in_chans=3, num_classes=0, embed_dim=16, depth=2, num_heads=2,
        mlp_ratio=4.0, qkv_bias=True, qk_norm=False, class_token=False, no_embed_class=True,
        global_pool="avg", fc_norm=False)
    assert isinstance(vit.norm, torch.nn.LayerNorm) or vit.norm.__class__.__name__ == "LayerNorm"
    head = AIMPredictionHead(input_dim=16, output_dim=48, hidden_dim=32, num_blocks=HEAD_BLOCKS)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for module in (vit, head):
            for name, p in module.named_parameters():
                base = 1.0 if ("norm" in name and name.endswith("weight")) else 0.0
                if module is head and name.endswith("weight") and p.dim() == 1:
                    base = 1.0  # the head's LayerNorms sit in a Sequential: `blocks.3.weight`
                p.copy_(base + 0.3 * torch.randn(p.shape, generator=gen))
    vit.train()
    head.train()

    images = torch.tensor([[[[math.sin(0.37 * (n * 768 + c * 256 + r * 16 + q) + 0.1 * n)
                              for q in range(16)] for r in range(16)] for c in range(3)]
                           for n in range(3)])
    patches = vit.patch_embed.num_patches
    cases = {}
    for case, prefixes in (("lightly", [0, 6, 14]), ("paper", [1, 6, 15])):
        for module in (vit, head):
            module.zero_grad()
        x = images.clone().requires_grad_(True)
        mask = torch.arange(patches).expand(3, patches) >= torch.tensor(prefixes).unsqueeze(1)
        features = vit.forward_features(x, mask=mask)
        features = vit._pos_embed(features)
        predictions = head(features)
        targets = utils.normalize_mean_var(utils.patchify(x.detach(), 4), dim=-1)
        if case == "lightly":
            loss = torch.nn.MSELoss()(predictions, targets)
        else:
            per_image = []
            for i, s in enumerate(prefixes):
                error = (predictions[i, s - 1:patches - 1] - targets[i, s:]) ** 2
                per_image.append(error.mean())
            loss = torch.stack(per_image).mean()
        loss.backward()
        blocks = head.blocks
        cases[case] = {
            "prefixes": prefixes,
            "loss": loss.item(),
            "grad_input": x.grad.flatten().tolist(),
            "grad_patch_embed_weight": vit.patch_embed.proj.weight.grad.flatten().tolist(),
            "grad_pos_embed": vit.pos_embed.grad.flatten().tolist(),
            "grad_qkv_weight_0": vit.blocks[0].attn.qkv.weight.grad.flatten().tolist(),
            "grad_head_embed_weight": blocks[0].weight.grad.flatten().tolist(),
            "grad_head_pred_weight": blocks[HEAD_BLOCKS + 2].weight.grad.flatten().tolist(),
        }

    tensors = {}
    for k, v in vit.state_dict().items():
        if k == "pos_embed":
            v = torch.cat([torch.zeros(1, 1, 16), v], dim=1)
        tensors[f"backbone.{k}"] = v
    tensors["backbone.cls_token"] = torch.zeros(1, 1, 16)
    tensors.update({head_key(k): v for k, v in head.state_dict().items()})
    tensors["input"] = images
    path = os.path.join(OUT, "aim_lightly.safetensors")
    save_safetensors(tensors, path)
    with open(os.path.join(OUT, "aim_lightly.json"), "w") as f:
        json.dump(cases, f, indent=1)
    print(f"wrote {path} and aim_lightly.json: lightly {cases['lightly']['loss']:.12f}, "
          f"paper {cases['paper']['loss']:.12f}; keys {sorted(tensors)}")


if __name__ == "__main__":
    main()
