"""``hookscope compare SPEC_A [SPEC_B] --b-autocast bf16 ...``: where two runs part.

The command loads side A's model and its inputs as ``trace`` does, and side B's model
when a second spec is given (else side B is side A's model under the ``--b-*``
settings), calls :func:`hookscope.compare` and prints its one-line answer and table, or
its rows as JSON or CSV. It is registered on the app of ``cli/app.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hookscope.cli.failure_boundary import failure_boundary, model_prints_to_stderr
from hookscope.cli.output import OutputTarget, Rendered
from hookscope.cli.shared_options import (
    ConfigOpt,
    DebugOpt,
    DepthOpt,
    DeviceOpt,
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


def compare_command(
    model: ModelArg,
    model_b: Annotated[str | None, typer.Argument(
        metavar="[MODEL_B]", show_default=False,
        help="Side B's model (default: MODEL itself, under the --b-* settings).")] = None,
    inputs: InputOpt = None,
    b_autocast: Annotated[str | None, typer.Option(
        metavar="DTYPE", show_default=False,
        help="Run side B under torch.autocast: bf16 or fp16.")] = None,
    b_dtype: Annotated[str | None, typer.Option(
        metavar="DTYPE", show_default=False,
        help="Side B is a copy cast to this dtype: bf16, fp16, fp32 or fp64.")] = None,
    b_device: Annotated[str | None, typer.Option(
        metavar="DEVICE", show_default=False,
        help="Side B is a copy on this device (cpu, cuda, cuda:1).")] = None,
    b_weights: Annotated[Path | None, typer.Option(
        metavar="FILE", show_default=False,
        help="Side B is a copy with these weights: a .safetensors or torch.save file.")] = None,
    b_compile: Annotated[bool, typer.Option(
        "--b-compile", help="Side B is torch.compile'd (inductor).")] = False,
    b_compile_backend: Annotated[str | None, typer.Option(
        "--b-compile-backend", metavar="NAME", show_default=False,
        help="Side B is torch.compile'd with this backend: eager, aot_eager, inductor, "
        "...")] = None,
    match: Annotated[list[str] | None, typer.Option(
        metavar="A=B", show_default=False,
        help="Side A's module path = side B's, where they differ; repeat for more.")] = None,
    tolerance: Annotated[float, typer.Option(
        metavar="X", help="The introduced max abs error above which a call is named first.",
    )] = 1e-4,
    spill: Annotated[Path | None, typer.Option(
        metavar="DIR", show_default=False,
        help="Stream the calls' values to this new directory instead of memory.")] = None,
    fmt: FormatWithCsvOpt = None,
    depth: DepthOpt = None,
    no_fold: NoFoldOpt = False,
    output: OutputOpt = None,
    no_color: NoColorOpt = False,
    width: WidthOpt = None,
    device: DeviceOpt = None,
    config: ConfigOpt = None,
    debug: DebugOpt = False,
) -> None:
    """Compare two models, or one model under two settings, call by call: where do
    their values start to differ?"""
    import hookscope
    from hookscope.cli.running import check_output, load, prepare

    fmt = chosen_format(fmt, output, FormatWithCsv)
    target = OutputTarget(output, no_color, width)
    with failure_boundary(debug=debug):
        check_output(output)
        mapping = _mapping(match or [])
        spill = None if spill is None else spill.expanduser()
        made = spill is not None and not spill.exists()
        with model_prints_to_stderr():
            prepared = prepare(model, inputs=inputs or [], config=config, device=device)
            other = None if model_b is None else load(model_b, config=config,
                                                      device=device).model
            try:
                result = hookscope.compare(
                    prepared.loaded.model, other, *prepared.args, kwargs=prepared.kwargs,
                    b_autocast=b_autocast, b_dtype=b_dtype, b_device=b_device,
                    b_compile=b_compile_backend or b_compile, b_weights=b_weights,
                    match=mapping or None, tolerance=tolerance, spill=spill,
                )
            except BaseException:
                if made and spill is not None:  # a failed command leaves nothing behind
                    import shutil

                    shutil.rmtree(spill, ignore_errors=True)
                raise
        if fmt is FormatWithCsv.JSON:
            target.write(Rendered.of_text(result.to_json()))
        elif fmt is FormatWithCsv.CSV:
            target.write(Rendered.of_text(result.to_csv()))
        else:
            from hookscope.compare.table import compare_table

            target.write(Rendered.of_tables(lambda ascii: [
                result.answer(),
                compare_table(result, depth=depth, fold=not no_fold, ascii=ascii)]))


def _mapping(pairs: list[str]) -> dict[str, str]:
    """``["a.x=b.x", ...]`` as a dict.

    Raises:
        SpecError: an item without ``=``.
    """
    from hookscope.errors import SpecError

    out = {}
    for item in pairs:
        a, sep, b = item.partition("=")
        if not sep:
            raise SpecError(f"--match {item!r} must be SIDE_A_PATH=SIDE_B_PATH, e.g. "
                            "--match features.1=features.0.bn")
        out[a.strip()] = b.strip()
    return out
