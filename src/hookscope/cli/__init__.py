"""The ``hookscope`` command line.

``main`` is the entry point of the ``hookscope`` console script and of
``python -m hookscope``. The commands live in :mod:`hookscope.cli.app`; they parse
arguments, load the model (:mod:`hookscope.cli.loading`), call the public API and
pick a renderer. Nothing heavy (torch, the model libraries) is imported until a
command needs it.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line and return its exit status.

    Args:
        argv: the arguments after the program name; ``None`` reads ``sys.argv[1:]``.

    Returns:
        0 on success, 2 for bad input (one ``error: ...`` line on stderr), 1 for an
        unexpected internal error (or, without a message, when stdout was closed
        early: ``hookscope ... | head``), 130 when interrupted.

    Example:
        >>> main(["summary", "hookscope.examples:seed_model", "--input", "2,2"])
        0
    """
    from hookscope.cli.app import run

    return run(argv)
