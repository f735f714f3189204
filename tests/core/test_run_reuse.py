"""A model traced again: what the start of a run reads once and keeps.

``trace()``/``summary()`` of a model whose module table is reused (``core/model/table_reuse.py``)
read every module once, and plan the stand-in for ``Module._call_impl`` from what they
planned last time (``core/engine/fast_path.py``) when nothing that plan depends on changed.
The oracle is the normal path: a ``Tracer`` block never takes the stand-in, so after a
change made between runs both must record the same calls; and the state a run puts
back is the one the model had before that run, not before the first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
from helpers import call_rows as rows
from helpers import total_hooks

SHAPES_ONLY = {"time": False, "stats": False, "memory": False}


def normal_path(model: nn.Module, x: torch.Tensor) -> hookscope.Trace:
    with torch.no_grad():
        tracer = hookscope.Tracer(model, restore_state=True, **SHAPES_ONLY)
        with tracer:
            model(x)
    assert tracer.trace is not None
    return tracer.trace


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 4)
        self.act = nn.Tanh()
        self.head = nn.Sequential(nn.Linear(4, 2), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.act(self.fc(x)))


def _twice(module: nn.Module, args: Any, output: torch.Tensor) -> torch.Tensor:
    return torch.cat([output, output])


def _double_input(module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
    return (args[0].repeat(2, 1),)


def add_output_hook(model: Net) -> Any:
    return model.act.register_forward_hook(_twice)


def add_input_hook(model: Net) -> Any:
    return model.fc.register_forward_pre_hook(_double_input)


def patch_forward(model: Net) -> Any:
    original = model.fc.forward
    model.fc.forward = lambda x: model.act(original(x))  # type: ignore[method-assign]
    return None


def compile_in_place(model: Net) -> Any:
    torch._dynamo.reset()
    model.head.compile(backend="eager")
    return None


def own_call_impl(model: Net) -> Any:
    class Disabled(nn.Tanh):
        pass

    torch.compiler.disable(Disabled)  # a _call_impl of the class's own
    model.act.__class__ = Disabled
    return None


def disable_a_class_in_place(model: Net) -> Any:
    class Block(nn.Module):  # a class of the model's own, decorated after some runs
        def __init__(self) -> None:
            super().__init__()
            self.inner = nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.inner(x))

    model.head = Block()
    for _ in range(3):
        hookscope.trace(model, torch.randn(2, 3), **SHAPES_ONLY)
    torch.compiler.disable(Block)  # the same class object, a _call_impl of its own now
    return None


CHANGES: dict[str, Callable[[Net], Any]] = {
    "a forward hook that replaces an output": add_output_hook,
    "a forward pre-hook that replaces an input": add_input_hook,
    "a forward patched on the instance, calling another module": patch_forward,
    "a submodule compiled in place": compile_in_place,
    "an instance given a class with a _call_impl of its own": own_call_impl,
    "a class given a _call_impl of its own": disable_a_class_in_place,
}


@pytest.mark.parametrize("change", CHANGES)
def test_a_change_between_runs_is_seen_by_the_next_run(change: str) -> None:
    torch.manual_seed(0)
    model, x = Net(), torch.randn(2, 3)
    for _ in range(3):  # the first run makes the table, the next ones reuse it
        hookscope.trace(model, x, **SHAPES_ONLY)
    handle = CHANGES[change](model)
    try:
        fast = hookscope.trace(model, x, **SHAPES_ONLY)
        assert rows(fast) == rows(normal_path(model, x))
        again = hookscope.trace(model, x, **SHAPES_ONLY)  # and once more, reused
        assert rows(again) == rows(fast)
    finally:
        if handle is not None:
            handle.remove()
    # with the hook gone, the runs record what a model without it computes
    if handle is not None:
        plain = hookscope.trace(model, x, **SHAPES_ONLY)
        assert rows(plain) == rows(normal_path(model, x))
    assert total_hooks(model) == 0


def test_a_hook_added_then_removed_between_runs() -> None:
    torch.manual_seed(0)
    model, x = Net(), torch.randn(2, 3)
    before = [rows(hookscope.trace(model, x, **SHAPES_ONLY)) for _ in range(3)]
    handle = add_output_hook(model)
    hooked = hookscope.trace(model, x, **SHAPES_ONLY)
    handle.remove()
    after = hookscope.trace(model, x, **SHAPES_ONLY)
    assert rows(after) == before[0]
    assert rows(hooked) != before[0]
    assert hooked.find("act").outputs[0].shape == (4, 4)  # what the caller received


class Toggles(nn.Module):
    """A forward that changes the model's state: dropout switched on, a layer frozen."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.drop = nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.drop.train()
        self.fc.weight.requires_grad_(False)
        return self.drop(self.fc(x))


def test_each_run_puts_back_the_state_the_model_had_before_it() -> None:
    model, x = Toggles().eval(), torch.randn(2, 3)
    for _ in range(3):  # reused tables read the state on the way
        hookscope.summary(model, x)
        assert not model.drop.training and not model.training
        assert model.fc.weight.requires_grad
    # the state changed between runs: the next run puts back the new one
    model.train()
    model.fc.bias.requires_grad_(False)
    for _ in range(2):
        hookscope.summary(model, x)
        assert model.training and model.drop.training and model.fc.training
        assert model.fc.weight.requires_grad and not model.fc.bias.requires_grad


class SetsAnIntFlag(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.act.training = 1  # type: ignore[assignment]  # equal to True, not True
        return self.act(x)


def test_a_flag_set_to_an_equal_value_of_another_type_is_put_back() -> None:
    model = SetsAnIntFlag()  # in training mode: True
    for _ in range(3):
        hookscope.summary(model, torch.randn(2, 3))
        assert model.act.training is True


class Slots(nn.Module):
    """Two parameter entries, the second maybe ``None`` (as ``bias=False`` registers)."""

    def __init__(self, second: bool) -> None:
        super().__init__()
        self.p = nn.Parameter(torch.ones(5))
        self.register_parameter("q", nn.Parameter(torch.ones(5)) if second else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.p if self.q is None else x * self.p + self.q


def test_a_parameter_moved_into_another_modules_none_entry_is_seen() -> None:
    # The same number of entries per module, the same tensors' counts and dtypes in the
    # same order: only which entry is None changed. The oracle is hookscope.inspect,
    # which never reuses a table.
    model = nn.Sequential(Slots(second=False), Slots(second=True))
    x = torch.randn(5)
    for _ in range(2):
        hookscope.trace(model, x, **SHAPES_ONLY)
    q = model[1].q
    model[1].register_parameter("q", None)
    model[0].register_parameter("q", q)
    reused = hookscope.trace(model, x, **SHAPES_ONLY)
    fresh = hookscope.inspect(model)
    for path in ("0", "1"):
        assert reused.modules[path].own_params == fresh[path].own_params
    assert reused.modules["0"].own_params == 10


def test_a_reused_tables_members_read_as_the_models_named_modules() -> None:
    """A reused table gives its ``(path, module)`` pairs as a view, not a list: it reads
    like ``named_modules()`` (the oracle) in every way the callers read it."""
    from hookscope.core.model.module_table import module_table
    from hookscope.core.model.table_reuse import Pairs

    model = nn.Sequential(nn.Linear(2, 3), nn.Sequential(nn.ReLU(), nn.Linear(3, 1)))
    module_table(model, extra_repr=False)
    table = module_table(model, extra_repr=False)  # the second: reused
    expected = list(model.named_modules())
    assert isinstance(table.members, Pairs)
    assert list(table.members) == expected and table.members == expected
    assert len(table.members) == len(expected) and table.walk == expected
    assert table.members[2] == expected[2] and table.members[-1] == expected[-1]
    assert table.members[1:3] == expected[1:3]
    assert dict(table.members) == dict(expected)
    assert repr(table.members) == repr(expected)
