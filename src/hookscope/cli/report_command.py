"""``hookscope report MODEL -o report.html``: the trace of one run as one HTML page.

The command loads the model and its inputs as ``trace`` does (``cli/running.py``:
``--input``, ``--config``, ``--device``, ``--dtype``), traces it with the default
probes (shapes, time, statistics, memory; FLOPs with ``--ops``, gradients with
``--backward``) and writes :meth:`hookscope.Trace.to_html`'s page (the renderer is
``render/report/``). ``-o`` is required: a page is for a browser, not a terminal
(``-o -`` writes it to stdout). When the model raises, the page of the partial trace
is written, its problem section saying where, and the exit status is 2.

The command is registered on the app of ``cli/app.py`` when that module is imported
(its last lines import this one) and shares that module's option types.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from hookscope.cli.failure_boundary import (
    failure_boundary,
    model_prints_to_stderr,
    partial_on_failure,
)
from hookscope.cli.output import OutputTarget, Rendered
from hookscope.cli.shared_options import (
    ConfigOpt,
    DebugOpt,
    DeviceOpt,
    DtypeOpt,
    InputOpt,
    ModelArg,
    NoFoldOpt,
    OpsOpt,
)

if TYPE_CHECKING:
    from hookscope.core.records.trace import Trace


def report_command(
    model: ModelArg,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", metavar="FILE", show_default=False,
        help="The HTML file to write (replaced only when the page is complete); "
        "'-' is stdout.")] = None,
    inputs: InputOpt = None,
    backward: Annotated[bool, typer.Option(
        "--backward", help="Also run a backward pass: gradient flow and backward times.",
    )] = False,
    ops: OpsOpt = False,
    device: DeviceOpt = None,
    config: ConfigOpt = None,
    dtype: DtypeOpt = None,
    no_fold: NoFoldOpt = False,
    debug: DebugOpt = False,
) -> None:
    """One self-contained HTML page of a traced run: module tree, charts, totals."""
    from hookscope.cli.running import check_output, dtype_hints, prepare, run_traces
    from hookscope.errors import SpecError

    target = OutputTarget(output)
    with failure_boundary(debug=debug):
        if output is None:
            raise SpecError("hookscope report needs the file to write: -o report.html "
                            "('-o -' writes the page to stdout)")
        check_output(output)
        with model_prints_to_stderr():
            prepared = prepare(model, inputs=inputs or [], config=config, device=device,
                               dtype=dtype, on_too_large="stop")
        with (partial_on_failure(lambda t: report_view(t, fold=not no_fold), target),
              model_prints_to_stderr(), dtype_hints(prepared)):
            result = run_traces(prepared, repeat=1, progress=False, ops=ops,
                                backward=backward)
        target.write(report_view(result, fold=not no_fold))


def report_view(trace: Trace, *, fold: bool) -> Rendered:
    """The report page of ``trace``."""
    from hookscope.render.report import trace_report

    return Rendered.of_text(trace_report(trace, fold=fold))
