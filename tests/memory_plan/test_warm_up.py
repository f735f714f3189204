"""The plan's untracked optimizer warm-up runs the ``foreach`` path for speed: the
states it leaves must be laid out as a plain single-tensor step leaves them, and the
optimizer's own ``foreach`` setting must be back afterwards."""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest
import torch
from torch import nn

from hookscope.memory_plan.step import _warm_up

FACTORIES: dict[str, Callable[..., torch.optim.Optimizer]] = {
    "adamw": torch.optim.AdamW,
    "adam-amsgrad": functools.partial(torch.optim.Adam, amsgrad=True),
    "sgd-momentum": functools.partial(torch.optim.SGD, lr=0.1, momentum=0.9),
    "rmsprop-centered": functools.partial(torch.optim.RMSprop, momentum=0.5, centered=True),
    "adagrad": torch.optim.Adagrad,
    "nadam": torch.optim.NAdam,
}


def _params() -> list[nn.Parameter]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.Linear(16, 4))
    return list(model.parameters())


def _layout(optimizer: torch.optim.Optimizer, params: list[nn.Parameter]) -> list[object]:
    return [(key, value.shape, value.stride(), value.dtype, value.device)
            for p in params for key, value in sorted(optimizer.state[p].items())
            if isinstance(value, torch.Tensor)]


@pytest.mark.parametrize("name", FACTORIES)
def test_warm_up_states_match_a_single_tensor_step(name: str) -> None:
    plain_params = _params()
    plain = FACTORIES[name](plain_params, foreach=False)
    for p in plain_params:
        p.grad = torch.zeros_like(p)
    plain.step()

    params = _params()
    optimizer = FACTORIES[name](params)
    before = [g["foreach"] for g in optimizer.param_groups]
    _warm_up(optimizer, params)

    assert _layout(optimizer, params) == _layout(plain, plain_params)
    assert len(_layout(plain, plain_params)) >= len(plain_params)
    assert [g["foreach"] for g in optimizer.param_groups] == before
    assert all(p.grad is None for p in params)
