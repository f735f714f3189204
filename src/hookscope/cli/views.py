"""Pick the renderer for a command's result and output format.

Each function maps a result (a :class:`~hookscope.Summary`, a
:class:`~hookscope.Trace`, a :class:`~hookscope.ModelInfo`) and a format name to a
:class:`~hookscope.cli.output.Rendered`. The renderers themselves live in
``hookscope.render``; nothing here formats a number.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.text import Text

from hookscope.cli.output import Rendered

if TYPE_CHECKING:
    from hookscope.core.model.structure import ModelInfo
    from hookscope.core.records.trace import Trace
    from hookscope.render.summary import Summary


SUMMARY_TOP_OPS = 10
"""``summary --ops`` lists this many op types, heaviest first (``trace --ops`` takes --top)."""


@dataclass(frozen=True)
class TraceView:
    """How ``hookscope trace`` shows a trace as a table.

    Attributes:
        columns: the columns to show (``None``: the renderer's default set).
        sort: sort calls by this column, largest first (``None``: call order).
        top: show only this many calls (and ops, with ``ops``).
        depth: show modules down to this depth.
        ops: add the per-op table (FLOPs by aten op).
        fold: repeated blocks as one row (``--no-fold``: every row).

    Without ``depth`` (and without ``sort``), the table shows the deepest levels that
    fit in :data:`~hookscope.render.fold.DEFAULT_MAX_ROWS` rows, and its caption says
    how many deeper rows that hides.
    """

    columns: Sequence[str] | None = None
    sort: str | None = None
    top: int | None = None
    depth: int | None = None
    ops: bool = False
    fold: bool = True


_TABLE_ONLY = {"json": ("columns", "sort", "top", "depth"), "csv": ("sort", "top", "depth")}
"""The ``trace`` options that shape only the table: JSON has every call and field, CSV
every call in call order (``--columns`` picks CSV fields)."""


def unmeasured(
    *, time: bool, stats: bool, memory: bool, ops: bool, device: str | None,
    backward: bool = False, breaks: bool = False,
) -> dict[str, str]:
    """Probe name -> why a ``trace`` run with these options leaves its columns empty
    (``breaks``: ``--break-at``/``--break-on`` stop the run in the debugger)."""
    on_meta = (device or "").strip().partition(":")[0] == "meta"
    off: dict[str, str] = {}
    if on_meta:
        off["time"] = "nothing is timed on --device meta"
        off["stats"] = "tensors on --device meta hold no values"
    if breaks:
        off["time"] = ("--break-at/--break-on pause the run in the debugger, and the pause "
                       "would be timed as the model's")
    if not time:
        off["time"] = "--no-time turns timing off"
    if not stats:
        off["stats"] = "--no-stats turns statistics off"
    if not memory:
        off["memory"] = "--no-memory turns the memory probe off"
    if not ops:
        off["ops"] = "FLOPs are counted only with --ops"
    if not backward:
        off["grads"] = "gradients and backward times are recorded only with --backward"
    return off


def check_trace_view(
    view: TraceView, fmt: str, *, unmeasured: Mapping[str, str] | None = None
) -> None:
    """Reject, before the model runs, table options the format ignores, unknown table
    columns, and columns that this run leaves empty.

    Args:
        view: the table options.
        fmt: the output format.
        unmeasured: probe name -> why its columns stay empty (see :func:`unmeasured`).

    Raises:
        SpecError: ``--sort``, ``--top``, ``--depth`` (or ``--columns``, with JSON) given
            for a format they do not apply to, or a column whose probe does not run.
        RenderError: ``--columns`` or ``--sort`` names a column the table does not have.
    """
    from hookscope.errors import SpecError

    given = [f"--{name}" for name in _TABLE_ONLY.get(fmt, ()) if getattr(view, name) is not None]
    if fmt != "table" and not view.fold:
        given.append("--no-fold")
    if given:
        raise SpecError(
            f"{', '.join(given)} only shape{'s' if len(given) == 1 else ''} the table; "
            f"--format {fmt} lists every call in call order. Drop "
            f"{'it' if len(given) == 1 else 'them'} or use --format table"
        )
    if fmt != "table":
        return
    import hookscope.probes  # noqa: F401  (the built-in probes declare their columns)
    from hookscope.render.trace_table import column

    off = unmeasured or {}
    chosen = [("--columns", n) for n in view.columns or ()]
    for option, name in chosen + ([("--sort", view.sort)] if view.sort else []):
        probe = column(name).probe
        if probe is not None and probe in off:
            raise SpecError(
                f"{option} {name}: column {name!r} would be empty ({off[probe]}); "
                "drop it or change that option"
            )


def check_summary_view(depth: int | None, fmt: str, *, fold: bool = True) -> None:
    """Reject ``--depth`` and ``--no-fold`` with JSON, which always has every call.

    Raises:
        SpecError: ``--depth`` or ``--no-fold`` given with ``--format json``.
    """
    from hookscope.errors import SpecError

    if depth is not None and fmt == "json":
        raise SpecError(
            "--depth only shapes the table; --format json lists every call with its "
            "'depth' (filter on it). Drop --depth or use --format table"
        )
    if not fold and fmt == "json":
        raise SpecError("--no-fold only shapes the table; --format json lists every call. "
                        "Drop it or use --format table")


def summary_view(
    result: Summary, fmt: str, *, ops: bool = False, fold: bool = True
) -> Rendered:
    """The summary table (plus the per-op table with ``ops``), or its JSON document.

    Without a depth, the table shows the deepest levels that fit in
    :data:`~hookscope.render.fold.DEFAULT_MAX_ROWS` rows (the caption says what it hides).
    """
    if fmt == "json":
        return Rendered.of_text(result.to_json())
    from hookscope.render.fold import auto_depth
    from hookscope.render.summary import Summary as Folded

    depth = result.depth
    hint = depth is None
    if depth is None:
        depth = auto_depth(result.trace, fold=fold)
    result = Folded(result.trace, depth=depth, fold=fold, depth_hint=hint)

    def build(ascii: bool) -> list[Any]:
        tables: list[Any] = [result.table(ascii=ascii)]
        if ops:
            tables.append(_ops_table(result.trace, top=SUMMARY_TOP_OPS, ascii=ascii))
        return tables

    return Rendered.of_tables(build)


def trace_view(trace: Trace, fmt: str, view: TraceView) -> Rendered:
    """The trace table (plus the per-op table), its JSON document, or its CSV rows."""
    if fmt == "json":
        return Rendered.of_text(trace.to_json())
    if fmt == "csv":
        from hookscope.render.export import trace_to_csv

        columns = None if view.columns is None else list(view.columns)
        return Rendered.of_text(trace_to_csv(trace, columns=columns))
    from hookscope.render.fold import auto_depth
    from hookscope.render.trace_table import trace_table

    depth, hint = view.depth, False
    if depth is None and view.sort is None and view.top is None:
        depth, hint = auto_depth(trace, fold=view.fold), True

    def build(ascii: bool) -> list[Any]:
        tables: list[Any] = [
            trace_table(
                trace, columns=None if view.columns is None else list(view.columns),
                sort=view.sort, top=view.top, depth=depth, ascii=ascii, fold=view.fold,
                depth_hint=hint,
            )
        ]
        if view.ops:
            tables.append(_ops_table(trace, top=view.top, ascii=ascii))
        params = trace.facts.get("param_grads")
        if params:  # --backward: each parameter's gradient, and those that got none
            from hookscope.render.param_grads_table import param_grads_table

            tables.append(param_grads_table(params, ascii=ascii))
        repeat = trace.meta.get("repeat")
        if repeat:
            tables.append(Text(f"times are medians of {repeat} runs"))
        return tables

    return Rendered.of_tables(build)


def structure_view(info: ModelInfo, fmt: str, *, fold: bool = True) -> Rendered:
    """The module tree of ``hookscope inspect`` (repeated blocks folded unless
    ``fold`` is false), or its JSON document.

    Raises:
        SpecError: ``--no-fold`` given with ``--format json``.
    """
    if fmt == "json":
        check_summary_view(None, fmt, fold=fold)
        return Rendered.of_text(info.to_json())
    from hookscope.render.table import structure_table

    return Rendered.of_tables(lambda ascii: [structure_table(info, ascii=ascii, fold=fold)])


def _ops_table(trace: Trace, *, top: int | None, ascii: bool) -> Any:
    from hookscope.render.ops_table import ops_table

    return ops_table(trace, top=top, ascii=ascii)
