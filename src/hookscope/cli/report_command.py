"""``hookscope report MODEL -o report.html``: the trace of one run as one HTML page.

The command loads the model and its inputs as ``trace`` does (``cli/running.py``:
``--input``, ``--config``, ``--device``, ``--dtype``), traces it with the default
probes (shapes, time, statistics, memory; FLOPs with ``--ops``, gradients with
``--backward``) and writes :meth:`hookscope.Trace.to_html`'s page (the renderer is
``render/report/``). ``-o`` is required: a page is for a browser, not a terminal
(``-o -`` writes it to stdout). When the model raises, the page of the partial trace
is written, its problem section saying where, and the exit status is 2.

``--lint`` adds :func:`hookscope.lint`'s findings (with the same inputs, and the
backward rules with ``--backward``). ``--find-anomaly`` runs
:func:`hookscope.find_anomaly` first: when an output (or, with ``--backward``, a
gradient) holds NaN or Inf, the page is that report above its partial trace and the exit
status is 1, as for ``trace --find-anomaly``; when every value is finite the page is the
usual one.

The command is registered on the app of ``cli/app.py`` when that module is imported
(its last lines import this one) and shares that module's option types.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from hookscope.cli.debug_options import EXIT_FOUND, FindAnomalyOpt
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
    from hookscope.cli.running import Prepared
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
    lint: Annotated[bool, typer.Option(
        "--lint", help="Add the lint findings of the model (hookscope lint).")] = False,
    find_anomaly: FindAnomalyOpt = False,
    capture: Annotated[str | None, typer.Option(
        "--capture", metavar="GLOB", show_default=False,
        help="Add thumbnails of the feature maps of the modules matching GLOB "
        "(e.g. 'layer*.0.conv1').")] = None,
    device: DeviceOpt = None,
    config: ConfigOpt = None,
    dtype: DtypeOpt = None,
    no_fold: NoFoldOpt = False,
    debug: DebugOpt = False,
) -> int:
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
            findings = _lint(prepared, backward=backward) if lint else []
            found = _anomaly(prepared, backward=backward) if find_anomaly else None
            maps = _capture(prepared, capture) if capture is not None else None
        if found is not None:
            target.write(Rendered.of_text(found.to_html()))
            return EXIT_FOUND
        with (partial_on_failure(lambda t: report_view(t, fold=not no_fold), target),
              model_prints_to_stderr(), dtype_hints(prepared)):
            result = run_traces(prepared, repeat=1, progress=False, ops=ops,
                                backward=backward)
        target.write(report_view(result, fold=not no_fold, findings=findings,
                                 feature_maps=maps))
    return 0


def _lint(prepared: Prepared, *, backward: bool) -> list[Any]:
    import hookscope

    report = hookscope.lint(prepared.loaded.model, *prepared.args,
                            kwargs=prepared.kwargs or None, backward=backward)
    return list(report)


def _capture(prepared: Prepared, select: str) -> Any:
    import hookscope

    return hookscope.capture(prepared.loaded.model, *prepared.args, select=select,
                             kwargs=prepared.kwargs)


def _anomaly(prepared: Prepared, *, backward: bool) -> Any:
    import hookscope

    return hookscope.find_anomaly(prepared.loaded.model, *prepared.args,
                                  kwargs=prepared.kwargs, backward=backward)


def report_view(trace: Trace, *, fold: bool, findings: Sequence[Any] = (),
                feature_maps: Any = None) -> Rendered:
    """The report page of ``trace`` (with lint ``findings`` and ``feature_maps``)."""
    from hookscope.render.report import trace_report

    return Rendered.of_text(trace_report(trace, fold=fold, findings=findings,
                                         feature_maps=feature_maps))
