"""The assumptions ``core/torch_private/compiler.py`` makes about ``torch.compile``,
checked against the installed torch (a release that changes one fails here by name)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch import nn

from hookscope.core import torch_private
from hookscope.core.torch_private import compiler as private_compiler


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


class Counting:
    """A backend that counts the graphs it compiles."""

    def __init__(self) -> None:
        self.graphs = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Any) -> Callable[..., Any]:
        self.graphs += 1
        return gm.forward


def test_torch_compile_wraps_the_module_as_orig_mod() -> None:
    model = nn.Linear(2, 2)
    wrapped = torch.compile(model, backend="eager")
    assert isinstance(wrapped, torch._dynamo.eval_frame.OptimizedModule)
    assert wrapped._orig_mod is model  # type: ignore[union-attr]
    assert torch_private.original_module(wrapped) is model  # type: ignore[arg-type]
    assert torch_private.compiled_form(wrapped) == "torch.compile(model)"  # type: ignore[arg-type]
    assert torch_private.original_module(model) is model
    assert torch_private.compiled_form(model) is None


def test_module_compile_sets_the_instance_s_compiled_call_impl() -> None:
    model = nn.Linear(2, 2)
    model.compile(backend="eager")
    assert model.__dict__.get("_compiled_call_impl") is not None
    assert torch_private.compiled_form(model) == "model.compile()"
    assert torch_private.original_module(model) is model


def test_explain_reports_breaks_with_a_user_stack_of_frame_summaries() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        print("break")  # a builtin dynamo does not trace
        return y + 1

    out = torch_private.explain_run(fn, (torch.randn(2),), {})
    assert out.graph_count == 2
    (brk,) = out.break_reasons
    assert isinstance(brk.reason, str) and brk.reason
    frame = brk.user_stack[-1]
    assert frame.filename == __file__ and frame.name == "fn"
    assert frame.lineno == fn.__code__.co_firstlineno + 2


def test_explain_run_keeps_the_compiled_code_and_dynamo_s_tables() -> None:
    """``explain`` resets dynamo (every compiled model would compile again): it must
    look ``reset`` up on the package when it runs, so that leaving it out holds."""
    backend = Counting()

    def user(x: torch.Tensor) -> torch.Tensor:
        return torch.sin(x) + 1

    compiled = torch.compile(user, backend=backend, dynamic=False)
    compiled(torch.randn(3))
    compiled(torch.randn(4))  # a recompilation: a guard failure recorded
    graphs = backend.graphs
    counters = {k: dict(v) for k, v in torch._dynamo.utils.counters.items()}
    failures = {k: list(v) for k, v in torch._dynamo.utils.guard_failures.items()}
    torch_private.explain_run(lambda x: torch.cos(x) * 2, (torch.randn(3),), {})
    assert {k: dict(v) for k, v in torch._dynamo.utils.counters.items()} == counters
    assert {k: list(v) for k, v in torch._dynamo.utils.guard_failures.items()} == failures
    compiled(torch.randn(3))
    compiled(torch.randn(4))
    assert backend.graphs == graphs  # both entries still cached: nothing compiled again


def test_explain_would_reset_without_the_patch() -> None:
    """The assumption above, the other way round: plain ``explain`` empties the cache."""
    backend = Counting()

    def user(x: torch.Tensor) -> torch.Tensor:
        return torch.sin(x) + 1

    compiled = torch.compile(user, backend=backend)
    compiled(torch.randn(3))
    torch._dynamo.explain(lambda x: x * 2)(torch.randn(3))
    compiled(torch.randn(3))
    assert backend.graphs == 2


def test_guard_failures_are_kept_by_code_object_with_their_reason() -> None:
    def user(x: torch.Tensor) -> torch.Tensor:
        return x * 3

    compiled = torch.compile(user, backend="eager", dynamic=False)
    compiled(torch.randn(3))
    compiled(torch.randn(5))
    reasons = torch_private.recompile_reasons()[user.__code__]
    assert any("size mismatch" in r for r in reasons)
    assert all(r.split(":")[0].count("/") == 1 for r in reasons)  # "frame/entry: ..."


def test_without_dynamo_imported_nothing_is_compiled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(__import__("sys").modules, "torch._dynamo")
    assert private_compiler._optimized_module_class() is None
    assert torch_private.recompile_reasons() == {}
