"""What :func:`hookscope.compare` returns: plain records, one row per matched call.

:class:`CallError` holds a call's measures (``numerics.py``) and the error it
introduced (``replay.py``); :class:`CompareResult` the rows, the first call that
introduced an error above the tolerance, the calls left unmatched and the memory the
compare used. The table they print as is ``table.py``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hookscope.compare.numerics import TensorError
from hookscope.core.records.value_json import float_out
from hookscope.errors import MissingDependencyError

if TYPE_CHECKING:
    from hookscope.compare.replay import Introduced
    from hookscope.core.records.trace import Call, Trace

#: The JSON document's version: bump when a key changes meaning.
COMPARE_SCHEMA_VERSION = 1

#: The columns of :meth:`CompareResult.to_dict`'s rows and of the DataFrame.
ROW_KEYS = ("path", "call_index", "path_b", "class", "max_abs", "max_rel", "cosine",
            "sqnr_db", "introduced_max_abs", "origin")


@dataclass(frozen=True)
class CallError:
    """How far side B's output of one matched call is from side A's.

    Attributes:
        path: side A's module path (``""``: the root).
        call_index: which call of that module (0 for the first).
        path_b: side B's module path of the matched call.
        module_class: side A's module class name.
        depth: the call's depth in side A's call tree.
        index: the call's index in side A's trace.
        max_abs, max_rel, cosine, sqnr_db: the worst over the output tensors
            (``nan``: no tensor could be compared).
        outputs: each output tensor's measures.
        introduced_max_abs: the ``max_abs`` error of side B's module run on side A's
            inputs of the call (``None``: not measured, ``introduced_note`` says why).
        introduced_note: why the introduced error was not measured.
    """

    path: str
    call_index: int
    path_b: str
    module_class: str
    depth: int
    index: int
    max_abs: float
    max_rel: float
    cosine: float
    sqnr_db: float
    outputs: tuple[TensorError, ...] = ()
    introduced_max_abs: float | None = None
    introduced_note: str = ""

    @property
    def name(self) -> str:
        """``path`` with the call index when the module ran more than once (``fc#1``)."""
        return f"{self.path}#{self.call_index}" if self.call_index else self.path

    def origin(self, tolerance: float) -> str:
        """``"introduced"`` (the call's own error is above ``tolerance``),
        ``"propagated"`` (its error is, but came in with its inputs) or ``""``."""
        if self.introduced_max_abs is not None and self.introduced_max_abs > tolerance:
            return "introduced"
        if self.max_abs > tolerance or math.isnan(self.max_abs):
            return "propagated" if self.introduced_max_abs is not None else ""
        return ""

    def with_introduced(self, introduced: Introduced) -> CallError:
        """This row with the error the call introduced (``replay.py``)."""
        return dataclasses.replace(self, introduced_max_abs=introduced.max_abs,
                                   introduced_note=introduced.note)


@dataclass(frozen=True)
class MemoryUse:
    """The memory a compare used beyond the two forwards.

    Attributes:
        stored_bytes: side A's call inputs and outputs, as kept (in memory, or on
            disk with ``spill=``); side B's outputs are measured as they come and kept
            nowhere.
        held_bytes: the most of them held in memory at once (all of them, or with
            ``spill=`` at most one shard's worth).
        copy_bytes: side B's copy of the model (``b_dtype``, ``b_device``,
            ``b_weights``; 0 when none was made).
        spilled: the values went to disk.
    """

    stored_bytes: int
    held_bytes: int
    copy_bytes: int
    spilled: bool

    @property
    def extra_peak_bytes(self) -> int:
        """``held_bytes + copy_bytes``: the peak the compare adds to the forwards'."""
        return self.held_bytes + self.copy_bytes


@dataclass(frozen=True)
class CompareResult:
    """Where two runs part, call by call (see :func:`hookscope.compare`).

    Attributes:
        rows: one per matched call, in side A's call order.
        first: the row whose introduced error is above ``tolerance`` whose call ended
            first, in execution order (a module's call ends after the calls inside it;
            ``None``: no call introduced one).
        tolerance: the introduced ``max_abs`` error that counts.
        only_a: side A's calls that matched none of side B's.
        only_b: side B's calls that matched none of side A's.
        memory: what the compare stored and held.
        trace_a: side A's trace (the calls' tree).
        trace_b: side B's trace.
        settings: how side B differs, in words (``{"autocast": "bfloat16"}``).
    """

    rows: list[CallError]
    first: CallError | None
    tolerance: float
    only_a: list[Call]
    only_b: list[Call]
    memory: MemoryUse
    trace_a: Trace
    trace_b: Trace
    settings: dict[str, str] = field(default_factory=dict)

    def row(self, path: str, call_index: int = 0) -> CallError:
        """The row of side A's call ``path`` (its ``call_index``-th call).

        Raises:
            KeyError: no matched call there.
        """
        for r in self.rows:
            if r.path == path and r.call_index == call_index:
                return r
        raise KeyError(f"no matched call {path!r} #{call_index}; matched paths look like "
                       f"{[r.path for r in self.rows[:4]]!r}")

    def answer(self) -> str:
        """The one-line answer: where side B starts to differ."""
        from hookscope.compare.table import answer_line

        return answer_line(self)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: ``rows`` (one per matched call, keys :data:`ROW_KEYS`),
        ``first``, ``tolerance``, ``only_a``/``only_b`` (``{"path", "call_index"}``),
        ``memory`` and ``settings``."""
        return {
            "schema_version": COMPARE_SCHEMA_VERSION,
            "answer": self.answer(),
            "first": None if self.first is None else {
                "path": self.first.path, "call_index": self.first.call_index},
            "tolerance": self.tolerance,
            "rows": [self._row(r) for r in self.rows],
            "only_a": [{"path": c.path, "call_index": c.call_index} for c in self.only_a],
            "only_b": [{"path": c.path, "call_index": c.call_index} for c in self.only_b],
            "memory": {**dataclasses.asdict(self.memory),
                       "extra_peak_bytes": self.memory.extra_peak_bytes},
            "settings": dict(self.settings),
        }

    def _row(self, r: CallError) -> dict[str, Any]:
        return {"path": r.path, "call_index": r.call_index, "path_b": r.path_b,
                "class": r.module_class, "max_abs": r.max_abs, "max_rel": r.max_rel,
                "cosine": r.cosine, "sqnr_db": r.sqnr_db,
                "introduced_max_abs": r.introduced_max_abs,
                "origin": r.origin(self.tolerance)}

    def to_json(self, *, indent: int | None = 2) -> str:
        """:meth:`to_dict` as standard JSON (keys sorted, ``inf``/``nan`` as
        ``{"$float": "inf"}``, as a trace's document writes them)."""
        return json.dumps(_plain(self.to_dict()), indent=indent, sort_keys=True,
                          allow_nan=False)

    def to_csv(self) -> str:
        """One CSV row per matched call, columns :data:`ROW_KEYS` (``inf`` as ``inf``)."""
        import csv
        import io

        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(ROW_KEYS)
        for r in self.rows:
            writer.writerow(["" if v is None else v for v in self._row(r).values()])
        return buf.getvalue()

    def to_dataframe(self) -> Any:
        """A pandas ``DataFrame``, one row per matched call (needs ``hookscope[pandas]``).

        Raises:
            MissingDependencyError: pandas is not installed (an ``ImportError``).
        """
        try:
            import pandas as pd
        except ImportError as e:
            raise MissingDependencyError("pandas", "pandas", needed_for="to_dataframe") from e
        return pd.DataFrame.from_records([self._row(r) for r in self.rows], columns=ROW_KEYS)

    def __str__(self) -> str:
        from hookscope.compare.table import compare_table
        from hookscope.render.table import terminal_width

        return f"{self.answer()}\n{compare_table(self).to_text(width=terminal_width())}"

    def _repr_html_(self) -> str:
        from html import escape

        from hookscope.compare.table import compare_table

        return f"<p>{escape(self.answer())}</p>{compare_table(self)._repr_html_()}"

    def __repr__(self) -> str:
        where = "no call above the tolerance" if self.first is None else \
            f"first introduced at {self.first.name!r}"
        return (f"<hookscope.CompareResult: {len(self.rows)} matched calls, {where}, "
                f"{len(self.only_a)} + {len(self.only_b)} unmatched>")


def _plain(value: Any) -> Any:
    if isinstance(value, float):
        return float_out(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
