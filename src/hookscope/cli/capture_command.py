"""``hookscope capture MODEL --select GLOB -o DIR``: save chosen modules' activations.

The command loads the model and its inputs like ``trace`` does, runs one forward
through :func:`hookscope.capture` with ``save_to=DIR`` (safetensors shards + a JSON
index, see ``interventions/storage.py``) and prints one line per saved call. It is
registered on the app of ``cli/app.py`` when that module is imported.
"""

from __future__ import annotations

import contextlib
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from hookscope.cli.failure_boundary import failure_boundary, model_prints_to_stderr
from hookscope.cli.shared_options import (
    ConfigOpt,
    DebugOpt,
    DeviceOpt,
    InputOpt,
    ModelArg,
)


class What(str, Enum):
    """``--what``: what the capture saves of each call."""

    OUTPUT = "output"
    INPUT = "input"
    BOTH = "both"


def capture_command(
    model: ModelArg,
    select: Annotated[str, typer.Option(
        "--select", "-s", metavar="GLOB",
        help="Modules to capture: a glob over module paths (* within a segment, ** across "
        "dots); repeat with commas for several.")],
    output: Annotated[Path, typer.Option(
        "--output", "-o", metavar="DIR",
        help="A new (or empty) directory for the activations, in one that exists.")],
    inputs: InputOpt = None,
    what: Annotated[What, typer.Option(help="What to save of each call.")] = What.OUTPUT,
    shard_mib: Annotated[float, typer.Option(help="Write a shard every N MiB.")] = 64.0,
    device: DeviceOpt = None,
    config: ConfigOpt = None,
    debug: DebugOpt = False,
) -> None:
    """Save the activations of chosen modules (safetensors + a JSON index)."""
    import hookscope
    from hookscope.cli.running import prepare
    from hookscope.core.model.selectors import compile_selector, require_match

    with failure_boundary(debug=debug):
        output = output.expanduser()  # the shell leaves the ~ of --output=~/acts alone
        made = _check_output(output)
        globs = [g.strip() for g in select.split(",") if g.strip()]
        with model_prints_to_stderr():
            prepared = prepare(model, inputs=inputs or [], config=config, device=device)
        net = prepared.loaded.model
        require_match(select, compile_selector(globs),
                      [p for p, _ in net.named_modules(remove_duplicate=False)],
                      type(net).__name__, option="--select")
        try:
            with model_prints_to_stderr():
                acts = hookscope.capture(
                    prepared.loaded.model, *prepared.args, kwargs=prepared.kwargs,
                    select=globs, what=what.value, save_to=output, shard_mib=shard_mib,
                )
        except BaseException:
            # a failed command leaves nothing behind (the library keeps a partial
            _empty(output, made=made)  # capture, for a run of hours)
            raise
        for name in acts:
            info = acts.info(name) if hasattr(acts, "info") else {}
            typer.echo(f"{name or '<root>'}\t{info.get('module_class', '')}")
        calls = "call" if len(acts) == 1 else "calls"
        typer.echo(f"{len(acts)} {calls} saved to {output}", err=True)


def _check_output(output: Path) -> bool:
    """Check, before the model is built, that ``output`` is a new directory in an
    existing, writable one, or an empty directory; return whether it is new.

    Like every other command's ``-o``, the directory that holds it is not made:
    a mistyped parent would otherwise scatter activations in a tree of its own.

    Raises:
        SpecError: ``output`` is a file or a directory that is not empty, or its
            parent is missing or not writable; in the command's own words.
    """
    import os

    from hookscope.cli.output import check_parent
    from hookscope.errors import SpecError

    shown = str(output)
    if output.exists():
        if output.is_dir() and not any(output.iterdir()):
            return False
        kind = "a file" if not output.is_dir() else "a directory that is not empty"
        raise SpecError(f"--output {shown!r} is {kind}; give a new directory (or an empty one)")
    check_parent(Path(os.path.realpath(output)).parent, f"--output {shown!r}")
    return True


def _empty(directory: Path, *, made: bool) -> None:
    """Remove what a failed capture wrote into ``directory`` (new or empty before),
    and the directory itself when the capture ``made`` it."""
    import shutil

    if directory.is_dir():
        for child in directory.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)
        if made:
            with contextlib.suppress(OSError):
                directory.rmdir()
