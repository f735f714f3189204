"""``torch.compile``: how a model was compiled, its original module, and dynamo's account.

A model is compiled in one of two ways: ``torch.compile(model)`` returns a
``torch._dynamo.eval_frame.OptimizedModule`` that holds the model as ``_orig_mod``, and
``model.compile()`` keeps the model and sets its ``_compiled_call_impl`` (what
``Module.__call__`` then runs). hookscope analyses the original module
(:func:`original_module`, :func:`compiled_form`), and for ``compiled=True`` asks
``torch._dynamo.explain`` how dynamo splits it into graphs (:func:`explain_run`) and
reads the reasons dynamo recorded for recompiling a frame (:func:`recompile_reasons`).

``explain`` calls ``torch._dynamo.reset()`` before and after it runs, which empties the
compiled code of every model in the process: the user's compiled model would compile
again on its next call. :func:`explain_run` runs it with that reset left out, and puts
dynamo's counters and its table of guard failures back as they were.
NB: what explain compiled stays in dynamo's cache beside the user's entries (one entry
per frame, guarded on explain's own backend, so the user's calls never run it; it counts
towards ``torch._dynamo.config.recompile_limit``).
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from types import CodeType
from typing import Any

import torch
from torch import nn

from hookscope.core.torch_private._warnings import _warn_once

__all__ = [
    "compiled_form",
    "explain_module_run",
    "explain_run",
    "original_module",
    "recompile_reasons",
]

COMPILED_WRAPPER = "torch.compile(model)"
"""What :func:`compiled_form` says for a model wrapped by ``torch.compile``."""
COMPILED_IN_PLACE = "model.compile()"
"""What :func:`compiled_form` says for a model compiled in place."""


def _optimized_module_class() -> type | None:
    """``OptimizedModule``, when dynamo was imported (nothing is compiled otherwise)."""
    if "torch._dynamo" not in sys.modules:
        return None
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    cls = getattr(eval_frame, "OptimizedModule", None)
    if cls is None:
        _warn_once("compiled models", "has no torch._dynamo.eval_frame.OptimizedModule")
    return cls if isinstance(cls, type) else None


def original_module(model: nn.Module) -> nn.Module:
    """The module ``torch.compile(model)`` wraps (``_orig_mod``, through every wrapper),
    or ``model`` itself."""
    cls = _optimized_module_class()
    while cls is not None and isinstance(model, cls):
        inner = model.__dict__.get("_orig_mod") or model._modules.get("_orig_mod")
        if not isinstance(inner, nn.Module):
            _warn_once("compiled models", "keeps an OptimizedModule's module elsewhere")
            return model
        model = inner
    return model


def compiled_form(model: nn.Module) -> str | None:
    """How ``model`` was compiled: :data:`COMPILED_WRAPPER`, :data:`COMPILED_IN_PLACE`
    (``Module.compile`` set ``_compiled_call_impl``), or ``None``."""
    if original_module(model) is not model:
        return COMPILED_WRAPPER
    if model.__dict__.get("_compiled_call_impl") is not None:
        return COMPILED_IN_PLACE
    return None


def _dynamo_tables() -> tuple[Any, Any]:
    import torch._dynamo.utils as utils

    return utils.counters, utils.guard_failures


@contextlib.contextmanager
def _dynamo_state_kept() -> Iterator[None]:
    """No ``torch._dynamo.reset()`` inside the block; dynamo's counters and guard
    failures are put back as they were when it ends."""
    import torch._dynamo as dynamo

    counters, failures = _dynamo_tables()
    counts = {k: Counter(v) for k, v in counters.items()}
    failed = {k: list(v) for k, v in failures.items()}
    reset = dynamo.reset
    # explain imports ``reset`` from the package each time it runs
    setattr(dynamo, "reset", lambda: None)  # noqa: B010  (an attribute mypy types as final)
    try:
        yield
    finally:
        setattr(dynamo, "reset", reset)  # noqa: B010  (as above)
        counters.clear()
        counters.update(counts)
        failures.clear()
        failures.update(failed)


def explain_run(fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    """``torch._dynamo.explain(fn)(*args, **kwargs)``: dynamo's ``ExplainOutput``
    (``graph_count``, ``break_reasons`` with ``reason`` and ``user_stack``, ``op_count``,
    ``out_guards``), without emptying the process's compiled code (module docstring)."""
    import torch._dynamo as dynamo

    # NB: dynamo logs a warning for each graph break it meets; the report says the same,
    # so warnings are off while explain runs (process-wide, for its duration only)
    quiet = logging.root.manager.disable
    logging.disable(max(quiet, logging.WARNING))
    try:
        # another tracer, active around this call, set the stance to force_eager
        with _dynamo_state_kept(), torch.compiler.set_stance("default"):
            return dynamo.explain(fn)(*args, **kwargs)
    finally:
        logging.disable(quiet)


def explain_module_run(model: nn.Module, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    """:func:`explain_run` of one call of ``model``, through ``Module._call_impl`` (as
    ``torch.compile(model)`` compiles it: the module's hooks inside the graph), not
    through a new ``OptimizedModule`` that ``explain(model)`` would wrap it in."""
    return explain_run(model._call_impl, args, kwargs)


def recompile_reasons() -> dict[CodeType, list[str]]:
    """Why dynamo compiled a frame again, by code object (a model's ``forward``, or a
    resume function dynamo made after a graph break): the guard of each cached entry
    that failed, as dynamo recorded it (``"1/0: tensor 'x' size mismatch ..."``)."""
    if "torch._dynamo" not in sys.modules:
        return {}
    _, failures = _dynamo_tables()
    return {code: list(reasons) for code, reasons in failures.items()
            if isinstance(code, CodeType) and reasons}
