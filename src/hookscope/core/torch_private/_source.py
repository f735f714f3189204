"""The body of a torch function as text, to compare with the copy a wrapper relies on.

A wrapper that skips a torch function (the fast path calls ``forward`` itself where
torch's ``_call_impl`` or ``_slow_forward`` would only call it) checks once per process
that this torch's source still reads as the copy it pins; any difference turns the
shortcut off with a warning.
"""

from __future__ import annotations

import inspect


def source_body(fn: object) -> str:
    """The source of ``fn`` less its ``def`` line, with comments and whitespace removed;
    ``""`` where the source cannot be read (no such function, a compiled build)."""
    try:
        source = inspect.getsource(fn)  # type: ignore[arg-type]
    except (OSError, TypeError):
        return ""
    return "".join(
        line.split("#", 1)[0].strip() for line in source.splitlines()[1:]
    ).replace(" ", "")
