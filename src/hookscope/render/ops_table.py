"""Op-level views of a trace recorded with ``ops=True``.

:func:`ops_table` groups the recorded aten ops by name (``hookscope.flops.registry.by_op``) and
shows, heaviest first, how often each ran, in which phase, its forward and backward
FLOPs, its share of all FLOPs and how its FLOPs were counted. :func:`calls_flops_table`
shows the module calls with their own (self) and subtree FLOPs. ``render_*`` return the
same tables as plain text at a fixed width.

Numbers are exact counts; ``+`` marks a total that includes an op without a FLOP
formula (a lower bound), listed in the caption.
"""

from __future__ import annotations

from hookscope.core.records.trace import Trace
from hookscope.core.records.values import FlopCount, FlopRule
from hookscope.errors import RenderError, SpecError
from hookscope.flops.registry import OpTotals, by_op, flops_text
from hookscope.render.fold import Folded, tree_rows
from hookscope.render.grid import Grid, GridColumn
from hookscope.render.labels import tree_text
from hookscope.render.names import shorten_plain
from hookscope.render.table import DEFAULT_WIDTH, GridTable, tree_column
from hookscope.render.units import format_count

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


#: The op names' narrowest width, once no other column is left to leave out (a name is
#: cut last, ``render/grid.py``): 18 keeps both ends of ``aten._unsafe_view.default``
#: (``aten._u~w.default``).
_OP_MIN = 18


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
    listed = ", ".join(f"{name} (x{n:,})" for name, n in trace.uncounted_ops.items())
    return f"+ lower bound: no FLOP formula for {listed}"


def _caption(trace: Trace, total: FlopCount, shown: int, kinds: int) -> list[str]:
    parts = [
        f"{len(trace.ops):,} ops of {kinds:,} types",
        f"FLOPs forward {format_count(total.forward)}, backward {format_count(total.backward)}",
        "MACs = FLOPs / 2",
    ]
    if shown < kinds:
        parts.insert(1, f"showing the {shown:,} heaviest")
    return parts


def ops_table(trace: Trace, *, top: int | None = None, ascii: bool = False) -> GridTable:
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

    def build(ascii: bool) -> Grid:
        ts = [t for _, t in rows]
        names = [n for n, _ in rows]
        cols = [
            # a name is cut last (render/grid.py): shortened only with no column to drop
            GridColumn("op", "Op", names, numeric=False, priority=1000,
                       shorten=shorten_plain, min_width=min(max(map(len, names), default=0),
                                                            _OP_MIN)),
            GridColumn("count", "Count", [format_count(t.count) for t in ts], priority=60),
            GridColumn("phase", "Phase", [_phase(t) for t in ts], numeric=False, priority=30),
            GridColumn("flops_fwd", "FLOPs fwd",
                       [_flops_cell(t.forward, t, ran=t.count_forward) for t in ts],
                       priority=90),
            GridColumn("flops_bwd", "FLOPs bwd",
                       [_flops_cell(t.backward, t, ran=t.count_backward) for t in ts],
                       priority=80),
            GridColumn("share", "Share", [_share(t.total, total.total) for t in ts],
                       priority=70),
            GridColumn("rule", "FLOPs from", [_RULE_TEXT[t.rule] for t in ts],
                       numeric=False, priority=20),
        ]
        legend = uncounted_legend(trace)
        return Grid(cols, _caption(trace, total, len(rows), len(groups)),
                    [legend] if legend else [], title="Ops")

    return GridTable(build, ascii=ascii)


def calls_flops_table(
    trace: Trace, *, depth: int | None = None, ascii: bool = False, fold: bool = False
) -> GridTable:
    """Module calls with their self and subtree FLOPs, forward and backward.

    Args:
        trace: a trace recorded with ``ops=True``.
        depth: show calls down to this depth (``None``: all).
        ascii: draw with ASCII characters.
        fold: fold runs of identical blocks (``render/fold.py``).

    Raises:
        RenderError: the trace has no op records.
    """
    total = _require_ops(trace)
    backward = total.backward > 0
    counts = [0] * len(trace.calls)
    for op in trace.ops:
        if op.call is not None:
            counts[op.call] += 1
    columns = [("Self fwd", False, False), ("FLOPs fwd", True, False)]
    if backward:
        columns += [("Self bwd", False, True), ("FLOPs bwd", True, True)]

    def build(ascii: bool) -> Grid:
        rows = [r for r in tree_rows(trace, depth=depth, fold=fold)
                if not isinstance(r, Folded)]
        cols = [
            tree_column([tree_text(trace, c, ascii=ascii) for c in rows]),
            GridColumn("ops", "Ops", [format_count(counts[c.index]) for c in rows],
                       footer=format_count(len(trace.ops)), priority=40),
        ]
        for i, (name, inclusive, bwd) in enumerate(columns):
            cells = [flops_text(c.flops if inclusive else c.self_flops, bwd)
                     for c in rows]
            cols.append(GridColumn(
                name.lower().replace(" ", "_"), name, cells,
                footer=flops_text(total, bwd) if inclusive else "",
                priority=(90 if inclusive else 60) - 5 * i))
        cols.append(GridColumn(
            "share", "Share",
            [_share(c.flops.total, total.total) if c.flops is not None else "" for c in rows],
            footer=_share(total.total, total.total), priority=50))
        legend = uncounted_legend(trace)
        return Grid(cols, [], [legend] if legend else [], title="FLOPs per call")

    return GridTable(build, ascii=ascii)


def render_ops(
    trace: Trace, *, top: int | None = None, width: int = DEFAULT_WIDTH, ascii: bool = True
) -> str:
    """:func:`ops_table` as text at a fixed width."""
    return ops_table(trace, top=top, ascii=ascii).to_text(width=width)


def render_call_flops(
    trace: Trace, *, depth: int | None = None, width: int = DEFAULT_WIDTH, ascii: bool = True
) -> str:
    """:func:`calls_flops_table` as text at a fixed width."""
    return calls_flops_table(trace, depth=depth, ascii=ascii).to_text(width=width)


if __name__ == "__main__":  # pragma: no cover
    import torch

    import hookscope

    demo = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    recorded = hookscope.trace(demo, torch.randn(4, 8), backward=True, ops=True)
    print(render_ops(recorded, top=8))
    print(render_call_flops(recorded))
