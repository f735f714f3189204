"""Writing a rendered file all at once: a temporary file in the same folder, renamed.

Where it sits: the renderers that write files (``render/timeline.py``) call it, so a
failure (a missing folder, a full disk, Ctrl-C) leaves neither a partial file nor a
temporary one, and the error is one line (:class:`~hookscope.errors.SpecError`).
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from hookscope.errors import SpecError

__all__ = ["write_text_atomically"]


def write_text_atomically(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file renamed on success.

    Raises:
        SpecError: ``path`` is a folder, its folder does not exist, or it cannot be
            written; no file is left behind.
    """
    shown = str(path)
    target = Path(os.path.realpath(path.expanduser()))
    if target.is_dir():
        raise SpecError(f"cannot write {shown!r}: it is a folder; give a file name, "
                        "e.g. timeline.json")
    if not target.parent.is_dir():
        raise SpecError(f"cannot write {shown!r}: folder {str(target.parent)!r} does not "
                        "exist; create it first")
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        mode = target.stat().st_mode if target.exists() else None
        os.chmod(tmp, stat.S_IMODE(mode) if mode is not None else 0o666 & ~_umask())
        os.replace(tmp, target)
    except BaseException as e:  # also Ctrl-C: no temporary file is left behind
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        if not isinstance(e, OSError):
            raise
        raise SpecError(f"cannot write {shown!r}: {e.strerror or type(e).__name__}") from e


def _umask() -> int:
    """The process umask (reading it means setting it; it is put back at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
