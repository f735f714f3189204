"""``hookscope.hooks``: the inventory lists exactly the hooks a test registers.

The oracle is the test itself: every hook below is registered here, and the expected
record (kind, owner, flags, qualified name) is written out beside it; expected source
lines come from the test's own functions (``__code__.co_firstlineno``), not from the
code under test. Global hooks are removed in a ``finally``.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import pytest
import torch
import torch.nn.modules.module as torch_module
from rich.console import Console
from torch import nn

import hookscope
from hookscope.debug.hook_inventory import HookInventory
from hookscope.debug.hook_records import HookKind, HookRecord, Scope
from hookscope.errors import RenderError, SpecError

HERE = __file__
SHOWN = os.path.relpath(HERE)  # the tree shows paths relative to the working directory


# -- hook functions: their lines are the expected ``line`` ---------------------------


def pre_hook(module: nn.Module, args: Any) -> None:
    pass


def fwd_hook_kwargs(module: nn.Module, args: Any, kwargs: Any, output: Any) -> None:
    pass


def fwd_hook(module: nn.Module, args: Any, output: Any) -> None:
    pass


def bwd_pre_hook(module: nn.Module, grad_output: Any) -> None:
    pass


def bwd_hook(module: nn.Module, grad_input: Any, grad_output: Any) -> None:
    pass


def sd_pre_hook(module: nn.Module, prefix: str, keep_vars: bool) -> None:
    pass


def sd_post_hook(module: nn.Module, state_dict: Any, prefix: str, meta: Any) -> None:
    pass


def load_pre_hook(*args: Any) -> None:
    pass


def load_post_hook(module: nn.Module, incompatible: Any) -> None:
    pass


def grad_hook(grad: torch.Tensor) -> None:
    pass


def acc_hook(param: torch.Tensor) -> None:
    pass


def scaled(factor: float, module: nn.Module, args: Any) -> None:
    pass


def logged(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any) -> Any:
        return fn(*args)

    return wrapper


@logged
def decorated(module: nn.Module, args: Any, output: Any) -> None:
    pass


class Recorder:
    def __call__(self, module: nn.Module, args: Any, output: Any) -> None:
        pass

    def method(self, module: nn.Module, args: Any, output: Any) -> None:
        pass


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.act = nn.ReLU()
        self.out = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.act(self.fc(x)))


def line(fn: Any) -> int:
    return int(inspect_target(fn).__code__.co_firstlineno)


def inspect_target(fn: Any) -> Any:
    """The function whose ``def`` line the record must name (the test's own view)."""
    return fn.__wrapped__ if hasattr(fn, "__wrapped__") else fn


def key(record: HookRecord) -> tuple[Any, ...]:
    return (record.kind, record.scope, record.owner, record.name, record.line, record.flags)


@contextmanager
def removed(*handles: Any) -> Iterator[None]:
    with ExitStack() as stack:
        for handle in handles:
            stack.callback(handle.remove)
        yield


# -- every kind of hook --------------------------------------------------------------


def test_every_module_and_tensor_hook_kind_is_listed_exactly() -> None:
    model = Net()
    model.fc.register_forward_pre_hook(pre_hook)
    model.fc.register_forward_pre_hook(functools.partial(scaled, 2.0), with_kwargs=False)
    model.fc.register_forward_hook(fwd_hook_kwargs, with_kwargs=True)
    model.fc.register_forward_hook(fwd_hook, always_call=True)
    model.act.register_forward_hook(Recorder())
    model.act.register_forward_hook(Recorder().method)
    model.act.register_forward_hook(decorated)
    model.register_full_backward_pre_hook(bwd_pre_hook)
    model.register_full_backward_hook(bwd_hook)
    model.out.register_backward_hook(bwd_hook)  # the deprecated, non-full kind
    model.register_state_dict_pre_hook(sd_pre_hook)
    model.register_state_dict_post_hook(sd_post_hook)
    model.register_load_state_dict_pre_hook(load_pre_hook)
    model.register_load_state_dict_post_hook(load_post_hook)
    model.fc.weight.register_hook(grad_hook)
    model.out.bias.register_post_accumulate_grad_hook(acc_hook)

    inventory = hookscope.hooks(model)

    m, p = Scope.MODULE, Scope.PARAMETER
    expected = [
        (HookKind.BACKWARD_PRE, m, "", "bwd_pre_hook", line(bwd_pre_hook), ()),
        (HookKind.BACKWARD, m, "", "bwd_hook", line(bwd_hook), ()),
        (HookKind.STATE_DICT_PRE, m, "", "sd_pre_hook", line(sd_pre_hook), ()),
        (HookKind.STATE_DICT_POST, m, "", "sd_post_hook", line(sd_post_hook), ()),
        (HookKind.LOAD_STATE_DICT_PRE, m, "", "load_pre_hook", line(load_pre_hook), ()),
        (HookKind.LOAD_STATE_DICT_POST, m, "", "load_post_hook", line(load_post_hook), ()),
        (HookKind.FORWARD_PRE, m, "fc", "pre_hook", line(pre_hook), ()),
        (HookKind.FORWARD_PRE, m, "fc", "functools.partial(scaled)", line(scaled), ()),
        (HookKind.FORWARD, m, "fc", "fwd_hook_kwargs", line(fwd_hook_kwargs), ("with_kwargs",)),
        (HookKind.FORWARD, m, "fc", "fwd_hook", line(fwd_hook), ("always_call",)),
        (HookKind.GRAD, p, "fc.weight", "grad_hook", line(grad_hook), ()),
        (HookKind.FORWARD, m, "act", "Recorder.__call__", line(Recorder.__call__), ()),
        (HookKind.FORWARD, m, "act", "Recorder.method", line(Recorder.method), ()),
        (HookKind.FORWARD, m, "act", "decorated", line(decorated), ()),
        (HookKind.BACKWARD, m, "out", "bwd_hook", line(bwd_hook), ("legacy",)),
        (HookKind.POST_ACCUMULATE_GRAD, p, "out.bias", "acc_hook", line(acc_hook), ()),
    ]
    assert [key(r) for r in inventory] == expected
    assert all(r.file == HERE and r.module == __name__ for r in inventory)
    assert all(r.registered_by == "user" for r in inventory)
    assert inventory.hidden_hookscope == 0
    assert [r.owner_class for r in inventory][:7] == ["Net"] * 6 + ["Linear"]
    assert inventory.by_owner()["fc.weight"][0].owner_class == "Parameter"
    # the handle ids are torch's keys of each dict: each record names its own entry
    assert [r.handle_id for r in inventory.by_owner()["fc"]] == [
        *model.fc._forward_pre_hooks, *model.fc._forward_hooks
    ]


def test_load_state_dict_pre_hook_is_seen_through_torchs_wrapper() -> None:
    model = nn.Linear(2, 2)
    model.register_load_state_dict_pre_hook(load_pre_hook)
    (wrapper,) = model._load_state_dict_pre_hooks.values()
    assert type(wrapper).__name__ == "_WrappedHook"  # what the record must see through
    (record,) = hookscope.hooks(model)
    assert (record.name, record.file, record.line) == ("load_pre_hook", HERE, line(load_pre_hook))


def test_lambdas_closures_and_builtins() -> None:
    model = nn.Linear(2, 2)

    def make() -> Callable[..., None]:
        def inner(module: nn.Module, args: Any, output: Any) -> None:
            pass

        return inner

    hook = lambda module, args: None  # noqa: E731 - the lambda is what is tested
    model.register_forward_pre_hook(hook)
    model.register_forward_hook(make())
    model.register_forward_hook(print)
    lam, inner, builtin = hookscope.hooks(model)
    prefix = "test_lambdas_closures_and_builtins.<locals>."
    assert (lam.name, lam.line) == (prefix + "<lambda>", hook.__code__.co_firstlineno)
    assert (inner.name, inner.line) == (prefix + "make.<locals>.inner", line(make()))
    assert (builtin.name, builtin.module, builtin.file, builtin.line) == (
        "print", "builtins", None, None)
    assert builtin.location is None and lam.location == f"{HERE}:{lam.line}"


def test_global_hooks_are_listed_and_gone_once_removed() -> None:
    model = Net()
    handles = [
        torch_module.register_module_forward_pre_hook(pre_hook),
        torch_module.register_module_forward_hook(fwd_hook_kwargs, with_kwargs=True),
        torch_module.register_module_forward_hook(fwd_hook, always_call=True),
        torch_module.register_module_full_backward_pre_hook(bwd_pre_hook),
        torch_module.register_module_full_backward_hook(bwd_hook),
        torch_module.register_module_buffer_registration_hook(acc_hook),
    ]
    try:
        inventory = hookscope.hooks(model)
        g = Scope.GLOBAL
        assert [key(r) for r in inventory] == [
            (HookKind.BUFFER_REGISTRATION, g, "global", "acc_hook", line(acc_hook), ()),
            (HookKind.FORWARD_PRE, g, "global", "pre_hook", line(pre_hook), ()),
            (HookKind.FORWARD, g, "global", "fwd_hook_kwargs", line(fwd_hook_kwargs),
             ("with_kwargs",)),
            (HookKind.FORWARD, g, "global", "fwd_hook", line(fwd_hook), ("always_call",)),
            (HookKind.BACKWARD_PRE, g, "global", "bwd_pre_hook", line(bwd_pre_hook), ()),
            (HookKind.BACKWARD, g, "global", "bwd_hook", line(bwd_hook), ()),
        ]
        assert [r.handle_id for r in inventory] == [
            handles[5].id, *(h.id for h in handles[:5])]
        assert all(r.owner_class is None for r in inventory)
    finally:
        for handle in handles:
            handle.remove()
        torch_module._global_forward_hooks_with_kwargs.pop(handles[1].id, None)
    assert len(hookscope.hooks(model)) == 0


def test_shared_modules_and_tied_tensors_are_listed_once_with_aliases() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2))
    model.add_module("again", model[1])
    model[2].weight = model[0].weight
    model[1].register_forward_hook(fwd_hook)
    model[0].weight.register_hook(grad_hook)
    weight, relu = hookscope.hooks(model)  # module 0 (and its weight) comes first
    assert (relu.owner, relu.aliases) == ("1", ("again",))
    assert (weight.owner, weight.aliases, weight.scope) == ("0.weight", ("2.weight",),
                                                             Scope.PARAMETER)


def test_buffer_hooks_are_listed_as_buffers() -> None:
    model = nn.Module()
    model.register_buffer("scale", torch.ones(2, requires_grad=True))
    model.scale.register_hook(grad_hook)
    (record,) = hookscope.hooks(model)
    assert (record.scope, record.owner, record.owner_class) == (Scope.BUFFER, "scale", "Tensor")


def test_a_model_without_hooks_has_an_empty_inventory() -> None:
    inventory = hookscope.hooks(Net())
    assert len(inventory) == 0 and list(inventory) == [] and inventory.by_owner() == {}
    assert str(inventory) == "Net: no hooks\n"


def test_not_a_module_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match=r"expects a torch\.nn\.Module, got Tensor"):
        hookscope.hooks(torch.zeros(2))  # type: ignore[arg-type]


# -- hookscope's own hooks -----------------------------------------------------------


def user_hooked_model() -> Net:
    model = Net()
    model.fc.register_forward_hook(fwd_hook)
    model.act.register_forward_pre_hook(pre_hook)
    model.out.weight.register_hook(grad_hook)
    return model


def test_hookscope_calls_leave_no_hook_in_the_inventory() -> None:
    model = user_hooked_model()
    before = hookscope.hooks(model, include_hookscope=True)
    x = torch.randn(2, 3)
    hookscope.trace(model, x)
    hookscope.trace(model, x, backward=True)
    hookscope.summary(model, x)
    with hookscope.Tracer(model):
        model(x)
    after = hookscope.hooks(model, include_hookscope=True)
    assert after == before
    assert [r.name for r in after] == ["fwd_hook", "pre_hook", "grad_hook"]


def test_an_active_tracers_hooks_are_hidden_by_default_and_marked_when_included() -> None:
    model = user_hooked_model()
    user = hookscope.hooks(model)
    with hookscope.Tracer(model):
        model.out.register_forward_hook(fwd_hook)  # the user's, though added inside
        inside = hookscope.hooks(model)
        everything = hookscope.hooks(model, include_hookscope=True)
    added = (HookKind.FORWARD, Scope.MODULE, "out", "fwd_hook", line(fwd_hook), ())
    *before_out, out_weight = [key(r) for r in user]
    assert [key(r) for r in inside] == [*before_out, added, out_weight]
    ours = [r for r in everything if r.registered_by == "hookscope"]
    assert ours and inside.hidden_hookscope == len(ours)
    assert len(everything) == len(inside) + len(ours)
    assert all(r.module is not None and r.module.startswith("hookscope.") for r in ours)
    assert {r.owner for r in ours} <= {"", "fc", "act", "out", "global"}
    assert [r for r in everything if r.registered_by == "user"] == list(inside)
    assert "(hookscope)" in everything.to_text() and "(hookscope)" not in inside.to_text()
    assert f"{len(ours)} of hookscope's own not shown" in inside.to_text()


# -- records, JSON and rendering -----------------------------------------------------


def test_json_round_trips_to_the_same_dict_and_inventory() -> None:
    inventory = hookscope.hooks(user_hooked_model())
    document = inventory.to_json()
    assert json.loads(document) == inventory.to_dict()
    assert HookInventory.from_json(document) == inventory
    assert list(json.loads(document)) == sorted(json.loads(document))
    assert inventory.to_dict()["schema_version"] == 1
    assert inventory.to_dict()["hooks"][0]["kind"] == "forward"
    with pytest.raises(RenderError, match="schema_version 1, got 99"):
        HookInventory.from_dict({**inventory.to_dict(), "schema_version": 99})


def test_tree_groups_owner_then_kind_then_hooks() -> None:
    model = nn.Sequential(nn.Linear(2, 2))
    first = model[0].register_forward_hook(fwd_hook, always_call=True)
    second = model[0].register_forward_hook(fwd_hook_kwargs, with_kwargs=True)
    third = model[0].weight.register_hook(grad_hook)
    with removed(first, second, third):
        text = hookscope.hooks(model).to_text(width=200)
    assert text == (
        "Sequential: 3 hooks\n"
        "+-- 0 (Linear)\n"
        "|   `-- forward\n"
        f"|       +-- fwd_hook  {SHOWN}:{line(fwd_hook)}  [always_call]"
        f"  id {first.id}\n"
        f"|       `-- fwd_hook_kwargs  {SHOWN}:{line(fwd_hook_kwargs)}"
        f"  [with_kwargs]  id {second.id}\n"
        "`-- 0.weight (Parameter)\n"
        "    `-- grad\n"
        f"        `-- grad_hook  {SHOWN}:{line(grad_hook)}  id {third.id}\n"
    )


def test_terminal_jupyter_and_repr() -> None:
    model = nn.Sequential(nn.Linear(2, 2))
    model[0].register_forward_hook(lambda module, args, output: None)
    inventory = hookscope.hooks(model)
    console = Console(width=100, force_terminal=True, color_system=None, record=True)
    console.print(inventory)
    drawn = console.export_text()
    assert "└── 0 (Linear)" in drawn and "<lambda>" in drawn
    page = inventory._repr_html_()
    assert page.startswith("<pre") and page.endswith("</pre>")
    assert "&lt;lambda&gt;" in page and "<lambda>" not in page and "└── forward" in page
    assert repr(inventory) == "<hookscope.HookInventory of Sequential: 1 hook on 1 owner>"
    assert repr(hookscope.hooks(user_hooked_model())) == (
        "<hookscope.HookInventory of Net: 3 hooks on 3 owners>")


# -- whose hook: decided by who registered it ----------------------------------------


def test_a_hookscope_function_the_user_registers_is_the_users_hook() -> None:
    """A hook was hookscope's when its function was defined in hookscope: one the user
    registered (a patch function, no Tracer active) was hidden."""
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    x = torch.randn(2, 4)
    handle = model[0].register_forward_hook(hookscope.patches.zero())
    assert list(model[0]._forward_hooks) == [handle.id]  # the truth: the user's handle
    assert torch.equal(model(x), model[2](torch.zeros(2, 4)))  # and it acts
    (record,) = hookscope.hooks(model)
    assert (record.handle_id, record.owner, record.registered_by) == (handle.id, "0", "user")
    assert hookscope.hooks(model).hidden_hookscope == 0
    with hookscope.Tracer(model):  # the tracer's own hooks beside it are hookscope's
        tracer_ids = {k for m in model.modules() for k in m._forward_hooks} - {handle.id}
        everything = hookscope.hooks(model, include_hookscope=True)
        inside = hookscope.hooks(model)
    assert tracer_ids
    assert {r.handle_id for r in everything if r.registered_by == "hookscope"} >= tracer_ids
    assert [(r.handle_id, r.registered_by) for r in inside] == [(handle.id, "user")]


class LogShapes(nn.Module):
    """A module used as a forward hook."""

    def forward(self, module: nn.Module, args: Any, output: Any) -> None:
        pass


def test_a_module_used_as_a_hook_is_named_by_its_class_and_forward() -> None:
    """It was named ``Module._wrapped_call_impl`` at torch's module.py."""
    model = nn.Sequential(nn.Linear(2, 2))
    model[0].register_forward_hook(LogShapes())
    (record,) = hookscope.hooks(model)
    assert (record.name, record.module, record.file, record.line) == (
        "LogShapes.forward", __name__, HERE, line(LogShapes.forward))
