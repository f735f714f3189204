"""``hookscope grads MODEL``: N synthetic training steps with a gradient monitor.

The command checks its options, loads the model and its example inputs like ``trace``
does (``cli/running.py``), runs ``--steps`` steps of SGD (``--lr``) on a new seeded
batch each, with the loss a user of that kind of model would use (``--loss``,
``cli/grads_loss.py``), recorded by :class:`hookscope.GradientMonitor`
(``cli/grads_training.py``), and prints the per-parameter table of
``render/grads_table.py`` with anomalies flagged and a caption saying how the numbers
were made, or ``--format json`` (``cli/grads_report.py``); ``--plot FILE.png`` also
draws the history (``hookscope[plot]``).

Exit status: 0; 1 with ``--fail-on KIND`` when an anomaly of that kind was flagged
(after the output is written); 2 for a usage error (``cli/failure_boundary.py``).
A plain function: ``cli/app.py`` registers it on the Typer app.
"""

from __future__ import annotations

import math
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from hookscope.cli.failure_boundary import failure_boundary, model_prints_to_stderr
from hookscope.cli.output import OutputTarget, Rendered
from hookscope.cli.shared_options import (
    ConfigOpt,
    DebugOpt,
    DeviceOpt,
    Format,
    FormatOpt,
    InputOpt,
    ModelArg,
    NoColorOpt,
    OutputOpt,
    WidthOpt,
    chosen_format,
)

if TYPE_CHECKING:
    from hookscope.cli.grads_training import Training


class LossChoice(str, Enum):
    """``--loss``: which loss the steps train on (``cli/grads_loss.py``)."""

    AUTO = "auto"
    CE = "ce"
    LM = "lm"
    MSE = "mse"
    SUM = "sum"


class FailOn(str, Enum):
    """``--fail-on``: the anomalies that make ``grads`` exit with 1."""

    EXPLODING = "exploding"
    VANISHING = "vanishing"
    NONFINITE = "nonfinite"
    ANY = "any"


def grads_command(
    model: ModelArg,
    inputs: InputOpt = None,
    steps: Annotated[int, typer.Option(min=1, metavar="N", help="Training steps.")] = 5,
    lr: Annotated[float, typer.Option(min=0.0, metavar="LR", help="SGD learning rate.")] = 1e-3,
    loss: Annotated[LossChoice, typer.Option(
        help="The loss: auto (cross-entropy on random labels for a [batch, classes] "
        "output, the next-token loss for a causal LM, the model's own loss when its "
        "output has one, else MSE to a random target), ce, lm, mse or sum.")
    ] = LossChoice.AUTO,
    seed: Annotated[int, typer.Option(
        min=0, max=2**62, metavar="N", help="Every step's batch and labels are drawn, in "
        "turn, from one generator seeded with N.")] = 0,
    explode_above: Annotated[float | None, typer.Option(
        metavar="X", show_default=False, help="Flag gradient norms above X.")] = None,
    vanish_below: Annotated[float | None, typer.Option(
        metavar="X", show_default=False, help="Flag gradient norms below X.")] = None,
    relative: Annotated[bool, typer.Option(
        "--relative", help="Show (and threshold) each gradient norm over its weight's "
        "norm.")] = False,
    clip: Annotated[float | None, typer.Option(
        metavar="NORM", show_default=False, help="Clip the total gradient norm to NORM "
        "before each optimizer step (clip_grad_norm_); the table shows norms before it.")
    ] = None,
    top: Annotated[int | None, typer.Option(
        min=1, metavar="N", show_default=False,
        help="Show only the N parameters with the largest values at the last step, "
        "largest first.")] = None,
    fail_on: Annotated[FailOn | None, typer.Option(
        show_default=False, help="Exit with 1 (after the output) when an anomaly of this "
        "kind was flagged: exploding, vanishing, nonfinite or any.")] = None,
    fmt: FormatOpt = None,
    plot: Annotated[Path | None, typer.Option(
        metavar="FILE.png", show_default=False,
        help="Also draw the norms over steps (needs matplotlib).")] = None,
    device: DeviceOpt = None,
    config: ConfigOpt = None,
    output: OutputOpt = None,
    no_color: NoColorOpt = False,
    width: WidthOpt = None,
    debug: DebugOpt = False,
) -> int:
    """N synthetic SGD steps on new random batches; gradient norms per parameter,
    anomalies flagged. Exit status 1 with --fail-on when one of that kind was."""
    from hookscope.cli.grads_report import fail_code
    from hookscope.cli.grads_training import train
    from hookscope.cli.running import check_output, prepare

    fmt = chosen_format(fmt, output, Format)
    target = OutputTarget(output, no_color, width)
    with failure_boundary(debug=debug):
        check_output(output)  # before the model is trained and --plot written
        if device == "meta":
            from hookscope.errors import SpecError

            raise SpecError("grads trains the model; --device meta has no values to train")
        if plot is not None:
            _check_plot(plot)  # before the model is built and trained, not after
        _check_thresholds(explode_above=explode_above, vanish_below=vanish_below, clip=clip)
        _check_fail_on(fail_on, explode_above=explode_above, vanish_below=vanish_below)
        if not math.isfinite(lr):
            from hookscope.errors import SpecError

            raise SpecError(f"--lr must be a finite learning rate, got {lr}; try --lr 1e-3")
        thresholds = {"explode_above": explode_above, "vanish_below": vanish_below}
        with model_prints_to_stderr():
            prepared = prepare(model, inputs=inputs or [], config=config, device=device)
            training = train(prepared, steps=steps, lr=lr, seed=seed, loss=loss.value, clip=clip,
                             weight_norms=relative, **({} if relative else thresholds))
        if plot is not None:
            training.monitor.plot(plot)
        anomalies, view = _view(training, prepared, fmt=fmt, lr=lr, seed=seed, clip=clip,
                                relative=relative, top=top, **thresholds)
        target.write(view)
        return fail_code(anomalies, None if fail_on is None else fail_on.value)
    return 2  # pragma: no cover  (failure_boundary raises typer.Exit)


def _check_fail_on(fail_on: FailOn | None, **thresholds: float | None) -> None:
    """``--fail-on exploding`` (``vanishing``) without its threshold would never fail.

    Raises:
        SpecError: naming the option that is missing.
    """
    from hookscope.errors import SpecError

    needs = {FailOn.EXPLODING: "explode_above", FailOn.VANISHING: "vanish_below"}
    name = needs.get(fail_on) if fail_on is not None else None
    if fail_on is not None and name is not None and thresholds[name] is None:
        option = "--" + name.replace("_", "-")
        raise SpecError(f"--fail-on {fail_on.value} needs {option} X: without a threshold "
                        "no gradient is flagged as that")


def _check_thresholds(**thresholds: float | None) -> None:
    """``--explode-above``/``--vanish-below`` are positive numbers (checked here, so
    that the error names the option, not ``GradientMonitor``'s argument).

    Raises:
        SpecError: one is zero, negative or not a number.
    """
    from hookscope.errors import SpecError

    for name, value in thresholds.items():
        if value is not None and not (math.isfinite(value) and value > 0):
            raise SpecError(f"--{name.replace('_', '-')} must be a positive number, "
                            f"got {value}")


def _check_plot(path: Path) -> None:
    """``--plot FILE`` can be written, as an image format matplotlib draws.

    Raises:
        SpecError: the file cannot be written there, or its extension is not an image
            format matplotlib writes.
        MissingDependencyError: matplotlib is not installed.
    """
    from hookscope.cli.running import check_output
    from hookscope.errors import MissingDependencyError, SpecError

    check_output(path, option="--plot")
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
    except ImportError as e:
        raise MissingDependencyError("matplotlib", "plot", needed_for="plots") from e
    suffix = path.suffix.lstrip(".").lower()
    # matplotlib's own list, less the formats that need an outside program (pgf: LaTeX)
    formats = set(FigureCanvasAgg.get_supported_filetypes()) - {"pgf"}
    if suffix and suffix not in formats:
        raise SpecError(f"--plot {str(path)!r}: .{suffix} is not an image format matplotlib "
                        "writes by itself; use .png, .svg or .pdf")


def _view(training: Training, prepared: Any, *, fmt: Format, lr: float, seed: int,
          clip: float | None, relative: bool, top: int | None,
          explode_above: float | None, vanish_below: float | None,
          ) -> tuple[list[Any], Rendered]:
    """The anomalies flagged, and the table or JSON of the run."""
    from hookscope.cli.grads_report import (
        caption,
        grads_json,
        ratio_history,
        relative_anomalies,
        shown_history,
    )
    from hookscope.render.grads_table import grads_table

    history = training.monitor.history
    anomalies = list(training.monitor.anomalies)
    if relative:
        history = ratio_history(training)
        anomalies += relative_anomalies(history, explode_above=explode_above,
                                        vanish_below=vanish_below)
        anomalies.sort(key=lambda a: a.step)
    shown = shown_history(history, top)
    inputs = " ".join(str(spec) for spec in prepared.specs)
    if fmt is Format.JSON:
        return anomalies, Rendered.of_text(grads_json(
            training, shown, anomalies, lr=lr, seed=seed, inputs=inputs, clip=clip,
            relative=relative, top=top, explode_above=explode_above,
            vanish_below=vanish_below))
    parts = caption(training, anomalies, lr=lr, seed=seed, inputs=inputs, clip=clip,
                    relative=relative, shown=len(shown.names))
    title = "Gradient norm / weight norm" if relative else "Gradient norms"
    return anomalies, Rendered.of_tables(lambda ascii: [grads_table(
        shown, anomalies, ascii=ascii, title=title, caption=parts)])
