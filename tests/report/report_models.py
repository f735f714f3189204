"""The models and traces the report tests share: resnet18 (forward, FLOPs), a small
GPT-2 (FLOPs and a backward pass), and a model whose names try to run script."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

import hookscope

EVIL_NAME = "<img src=x onerror=alert(1)>"
EVIL_CLASS = "</script><script>alert(2)</script>"


def called_modules(model: nn.Module, *args: object) -> dict[str, str]:
    """The oracle of which modules run: path -> class name, from forward pre-hooks of
    our own (removed before returning)."""
    seen: dict[str, str] = {}

    def note(path: str) -> Callable[[nn.Module, object], None]:
        def hook(module: nn.Module, args: object) -> None:
            seen.setdefault(path, type(module).__name__)
        return hook

    handles = [m.register_forward_pre_hook(note(path)) for path, m in model.named_modules()]
    try:
        with torch.no_grad():
            model(*args)
    finally:
        for h in handles:
            h.remove()
    return seen


def resnet18_trace() -> tuple[hookscope.Trace, dict[str, str]]:
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18().eval()
    x = torch.randn(1, 3, 64, 64)
    return hookscope.trace(model, x, ops=True), called_modules(model, x)


def gpt2_model(n_layer: int = 2) -> nn.Module:
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    return GPT2Model(GPT2Config(n_layer=n_layer, n_embd=64, n_head=2)).eval()


def gpt2_trace(n_layer: int = 2) -> tuple[hookscope.Trace, dict[str, str]]:
    model = gpt2_model(n_layer)
    ids = torch.randint(0, 100, (1, 16), generator=torch.Generator().manual_seed(0))
    return hookscope.trace(model, ids, backward=True, ops=True), called_modules(model, ids)


def evil_model() -> nn.Module:
    """A module named like an ``<img>`` tag, of a class named like a script end."""
    evil = type(EVIL_CLASS, (nn.Module,), {"forward": lambda self, x: torch.relu(x)})
    model = nn.Sequential(nn.Linear(4, 4))
    model.add_module(EVIL_NAME, evil())
    return model
