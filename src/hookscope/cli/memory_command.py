"""``hookscope memory MODEL``: the memory of a training step, per module, and whether it
fits a device.

The model is built on the meta device (no weights are allocated: a 70B configuration
loads in a second), its example inputs likewise, and :func:`hookscope.memory_plan`
plans one step on fake tensors. The table (its title is the one-line answer), or
``--format json``/``csv``; ``--plot FILE.png`` also draws the timeline
(``hookscope[plot]``).
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from hookscope.cli.failure_boundary import failure_boundary, model_prints_to_stderr
from hookscope.cli.output import OutputTarget, Rendered
from hookscope.cli.shared_options import (
    ConfigOpt,
    DebugOpt,
    DtypeOpt,
    FormatWithCsv,
    FormatWithCsvOpt,
    InputOpt,
    ModelArg,
    NoColorOpt,
    NoFoldOpt,
    OutputOpt,
    WidthOpt,
    chosen_format,
)

if TYPE_CHECKING:
    from hookscope.memory_plan import MemoryPlan


def memory_command(
    model: ModelArg,
    inputs: InputOpt = None,
    batch_size: Annotated[int | None, typer.Option(
        min=1, metavar="N", show_default=False,
        help="Plan with N rows of input (the first dimension of the inputs).")] = None,
    optimizer: Annotated[str, typer.Option(
        metavar="NAME", help="A torch.optim class: sgd, adamw, adam, adagrad, rmsprop, ...")
    ] = "adamw",
    inference: Annotated[bool, typer.Option(
        "--inference", help="Plan one forward without gradients instead of a training step.")
    ] = False,
    dtype: DtypeOpt = None,
    autocast: Annotated[str | None, typer.Option(
        metavar="DTYPE", show_default=False, help="Run forward under autocast: bf16 or fp16.")
    ] = None,
    shards: Annotated[int, typer.Option(
        min=1, metavar="N", help="Per rank of FSDP2-style sharding over N ranks.")] = 1,
    checkpointing: Annotated[bool, typer.Option(
        "--checkpointing", help="Recompute each repeated block's activations in backward.")
    ] = False,
    checkpoint: Annotated[str | None, typer.Option(
        metavar="GLOB", show_default=False,
        help="Recompute these modules' activations in backward, e.g. 'layers.*'.")] = None,
    accumulation: Annotated[int, typer.Option(
        "--gradient-accumulation", min=1, metavar="N", help="Micro-batches per step.")] = 1,
    device_memory: Annotated[str | None, typer.Option(
        metavar="SIZE", show_default=False,
        help="Also find the largest batch that fits SIZE, e.g. 80GiB.")] = None,
    plot: Annotated[Path | None, typer.Option(
        metavar="FILE", show_default=False,
        help="Also draw the timeline to FILE.png (needs matplotlib).")] = None,
    fmt: FormatWithCsvOpt = None,
    output: OutputOpt = None,
    config: ConfigOpt = None,
    no_color: NoColorOpt = False,
    width: WidthOpt = None,
    no_fold: NoFoldOpt = False,
    debug: DebugOpt = False,
) -> None:
    """Peak memory of a training step per module (parameters, gradients, optimizer
    states, saved activations), planned without allocating it."""
    import hookscope
    from hookscope.cli.running import check_output, dtype_hints

    fmt = chosen_format(fmt, output, FormatWithCsv)
    target = OutputTarget(output, no_color, width)
    with failure_boundary(debug=debug):
        check_output(output)
        if plot is not None:
            from hookscope.cli.grads_command import _check_plot

            _check_plot(plot)
        with model_prints_to_stderr():
            prepared = _prepare(model, inputs or [], config)
        # the hint names the model's dtype: with --dtype the plan's copy has another
        hints = dtype_hints(prepared) if dtype is None else contextlib.nullcontext()
        with model_prints_to_stderr(), hints:
            plan = hookscope.memory_plan(
                prepared.loaded.model, *prepared.args, kwargs=prepared.kwargs,
                training=not inference, optimizer=optimizer, dtype=dtype, autocast=autocast,
                activation_checkpointing=checkpoint or checkpointing or None, shards=shards,
                gradient_accumulation=accumulation, batch_size=batch_size,
                device_memory=device_memory,
            )
        if plot is not None:
            plan.plot(str(plot))
            sys.stderr.write(f"note: timeline drawn to {plot}\n")
        target.write(memory_view(plan, fmt.value, fold=not no_fold))


def _prepare(model: str, inputs: list[str], config: str | None) -> Any:
    """The model and inputs built on the meta device; one whose ``__init__`` reads its
    own weights' values, which meta has none of, is built as its code builds it."""
    from hookscope.cli.running import prepare
    from hookscope.errors import SpecError

    try:
        return prepare(model, inputs=inputs, config=config, device="meta")
    except SpecError as e:
        if "meta" not in str(e):
            raise
        sys.stderr.write("note: the model cannot be built on the meta device "
                         f"({str(e).rsplit(': ', 1)[-1]}); building it as its code does\n")
        return prepare(model, inputs=inputs, config=config, device=None)


def memory_view(plan: MemoryPlan, fmt: str, *, fold: bool = True) -> Rendered:
    """The table of ``plan``, or its JSON or CSV."""
    if fmt == "json":
        return Rendered.of_text(plan.to_json())
    if fmt == "csv":
        return Rendered.of_text(plan.to_csv())
    return Rendered.of_tables(lambda ascii: [plan.table(ascii=ascii, fold=fold)])
