"""``hookscope grads MODEL``: N synthetic training steps with a gradient monitor.

The command loads the model and its example inputs like ``trace`` does, runs ``--steps``
steps of plain SGD (``--lr``) on the default loss (the sum of the floating outputs),
recorded by :class:`hookscope.GradientMonitor`, and prints the per-parameter table of
``render/grads_table.py`` with anomalies flagged; ``--plot FILE.png`` also draws the
history (``hookscope[plot]``). Registered on the app of ``cli/app.py`` when that
module is imported (its last lines import this one).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import typer

from hookscope.cli.failures import failure_boundary, model_prints_to_stderr
from hookscope.cli.options import (
    ConfigOpt,
    DebugOpt,
    DeviceOpt,
    InputOpt,
    ModelArg,
    NoColorOpt,
    OutputOpt,
    WidthOpt,
)
from hookscope.cli.output import OutputTarget, Rendered


def grads_command(
    model: ModelArg,
    inputs: InputOpt = None,
    steps: Annotated[int, typer.Option(min=1, metavar="N", help="Training steps.")] = 5,
    lr: Annotated[float, typer.Option(min=0.0, metavar="LR", help="SGD learning rate.")] = 1e-3,
    explode_above: Annotated[float | None, typer.Option(
        metavar="X", show_default=False, help="Flag gradient norms above X.")] = None,
    vanish_below: Annotated[float | None, typer.Option(
        metavar="X", show_default=False, help="Flag gradient norms below X.")] = None,
    plot: Annotated[Path | None, typer.Option(
        metavar="FILE.png", show_default=False,
        help="Also draw the norms over steps (needs matplotlib).")] = None,
    device: DeviceOpt = None,
    config: ConfigOpt = None,
    output: OutputOpt = None,
    no_color: NoColorOpt = False,
    width: WidthOpt = None,
    debug: DebugOpt = False,
) -> None:
    """N synthetic SGD steps; gradient norms per parameter, anomalies flagged."""
    from hookscope.cli.running import check_output, prepare

    target = OutputTarget(output, no_color, width)
    with failure_boundary(debug=debug):
        check_output(output)  # before the model is trained and --plot written
        if device == "meta":
            from hookscope.errors import SpecError

            raise SpecError("grads trains the model; --device meta has no values to train")
        if plot is not None:
            _check_plot(plot)  # before the model is built and trained, not after
        _check_thresholds(explode_above=explode_above, vanish_below=vanish_below)
        if not math.isfinite(lr):
            from hookscope.errors import SpecError

            raise SpecError(f"--lr must be a finite learning rate, got {lr}; try --lr 1e-3")
        with model_prints_to_stderr():
            prepared = prepare(model, inputs=inputs or [], config=config, device=device)
            monitor = _train(prepared, steps=steps, lr=lr, explode_above=explode_above,
                             vanish_below=vanish_below)
        if plot is not None:
            monitor.plot(plot)
        target.write(_view(monitor))


def _check_thresholds(**thresholds: float | None) -> None:
    """``--explode-above``/``--vanish-below`` are positive numbers (checked here, so
    that the error names the option, not ``GradientMonitor``'s argument).

    Raises:
        SpecError: one is zero, negative or not a number.
    """
    import math

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

    check_output(path)
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
    except ImportError as e:
        raise MissingDependencyError("matplotlib", "plot", needed_for="plots") from e
    suffix = path.suffix.lstrip(".").lower()
    # NB: matplotlib's own list, less the formats that need an outside program (pgf: LaTeX)
    formats = set(FigureCanvasAgg.get_supported_filetypes()) - {"pgf"}
    if suffix and suffix not in formats:
        raise SpecError(f"--plot {str(path)!r}: .{suffix} is not an image format matplotlib "
                        "writes by itself; use .png, .svg or .pdf")


def _train(prepared: Any, *, steps: int, lr: float, **thresholds: Any) -> Any:
    import torch

    import hookscope
    from hookscope.core.failures import message
    from hookscope.core.tensors import iter_tensors

    net = prepared.loaded.model
    net.train()  # NB: before the check: a model may fail in training mode alone
    # one observed forward first, in the mode the steps run in: inputs that do not fit
    # fail with the module's path and its input shapes (a ModelRunError), not inside
    # the training loop
    hookscope.trace(net, *prepared.args, kwargs=prepared.kwargs, time=False, stats=False,
                    memory=False)
    trainable = [p for p in net.parameters() if p.requires_grad]
    if not trainable:
        raise hookscope.SpecError(
            f"grads trains the model, and {type(net).__name__} has no parameter that "
            "requires grad (none, or all frozen); for its forward use hookscope trace")
    opt = torch.optim.SGD(trainable, lr=lr)
    found: list[Any] = []
    with hookscope.GradientMonitor(net, optimizer=opt, on_anomaly=found.append,
                                   **thresholds) as monitor:
        for step in range(steps):
            out = net(*prepared.args, **prepared.kwargs)
            roots = [t for _, t in iter_tensors(out, "out")
                     if t.requires_grad and t.is_floating_point()]
            if not roots:
                raise hookscope.SpecError("no floating output of the model requires grad; "
                                          "grads needs a model with trainable parameters")
            try:
                torch.stack([t.sum() for t in roots]).sum().backward()  # type: ignore[no-untyped-call]
            except Exception as e:  # the model's own backward (the forward was checked)
                raise hookscope.HookscopeError(
                    f"the model's backward raised {type(e).__name__} at step {step}: "
                    f"{message(e)}"
                ) from e
            opt.step()
            opt.zero_grad()
    return monitor


def _view(monitor: Any) -> Rendered:
    from hookscope.render.grads_table import grads_table

    return Rendered.of_tables(
        lambda ascii: [grads_table(monitor.history, monitor.anomalies, ascii=ascii)]
    )
