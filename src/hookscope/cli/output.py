"""Where a command's result goes: the terminal, a pipe, or a file written atomically.

A command renders its result into a :class:`Rendered`: either finished text (JSON,
CSV) or a function that builds rich tables for a given drawing style, because the
style depends on the destination. :class:`OutputTarget` then decides:

- a terminal gets coloured tables with box characters, as wide as the terminal;
- a pipe, a file, or ``--no-color`` gets plain ASCII tables without colour, at
  ``--width`` columns (default: ``COLUMNS`` when set, else 120): the same width gives
  the same layout on a terminal and in a pipe;
- ``-o FILE`` is written to a temporary file in the same directory and renamed
  over ``FILE`` only once everything is rendered and written, so a failure never
  leaves a half-written file. ``-o -`` is stdout; a symlink is written through (the
  link stays), a device or FIFO (``-o /dev/stdout``) is written directly.

``NO_COLOR`` (any value) in the environment acts as ``--no-color``; ``FORCE_COLOR``
gives the terminal's coloured tables also in a pipe.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TableBuilder = Callable[[bool], Sequence[Any]]
"""``build(ascii) -> renderables``: rich tables drawn in ASCII or with box characters."""


@dataclass(frozen=True)
class Rendered:
    """A command's result, ready for an :class:`OutputTarget`.

    Attributes:
        text: finished text (JSON, CSV), written as is.
        tables: builds the rich renderables when the result is a table.
    """

    text: str | None = None
    tables: TableBuilder | None = None

    @classmethod
    def of_text(cls, text: str) -> Rendered:
        return cls(text=text if text.endswith("\n") else text + "\n")

    @classmethod
    def of_tables(cls, build: TableBuilder) -> Rendered:
        return cls(tables=build)


@dataclass(frozen=True)
class OutputTarget:
    """Destination and style of a command's output.

    Attributes:
        path: write to this file instead of stdout.
        no_color: plain ASCII tables without colour, also on a terminal.
        width: table width in characters (default: the terminal's, or 120).
    """

    path: Path | None = None
    no_color: bool = False
    width: int | None = None

    def write(self, rendered: Rendered) -> None:
        """Write ``rendered`` to the file or to stdout.

        Raises:
            SpecError: the output file cannot be written (nothing is left behind).
        """
        if self.path is not None and str(self.path) != "-":
            # the shell leaves the ~ of --output=~/x.json alone
            write_atomically(self.path.expanduser(), self._as_text(rendered))
            return
        from hookscope.errors import SpecError

        if sys.stdout is None:  # started with stdout closed (`>&-`)
            raise SpecError("stdout is closed; write the result to a file with -o FILE")
        reconfigure = getattr(sys.stdout, "reconfigure", None)
        if callable(reconfigure):  # PYTHONIOENCODING=ascii: a '?' for what it cannot show
            reconfigure(errors="replace")
        with stdout_errors(hint="try -o FILE elsewhere"):
            if rendered.text is not None:
                sys.stdout.write(rendered.text)
                sys.stdout.flush()
            else:
                self._print_tables(rendered)

    def _as_text(self, rendered: Rendered) -> str:
        if rendered.text is not None:
            return rendered.text
        from hookscope.render.table import pipe_width, to_text

        assert rendered.tables is not None
        width = self.width or pipe_width()
        return "".join(to_text(r, width=width) for r in _worded(rendered.tables(True)))

    def _print_tables(self, rendered: Rendered) -> None:
        from hookscope.render.table import make_console

        assert rendered.tables is not None
        console = make_console(width=self.width, color=color_choice(self.no_color))
        # rich's own reaction to a closed pipe is SystemExit(1), which would hide the
        # model's error after a partial table; raise what writing text raises instead.
        console.on_broken_pipe = _broken_pipe  # type: ignore[method-assign]
        renderables = rendered.tables(self.no_color or not console.is_terminal)
        for renderable in _worded(renderables):
            console.print(renderable)


def _worded(renderables: Sequence[Any]) -> Sequence[Any]:
    """``renderables`` with their tables' captions saying how to see left-out columns in
    command-line terms (``widen with --width 142``, ``--no-fold``) rather than Python ones."""
    from hookscope.render.grid import Wording
    from hookscope.render.table import GridTable

    for renderable in renderables:
        if isinstance(renderable, GridTable):
            renderable.wording = Wording(widen="widen with --width {width}",
                                         pick="or pick them with --columns",
                                         unfold="--no-fold shows them",
                                         deeper="--depth {depth} shows them")
    return renderables


def color_choice(no_color: bool) -> bool | None:
    """``make_console``'s ``color``: off with ``--no-color`` or ``NO_COLOR``, on with
    ``FORCE_COLOR``, else ``None`` (colour only on a terminal)."""
    if no_color or os.environ.get("NO_COLOR"):
        return False
    return True if os.environ.get("FORCE_COLOR") else None


@contextmanager
def stdout_errors(*, hint: str) -> Iterator[None]:
    """Turn a failed write to stdout (a full disk, ``/dev/full``) into a ``SpecError``
    naming the reason and ``hint``; a closed pipe (``| head``) propagates as is.

    Raises:
        SpecError: stdout could not be written.
    """
    from hookscope.errors import SpecError

    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as e:
        discard_stdout()
        reason = e.strerror or type(e).__name__
        raise SpecError(f"cannot write to stdout: {reason}; {hint}") from e


def discard_stdout() -> None:
    """Point stdout at /dev/null once it cannot be written (``| head``, a full disk).

    Python flushes stdout again at exit; without this, that flush fails too and
    prints "Exception ignored ... BrokenPipeError" (the recipe from Python's docs on
    SIGPIPE).
    """
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # a captured, in-memory stdout
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def _broken_pipe() -> None:
    discard_stdout()
    raise BrokenPipeError


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed on success.

    A symlink is followed (the file it points to is replaced, the link stays); a path
    that is neither a file nor a directory (``/dev/stdout``, a FIFO) is written
    directly. A replaced file keeps its permissions.

    Raises:
        SpecError: the file cannot be written; no file (new or temporary) is left.
    """
    from hookscope.errors import SpecError

    shown = str(path)
    try:
        mode = os.stat(path).st_mode
    except OSError:
        mode = None
    if mode is not None and stat.S_ISDIR(mode):
        raise SpecError(f"output path {shown!r} is a directory; give a file name, e.g. -o out.txt")
    if mode is not None and not stat.S_ISREG(mode):
        try:
            with open(path, "w", encoding="utf-8", newline="") as f:
                f.write(text)
        except OSError as e:
            raise SpecError(f"cannot write output file {shown!r}: {e.strerror or e}") from e
        return
    path = Path(os.path.realpath(path))
    if not path.parent.is_dir():
        raise SpecError(f"cannot write output file {shown!r}: {missing_folder(path.parent)}")
    from hookscope.render.files import replace_atomically  # not at import: `--help` needs no torch

    try:
        replace_atomically(path, text)
    except OSError as e:
        reason = e.strerror or type(e).__name__
        raise SpecError(f"cannot write output file {shown!r}: {reason}") from e


def missing_folder(folder: Path) -> str:
    """Why ``folder`` (not a directory) cannot hold a file: it does not exist, or a
    file stands where it or one of its parents should be."""
    for part in (folder, *folder.parents):
        if part.exists():
            if part.is_dir():
                break
            return f"{str(part)!r} is a file, not a directory"
    return f"directory {str(folder)!r} does not exist; create it first"


def check_parent(folder: Path, option: str) -> None:
    """Check that ``folder`` can hold what an option names, before any model is built.

    Args:
        folder: the directory the file or directory is to be made in.
        option: how the message names the option's value (``--output 'run'``).

    Raises:
        SpecError: ``folder`` is missing, is a file, or cannot be written.
    """
    from hookscope.errors import SpecError

    if not folder.is_dir():
        raise SpecError(f"{option}: {missing_folder(folder)}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise SpecError(f"{option}: directory {str(folder)!r} is not writable; "
                        "choose another directory")
