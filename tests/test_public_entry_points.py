"""Every public entry point that takes a model says so, in one line, when it is given
something else (a function, a class, an output tensor): a ``SpecError``, never an
``AttributeError`` from deep inside."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import hookscope

X = torch.randn(3, 4)


def _enter(value: Any) -> None:
    if hasattr(value, "__enter__"):
        with value:
            pass


ENTRY_POINTS: dict[str, Callable[[Any], Any]] = {
    "trace": lambda m: hookscope.trace(m, X),
    "summary": lambda m: hookscope.summary(m, X),
    "Tracer": lambda m: _enter(hookscope.Tracer(m)),
    "find_anomaly": lambda m: hookscope.find_anomaly(m, X),
    "detect_anomaly": lambda m: _enter(hookscope.detect_anomaly(m)),
    "breakpoint": lambda m: _enter(hookscope.breakpoint(m, at="0")),
    "capture": lambda m: hookscope.capture(m, X, select="0"),
    "Capture": lambda m: _enter(hookscope.Capture(m, select="0")),
    "compare": lambda m: hookscope.compare(m, None, X),
    "compare model_b": lambda m: hookscope.compare(nn.Sequential(nn.Linear(4, 4)), m, X),
    "patch": lambda m: _enter(hookscope.patch(m, {"0": lambda out: out})),
    "patch_inputs": lambda m: _enter(hookscope.patch_inputs(m, {"0": lambda x: x})),
    "GradientMonitor": lambda m: hookscope.GradientMonitor(m),
    "hooks": lambda m: hookscope.hooks(m),
    "lint": lambda m: hookscope.lint(m),
    "inspect": lambda m: hookscope.inspect(m),
    "memory_plan": lambda m: hookscope.memory_plan(m, X),
    "annotated_repr": lambda m: hookscope.annotated_repr(
        m, hookscope.trace(nn.Sequential(nn.Linear(4, 4)), X)),
}


@pytest.mark.parametrize("name", list(ENTRY_POINTS))
@pytest.mark.parametrize("wrong", [lambda t: t, nn.Linear, X], ids=["function", "class", "tensor"])
def test_a_model_that_is_no_module_is_a_spec_error(name: str, wrong: Any) -> None:
    with pytest.raises(hookscope.SpecError, match=r"nn\.Module|a module"):
        ENTRY_POINTS[name](wrong)


def test_annotated_repr_wants_the_trace_second() -> None:
    model = nn.Sequential(nn.Linear(4, 4))
    with pytest.raises(hookscope.SpecError, match="trace of the model second"):
        hookscope.annotated_repr(model, model)  # type: ignore[arg-type]
