#!/usr/bin/env python3
"""MAE's loss and gradients in float64 through lightly's own modules, for the Rust test
`methods::mae_matches_lightly_in_f64` (tests/methods.rs).

Run from the repository root:

    pip install torch timm lightly
    python3 tests/pytorch/mae.py

Written and run with torch 2.15.0, timm 1.0.31 and lightly 1.6.0 (CPU). The network is lightly's
MAE as its example builds it (examples/pytorch/mae.py): `MaskedVisionTransformerTIMM` around timm's
`VisionTransformer` (image 8, patch 4, one channel, width 8, one block of 2 heads, MLP ratio 4,
qkv bias, LayerNorm eps 1e-6) and `MAEDecoderTIMM` (width 8, one block of 2 heads); every
trainable parameter is drawn from a seeded normal (the mask token, the biases and the norms
included, so that none is a zero or a one that would hide a swapped pair). `MAEDecoderTIMM` is
the class lightly 1.6's MAE example uses (deprecated there for 1.7's
`MaskedVisionTransformerDecoderTIMM`). lightly's decoder positional
embeddings (fixed sine-cosine, filled in float32) are replaced by the authors' table in float64
(checked equal to float32's rounding) and written for the Rust side to compare its own.

Input: 2 images, x[n, 0, r, c] = sin(0.37 * (n * 64 + r * 8 + c) + 0.1 * n). The masks are given,
not drawn: image 0 keeps its patches 1 and 3, image 1 its patches 0 and 2 (lightly's `idx_keep`
counts the class token as token 0).

The loss, as lightly's example: the decoder's predictions at the hidden tokens against the
hidden patches (`utils.patchify`, `utils.get_at_index`), `nn.MSELoss`; and the paper's
`norm_pix_loss` form, the targets normalised per patch by their mean and `var` (unbiased, as the
authors' code) + 1e-6. Written: both losses, and their gradients with respect to the decoder's
output layer, the mask token and the patch embedding.
"""

import json
import math
import os
import struct

import numpy as np
import torch
from lightly.models import utils
from lightly.models.modules import MAEDecoderTIMM, MaskedVisionTransformerTIMM
from timm.models.vision_transformer import VisionTransformer

torch.set_default_dtype(torch.float64)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures")


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


def sincos_2d(dim, side):
    """The authors' `get_2d_sincos_pos_embed` (facebookresearch/mae, util/pos_embed.py) in
    float64, with the class token's zero row."""
    def one_d(d, pos):
        omega = 1.0 / 10000 ** (np.arange(d // 2, dtype=np.float64) / (d / 2.0))
        out = np.outer(pos.reshape(-1), omega)
        return np.concatenate([np.sin(out), np.cos(out)], axis=1)
    grid = np.meshgrid(np.arange(side, dtype=np.float64), np.arange(side, dtype=np.float64))
    emb = np.concatenate([one_d(dim // 2, grid[0]), one_d(dim // 2, grid[1])], axis=1)
    return np.concatenate([np.zeros([1, dim]), emb], axis=0)


def main():
    torch.manual_seed(0)
    vit = VisionTransformer(img_size=8, patch_size=4, in_chans=1, num_classes=0, embed_dim=8,
                            depth=1, num_heads=2, mlp_ratio=4.0, qkv_bias=True, global_pool="token")
    backbone = MaskedVisionTransformerTIMM(vit=vit)
    decoder = MAEDecoderTIMM(num_patches=4, patch_size=4, in_chans=1, embed_dim=8,
                             decoder_embed_dim=8, decoder_depth=1, decoder_num_heads=2,
                             mlp_ratio=4.0, proj_drop_rate=0.0, attn_drop_rate=0.0)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for module in (vit, decoder):
            for name, p in module.named_parameters():
                if not p.requires_grad:
                    continue  # the decoder's fixed sine-cosine positions
                base = 1.0 if ("norm" in name and name.endswith("weight")) else 0.0
                p.copy_(base + 0.3 * torch.randn(p.shape, generator=gen))
    # lightly fills its fixed positions in float32; the same table in float64 replaces it (they
    # agree to float32's rounding), so that the comparison is exact.
    exact = torch.from_numpy(sincos_2d(8, 2)).unsqueeze(0)
    assert torch.allclose(decoder.decoder_pos_embed, exact, atol=1e-7)
    with torch.no_grad():
        decoder.decoder_pos_embed.copy_(exact)
    vit.train()
    decoder.train()

    images = torch.tensor([[[[math.sin(0.37 * (n * 64 + r * 8 + c) + 0.1 * n) for c in range(8)]
                             for r in range(8)]] for n in range(2)])
    idx_keep = torch.tensor([[0, 2, 4], [0, 1, 3]])
    idx_mask = torch.tensor([[1, 3], [2, 4]])

    cases = {}
    for normalize in (False, True):
        for module in (vit, decoder):
            module.zero_grad()
        x_encoded = backbone.encode(images, idx_keep=idx_keep)
        x_decode = decoder.embed(x_encoded)
        x_masked = utils.repeat_token(decoder.mask_token, (2, 5))
        x_masked = utils.set_at_index(x_masked, idx_keep, x_decode.type_as(x_masked))
        x_decoded = decoder.decode(x_masked)
        x_pred = decoder.predict(utils.get_at_index(x_decoded, idx_mask))
        target = utils.get_at_index(utils.patchify(images, 4), idx_mask - 1)
        if normalize:
            mean = target.mean(dim=-1, keepdim=True)
            var = target.var(dim=-1, keepdim=True)
            target = (target - mean) / (var + 1.0e-6) ** 0.5
        loss = torch.nn.MSELoss()(x_pred, target)
        loss.backward()
        cases["normalized" if normalize else "plain"] = {
            "loss": loss.item(),
            "grad_decoder_pred_weight": decoder.decoder_pred.weight.grad.flatten().tolist(),
            "grad_mask_token": decoder.mask_token.grad.flatten().tolist(),
            "grad_patch_embed_weight": vit.patch_embed.proj.weight.grad.flatten().tolist(),
        }

    tensors = {f"backbone.{k}": v for k, v in vit.state_dict().items()}
    tensors.update({f"decoder.{k}": v for k, v in decoder.state_dict().items()})
    tensors["input"] = images
    path = os.path.join(OUT, "mae_lightly.safetensors")
    save_safetensors(tensors, path)
    cases["decoder_pos_embed"] = decoder.decoder_pos_embed.flatten().tolist()
    with open(os.path.join(OUT, "mae_lightly.json"), "w") as f:
        json.dump(cases, f, indent=1)
    print(f"wrote {path} and mae_lightly.json: plain {cases['plain']['loss']:.12f}, "
          f"normalized {cases['normalized']['loss']:.12f}")


if __name__ == "__main__":
    main()
