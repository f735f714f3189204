"""How the command line fails: one ``error: ...`` line on stderr and an exit status.

Every command body runs inside :func:`failure_boundary`. A
:class:`~hookscope.errors.HookscopeError` (a bad spec, a bad option, a model that
raised) becomes one line and exit status 2; anything else is a bug in hookscope and
becomes one line and exit status 1. ``--debug`` prints the traceback first. Usage
errors found by the argument parser are turned into the same one line by
:func:`report_usage_error`. Around the model's own code, :func:`model_prints_to_stderr`
keeps stdout for hookscope's result, and :func:`partial_on_failure` writes the partial
result when the model raises.
"""

from __future__ import annotations

import contextlib
import sys
import traceback
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import typer

from hookscope.cli.output import OutputTarget, Rendered, discard_stdout

if TYPE_CHECKING:
    from hookscope.core.records.trace import Trace

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 1  # stdout closed early (`| head`): quietly, as rich and click do


def _click_error_class() -> type[Exception]:
    """The base of the parser's errors (click's own, or the copy that typer vendors)."""
    for cls in typer.BadParameter.__mro__:
        if cls.__name__ == "ClickException":
            return cls
    return Exception  # pragma: no cover - every typer release has ClickException


CLICK_ERROR = _click_error_class()
"""Catch this to catch a usage error raised by the argument parser."""


def one_line(text: str) -> str:
    """Join the non-empty lines of ``text`` with single spaces."""
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def print_error(message: str) -> None:
    """Write ``error: <message>`` as one line on stderr."""
    sys.stderr.write(f"error: {one_line(message)}\n")
    sys.stderr.flush()


@contextmanager
def hookscope_warnings_as_lines() -> Iterator[None]:
    """hookscope's own warnings as one ``warning: <message>`` line on stderr: the code
    line a warning names is the user's in a program, typer's here. Others (the model's,
    its library's) are shown as Python shows them."""
    shown = warnings.showwarning

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: Any = None, line: str | None = None) -> None:
        text = str(message)
        if text.startswith("hookscope: "):
            sys.stderr.write(f"warning: {one_line(text.removeprefix('hookscope: '))}\n")
        else:
            shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        if warnings.showwarning is show:
            warnings.showwarning = shown


@contextmanager
def failure_boundary(*, debug: bool) -> Iterator[None]:
    """Turn an exception from the block into an error line and ``typer.Exit``.

    Args:
        debug: print the traceback before the error line.

    Raises:
        typer.Exit: with status 2 for a ``HookscopeError``, 130 on Ctrl-C, 1 otherwise.
    """
    try:
        yield
    except (typer.Exit, typer.Abort, CLICK_ERROR):
        raise
    except KeyboardInterrupt:
        print_error("interrupted")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except BrokenPipeError:
        discard_stdout()
        raise typer.Exit(EXIT_BROKEN_PIPE) from None
    except Exception as e:
        raise typer.Exit(_report(e, debug=debug)) from None


def _report(error: Exception, *, debug: bool) -> int:
    from hookscope.errors import HookscopeError

    if debug:
        traceback.print_exception(type(error), error, error.__traceback__, file=sys.stderr)
    if isinstance(error, HookscopeError):
        print_error(str(error))
        return EXIT_USAGE
    hint = "" if debug else "; rerun with --debug for the traceback"
    print_error(f"internal error: {type(error).__name__}: {error}{hint}")
    return EXIT_INTERNAL


def report_usage_error(error: Any) -> int:
    """Print a parser error as one line (or the help, when no command was given).

    Args:
        error: a click-style exception (``format_message()``, ``exit_code``, ``ctx``).

    Returns:
        The exit status: the error's own (2 for usage errors), 0 after printing help.
    """
    ctx = getattr(error, "ctx", None)
    if type(error).__name__ == "NoArgsIsHelpError" and ctx is not None:
        sys.stdout.write(ctx.get_help() + "\n")
        return EXIT_OK
    # typer >= 0.20 validates with pydantic, which prefixes "Value error, ".
    message = one_line(error.format_message()).replace("Value error, ", "")
    if ctx is not None:
        message += f" (see '{ctx.command_path} --help')"
    print_error(message)
    code = getattr(error, "exit_code", EXIT_USAGE)
    return code if isinstance(code, int) else EXIT_USAGE


@contextmanager
def model_prints_to_stderr() -> Iterator[None]:
    """Around the model's own code: what it prints goes to stderr (stdout carries only
    the result), and a ``sys.exit()`` in it becomes an error line, not a silent exit."""
    from hookscope.errors import SpecError

    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    except SystemExit as e:
        raise SpecError(
            f"the model's code called sys.exit({e.code!r}) while hookscope ran it; "
            "a model must return its output or raise"
        ) from e


@contextmanager
def partial_on_failure(
    render: Callable[[Trace], Rendered], target: OutputTarget
) -> Iterator[None]:
    """When the model raises, write the partial result where the whole one would go
    (stdout, or ``-o FILE`` atomically, as on success), then re-raise.

    The partial result says where the model failed (a ``FAILED`` line, the JSON's
    ``error``), so a file holding it is not mistaken for a finished run; the exit
    status is the model error's.
    """
    from hookscope.errors import HookscopeError, ModelRunError

    try:
        yield
    except ModelRunError as e:
        if e.trace is None:
            raise
        # a bad --columns, a closed stdout or an unwritable file must not hide the
        # model's own error.
        try:
            with contextlib.suppress(HookscopeError):
                target.write(render(e.trace))
        except BrokenPipeError:
            discard_stdout()
        raise
