"""The options the ``hookscope`` commands share: output formats, and the typed
``Annotated`` option declarations every command module reuses (``cli/app.py`` and the
``*_command.py`` modules)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, TypeVar

import typer


class Format(str, Enum):
    """Output formats of ``summary`` and ``inspect``."""

    TABLE = "table"
    JSON = "json"


class FormatWithCsv(str, Enum):
    """Output formats of ``trace``, ``memory``, ``compare`` and ``diff``."""

    TABLE = "table"
    JSON = "json"
    CSV = "csv"


_F = TypeVar("_F", bound=Enum)


def chosen_format(given: _F | None, output: Path | None, kind: type[_F]) -> _F:
    """``--format`` as given, else the format ``-o FILE``'s extension names (``.json``,
    ``.csv``), else ``kind``'s first (the table, or lint's text)."""
    if given is not None:
        return given
    if output is not None and str(output) != "-":
        suffix = output.suffix.lower().removeprefix(".")
        for member in kind:
            if member.value == suffix:
                return member
    return next(iter(kind))


FormatOpt = Annotated[Format | None, typer.Option(
    "--format", "-f", show_default=False,
    help="table or json. Default: json for -o FILE.json, else table.")]
FormatWithCsvOpt = Annotated[FormatWithCsv | None, typer.Option(
    "--format", "-f", show_default=False,
    help="table, json or csv. Default: as -o FILE's extension says (.json, .csv), "
    "else table.")]


ModelArg = Annotated[str, typer.Argument(
    metavar="MODEL", show_default=False,
    help="file.py:factory, package.module:factory, torchvision:NAME or "
    "transformers:NAME[/TASK] (a model type, or a checkpoint id or directory whose "
    "config.json is on this machine; the weights are random)",
)]
InputOpt = Annotated[list[str] | None, typer.Option(
    "--input", "-i", metavar="[NAME=]SHAPE[:DTYPE]", show_default=False,
    help="An example input, e.g. 1,3,224,224 or input_ids=1,128:int64; repeat for more. "
    "Default: the model's own example inputs (torchvision, transformers).",
)]
DepthOpt = Annotated[int | None, typer.Option(
    min=0, metavar="N", show_default=False,
    help="Show modules down to this depth (0: the model only).")]
DeviceOpt = Annotated[str | None, typer.Option(
    metavar="DEVICE", show_default=False,
    help="Build and run on this device: cpu, cuda, cuda:1 or meta "
    "(shapes and parameters without allocating memory).")]
ConfigOpt = Annotated[str | None, typer.Option(
    metavar="K=V,...", show_default=False,
    help="Config overrides for transformers:NAME, e.g. num_hidden_layers=2,hidden_size=256.")]
OutputOpt = Annotated[Path | None, typer.Option(
    "--output", "-o", metavar="FILE", show_default=False,
    help="Write to FILE (replaced only when everything succeeded) instead of stdout; "
    "'-' is stdout. FILE.json and FILE.csv get that format unless --format says another.")]
TimelineOpt = Annotated[Path | None, typer.Option(
    "--timeline", metavar="FILE", show_default=False,
    help="Also write the calls as a timeline (Chrome trace-event JSON) to open in "
    "ui.perfetto.dev or chrome://tracing.")]
NoColorOpt = Annotated[bool, typer.Option(
    "--no-color", help="Plain ASCII tables without colour, also on a terminal "
    "(as does NO_COLOR=1; FORCE_COLOR=1 colours a pipe).")]
WidthOpt = Annotated[int | None, typer.Option(
    min=40, metavar="N", show_default=False,
    help="Table width in characters (default: terminal, or 120).")]
OpsOpt = Annotated[bool, typer.Option(
    "--ops", help="Count FLOPs per call and add the per-op table.")]
NoFoldOpt = Annotated[bool, typer.Option(
    "--no-fold", help="Show every repeated block (by default a run of identical blocks "
    "is its first block and one row for the rest).")]
CompiledOpt = Annotated[bool, typer.Option(
    "--compiled", help="Also run the model's torch.compile code once and report its graphs, "
    "each graph break (reason, module, source line) and recompilations; module facts "
    "always come from the original module run eagerly.")]
DebugOpt = Annotated[bool, typer.Option(
    "--debug", help="On failure, print the full traceback before the error line.")]
DtypeOpt = Annotated[str | None, typer.Option(
    metavar="DTYPE", show_default=False,
    help="Cast the model and its floating inputs: float16 (half, fp16), bfloat16 (bf16), "
    "float64 or float32.")]


def split_names(text: str | None) -> list[str] | None:
    """``"a, b,c"`` -> ``["a", "b", "c"]``; ``None`` or blank -> ``None``."""
    if text is None:
        return None
    names = [part.strip() for part in text.split(",") if part.strip()]
    return names or None
