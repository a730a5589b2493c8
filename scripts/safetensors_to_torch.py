"""A backbone exported by `recipe export` as a PyTorch module: torchvision's ResNet-18/34/50
(with the CIFAR stem when the run used it), EfficientNet-B0/B1 or MobileNet-V3-Large/Small, or
timm's VisionTransformer, built from the header's
metadata and loaded with `load_state_dict(strict=True)` (the classifier replaced by the identity).

    python scripts/safetensors_to_torch.py runs/simclr/backbone.safetensors --onnx backbone.onnx
    python scripts/safetensors_to_torch.py runs/simclr/backbone.safetensors \
        --compare features.npy --images path/to/images

`--onnx` writes an ONNX model (burn 0.21 cannot write ONNX itself) and checks it with
onnxruntime when installed. `--compare` runs the module on the images (in the order and with the
resizing of `recipe embed --images`: path order, shorter side to the input size, centre crop) and
prints the largest difference from `recipe embed`'s features.

Needs torch, torchvision, timm and safetensors (and onnx / onnxruntime for --onnx).
"""

import argparse
import json
import os
import sys

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file


def metadata(path):
    with safe_open(path, "pt") as f:
        return f.metadata() or {}


def build(path):
    """The module and the header's metadata."""
    meta = metadata(path)
    names = meta.get("key_names")
    backbone = meta.get("backbone", "")
    in_chans = int(meta.get("in_chans", "3"))
    state = load_file(path)
    if names == "torchvision-resnet":
        import torchvision

        if backbone not in ("resnet18", "resnet34", "resnet50"):
            sys.exit(f"{backbone}: torchvision has no model of this shape (resnet18/34/50 only)")
        model = getattr(torchvision.models, backbone)()
        model.conv1 = torch.nn.Conv2d(
            in_chans, 64, *((3, 1, 1) if meta.get("stem") == "cifar" else (7, 2, 3)), bias=False
        )
        if meta.get("stem") == "cifar":
            model.maxpool = torch.nn.Identity()
        model.fc = torch.nn.Identity()
    elif names in ("torchvision-efficientnet", "torchvision-mobilenet-v3"):
        import torchvision

        name = backbone.replace("-", "_")
        if name not in ("efficientnet_b0", "efficientnet_b1", "mobilenet_v3_large", "mobilenet_v3_small"):
            sys.exit(f"{backbone}: not a torchvision model")
        model = getattr(torchvision.models, name)()
        stem = model.features[0][0]
        if in_chans != stem.in_channels:
            model.features[0][0] = torch.nn.Conv2d(
                in_chans, stem.out_channels, stem.kernel_size, stem.stride, stem.padding, bias=False
            )
        model.classifier = torch.nn.Identity()
    elif names == "timm-vit":
        import timm

        height = int(meta["input_size"].split("x")[0])
        patch = state["patch_embed.proj.weight"].shape[-1]
        dim = state["patch_embed.proj.weight"].shape[0]
        depth = len({k.split(".")[1] for k in state if k.startswith("blocks.")})
        heads = int(meta.get("num_heads", 0)) or {96: 3, 192: 3, 384: 6, 768: 12}.get(dim, max(1, dim // 64))
        if meta.get("vit_pool") == "PatchMean":
            # The patch tokens encoded without the class token, the final norm, their mean
            # (VitPool::PatchMean, AIM's runs): timm's ViT without a class token, average
            # pooling after its norm (fc_norm off). The untrained class token and its position
            # are dropped.
            state.pop("cls_token")
            state["pos_embed"] = state["pos_embed"][:, 1:]
            model = timm.models.vision_transformer.VisionTransformer(
                img_size=height, patch_size=patch, in_chans=in_chans, embed_dim=dim,
                depth=depth, num_heads=heads, num_classes=0, class_token=False,
                global_pool="avg", fc_norm=False,
            )
        else:
            model = timm.models.vision_transformer.VisionTransformer(
                img_size=height, patch_size=patch, in_chans=in_chans, embed_dim=dim,
                depth=depth, num_heads=heads, num_classes=0, global_pool="token",
            )
    else:
        sys.exit(f"key names {names!r}: no PyTorch model to load them into (the ResNets, "
                 "EfficientNets, MobileNet-V3s and ViTs have one)")
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith("num_batches_tracked")]
    if missing or unexpected:
        sys.exit(f"not the same model: missing {missing}, unexpected {unexpected}")
    return model.eval(), meta


def images(folder, meta):
    """The folder's images as `recipe embed --images` reads them, normalised."""
    from PIL import Image

    height, width = (int(v) for v in meta["input_size"].split("x"))
    in_chans = int(meta.get("in_chans", "3"))
    files = []
    for root, dirs, names in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        files += [os.path.join(root, n) for n in names
                  if not n.startswith(".") and n.lower().endswith((".png", ".jpg", ".jpeg"))]
    files.sort()
    mean = np.array(json.loads(meta["mean"]), dtype=np.float32)
    std = np.array(json.loads(meta["std"]), dtype=np.float32)
    batch = []
    for f in files:
        img = Image.open(f).convert("L" if in_chans == 1 else "RGB")
        w, h = img.size
        scale = max(height / h, width / w)
        nw, nh = max(width, round(w * scale)), max(height, round(h * scale))
        if (nw, nh) != (w, h):
            img = img.resize((nw, nh), Image.BILINEAR)
        left, top = (nw - width) // 2, (nh - height) // 2
        img = img.crop((left, top, left + width, top + height))
        x = np.asarray(img, dtype=np.float32).reshape(height, width, in_chans) / 255.0
        batch.append(((x - mean) / std).transpose(2, 0, 1))
    return files, torch.from_numpy(np.stack(batch))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path")
    parser.add_argument("--onnx")
    parser.add_argument("--compare")
    parser.add_argument("--images")
    args = parser.parse_args()
    model, meta = build(args.path)
    print(f"{meta.get('backbone')} ({meta.get('key_names')}): loaded, strict")
    if args.compare:
        files, x = images(args.images, meta)
        with torch.no_grad():
            ours = model(x).numpy()
        theirs = np.load(args.compare)
        print(f"{len(files)} images: max |PyTorch - recipe embed| = {np.abs(ours - theirs).max():.3e}"
              f" (features up to {np.abs(theirs).max():.3e})")
    if args.onnx:
        height, width = (int(v) for v in meta["input_size"].split("x"))
        x = torch.randn(2, int(meta.get("in_chans", "3")), height, width)
        torch.onnx.export(model, (x,), args.onnx, input_names=["images"],
                          output_names=["features"], dynamic_axes={"images": {0: "batch"}},
                          dynamo=False)
        try:
            import onnxruntime
        except ImportError:
            print(f"wrote {args.onnx} (onnxruntime not installed: not checked)")
            return
        session = onnxruntime.InferenceSession(args.onnx)
        got = session.run(None, {"images": x.numpy()})[0]
        with torch.no_grad():
            want = model(x).numpy()
        print(f"wrote {args.onnx}: onnxruntime vs PyTorch max |diff| {np.abs(got - want).max():.3e}")


if __name__ == "__main__":
    main()
