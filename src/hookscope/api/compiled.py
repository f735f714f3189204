"""``trace(..., compiled=True)``: what the compiled code does, in dynamo's own words.

Where it sits: :func:`hookscope.trace` records every module call from the original
module run eagerly (a tracer's hooks would not run inside compiled code); with
``compiled=True`` it then calls :func:`explain_compiled`, which runs the model once
through ``torch._dynamo.explain`` (``core/torch_private/compiler.py``) and turns its
account into the JSON data of a :class:`~hookscope.core.records.compile_report.
CompileReport`: the number of graphs, each graph break with dynamo's reason, its source
line and the module whose ``forward`` holds it, and the recompilations dynamo recorded
for the model's frames with the guard that failed.

A break's module is the innermost frame of dynamo's user stack that lies in the
``forward`` of a module of the model. Modules of one class share that code:
NB: the k-th break at one line is given to the k-th of those modules in the order the
eager run called them when there are as many breaks there as modules; otherwise the
break names every module that could hold it. A frame dynamo wraps itself (a
``torch.nn`` container compiled as a whole runs through ``torch._dynamo``'s own
``inner``) holds no module's code: its recompilations are not attributed.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from hookscope.core.model.module_table import ModuleTable, module_table
from hookscope.core.model.state import ModelState
from hookscope.core.records.compile_report import CompileReport, GraphBreak, Recompile
from hookscope.core.records.trace import Trace
from hookscope.core.torch_private import explain_module_run, recompile_reasons

__all__ = ["explain_compiled"]

Span = tuple[str, int, int]  # file, first line, last line of a forward
Site = tuple[str, int, str] | None  # file, line, function of a break's innermost frame
_RESUME = re.compile(r"torch_dynamo_resume_in_\w+_at_(\d+)$")
_ENTRY = re.compile(r"^\d+/\d+: ")  # dynamo's frame/entry number before a failed guard


def explain_compiled(
    model: nn.Module, args: Sequence[Any], kwargs: dict[str, Any], trace: Trace, *,
    grad: bool,
) -> dict[str, Any]:
    """Run ``model`` once through ``torch._dynamo.explain`` and describe what it saw.

    Args:
        model: the original module (not its ``torch.compile`` wrapper).
        args: its positional inputs.
        kwargs: its keyword inputs.
        trace: the eager trace of the same inputs (its call order names the modules).
        grad: run with autograd recording (as the traced forward did).

    Returns:
        The JSON data of a :class:`CompileReport` (``trace.meta["compile"]``).
    """
    spans = _forward_spans(model, trace)
    recompiles = _recompiles(spans)  # before explain adds its own entries
    table = module_table(model, extra_repr=False)
    state = ModelState(table, buffers=True)
    grad_mode = torch.enable_grad() if grad else torch.no_grad()
    try:
        with torch.random.fork_rng(devices=_cuda_indices(table)), grad_mode:
            out = explain_module_run(model, args, kwargs)
    except Exception as e:  # dynamo's failure is a finding, not hookscope's crash
        first = (str(e).strip().splitlines() or [""])[0]
        return CompileReport(graphs=0, ops=0, breaks=(), recompiles=recompiles, guards=0,
                             error=f"{type(e).__name__}: {first}").to_data()
    finally:
        state.restore()
    breaks = _breaks(out.break_reasons, spans)
    return CompileReport(
        graphs=int(out.graph_count), ops=int(out.op_count), breaks=tuple(breaks),
        recompiles=recompiles, guards=len(out.out_guards or ()),
    ).to_data()


def _cuda_indices(table: ModuleTable) -> list[int]:
    """The CUDA devices whose random state the model's run may move."""
    return sorted({t.device.index or 0 for t in table.parameters if t.is_cuda})


def _forward_spans(model: nn.Module, trace: Trace) -> dict[str, Span]:
    """Each module's ``forward`` source span, by path: the modules the eager run called
    first, in call order, then the rest."""
    order = list(dict.fromkeys(c.path for c in trace.calls))
    paths = dict(model.named_modules())
    order += [p for p in paths if p not in order]
    by_class: dict[type, Span | None] = {}  # reading a source file once per class
    spans: dict[str, Span] = {}
    for path in order:
        module = paths.get(path)
        if module is None:
            continue
        cls = type(module)
        if cls not in by_class:
            by_class[cls] = _span(cls.forward)
        span = by_class[cls]
        if span is not None:
            spans[path] = span
    return spans


def _span(forward: Any) -> Span | None:
    try:
        fn = inspect.unwrap(forward)
        lines, first = inspect.getsourcelines(fn)
        return fn.__code__.co_filename, first, first + len(lines) - 1
    except (TypeError, OSError, AttributeError):  # no Python source (a C forward)
        return None


def _holders(spans: dict[str, Span], filename: str, line: int) -> list[str]:
    return [p for p, (f, a, b) in spans.items() if f == filename and a <= line <= b]


def _breaks(reasons: Sequence[Any], spans: dict[str, Span]) -> list[GraphBreak]:
    # NB: dynamo reports a break inside an inlined module call twice, once from the
    # caller's frame and once when it compiles the module's own frame: one break per
    # reason, module and line
    found: dict[tuple[str, tuple[str, ...], Site], None] = {}
    for r in reasons:
        stack = list(getattr(r, "user_stack", None) or ())
        site: Site = (stack[-1].filename, stack[-1].lineno, stack[-1].name) if stack else None
        found[(str(r.reason), _innermost_holders(stack, spans), site)] = None
    at_site: dict[Site, int] = {}
    for _, _, site in found:
        at_site[site] = at_site.get(site, 0) + 1
    seen: dict[Site, int] = {}
    breaks = []
    for reason, holders, site in found:
        k = seen[site] = seen.get(site, -1) + 1
        paths = (holders[k],) if len(holders) > 1 and at_site[site] == len(holders) \
            else holders
        breaks.append(GraphBreak(
            reason=reason, paths=paths, file=None if site is None else site[0],
            line=None if site is None else site[1], function=None if site is None else site[2],
        ))
    return breaks


def _innermost_holders(stack: list[Any], spans: dict[str, Span]) -> tuple[str, ...]:
    """The modules whose ``forward`` holds the innermost frame of ``stack`` that lies
    in one."""
    for frame in reversed(stack):
        holders = _holders(spans, frame.filename, frame.lineno or 0)
        if holders:
            return tuple(holders)
    return ()


def _recompiles(spans: dict[str, Span]) -> tuple[Recompile, ...]:
    out = []
    for code, reasons in recompile_reasons().items():
        resume = _RESUME.search(code.co_name)
        line = int(resume.group(1)) if resume else code.co_firstlineno
        holders = _holders(spans, code.co_filename, line)
        if not holders:
            continue  # another model's frame
        for reason in dict.fromkeys(map(_guard_text, reasons)):
            out.append(Recompile(paths=tuple(holders), file=code.co_filename, line=line,
                                 reason=reason))
    return tuple(out)


def _guard_text(reason: str) -> str:
    """A failed guard without dynamo's entry number and the source it quotes:
    ``"tensor 'x' size mismatch at index 0. expected 3, actual 5"``."""
    first = (reason.strip().splitlines() or [""])[0]
    return _ENTRY.sub("", first).split("  #")[0].strip()
