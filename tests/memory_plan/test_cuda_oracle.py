"""On a CUDA device: ``torch.cuda.max_memory_allocated`` of a real training step within
10 % of the plan (the allocator's rounding and cuDNN's workspaces are in the measure,
not in the plan: the plan's guide says so). Skipped without a GPU."""

from __future__ import annotations

import copy
import functools

import pytest
import torch
from oracles import loss_of

import hookscope

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_resnet_step_on_cuda_is_within_10_percent_of_the_plan() -> None:
    import torchvision

    torch.manual_seed(0)
    model, x = torchvision.models.resnet18(), torch.randn(16, 3, 128, 128)
    # foreach: CUDA's default, whose temporaries span every parameter at once
    optimizer = functools.partial(torch.optim.AdamW, lr=1e-3, foreach=True)
    plan = hookscope.memory_plan(model, x, optimizer=optimizer)
    real = copy.deepcopy(model).cuda().train()
    x = x.cuda()
    opt = optimizer(real.parameters())
    loss_of(real(x)).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    out = real(x)
    loss = loss_of(out)
    loss.backward()
    del loss
    opt.step()
    torch.cuda.synchronize()
    assert torch.cuda.max_memory_allocated() == pytest.approx(plan.peak_bytes, rel=0.10)
