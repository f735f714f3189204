"""The plan against PyTorch's own ``MemTracker`` (``torch.distributed._tools``) on the
same step under fake tensors: parameters per module and gradient and optimizer-state
totals equal, the peak equal, the forward's activations within 5 %."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from oracles import no_cache
from torch import nn

import hookscope

mem_tracker = pytest.importorskip("torch.distributed._tools.mem_tracker")
fake_tensor = pytest.importorskip("torch._subclasses.fake_tensor")


def _gpt2() -> tuple[nn.Module, tuple[Any, ...]]:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=512, n_positions=64)
    return GPT2LMHeadModel(config), (torch.randint(0, 512, (2, 32)),)


def _resnet() -> tuple[nn.Module, tuple[Any, ...]]:
    import torchvision

    return torchvision.models.resnet18(), (torch.randn(2, 3, 64, 64),)


def _tracked_step(build: Callable[[], tuple[nn.Module, tuple[Any, ...]]]
                  ) -> tuple[Any, nn.Module, dict[str, int]]:
    """MemTracker over a steady-state step of a model built under fake tensors."""
    with fake_tensor.FakeTensorMode():
        torch.manual_seed(0)
        model, inputs = build()
        model.train()
        no_cache(model)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        model(*inputs).logits.sum().backward() if hasattr(model, "transformer") else \
            model(*inputs).sum().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        tracker = mem_tracker.MemTracker()
        tracker.track_external(model, opt, *inputs)
        with tracker:
            out = model(*inputs)
            loss = (out.logits if hasattr(out, "logits") else out).sum()
            loss.backward()
            del loss
            opt.step()
            end = dict(tracker.get_tracker_snapshot()[torch.device("cpu")])
            del out
    return tracker, model, end


@pytest.mark.parametrize("build", [_gpt2, _resnet], ids=["gpt2", "resnet18"])
def test_plan_agrees_with_mem_tracker(build: Callable[[], tuple[nn.Module, tuple[Any, ...]]]
                                      ) -> None:
    tracker, fake_model, end = _tracked_step(build)
    torch.manual_seed(0)
    model, inputs = build()
    plan = hookscope.memory_plan(model, *inputs, optimizer="adamw")
    cpu = torch.device("cpu")
    by_path = {m.path: m for m in plan.modules}
    for path, module in fake_model.named_modules():
        stats = tracker.memory_tracking.get(module)
        if stats is not None and hasattr(stats, "parameter_mem"):
            assert by_path[path].parameters == stats.parameter_mem, path
    assert by_path[""].gradients == end["Gradient"]
    assert by_path[""].optimizer_states == end["Optstate"]
    assert plan.peak_bytes == tracker.get_tracker_snapshot("peak")[cpu]["Total"]
    forward_peak = tracker.memory_tracking[fake_model].snapshots[mem_tracker._ModState.PEAK_FW]
    activations = forward_peak[-1][cpu]["Activation"]
    static = sum(plan.at_peak[k] for k in ("parameters", "buffers", "inputs", "optimizer_states"))
    planned = max(p.bytes for p in plan.timeline if p.phase == "forward") - static
    assert planned == pytest.approx(activations, rel=0.05)
