"""What :func:`~hookscope.check_divergence` found: plain records, and how they print."""

from __future__ import annotations

import html
from dataclasses import dataclass, field

from hookscope.render.grid import Grid, GridColumn
from hookscope.render.table import GridTable, terminal_width
from hookscope.render.units import format_stat

__all__ = ["Divergence", "DivergenceReport"]


@dataclass(frozen=True, slots=True)
class Divergence:
    """A parameter or buffer whose copies differ across ranks.

    Attributes:
        path: its path (``fc.weight``).
        kind: ``"parameter"`` or ``"buffer"``.
        reference_rank: the lowest rank holding the copy most ranks hold.
        ranks: the ranks whose copy differs from the reference rank's.
        max_abs_diff: per rank in ``ranks``, its largest absolute difference from the
            reference copy (NaN: the shapes differ).
    """

    path: str
    kind: str
    reference_rank: int
    ranks: tuple[int, ...]
    max_abs_diff: tuple[float, ...]


@dataclass(frozen=True)
class DivergenceReport:
    """The result of :func:`~hookscope.check_divergence`, the same on every rank.

    Attributes:
        world_size: how many ranks compared their copies.
        compared: how many parameters and buffers were compared.
        diverged: each one that differs, in ``named_parameters``, then
            ``named_buffers`` order.
        skipped: sharded parameters (FSDP2): each rank holds another shard.
    """

    world_size: int
    compared: int
    diverged: list[Divergence] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether every compared tensor is the same on every rank."""
        return not self.diverged

    def answer(self) -> str:
        """The one-line answer."""
        if self.ok:
            return (f"all {self.compared} parameters and buffers are the same on the "
                    f"{self.world_size} ranks")
        first = self.diverged[0]
        ranks = ", ".join(map(str, first.ranks))
        return (f"{len(self.diverged)} of {self.compared} parameters and buffers differ "
                f"across ranks; first: {first.path} on rank {ranks} (reference rank "
                f"{first.reference_rank}, max |diff| {format_stat(max(first.max_abs_diff))})")

    def table(self) -> GridTable:
        """The differing tensors as a table."""
        def build(ascii: bool) -> Grid:
            rows = self.diverged
            return Grid([
                GridColumn("path", "Tensor", [d.path for d in rows], numeric=False,
                           priority=1000),
                GridColumn("kind", "Kind", [d.kind for d in rows], numeric=False),
                GridColumn("ranks", "Differs on rank", [", ".join(map(str, d.ranks))
                                                        for d in rows], numeric=False),
                GridColumn("reference", "Reference rank",
                           [str(d.reference_rank) for d in rows]),
                GridColumn("diff", "Max |diff|", [
                    ", ".join(format_stat(x) for x in d.max_abs_diff) for d in rows]),
            ])
        return GridTable(build)

    def _repr_html_(self) -> str:
        """The answer and the table, for Jupyter."""
        answer = f"<p>{html.escape(self.answer())}</p>"
        return answer + (self.table()._repr_html_() if self.diverged else "")

    def __str__(self) -> str:
        lines = [self.answer()]
        if self.diverged:
            lines += ["", self.table().to_text(width=terminal_width())]
        if self.skipped:
            lines += ["", f"not compared (sharded): {', '.join(self.skipped)}"]
        return "\n".join(lines)
