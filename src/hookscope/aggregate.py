"""Fold repeated traces of one model into one trace.

Where it sits: an API-layer module beside :mod:`hookscope.api`. It takes traces that
:func:`hookscope.trace` returned (plain records from :mod:`hookscope.core.records`) and
combines them; it runs no model and renders nothing. The command line's ``--repeat``
and the demo call it, so one slow run (a cold cache, another process) does not decide
the times they report.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hookscope.core.records import Call, Trace

__all__ = ["median_times"]


def median_times(traces: Sequence[Trace]) -> Trace:
    """The first trace, with each call's times replaced by the median over all traces.

    Calls are matched by module path and call index. ``meta["repeat"]`` records how
    many traces were combined. The first trace is updated in place and returned; a
    single trace is returned unchanged.

    Args:
        traces: one or more traces of the same model on the same inputs.

    Returns:
        The first trace, with median ``time_ns`` and ``self_time_ns`` per call.

    Example:
        >>> runs = [hookscope.trace(model, x) for _ in range(5)]
        >>> trace = hookscope.median_times(runs)
    """
    first = traces[0]
    if len(traces) == 1:
        return first
    times: dict[tuple[str, int], list[tuple[int | None, int | None]]] = {}
    for trace in traces:
        for call in trace.calls:
            key = (call.path, call.call_index)
            times.setdefault(key, []).append((call.time_ns, call.self_time_ns))
    for call in first.calls:
        samples = times[(call.path, call.call_index)]
        _set_times(call, _median([t for t, _ in samples]), _median([s for _, s in samples]))
    first.meta["repeat"] = len(traces)
    return first


def _set_times(call: Call, time_ns: int | None, self_time_ns: int | None) -> None:
    # NB: the engine rewrite moves what probes record from fields of Call into
    # ``call.facts`` (read back as attributes); this writes to whichever this Call has.
    facts = getattr(call, "facts", None)
    if facts is None:
        setattr(call, "time_ns", time_ns)  # noqa: B010 (a field only before the rewrite)
        setattr(call, "self_time_ns", self_time_ns)  # noqa: B010 (same)
        return
    for name, value in (("time_ns", time_ns), ("self_time_ns", self_time_ns)):
        if value is not None or name in facts:
            facts[name] = value


def _median(values: Sequence[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return int(statistics.median(known)) if known else None
