"""The torchvision scenario: a model torchvision builds and initialises, trained by torch_.train.

    torchvision.resnet18   torchvision.models.resnet18(weights=None, num_classes=10) initialised
                           by torchvision's own code (kaiming_normal_ convolutions, BatchNorm
                           weight 1, bias 0, the default Linear) under torch.manual_seed(seed),
                           trained on gen.image_data (8 images of 32x32) with SGD(lr 0.01,
                           momentum 0.9, weight decay 5e-4); probe: eval-mode logits (BatchNorm's
                           running statistics); the digest covers the whole state_dict

Runs inside the target environment (stdlib, torch, torchvision); imported by run.py after
torch_.setup. weights=None: nothing is downloaded.
"""

from __future__ import annotations

from typing import Any, Callable, Dict

import torch
import torch.nn.functional as F
import torchvision

from . import gen, torch_
from .common import record_libraries

VERSIONS = ("torchvision", "pillow")


def image_inputs(ctx) -> tuple:
    """gen.image_data on the run's device: (images, labels, probe images)."""
    device = torch_._device(ctx)
    x_t, labels, probe_t = gen.image_data(ctx.seed)
    return (torch_._tensor(x_t, device), torch.tensor(labels, dtype=torch.long, device=device),
            torch_._tensor(probe_t, device))


def train_classifier(ctx, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Train an image classifier on image_inputs (cross-entropy, train mode); probe in eval
    mode; the digest over the state_dict (running statistics included)."""
    x, y, p = image_inputs(ctx)

    def probe_fn(m: torch.nn.Module) -> torch.Tensor:
        m.eval()
        try:
            return m(p)
        finally:
            m.train()

    named: Dict[str, torch.Tensor] = dict(model.state_dict())
    model.train()
    torch_.train(ctx, model, lambda m: F.cross_entropy(m(x), y), probe_fn, optimizer, named)


def _resnet18(ctx) -> None:
    torch.manual_seed(ctx.seed)  # torchvision's init draws from torch's global RNG
    model = torchvision.models.resnet18(weights=None, num_classes=gen.IMAGES["classes"])
    model.to(torch_._device(ctx))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    train_classifier(ctx, model, optimizer)
    record_libraries(ctx, VERSIONS, model="resnet18")


SCENARIOS: Dict[str, Callable[[Any], None]] = {
    "torchvision.resnet18": _resnet18,
}
