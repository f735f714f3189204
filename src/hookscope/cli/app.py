"""The ``hookscope`` commands: ``summary``, ``trace``, ``inspect`` and ``demo``.

Each command only parses its options, loads the model (``cli/running.py`` through
``cli/loading/``), calls the public API (:func:`hookscope.summary`,
:func:`hookscope.trace`, :func:`hookscope.inspect`), and hands the result to a
renderer (``cli/views.py``) and a destination (``cli/output.py``). Failures become
one ``error: ...`` line and exit status 2 (``cli/failure_boundary.py``); when the model
raises, the partial table is printed first. Stdout carries only hookscope's result:
what the model's own code prints while it is loaded and run goes to stderr, so
``--format json`` and ``csv`` stay parseable.

:func:`run` drives the Typer app in-process, so tests call ``main([...])`` directly.
The ``capture``, ``grads``, ``hooks`` and ``lint`` commands are plain functions of
their own modules (``cli/*_command.py``), which never import this one: the app is
built here, by registering them.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated

import typer

from hookscope.cli.capture_command import capture_command
from hookscope.cli.compare_command import compare_command
from hookscope.cli.debug_options import BreakAtOpt, BreakOnOpt, FindAnomalyOpt
from hookscope.cli.diff_command import diff_command
from hookscope.cli.failure_boundary import (
    CLICK_ERROR,
    EXIT_INTERRUPTED,
    failure_boundary,
    hookscope_warnings_as_lines,
    model_prints_to_stderr,
    partial_on_failure,
    print_error,
    report_usage_error,
)
from hookscope.cli.grads_command import grads_command
from hookscope.cli.hooks_command import hooks_command
from hookscope.cli.lint_command import lint_command
from hookscope.cli.memory_command import memory_command
from hookscope.cli.output import OutputTarget, Rendered, color_choice
from hookscope.cli.report_command import report_command
from hookscope.cli.shared_options import (
    CompiledOpt,
    ConfigOpt,
    DebugOpt,
    DepthOpt,
    DeviceOpt,
    DtypeOpt,
    Format,
    FormatOpt,
    FormatWithCsv,
    FormatWithCsvOpt,
    InputOpt,
    ModelArg,
    NoColorOpt,
    NoFoldOpt,
    OpsOpt,
    OutputOpt,
    TimelineOpt,
    WidthOpt,
    chosen_format,
    split_names,
)

if TYPE_CHECKING:
    from hookscope.core.records.trace import Trace


app = typer.Typer(
    name="hookscope",
    help="See inside every forward and backward pass of a PyTorch model.\n\n"
    "MODEL is path/to/file.py:factory, package.module:factory, torchvision:NAME or "
    "transformers:NAME (random weights; nothing is downloaded). Start with: hookscope demo",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)

def run(argv: Sequence[str] | None) -> int:
    """Run the app on ``argv`` (``None``: ``sys.argv[1:]``) and return the exit status."""
    command = typer.main.get_command(app)
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        with hookscope_warnings_as_lines():
            result = command.main(args=args, prog_name="hookscope", standalone_mode=False)
    except CLICK_ERROR as e:
        return report_usage_error(e)
    except (typer.Abort, KeyboardInterrupt):
        print_error("interrupted")
        return EXIT_INTERRUPTED
    return result if isinstance(result, int) else 0


def _print_version(value: bool) -> None:
    if value:
        from hookscope.core.version import package_version

        sys.stdout.write(f"hookscope {package_version()}\n")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[bool, typer.Option(
        "--version", is_eager=True, callback=_print_version, help="Print the version and exit.",
    )] = False,
) -> None:
    """See inside every forward and backward pass of a PyTorch model."""


@app.command("summary")
def summary_command(
    model: ModelArg,
    inputs: InputOpt = None,
    depth: DepthOpt = None,
    device: DeviceOpt = None,
    fmt: FormatOpt = None,
    output: OutputOpt = None,
    config: ConfigOpt = None,
    no_color: NoColorOpt = False,
    width: WidthOpt = None,
    ops: OpsOpt = False,
    debug: DebugOpt = False,
    dtype: DtypeOpt = None,
    no_fold: NoFoldOpt = False,
    compiled: CompiledOpt = False,
) -> None:
    """Module tree with input/output shapes and parameters per call (one forward pass)."""
    import hookscope
    from hookscope.cli.running import check_output, dtype_hints, prepare
    from hookscope.cli.views import check_summary_view, summary_view

    fmt = chosen_format(fmt, output, Format)
    target = OutputTarget(output, no_color, width)
    with failure_boundary(debug=debug):
        check_summary_view(depth, fmt.value, fold=not no_fold)
        check_output(output)
        with model_prints_to_stderr():
            prepared = prepare(model, inputs=inputs or [], config=config, device=device,
                               dtype=dtype, on_too_large="meta")

        def partial(trace: Trace) -> Rendered:
            return summary_view(hookscope.Summary(trace, depth=depth), fmt.value,
                                fold=not no_fold)

        with (partial_on_failure(partial, target), model_prints_to_stderr(),
              dtype_hints(prepared)):
            result = hookscope.summary(
                prepared.loaded.model, *prepared.args, kwargs=prepared.kwargs, depth=depth,
                ops=ops, compiled=compiled,
            )
        target.write(summary_view(result, fmt.value, ops=ops, fold=not no_fold))


@app.command("trace")
def trace_command(
    model: ModelArg,
    inputs: InputOpt = None,
    time: Annotated[bool, typer.Option(help="Time every call (inclusive and self).")] = True,
    stats: Annotated[bool, typer.Option(help="Statistics of every output tensor.")] = True,
    memory: Annotated[bool, typer.Option(help="Bytes of outputs and saved tensors.")] = True,
    ops: OpsOpt = False,
    backward: Annotated[bool, typer.Option(
        "--backward", help="Also run a backward pass from the outputs.")] = False,
    sort: Annotated[str | None, typer.Option(
        metavar="COLUMN", show_default=False, help="Sort calls by COLUMN, largest first.")] = None,
    top: Annotated[int | None, typer.Option(
        min=1, metavar="K", show_default=False,
        help="Show only the K heaviest rows (by --sort, else by time, FLOPs or params).")] = None,
    columns: Annotated[str | None, typer.Option(
        metavar="A,B,...", show_default=False, help="Columns to show, comma-separated.")] = None,
    depth: DepthOpt = None,
    fmt: FormatWithCsvOpt = None,
    output: OutputOpt = None,
    device: DeviceOpt = None,
    config: ConfigOpt = None,
    repeat: Annotated[int, typer.Option(
        min=1, metavar="N", help="Run N times and report median times.")] = 1,
    no_color: NoColorOpt = False,
    width: WidthOpt = None,
    debug: DebugOpt = False,
    dtype: DtypeOpt = None,
    find_anomaly: FindAnomalyOpt = False,
    break_at: BreakAtOpt = None,
    break_on: BreakOnOpt = None,
    no_fold: NoFoldOpt = False,
    timeline: TimelineOpt = None,
    compiled: CompiledOpt = False,
    gather: Annotated[bool, typer.Option(
        "--gather", help="Under torchrun: every rank's trace merged on rank 0 (into "
        "-o FILE; each rank's own goes to FILE.rankN).")] = False,
) -> int:
    """Time, activation statistics and memory of every call; FLOPs with --ops."""
    from hookscope.cli import debug_options
    from hookscope.cli.ranks import (
        job_group,
        launch,
        mark_rank,
        rank_path,
        rank_targets,
        write_gathered,
    )
    from hookscope.cli.running import (
        check_output,
        check_timeline,
        dtype_hints,
        prepare,
        run_traces,
    )
    from hookscope.cli.views import TraceView, check_trace_view, trace_view, unmeasured

    fmt = chosen_format(fmt, output, FormatWithCsv)
    merged = target = OutputTarget(output, no_color, width)
    view = TraceView(split_names(columns), sort, top, depth, ops, fold=not no_fold)
    with failure_boundary(debug=debug):
        job = launch(gather=gather, fmt=fmt.value)
        if job is not None:  # each rank its own file; rank 0 alone prints
            target, merged = rank_targets(job, target, gather=gather)
        breaks = bool(break_at or break_on)
        off = unmeasured(time=time, stats=stats, memory=memory, ops=ops, device=device,
                         backward=backward, breaks=breaks)
        check_trace_view(view, fmt.value, unmeasured=off)
        debug_options.check_debug_options(
            find_anomaly=find_anomaly, break_at=break_at, break_on=break_on, repeat=repeat,
            fmt=fmt.value, view=view,
            probes={"time": time, "stats": stats, "memory": memory, "ops": ops},
            untimed=off.get("time"))
        time = time and not breaks  # the debugger's pause is not the model's time
        check_output(output)
        check_timeline(timeline, untimed=off.get("time"), find_anomaly=find_anomaly,
                       output=output)
        too_large = "stop" if time or stats or memory else "meta"  # values need memory
        with model_prints_to_stderr():
            prepared = prepare(model, inputs=inputs or [], config=config, device=device,
                               dtype=dtype, on_too_large=too_large)
        if find_anomaly:
            with model_prints_to_stderr():
                found, code = debug_options.find(prepared, backward=backward, fmt=fmt.value)
            target.write(found)
            return code
        with job_group(job, gather=gather):
            with (partial_on_failure(lambda t: trace_view(t, fmt.value, view), target),
                  model_prints_to_stderr(), dtype_hints(prepared),
                  debug_options.breaking(prepared.loaded.model, break_at, break_on)):
                result = run_traces(
                    prepared, repeat=repeat, progress=color_choice(no_color) is not False,
                    time=time, stats=stats, memory=memory, ops=ops, backward=backward,
                    compiled=compiled,
                )
            if job is not None:
                mark_rank(result, job)
            if timeline is not None:
                from hookscope.render.timeline import write_chrome_trace

                # under torchrun each rank its own (FILE.rankN), as -o
                write_chrome_trace(result, timeline if job is None
                                   else rank_path(timeline, job.rank) or timeline)
            target.write(trace_view(result, fmt.value, view))
            if gather and job is not None:
                gathered = write_gathered(result, fmt.value, merged, rank=job.rank)
                if gathered is not None and timeline is not None:
                    from hookscope.render.timeline import write_chrome_trace

                    write_chrome_trace(gathered.traces, timeline)
    return 0


@app.command("inspect")
def inspect_command(
    model: ModelArg,
    device: DeviceOpt = None,
    config: ConfigOpt = None,
    fmt: FormatOpt = None,
    output: OutputOpt = None,
    no_color: NoColorOpt = False,
    width: WidthOpt = None,
    debug: DebugOpt = False,
    dtype: DtypeOpt = None,
    no_fold: NoFoldOpt = False,
) -> None:
    """Module tree, parameters and buffers, without running the model (on the meta
    device unless --device is given: no weights are allocated)."""
    import hookscope
    from hookscope.cli.running import check_output, load
    from hookscope.cli.views import structure_view
    from hookscope.errors import SpecError

    fmt = chosen_format(fmt, output, Format)
    target = OutputTarget(output, no_color, width)
    with failure_boundary(debug=debug):
        check_output(output)
        with model_prints_to_stderr():
            try:
                loaded = load(model, config=config, device=device or "meta", dtype=dtype)
            except SpecError as e:
                if device is not None or "meta" not in str(e):
                    raise
                # its __init__ computes with its own values (``.item()`` of a weight),
                # which the meta device has none of: built as its code builds it
                sys.stderr.write("note: the model cannot be built on the meta device "
                                 f"({str(e).rsplit(': ', 1)[-1]}); building it as its "
                                 "code does\n")
                loaded = load(model, config=config, device=None, dtype=dtype)
        target.write(structure_view(hookscope.inspect(loaded.model), fmt.value,
                                    fold=not no_fold))


@app.command("demo")
def demo_command(
    no_color: NoColorOpt = False,
    width: WidthOpt = None,
    debug: DebugOpt = False,
) -> None:
    """A tour on built-in models: structure, summary, trace and FLOPs."""
    from hookscope.cli.demo import run_demo
    from hookscope.cli.output import stdout_errors

    with failure_boundary(debug=debug), stdout_errors(hint="run it where stdout can be written"):
        run_demo(no_color=no_color, width=width)


# The commands of their own modules, registered after this module's in help order.
app.command("capture")(capture_command)
app.command("compare")(compare_command)
app.command("diff")(diff_command)
app.command("grads")(grads_command)
app.command("hooks")(hooks_command)
app.command("lint")(lint_command)
app.command("report")(report_command)
app.command("memory")(memory_command)
