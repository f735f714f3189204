"""``hookscope trace --find-anomaly``, ``--break-at GLOB`` and ``--break-on WHAT``.

The options' types live here and ``cli/app.py``'s ``trace`` command declares them;
the work is the public API's (:func:`hookscope.find_anomaly`,
:func:`hookscope.breakpoint`). ``--find-anomaly`` prints the report (text, or JSON
with ``--format json``) and exits 1 when a non-finite value was found, 0 when the run
was clean; ``q`` in the debugger the ``--break-*`` options open exits 3.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from torch import nn

    from hookscope.cli.output import Rendered
    from hookscope.cli.running import Prepared

EXIT_FOUND = 1
#: ``q`` in the debugger ``--break-at``/``--break-on`` opened: the user's own stop, not
#: a usage error (2) nor a failure (1)
EXIT_DEBUGGER_QUIT = 3


class BreakOn(str, Enum):
    """What ``--break-on`` takes."""

    NONFINITE = "nonfinite"
    NAN = "nan"
    INF = "inf"


FindAnomalyOpt = Annotated[bool, typer.Option(
    "--find-anomaly", help="Find the first module call whose output holds NaN/Inf, and "
    "the op that made it (with --backward, then the autograd node that made the first "
    "non-finite gradient, and its line); exit 1 if found, 0 if clean.")]
BreakAtOpt = Annotated[str | None, typer.Option(
    "--break-at", metavar="GLOB", show_default=False,
    help="Open the debugger (sys.breakpointhook: PYTHONBREAKPOINT is honoured) after "
    "each call of the modules matching GLOB.")]
BreakOnOpt = Annotated[BreakOn | None, typer.Option(
    "--break-on", show_default=False,
    help="Only break where the call's output holds this: nonfinite, nan or inf, once, at "
    "the first call whose output holds it and whose inputs do not (every module when "
    "--break-at is not given); 'q' in the debugger exits 3.")]


def check_debug_options(
    *, find_anomaly: bool, break_at: str | None, break_on: BreakOn | None, repeat: int,
    fmt: str, view: Any = None, probes: dict[str, bool] | None = None,
    untimed: str | None = None,
) -> None:
    """Reject combinations that would silently ignore an option.

    ``probes``: the trace's probe switches as given (``time``, ``stats``, ``memory``,
    ``ops``); ``untimed``: why the run is not timed, if it is not.

    Raises:
        SpecError: ``--find-anomaly`` with ``--break-*``, ``--repeat``, ``--format csv``,
            a probe switch other than its default (``--ops``, ``--no-stats``: its run
            has no probe but the NaN check) or an option of the trace table (``view``:
            ``--sort``, ``--top``, ``--columns``, ``--depth``), which its report does not
            have; ``--repeat`` in a run that is not timed (its point is median times).
    """
    from hookscope.errors import SpecError

    if find_anomaly and probes:
        given = [f"--{name}" if on else f"--no-{name}" for name, on in probes.items()
                 if on != (name != "ops")]  # every probe is on by default, but ops
        if given:
            raise SpecError(f"--find-anomaly runs the NaN/Inf check alone; drop "
                            f"{', '.join(given)}")
    if not find_anomaly and repeat != 1 and untimed:
        raise SpecError(f"--repeat {repeat} reports median times, and this run is not "
                        f"timed ({untimed}); drop --repeat")

    if find_anomaly and view is not None:
        given = [flag for flag, value in (("--sort", view.sort), ("--top", view.top),
                                          ("--columns", view.columns), ("--depth", view.depth))
                 if value is not None]
        if given:
            raise SpecError(f"--find-anomaly prints its report, not the trace table; drop "
                            f"{', '.join(given)}")

    if find_anomaly and (break_at is not None or break_on is not None):
        raise SpecError("--find-anomaly reports the first NaN/Inf and stops; drop "
                        "--break-at/--break-on, or --find-anomaly to break in the debugger")
    if find_anomaly and repeat != 1:
        raise SpecError("--find-anomaly runs the model once; drop --repeat")
    if find_anomaly and fmt == "csv":
        raise SpecError("--find-anomaly prints text or JSON; use --format table or json")


def find(prepared: Prepared, *, backward: bool, fmt: str) -> tuple[Rendered, int]:
    """Run :func:`hookscope.find_anomaly`: its report, rendered, and the exit status."""
    import hookscope
    from hookscope.cli.output import Rendered

    model = prepared.loaded.model
    report = hookscope.find_anomaly(model, *prepared.args, kwargs=prepared.kwargs,
                                    backward=backward)
    if fmt == "json":
        from hookscope.debug.anomaly_records import AnomalyReport

        text = (report or AnomalyReport((), trace=None, stopped=False)).to_json()
    else:
        text = str(report) if report is not None else "No NaN or Inf: every output is finite."
    return Rendered.of_text(text), 0 if report is None else EXIT_FOUND


@contextmanager
def breaking(model: nn.Module, break_at: str | None, break_on: BreakOn | None) -> Iterator[None]:
    """``hookscope.breakpoint`` around the run when ``--break-at``/``--break-on`` ask."""
    if break_at is None and break_on is None:
        yield
        return
    import hookscope

    if break_at is not None:  # named as the command line wrote it, not as at=
        from hookscope.core.model.selectors import compile_selector, require_match

        paths = [path for path, _ in model.named_modules(remove_duplicate=False)]
        require_match(break_at, compile_selector(break_at), paths, type(model).__name__,
                      option="--break-at")
    from hookscope.cli.failure_boundary import print_error
    from hookscope.errors import DebuggerQuit

    try:
        with hookscope.breakpoint(model, at=break_at,
                                  when=None if break_on is None else break_on.value):
            yield
    except DebuggerQuit as e:
        print_error(str(e))
        raise typer.Exit(EXIT_DEBUGGER_QUIT) from None
