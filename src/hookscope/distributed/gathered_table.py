"""How a :class:`~hookscope.distributed.gathered.GatheredTrace` prints: the straggler
first, in one line, then a table of every call with its time on each rank, the slowest
rank and the slowest time over the median; then, when gradients were recorded, each
parameter's gradient norm on each rank. Tables are ``render/``'s grids.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hookscope.render.grid import Grid, GridColumn
from hookscope.render.table import GridTable, tree_column
from hookscope.render.units import format_stat, format_time

if TYPE_CHECKING:
    from hookscope.distributed.gathered import CallAcrossRanks, GatheredTrace

__all__ = ["gathered_table", "gathered_text", "grads_table", "straggler_line"]


def straggler_line(gathered: GatheredTrace, *, ascii: bool = True) -> str:
    """The one-line answer: which call kept the other ranks waiting longest."""
    found = gathered.stragglers()
    if not found or not found[0].excess_ns:
        return f"{gathered.world_size} ranks; no timed call ran longer on one rank"
    c = found[0]
    rank = c.straggler_rank
    assert rank is not None
    own = c.self_times_ns[rank]
    return (f"straggler: {c.path or '<root>'} ({c.module_class}) on rank {rank}: "
            f"{format_time(own, ascii=ascii)} of its own time, "
            f"{format_time(c.excess_ns, ascii=ascii)} above the median rank")


def _label(c: CallAcrossRanks) -> str:
    depth = c.path.count(".") + 1 if c.path else 0
    name = c.path or "<root>"
    again = f"#{c.call_index}" if c.call_index else ""
    return f"{'  ' * depth}{name}{again} ({c.module_class})"


def gathered_table(gathered: GatheredTrace, *, ascii: bool = False) -> GridTable:
    """Every call with its time on each rank, the slowest rank and max/median."""
    def build(ascii: bool) -> Grid:
        calls = gathered.calls
        columns = [tree_column([_label(c) for c in calls], footer="")]
        for rank in range(gathered.world_size):
            columns.append(GridColumn(
                f"rank{rank}", f"Rank {rank} time",
                [format_time(c.times_ns[rank], ascii=ascii) for c in calls], priority=60))
        columns.append(GridColumn(
            "slowest", "Slowest rank",
            ["" if c.slowest_rank is None else str(c.slowest_rank) for c in calls],
            priority=80))
        columns.append(GridColumn(
            "ratio", "Max/median",
            ["" if c.ratio is None else f"{c.ratio:.2f}x" for c in calls], priority=90))
        return Grid(columns, caption=[f"{gathered.world_size} ranks",
                                      f"{len(calls)} calls"])
    return GridTable(build, ascii=ascii)


def grads_table(gathered: GatheredTrace, *, ascii: bool = False) -> GridTable | None:
    """Each parameter's gradient norm on each rank (``None``: no gradients recorded)."""
    norms = gathered.param_grads
    if not norms:
        return None

    def build(ascii: bool) -> Grid:
        paths = list(norms)
        columns = [tree_column(paths, footer="", header="Parameter")]
        for rank in range(gathered.world_size):
            columns.append(GridColumn(
                f"rank{rank}", f"Rank {rank} |grad|",
                [format_stat(norms[p][rank]) for p in paths], priority=60))
        return Grid(columns)
    return GridTable(build, ascii=ascii)


def gathered_text(gathered: GatheredTrace, *, width: int) -> str:
    """The answer line, the calls table and the gradient table, as plain text."""
    parts = [straggler_line(gathered), gathered_table(gathered).to_text(width=width)]
    grads = grads_table(gathered)
    if grads is not None:
        parts.append(grads.to_text(width=width))
    return "\n\n".join(parts)
