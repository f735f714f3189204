"""Op-level views of a trace recorded with ``ops=True``.

:func:`ops_table` groups the recorded aten ops by name (``hookscope.flops.by_op``) and
shows, heaviest first, how often each ran, in which phase, its forward and backward
FLOPs, its share of all FLOPs and how its FLOPs were counted. :func:`calls_flops_table`
shows the module calls with their own (self) and subtree FLOPs. ``render_*`` return the
same tables as plain text at a fixed width.

Numbers are exact counts; ``+`` marks a total that includes an op without a FLOP
formula (a lower bound), listed in the caption.
"""

from __future__ import annotations

from rich.table import Table

from hookscope.core.records import FlopCount, FlopRule, Trace
from hookscope.errors import RenderError, SpecError
from hookscope.flops import OpTotals, by_op
from hookscope.render.table import (
    DEFAULT_WIDTH,
    format_count,
    separator,
    table_box,
    to_text,
    tree_label,
    visible_calls,
)

_RULE_TEXT = {
    FlopRule.FORMULA: "formula",
    FlopRule.FREE: "free",
    FlopRule.CONVENTION: "convention",
    FlopRule.UNCOUNTED: "uncounted",
}


def _require_ops(trace: Trace) -> FlopCount:
    totals: FlopCount | None = trace.facts.get("totals_flops")
    if totals is None:
        raise RenderError(
            "this trace has no op records; record it with ops=True "
            "(hookscope.trace(model, x, ops=True) or `hookscope trace --ops`)"
        )
    return totals


def _check_top(top: int | None) -> None:
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
        raise SpecError(f"top must be a positive integer or None, got {top!r}")


def _phase(t: OpTotals) -> str:
    if t.count_forward and t.count_backward:
        return "fwd+bwd"
    return "bwd" if t.count_backward else "fwd"


def _flops_cell(value: int, t: OpTotals, *, ran: int) -> str:
    if not ran:
        return ""
    if t.uncounted == t.count:
        return "?"
    return format_count(value) + ("+" if t.uncounted else "")


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else ""


def uncounted_legend(trace: Trace) -> str | None:
    """``+ lower bound: no FLOP formula for aten.foo.default (x3), ...``, or ``None``."""
    if not trace.uncounted_ops:
        return None
    listed = ", ".join(f"{name} (x{n})" for name, n in trace.uncounted_ops.items())
    return f"+ lower bound: no FLOP formula for {listed}"


def _caption(trace: Trace, total: FlopCount, shown: int, kinds: int, ascii: bool) -> str:
    parts = [
        f"{len(trace.ops):,} ops of {kinds} types",
        f"FLOPs forward {format_count(total.forward)}, backward {format_count(total.backward)}",
        "MACs = FLOPs / 2",
    ]
    if shown < kinds:
        parts.insert(1, f"showing the {shown} heaviest")
    legend = uncounted_legend(trace)
    return separator(ascii).join(parts) + (f"\n{legend}" if legend else "")


def ops_table(trace: Trace, *, top: int | None = None, ascii: bool = False) -> Table:
    """Per-op-type table, heaviest first.

    Args:
        trace: a trace recorded with ``ops=True``.
        top: show only the ``top`` heaviest op types (``None``: all).
        ascii: draw with ASCII characters (pipes, files, tests).

    Raises:
        RenderError: the trace has no op records.
        SpecError: ``top`` is not a positive integer.
    """
    _check_top(top)
    total = _require_ops(trace)
    groups = by_op(trace)
    rows = list(groups.items())[:top]
    table = Table(box=table_box(ascii), title="Ops")
    # numbers are never cut: on a narrow console the op names wrap instead
    table.add_column("Op", overflow="fold")
    for name in ("Count", "Phase", "FLOPs fwd", "FLOPs bwd", "Share"):
        table.add_column(name, justify="left" if name == "Phase" else "right", no_wrap=True)
    table.add_column("FLOPs from", no_wrap=True)
    for name, t in rows:
        table.add_row(
            name, format_count(t.count), _phase(t),
            _flops_cell(t.forward, t, ran=t.count_forward),
            _flops_cell(t.backward, t, ran=t.count_backward),
            _share(t.total, total.total), _RULE_TEXT[t.rule],
        )
    table.caption = _caption(trace, total, len(rows), len(groups), ascii)
    return table


def _call_flops_cell(f: FlopCount | None, backward: bool) -> str:
    if f is None:
        return ""
    return format_count(f.backward if backward else f.forward) + ("+" if f.partial else "")


def calls_flops_table(trace: Trace, *, depth: int | None = None, ascii: bool = False) -> Table:
    """Module calls with their self and subtree FLOPs, forward and backward.

    Args:
        trace: a trace recorded with ``ops=True``.
        depth: show calls down to this depth (``None``: all).
        ascii: draw with ASCII characters.

    Raises:
        RenderError: the trace has no op records.
    """
    total = _require_ops(trace)
    backward = total.backward > 0
    table = Table(box=table_box(ascii), show_footer=True, title="FLOPs per call")
    table.add_column("Layer (type)", footer="Total")
    table.add_column("Ops", justify="right", footer=format_count(len(trace.ops)))
    columns = [("Self fwd", False, False), ("FLOPs fwd", True, False)]
    if backward:
        columns += [("Self bwd", False, True), ("FLOPs bwd", True, True)]
    for name, inclusive, bwd in columns:
        table.add_column(
            name, justify="right", footer=_call_flops_cell(total, bwd) if inclusive else ""
        )
    table.add_column("Share", justify="right", footer=_share(total.total, total.total))
    counts = [0] * len(trace.calls)
    for op in trace.ops:
        if op.call is not None:
            counts[op.call] += 1
    for call in visible_calls(trace, depth):
        cells = [
            _call_flops_cell(call.flops if inclusive else call.self_flops, bwd)
            for _, inclusive, bwd in columns
        ]
        share = _share(call.flops.total, total.total) if call.flops is not None else ""
        label = tree_label(trace, call, ascii=ascii)
        table.add_row(label, format_count(counts[call.index]), *cells, share)
    table.caption = uncounted_legend(trace)
    return table


def render_ops(
    trace: Trace, *, top: int | None = None, width: int = DEFAULT_WIDTH, ascii: bool = True
) -> str:
    """:func:`ops_table` as text at a fixed width."""
    return to_text(ops_table(trace, top=top, ascii=ascii), width=width)


def render_call_flops(
    trace: Trace, *, depth: int | None = None, width: int = DEFAULT_WIDTH, ascii: bool = True
) -> str:
    """:func:`calls_flops_table` as text at a fixed width."""
    return to_text(calls_flops_table(trace, depth=depth, ascii=ascii), width=width)


if __name__ == "__main__":  # pragma: no cover
    import torch

    import hookscope

    demo = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    recorded = hookscope.trace(demo, torch.randn(4, 8), backward=True, ops=True)
    print(render_ops(recorded, top=8))
    print(render_call_flops(recorded))
