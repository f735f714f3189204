"""``hookscope demo``: a guided tour on the built-in example models.

It runs the public API on :mod:`hookscope.examples` (the seed notes' nested ``Model``
and a small CNN) and prints, each after a one-line explanation: the structure
(:func:`hookscope.inspect`), the summary table (:func:`hookscope.summary`), a short
trace with time and activation statistics (:func:`hookscope.trace`), the FLOPs per
aten op, and the commands to try next.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

TRACE_RUNS = 5
"""The demo's trace reports median times: the first run on a CPU is often much slower."""

NEXT_COMMANDS: tuple[tuple[str, str], ...] = (
    ("hookscope summary hookscope.examples:seed_model --input 2,2",
     "the nested model above, from the command line"),
    ("hookscope summary path/to/model.py:make_model --input 1,3,224,224",
     "your own model: a factory function in a file"),
    ("hookscope summary torchvision:resnet18 --depth 2", "a torchvision model, random weights"),
    ("hookscope trace hookscope.examples:small_cnn --input 1,3,32,32 --sort time --top 5",
     "the slowest calls"),
    ("hookscope trace transformers:gpt2 --ops --top 10", "FLOPs of the heaviest aten ops"),
    ("hookscope inspect transformers:bert --format json", "the structure as JSON"),
)


def run_demo(*, no_color: bool = False, width: int | None = None) -> None:
    """Print the tour on stdout.

    Args:
        no_color: plain ASCII without colour, also on a terminal.
        width: table width (default: the terminal's, or 120).
    """
    import torch

    from hookscope import examples
    from hookscope.cli.output import color_choice
    from hookscope.render.table import make_console

    console = make_console(width=width, color=color_choice(no_color))
    ascii = no_color or not console.is_terminal
    seed = examples.seed_model()
    x = torch.arange(4.0).reshape(examples.SEED_INPUT_SHAPE)
    cnn = examples.small_cnn()
    image = torch.randn(examples.SMALL_CNN_INPUT_SHAPE, generator=torch.Generator().manual_seed(0))
    _show_structure(console, seed, ascii=ascii)
    _show_summaries(console, [(seed, x), (cnn, image)], ascii=ascii)
    _show_trace(console, cnn, image, ascii=ascii)
    _show_flops(console, cnn, image, ascii=ascii)
    _show_next(console)


def _heading(console: Console, title: str, explanation: str) -> None:
    from rich.text import Text

    console.print()
    console.print(Text(title, style="bold cyan"))
    console.print(Text(explanation))


def _show_structure(console: Console, model: Any, *, ascii: bool) -> None:
    import hookscope
    from hookscope.render.table import structure_table

    _heading(
        console, "1. Structure: hookscope.inspect(model)",
        "A small nested model, read without running it: the module tree, parameters "
        "and buffers (what named_modules, named_parameters and named_buffers list).",
    )
    info = hookscope.inspect(model)
    console.print(structure_table(info, ascii=ascii))
    w1, duck = info.parameters["ab.b.W1"], info.buffers["cd.c.duck"]
    console.print(f'info["ab.b.W1"]   -> parameter, shape {list(w1.shape)}, {w1.dtype}')
    console.print(f'info["cd.c.duck"] -> buffer, shape {list(duck.shape)}, {duck.dtype}')


def _show_summaries(console: Console, runs: Sequence[tuple[Any, Any]], *, ascii: bool) -> None:
    import hookscope

    _heading(
        console, "2. Summary: hookscope.summary(model, x)",
        "One forward pass under torch.no_grad(): what every module received and returned, "
        "like a forward hook that prints shapes, for every layer at once.",
    )
    for model, x in runs:
        console.print(hookscope.summary(model, x).table(ascii=ascii))


def _show_trace(console: Console, model: Any, x: Any, *, ascii: bool) -> None:
    import hookscope
    from hookscope.render.trace_table import trace_table

    _heading(
        console, "3. Trace: hookscope.trace(model, x)",
        "Time per call (inclusive and self) and statistics of every output tensor; "
        f"the 5 slowest calls of the small CNN, median of {TRACE_RUNS} runs.",
    )
    runs = [hookscope.trace(model, x, stats=True, memory=False) for _ in range(TRACE_RUNS)]
    trace = hookscope.median_times(runs)
    console.print(trace_table(trace, sort="time", top=5, ascii=ascii))


def _show_flops(console: Console, model: Any, x: Any, *, ascii: bool) -> None:
    import hookscope
    from hookscope.probes import PROBES

    if "ops" not in PROBES:
        return
    from hookscope.render.ops_table import ops_table

    _heading(
        console, "4. FLOPs: hookscope.trace(model, x, ops=True)",
        "Every aten op each layer ran, with FLOPs from torch.utils.flop_counter's "
        "formulas (a multiply-add is 2 FLOPs); the heaviest ops of the small CNN.",
    )
    trace = hookscope.trace(model, x, time=False, stats=False, memory=False, ops=True)
    console.print(ops_table(trace, top=5, ascii=ascii))


def _show_next(console: Console) -> None:
    from rich.text import Text

    _heading(console, "Next", "Try these (hookscope COMMAND --help lists every option):")
    for command, what in NEXT_COMMANDS:
        line = Text("  ")
        line.append(command, style="bold")
        line.append(f"   # {what}", style="dim")
        console.print(line)
