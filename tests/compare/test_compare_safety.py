"""Safety of hookscope.compare on every zoo model (tests/test_safety.py's checks): the
model (and a second model) keeps its hooks, objects, flags, parameter and buffer values,
``.grad`` and ``requires_grad``, also when it raises; the caller's RNG does not move."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
import zoo
from helpers import assert_state_unchanged, count_hooks, install_user_hooks, snapshot_state


def _setup(cls: type[zoo.ZooModel], mode: str) -> tuple[nn.Module, nn.Module]:
    model = zoo.materialize(zoo.build(cls))
    model.train(mode == "train")
    gen = torch.Generator().manual_seed(7)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=gen, dtype=p.dtype)
    twin = copy.deepcopy(model)
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        q.grad = None if p.grad is None else p.grad.clone()
    install_user_hooks(model)
    install_user_hooks(twin)
    return model, twin


def _plain(model: nn.Module, args: Any, kwargs: Any) -> None:
    """The twin's forward, its buffers put back after (what a forward run for the caller
    promises: a train-mode forward does not move BatchNorm's statistics)."""
    saved = [(b, b.detach().clone()) for b in model.buffers()
             if not isinstance(b, nn.parameter.UninitializedBuffer)]
    try:
        with torch.no_grad():
            model(*args, **kwargs)
    except Exception:
        pass
    finally:
        with torch.no_grad():
            for b, value in saved:
                b.copy_(value)


@pytest.mark.parametrize("options", [{}, {"b_autocast": "bf16"}, {"b_dtype": "float64"}],
                         ids=["self", "bf16", "copy"])
@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("cls", zoo.ALL_ZOO, ids=lambda c: c.__name__)
def test_compare_leaves_the_model_untouched(cls: type[zoo.ZooModel], mode: str,
                                            options: dict[str, Any]) -> None:
    model, twin = _setup(cls, mode)
    before = snapshot_state(model)
    args, kwargs = cls.example_inputs()
    torch.manual_seed(1)
    try:
        hookscope.compare(model, None, *args, kwargs=kwargs, **options)
    except hookscope.ModelRunError as e:
        # the model raised, or its cast copy did (a Linear kept in a plain list is not
        # cast: PlainListModel's float64 copy multiplies float64 by float32)
        assert cls.RAISES or "side B" in str(e)
    except hookscope.SpecError:
        pass  # a model compare refuses (one it cannot copy, inputs it cannot run on)
    rng = torch.get_rng_state()
    torch.manual_seed(1)
    _plain(twin, *cls.example_inputs())
    assert torch.equal(rng, torch.get_rng_state()), "compare consumed random numbers"
    assert_state_unchanged(before, model, expected=snapshot_state(twin))
    assert count_hooks(model) == count_hooks(twin)
    assert all("forward" not in vars(m) for m in model.modules())


def test_a_second_model_is_left_untouched() -> None:
    model, other = _setup(zoo.BufferModel, "train")
    _, twin = _setup(zoo.BufferModel, "train")
    before = snapshot_state(other)
    hookscope.compare(model, other, *zoo.BufferModel.example_inputs()[0])
    assert_state_unchanged(before, other)
    assert count_hooks(other) == count_hooks(twin)
