"""``hookscope.diff``: how two finished traces differ, call by call.

:func:`diff` matches the calls of the two traces (``compare/matching.py``), compares
every numeric fact the probes declared and the structure of each pair
(``compare/diff_calls.py``), and ranks the rows by their largest relative change, the
structural ones (a module added, removed, replaced, or with other parameters) first.
The :class:`TraceDiff` it returns answers in one line (:attr:`TraceDiff.answer`),
prints as a table (``compare/diff_table.py``) and exports like a trace
(``compare/diff_export.py``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import hookscope.probes
import hookscope.render  # noqa: F401  (how the traces it reads print and export)
from hookscope.compare.diff_calls import STRUCTURAL, CallDiff, diff_call, one_side
from hookscope.compare.diff_facts import FactSpec, fact_specs
from hookscope.compare.matching import CallMatching, match_calls
from hookscope.core.records.trace import Trace
from hookscope.errors import HookscopeError, SpecError

__all__ = ["TraceDiff", "diff", "load_trace"]


class TraceDiff:
    """How trace B differs from trace A (made by :func:`diff`).

    Attributes:
        a, b: the two traces.
        matching: which call of A is which call of B, and the calls of one side only.
        facts: the facts compared, in the table's column order.
        rows: one :class:`CallDiff` per call of either side, most changed first.
        sort: the fact the rows are ranked by (``None``: each row's largest change).
    """

    def __init__(self, a: Trace, b: Trace, matching: CallMatching, facts: list[FactSpec],
                 rows: list[CallDiff], sort: str | None) -> None:
        self.a, self.b, self.matching, self.facts = a, b, matching, facts
        self.rows, self.sort = rows, sort

    @property
    def changed(self) -> list[CallDiff]:
        """The rows with any change (all but the ``same`` ones), in rank order."""
        return [r for r in self.rows if r.status != "same"]

    @property
    def answer(self) -> str:
        """The diff in one line: the call that changed most, and what changed in the
        structure."""
        from hookscope.compare.diff_table import answer

        return answer(self)

    def table(self, *, top: int | None = 20, ascii: bool = False) -> Any:
        """The rows as a table (a ``GridTable``: prints at any width, shows in Jupyter).

        Args:
            top: the most rows shown (``None``: every row).
            ascii: plain ASCII characters only.
        """
        from hookscope.compare.diff_table import diff_table

        return diff_table(self, top=top, ascii=ascii)

    def to_dict(self) -> dict[str, Any]:
        """The diff as plain data: the answer, both sides, and one dict per row."""
        from hookscope.compare.diff_export import diff_to_dict

        return diff_to_dict(self)

    def to_json(self, *, indent: int | None = 2) -> str:
        """:meth:`to_dict` as a JSON document."""
        from hookscope.compare.diff_export import diff_to_json

        return diff_to_json(self, indent=indent)

    def to_csv(self) -> str:
        """One CSV line per row: the structure, then per fact ``NAME_a``, ``NAME_b``,
        ``NAME_delta``, ``NAME_rel``."""
        from hookscope.compare.diff_export import diff_to_csv

        return diff_to_csv(self)

    def to_dataframe(self) -> Any:
        """The CSV's rows as a pandas ``DataFrame`` (needs ``hookscope[pandas]``)."""
        from hookscope.compare.diff_export import diff_to_dataframe

        return diff_to_dataframe(self)

    def __str__(self) -> str:
        return str(self.table())

    def _repr_html_(self) -> str:
        return str(self.table()._repr_html_())

    def __repr__(self) -> str:
        return (f"<hookscope.TraceDiff of {self.a.model.class_name} and "
                f"{self.b.model.class_name}: {len(self.matching.pairs)} matched calls, "
                f"{len(self.changed)} changed>")


def load_trace(source: Trace | str | os.PathLike[str], *, side: str) -> Trace:
    """``source`` itself, or the trace its JSON file holds.

    Raises:
        SpecError: not a trace, a file that cannot be read, or not a trace document
            this hookscope reads (the message names the file and the side).
    """
    if isinstance(source, Trace):
        return source
    if not isinstance(source, (str, os.PathLike)):
        raise SpecError(f"diff compares two hookscope.Trace objects (or trace JSON files); "
                        f"side {side} is a {type(source).__name__}")
    path = Path(source)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise SpecError(f"cannot read trace file {str(path)!r} (side {side}): {reason}; "
                        "give a file written by Trace.to_json() or "
                        "hookscope trace --format json") from e
    try:
        return Trace.from_json(text)
    except HookscopeError as e:
        raise SpecError(f"{str(path)!r} (side {side}) is not a trace this hookscope reads: "
                        f"{e}") from e


def _check_sort(sort: str | None, facts: Sequence[FactSpec]) -> None:
    names = [f.name for f in facts if f.numeric]
    if sort is not None and sort not in names:
        raise SpecError(f"sort={sort!r} is not a numeric fact of these traces; pick one "
                        f"of: {', '.join(names) or 'none (no numeric facts)'}")


def diff(
    trace_a: Trace | str | os.PathLike[str],
    trace_b: Trace | str | os.PathLike[str],
    *,
    match: Mapping[str, str] | None = None,
    sort: str | None = None,
) -> TraceDiff:
    """How trace B differs from trace A, call by call.

    Calls are paired by module path and call index (wrapper prefixes such as the
    ``module.`` of DDP removed where that pairs them; ``match`` for paths that differ
    otherwise). Every numeric fact the probes declared is compared (time, FLOPs,
    bytes, statistics, gradient norms, a probe of your own), and the structure: the
    module's class, parameter count and shapes, and the calls of one side only.

    Args:
        trace_a: side A: a :class:`~hookscope.Trace`, or a JSON file of one.
        trace_b: side B.
        match: side A's module path -> side B's (a path maps its subtree).
        sort: rank the rows by this fact's relative change (a name of
            ``result.facts``, e.g. ``"time_ns"``); default: each row's largest
            relative change, amounts (time, counts, bytes) before statistics.

    Returns:
        The diff: ``.answer`` (one line), ``.rows``, a table as ``str()``, and
        ``to_dict``/``to_json``/``to_csv``/``to_dataframe``.

    Raises:
        SpecError: a side is not a trace (or a readable trace file), ``match`` names a
            path no call has, or ``sort`` is not a compared fact.

    Example:
        >>> d = hookscope.diff(hookscope.trace(model, x1), hookscope.trace(model, x8))
        >>> print(d.answer)
    """
    a, b = load_trace(trace_a, side="A"), load_trace(trace_b, side="B")
    matching = match_calls(a, b, match=match)
    facts = fact_specs(a, b)
    _check_sort(sort, facts)
    rows = [diff_call(facts, ca, a, cb, b) for ca, cb in matching.pairs]
    rows += [one_side(facts, c, a, side="a") for c in matching.only_a]
    rows += [one_side(facts, c, b, side="b") for c in matching.only_b]
    # calls of one side and replaced modules, then other parameter counts, then numbers;
    # of equal changes the deeper call first (where a change starts, not its callers)
    rows.sort(key=lambda r: (r.status in STRUCTURAL, r.structural, r.score(sort), r.depth),
              reverse=True)
    return TraceDiff(a, b, matching, facts, rows, sort)
