"""Fold repeated traces of one model into one trace.

Where it sits: an API-layer module beside :mod:`hookscope.api.tracing`. It takes traces that
:func:`hookscope.trace` returned (plain records from :mod:`hookscope.core.records.trace`) and
combines them; it runs no model and renders nothing. The command line's ``--repeat``
and the demo call it, so one slow run (a cold cache, another process) does not decide
the times they report.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from hookscope.core.records.facts import timing_facts

if TYPE_CHECKING:
    from hookscope.core.records.trace import Trace

__all__ = ["median_times"]


def median_times(traces: Sequence[Trace]) -> Trace:
    """The first trace, with each call's times replaced by the median over all traces.

    The times are every per-call fact a probe declares ``timing``
    (:class:`~hookscope.core.records.facts.Fact`): the forward times ``time_ns`` and
    ``self_time_ns``, the backward times ``backward_ns`` and ``backward_self_ns``, and
    your own probe's. Calls are matched by module path and call index.
    ``meta["repeat"]`` records how many traces were combined. The first trace is updated
    in place and returned; a single trace is returned unchanged.

    Args:
        traces: one or more traces of the same model on the same inputs.

    Returns:
        The first trace, with median times per call.

    Example:
        >>> runs = [hookscope.trace(model, x) for _ in range(5)]
        >>> trace = hookscope.median_times(runs)
    """
    first = traces[0]
    if len(traces) == 1:
        return first
    names = timing_facts()
    samples: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for trace in traces:
        for call in trace.calls:
            samples.setdefault((call.path, call.call_index), []).append(call.facts)
    for call in first.calls:
        runs = samples[(call.path, call.call_index)]
        for name in names:
            if name in call.facts:
                call.facts[name] = _median([facts.get(name) for facts in runs])
    first.meta["repeat"] = len(traces)
    return first


def _median(values: Sequence[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return int(statistics.median(known)) if known else None
