"""Where a command's result goes: the terminal, a pipe, or a file written atomically.

A command renders its result into a :class:`Rendered`: either finished text (JSON,
CSV) or a function that builds rich tables for a given drawing style, because the
style depends on the destination. :class:`OutputTarget` then decides:

- a terminal gets coloured tables with box characters, as wide as the terminal;
- a pipe, a file, or ``--no-color`` gets plain ASCII tables without colour, at
  ``--width`` (default 120) columns;
- ``-o FILE`` is written to a temporary file in the same directory and renamed
  over ``FILE`` only once everything is rendered and written, so a failure never
  leaves a half-written file.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
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

    def to_stdout(self) -> OutputTarget:
        """The same style, on stdout (where a failed run's partial result goes)."""
        return OutputTarget(None, self.no_color, self.width)

    def write(self, rendered: Rendered) -> None:
        """Write ``rendered`` to the file or to stdout.

        Raises:
            SpecError: the output file cannot be written (nothing is left behind).
        """
        if self.path is not None:
            write_atomically(self.path, self._as_text(rendered))
        elif rendered.text is not None:
            sys.stdout.write(rendered.text)
            sys.stdout.flush()
        else:
            self._print_tables(rendered)

    def _as_text(self, rendered: Rendered) -> str:
        if rendered.text is not None:
            return rendered.text
        from hookscope.render.table import DEFAULT_WIDTH, to_text

        assert rendered.tables is not None
        width = self.width or DEFAULT_WIDTH
        return "".join(to_text(r, width=width) for r in rendered.tables(True))

    def _print_tables(self, rendered: Rendered) -> None:
        from hookscope.render.table import make_console

        assert rendered.tables is not None
        console = make_console(width=self.width, color=False if self.no_color else None)
        renderables = rendered.tables(self.no_color or not console.is_terminal)
        for renderable in renderables:
            console.print(renderable)


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed on success.

    Raises:
        SpecError: the file cannot be written; no file (new or temporary) is left.
    """
    from hookscope.errors import SpecError

    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except OSError as e:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        reason = e.strerror or type(e).__name__
        raise SpecError(f"cannot write output file {str(path)!r}: {reason}") from e


def _umask() -> int:
    """The process umask (reading it means setting it; it is put back at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
