"""The timm scenario: a model timm builds and initialises, trained by torch_.train.

    timm.vit   timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32,
               patch_size=8, num_classes=10): ViT-Tiny's width and depth on 32x32 images in
               16 patches, initialised by timm's own code (trunc_normal_, its ViT init scheme)
               under torch.manual_seed(seed), trained on gen.image_data with AdamW(lr 1e-3);
               probe: eval-mode logits; the digest covers the whole state_dict

Runs inside the target environment (stdlib, torch, timm and what it imports: torchvision,
huggingface_hub, safetensors); imported by run.py after torch_.setup. pretrained=False and an
offline hub: nothing is downloaded.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"

import timm  # noqa: E402
import torch  # noqa: E402

from . import gen, torch_  # noqa: E402
from .common import record_libraries  # noqa: E402
from .lib_torchvision import train_classifier  # noqa: E402

VERSIONS = ("timm", "torchvision", "huggingface-hub", "safetensors")


def _vit(ctx) -> None:
    torch.manual_seed(ctx.seed)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False,
                              img_size=gen.IMAGES["size"], patch_size=8,
                              num_classes=gen.IMAGES["classes"])
    model.to(torch_._device(ctx))
    train_classifier(ctx, model, torch.optim.AdamW(model.parameters(), lr=1e-3))
    record_libraries(ctx, VERSIONS, model="vit_tiny_patch16_224")


SCENARIOS: Dict[str, Callable[[Any], None]] = {
    "timm.vit": _vit,
}
