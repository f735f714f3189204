"""The annotated model print: the model's own repr with trace facts, fully undone."""

from __future__ import annotations

import functools

import pytest
import torch
from torch import nn

import hookscope
from helpers import assert_state_unchanged, snapshot_state


def instance_dicts(model: nn.Module) -> list[dict[str, object]]:
    """A shallow copy of every module instance's ``__dict__`` (values by identity)."""
    return [dict(vars(m)) for m in model.modules()]


def assert_untouched(model: nn.Module, before_repr: str, dicts: list[dict[str, object]]) -> None:
    assert repr(model) == before_repr
    after = instance_dicts(model)
    assert [list(d) for d in after] == [list(d) for d in dicts]
    for old, new in zip(dicts, after, strict=True):
        assert all(new[k] is v for k, v in old.items())


def seed_model() -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Flatten())


def test_the_seed_model_is_annotated_with_shapes_params_and_time() -> None:
    model = seed_model()
    trace = hookscope.trace(model, torch.randn(1, 3, 32, 32))
    before, dicts, state = repr(model), instance_dicts(model), snapshot_state(model)
    text = hookscope.annotated_repr(model, trace)
    lines = text.splitlines()
    conv = next(line for line in lines if "Conv2d(" in line)
    assert conv.startswith("  (0): Conv2d(3, 16, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1)")
    assert "output=[1, 16, 32, 32]" in conv
    assert f"params={3 * 16 * 9 + 16}" in conv and "time=" in conv
    assert "output=[1, 16384]" in next(line for line in lines if "Flatten(" in line)
    assert lines[1].strip().startswith("output=[1, 16384], params=448")  # the container
    assert len(lines) == len(before.splitlines()) + 1  # one note line for the container
    assert_untouched(model, before, dicts)
    assert_state_unchanged(state, model)


def test_an_extra_repr_the_user_set_is_kept_and_put_back() -> None:
    """The seeds set ``extra_repr`` per instance with ``apply`` + ``partial``."""
    model = seed_model()

    def describe(module: nn.Module, *, note: str) -> str:
        return note

    model.apply(lambda m: setattr(m, "extra_repr", functools.partial(describe, m, note="mine"))
                if isinstance(m, nn.ReLU) else None)
    trace = hookscope.trace(model, torch.randn(1, 3, 8, 8))
    before, dicts = repr(model), instance_dicts(model)
    text = hookscope.annotated_repr(model, trace, fields=["output"])
    assert "ReLU(mine | output=[1, 16, 8, 8])" in text
    assert_untouched(model, before, dicts)
    assert "extra_repr" in vars(model[1]) and "extra_repr" not in vars(model[0])


def test_shared_reused_and_never_called_modules() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.act = nn.Tanh()
            self.alias = self.act  # the same module under a second name
            self.fc = nn.Linear(4, 4)
            self.unused = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.act(self.fc(self.act(x)))

    model = Net()
    trace = hookscope.trace(model, torch.randn(2, 4))
    before, dicts = repr(model), instance_dicts(model)
    text = hookscope.annotated_repr(model, trace, fields=("output", "params"))
    tanh_lines = [line for line in text.splitlines() if "Tanh(" in line]
    assert len(tanh_lines) == 2
    assert all("output=[2, 4], params=0, calls=2" in line for line in tanh_lines)
    assert "(unused): Linear(in_features=4, out_features=4, bias=True | not called)" in text
    assert_untouched(model, before, dicts)


def test_a_failing_repr_still_restores_every_module() -> None:
    class Fragile(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x

        def extra_repr(self) -> str:
            raise RuntimeError("cannot describe myself")

    model = nn.Sequential(nn.Linear(2, 2), Fragile())
    trace = hookscope.trace(model, torch.zeros(1, 2))
    dicts = instance_dicts(model)
    with pytest.raises(RuntimeError, match="cannot describe myself"):
        hookscope.annotated_repr(model, trace)
    after = instance_dicts(model)
    assert [list(d) for d in after] == [list(d) for d in dicts]


def test_unknown_field_is_a_render_error() -> None:
    model = nn.Linear(2, 2)
    trace = hookscope.trace(model, torch.zeros(1, 2))
    with pytest.raises(hookscope.RenderError, match="unknown trace column 'shape'"):
        hookscope.annotated_repr(model, trace, fields=["shape"])
    with pytest.raises(hookscope.RenderError, match="list of column names"):
        hookscope.annotated_repr(model, trace, fields="output")
    assert "extra_repr" not in vars(model)


def test_modules_outside_select_are_not_observed_not_not_called() -> None:
    class Skip(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b, self.c = nn.Linear(4, 4), nn.Linear(4, 4), nn.ReLU()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.c(self.a(x))  # b never runs

    model = Skip()
    trace = hookscope.trace(model, torch.randn(3, 4), select=["a", "b"])
    lines = hookscope.annotated_repr(model, trace).splitlines()
    assert lines[1].strip() == "not observed (outside select=)"  # the root ran, unselected
    assert "output=[3, 4]" in lines[2]
    assert lines[3].endswith("| not called)")  # selected, and it did not run
    assert lines[4].endswith("(not observed (outside select=))")  # ran, unselected
    again = hookscope.Trace.from_json(trace.to_json())
    assert hookscope.annotated_repr(model, again).splitlines() == lines
