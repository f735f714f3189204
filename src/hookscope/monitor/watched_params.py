"""Which parameters a :class:`~hookscope.GradientMonitor` watches (``select=``).

Those that require grad when the monitor is made, in ``named_parameters`` order, which
the monitor (``monitor/monitor.py``) keeps: a history's columns, a step's norms and
``clip=``'s limits (``thresholds.clip_limits``, from every path of each) follow it.
"""

from __future__ import annotations

from torch import nn

from hookscope.core.model.selectors import Selector, compile_selector
from hookscope.errors import SpecError

__all__ = ["watched_params"]


def watched_params(
    model: nn.Module, select: Selector | None,
) -> tuple[list[str], list[nn.Parameter], list[list[str]]]:
    """The watched parameters: their first paths, the parameters, and every path of each.

    Raises:
        SpecError: no parameter requires grad (or none matches ``select``).
    """
    matches = compile_selector(select) if select is not None else None
    # a tied parameter is watched once, by its first path, and selected or clipped
    # by any of its paths (``lm_head.weight`` of a model that ties it to the input
    # embedding)
    paths: dict[int, list[str]] = {}
    named = []
    for n, p in model.named_parameters(remove_duplicate=False):
        if p.requires_grad:
            if id(p) not in paths:
                paths[id(p)] = []
                named.append((n, p))
            paths[id(p)].append(n)
    named = [(n, p) for n, p in named
             if matches is None or any(map(matches, paths[id(p)]))]
    if not named:
        raise SpecError("GradientMonitor found no parameter that requires grad to watch"
                        + (f" matching select={select!r}" if select is not None else ""))
    return [n for n, _ in named], [p for _, p in named], [paths[id(p)] for _, p in named]
