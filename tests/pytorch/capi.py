#!/usr/bin/env python3
"""CAPI's losses and gradients in float64 through lightly's own modules, for the Rust tests
`methods::capi_matches_lightly_in_f64` and `methods::capi_sinkhorn_matches_lightly`
(tests/methods.rs).

Run from the repository root:

    pip install torch timm lightly
    python3 tests/pytorch/capi.py

Written and run with torch 2.15.0, timm 1.0.31 and lightly 1.6.0 (CPU). The networks, as
lightly's CAPI example (examples/pytorch/capi.py) builds them at a tiny size: lightly's
`MaskedVisionTransformerTIMM` around timm's `VisionTransformer` (image 12, patch 4, one channel,
width 16, one block of 2 heads, MLP ratio 4, qkv bias, LayerNorm eps 1e-6) as the student
encoder, the same weights as the teacher encoder (the EMA copy at the start); lightly's
`CAPIPredictorTIMM` (3 x 3 grid, width 16, 2 blocks of 2 heads: head width 8, two RoPE bands);
`CAPIProjectionHead(16, 6, weight_norm=True)` as the student head (its frozen scale `weight_g`
stays 1) and `CAPIProjectionHead(16, 6, bias=True)` as the teacher's clustering head. Every
trainable parameter is drawn from a seeded normal (norm weights 1 + 0.3 N, the rest 0.3 N). The
predictor's RoPE table (timm builds it in float32) is replaced by the same formula in float64 and
written for the Rust side to compare its own.

Input: 2 images, x[n, 0, r, c] = sin(0.37 * (n * 144 + r * 12 + c) + 0.1 * n). Masks given, as
`random_inverse_block_mask` draws them at mask ratio 0.65 on 9 patches (int(9 * 0.65) = 5 hidden,
4 visible): image 0 keeps the block [0, 1, 3, 4], image 1 the rolled block [0, 2, 6, 8]. Two
cases:
- "subsampled": the student predicts 2 of the hidden patches per image, given in a random order
  ([7, 5] and [4, 1], the benchmark's `idx_predict`) — the loss does not depend on the order;
- "all_masked": every hidden patch (lightly's example).
In each: student_loss = CAPILoss()(teacher_logits, student_logits, teacher_index), clustering_loss
= CAPILoss()(teacher_logits, teacher_logits), loss = their sum (one backward). Written: the
three values, the teacher's Sinkhorn assignments over all 9 positions, and the gradients of the
predictor's mask token, blocks.0.to_query.weight, blocks.1.to_key_value.weight, the student
head's weight_v, the teacher head's weight and bias, the encoder's patch embedding and class
token. Also `sinkhorn_knopp` of a seeded [3, 4, 5] tensor / 0.06 (its input and output).
"""

import json
import math
import os

import torch
from lightly.loss import CAPILoss
from lightly.loss.capi_loss import sinkhorn_knopp
from lightly.models.modules import (
    CAPIPredictorTIMM,
    CAPIProjectionHead,
    MaskedVisionTransformerTIMM,
)
from timm.models.vision_transformer import VisionTransformer

from mae import save_safetensors

torch.set_default_dtype(torch.float64)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures")


def vit():
    return VisionTransformer(img_size=12, patch_size=4, in_chans=1, num_classes=0, embed_dim=16,
                             depth=1, num_heads=2, mlp_ratio=4.0, qkv_bias=True,
                             global_pool="token")


def rope_table(grid, head_dim):
    """timm's `RotaryEmbeddingCat(dim=head_dim, in_pixels=False, feat_shape=[g, g])` table in
    float64: head_dim / 4 bands 10000^(-j / (head_dim / 4)); token t = r * g + c at (r, c); angles
    [r b_0 .. r b_{nb-1}, c b_0 .. c b_{nb-1}], each repeated twice (interleaved); [sin | cos]."""
    nb = head_dim // 4
    bands = [10000.0 ** (-j / nb) for j in range(nb)]
    rows = []
    for r in range(grid):
        for c in range(grid):
            angles = [r * b for b in bands] + [c * b for b in bands]
            angles = [a for a in angles for _ in range(2)]
            rows.append([math.sin(a) for a in angles] + [math.cos(a) for a in angles])
    return torch.tensor(rows)


def main():
    torch.manual_seed(0)
    student_vit = vit()
    # Wrapped before the weights are drawn: the wrapper initialises the ViT's weights.
    student = MaskedVisionTransformerTIMM(vit=student_vit)
    predictor = CAPIPredictorTIMM(embed_dim=16, grid_size=3, depth=2, num_heads=2)
    student_head = CAPIProjectionHead(input_dim=16, num_clusters=6, weight_norm=True)
    teacher_head = CAPIProjectionHead(input_dim=16, num_clusters=6, bias=True)
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for module in (student_vit, predictor, student_head, teacher_head):
            for name, p in module.named_parameters():
                if not p.requires_grad:
                    continue  # the student head's frozen scale weight_g
                base = 1.0 if ("norm" in name and name.endswith("weight")) else 0.0
                p.copy_(base + 0.3 * torch.randn(p.shape, generator=gen))
    assert torch.equal(student_head.layer.weight_g, torch.ones(6, 1))
    exact = rope_table(3, 8)
    assert predictor.rope.pos_embed.shape == exact.shape
    assert torch.allclose(predictor.rope.pos_embed.to(torch.float64), exact, atol=1e-6)
    predictor.rope.pos_embed = exact
    assert torch.equal(predictor.rope.get_embed(), exact)
    teacher_vit = vit()
    teacher = MaskedVisionTransformerTIMM(vit=teacher_vit)
    teacher_vit.load_state_dict(student_vit.state_dict())
    for p in teacher_vit.parameters():
        p.requires_grad = False

    images = torch.tensor([[[[math.sin(0.37 * (n * 144 + r * 12 + c) + 0.1 * n)
                              for c in range(12)] for r in range(12)]] for n in range(2)])
    visible = torch.tensor([[0, 1, 3, 4], [0, 2, 6, 8]])
    hidden = torch.tensor([[2, 5, 6, 7, 8], [1, 3, 4, 5, 7]])
    cases = {
        "subsampled": torch.tensor([[7, 5], [4, 1]]),
        "all_masked": hidden,
    }
    prefix = 1
    idx_keep = torch.cat([torch.zeros(2, 1, dtype=torch.long), visible + prefix], dim=1)
    criterion = CAPILoss()
    trainable = [student_vit, predictor, student_head, teacher_head]
    out = {"rope": exact.flatten().tolist()}
    for case, predict in cases.items():
        for module in trainable:
            module.zero_grad()
        tokens = student.encode(images, idx_keep=idx_keep)
        predicted = predictor(
            context=tokens[:, prefix:],
            context_positions=idx_keep[:, prefix:] - prefix,
            query_positions=predict,
        )
        student_logits = student_head(predicted)
        with torch.no_grad():
            features = teacher.encode(images)
        teacher_logits = teacher_head(features)[:, prefix:]
        student_loss = criterion(teacher_logits, student_logits, teacher_index=predict)
        clustering_loss = criterion(teacher_logits, teacher_logits)
        loss = student_loss + clustering_loss
        loss.backward()
        assignments = sinkhorn_knopp(teacher_logits.detach() / 0.06)
        blocks = predictor.blocks
        out[case] = {
            "predict": predict.tolist(),
            "loss": loss.item(),
            "student_loss": student_loss.item(),
            "clustering_loss": clustering_loss.item(),
            "teacher_logits": teacher_logits.flatten().tolist(),
            "assignments": assignments.flatten().tolist(),
            "grad_mask_token": predictor.mask_token.grad.flatten().tolist(),
            "grad_block0_to_query_weight": blocks[0].to_query.weight.grad.flatten().tolist(),
            "grad_block1_to_key_value_weight":
                blocks[1].to_key_value.weight.grad.flatten().tolist(),
            "grad_student_head_weight_v":
                student_head.layer.weight_v.grad.flatten().tolist(),
            "grad_teacher_head_weight": teacher_head.layer.weight.grad.flatten().tolist(),
            "grad_teacher_head_bias": teacher_head.layer.bias.grad.flatten().tolist(),
            "grad_patch_embed_weight": student_vit.patch_embed.proj.weight.grad.flatten().tolist(),
            "grad_cls_token": student_vit.cls_token.grad.flatten().tolist(),
        }
    gen = torch.Generator().manual_seed(5)
    logits = torch.randn(3, 4, 5, generator=gen)
    out["sinkhorn_input"] = logits.flatten().tolist()
    out["sinkhorn"] = sinkhorn_knopp(logits / 0.06).flatten().tolist()

    tensors = {f"backbone.{k}": v for k, v in student_vit.state_dict().items()}
    tensors.update({f"predictor.{k}": v for k, v in predictor.state_dict().items()})
    tensors.update({f"student_head.{k}": v for k, v in student_head.state_dict().items()})
    tensors.update({f"teacher_head.{k}": v for k, v in teacher_head.state_dict().items()})
    tensors["input"] = images
    path = os.path.join(OUT, "capi_lightly.safetensors")
    save_safetensors(tensors, path)
    with open(os.path.join(OUT, "capi_lightly.json"), "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {path} and capi_lightly.json: loss {out['subsampled']['loss']:.12f} "
          f"(subsampled), {out['all_masked']['loss']:.12f} (all masked)")
    print(sorted(tensors))


if __name__ == "__main__":
    main()
