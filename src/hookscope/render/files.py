"""Writing a rendered file all at once: a temporary file in the same folder, renamed.

Where it sits: everything that writes a file the user named (the timeline, the HTML
report, the command line's ``-o``) goes through :func:`replace_atomically`, so a
failure (a full disk, Ctrl-C) leaves neither a partial file nor a temporary one;
:func:`write_text_atomically` adds the checks and the one-line
:class:`~hookscope.errors.SpecError` the renderers give.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from hookscope.errors import SpecError

__all__ = ["replace_atomically", "write_text_atomically"]


def write_text_atomically(path: Path, text: str, *, example: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` in one step; ``example`` is a file name the
    error for a folder suggests (``timeline.json``). Returns the file written.

    Raises:
        SpecError: ``path`` is a folder, its folder does not exist, or it cannot be
            written; no file is left behind.
    """
    shown = str(path)
    target = Path(os.path.realpath(path.expanduser()))
    if target.is_dir():
        raise SpecError(f"cannot write {shown!r}: it is a folder; give a file name, "
                        f"e.g. {example}")
    if not target.parent.is_dir():
        raise SpecError(f"cannot write {shown!r}: folder {str(target.parent)!r} does not "
                        "exist; create it first")
    try:
        replace_atomically(target, text)
    except OSError as e:
        raise SpecError(f"cannot write {shown!r}: {e.strerror or type(e).__name__}") from e
    return target


def replace_atomically(target: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to a temporary file beside ``target`` and rename it over
    ``target``, which keeps its permissions (a new file gets the umask's).

    Raises:
        OSError: the file cannot be written; the temporary file is removed, also on
            Ctrl-C.
    """
    try:
        mode: int | None = target.stat().st_mode
    except OSError:
        mode = None
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.chmod(tmp, stat.S_IMODE(mode) if mode is not None else 0o666 & ~_umask())
        os.replace(tmp, target)
    except BaseException:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise


def _umask() -> int:
    """The process umask (reading it means setting it; it is put back at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
