"""``hookscope diff A.json B.json``: how two saved traces differ, call by call.

The traces are files written by ``hookscope trace --format json`` or
``Trace.to_json()``. The command reads both (a file that is not a trace, or one of a
schema this hookscope cannot read, is one error line and exit status 2), calls
:func:`hookscope.diff`, and prints its table (the one-line answer as its title), its
JSON document or its CSV rows. Registered on the app by ``cli/app.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hookscope.cli.failure_boundary import failure_boundary
from hookscope.cli.output import OutputTarget, Rendered
from hookscope.cli.shared_options import (
    DebugOpt,
    FormatWithCsv,
    FormatWithCsvOpt,
    NoColorOpt,
    OutputOpt,
    WidthOpt,
    chosen_format,
)
from hookscope.errors import SpecError


def parse_match(pairs: list[str] | None) -> dict[str, str]:
    """``["encoder=backbone", "fc=head"]`` -> ``{"encoder": "backbone", "fc": "head"}``.

    Raises:
        SpecError: an entry without ``=``.
    """
    out: dict[str, str] = {}
    for pair in pairs or []:
        a, eq, b = pair.partition("=")
        if not eq:
            raise SpecError(f"--match takes A_PATH=B_PATH (e.g. --match fc=head), got {pair!r}")
        out[a.strip()] = b.strip()
    return out


def diff_command(
    trace_a: Annotated[Path, typer.Argument(metavar="A.json", show_default=False,
                                            help="Side A: a trace JSON file.")],
    trace_b: Annotated[Path, typer.Argument(metavar="B.json", show_default=False,
                                            help="Side B: a trace JSON file.")],
    match: Annotated[list[str] | None, typer.Option(
        "--match", "-m", metavar="A_PATH=B_PATH", show_default=False,
        help="Side A's module path that is side B's (its subtree too); repeat for more.",
    )] = None,
    sort: Annotated[str | None, typer.Option(
        metavar="FACT", show_default=False,
        help="Rank by this fact's relative change, e.g. time_ns (default: each call's "
        "largest change).")] = None,
    top: Annotated[int, typer.Option(
        min=0, metavar="N", help="Rows in the table, most changed first (0: all).")] = 20,
    fmt: FormatWithCsvOpt = None,
    output: OutputOpt = None,
    no_color: NoColorOpt = False,
    width: WidthOpt = None,
    debug: DebugOpt = False,
) -> None:
    """How two saved traces differ: per call, every fact's change and the structure."""
    import hookscope
    from hookscope.cli.running import check_output

    fmt = chosen_format(fmt, output, FormatWithCsv)
    target = OutputTarget(output, no_color, width)
    with failure_boundary(debug=debug):
        check_output(output)
        result = hookscope.diff(trace_a, trace_b, match=parse_match(match), sort=sort)
        if fmt is FormatWithCsv.JSON:
            target.write(Rendered.of_text(result.to_json()))
        elif fmt is FormatWithCsv.CSV:
            target.write(Rendered.of_text(result.to_csv()))
        else:
            from hookscope.compare.diff_table import diff_table

            target.write(Rendered.of_tables(lambda ascii: [diff_table(
                result, top=top or None, ascii=ascii, more_hint="--top 0 shows them")]))
