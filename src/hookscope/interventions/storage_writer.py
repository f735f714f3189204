"""Writing a capture directory while the forward runs (the layout: ``storage.py``).

:class:`ShardWriter` queues each call's value and writes the queue as a safetensors
shard every ``shard_bytes``, then ``index.json`` last, complete or interrupted by an
error. Every file is written to a temporary name (``.NAME.tmp``) and renamed when
complete.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from hookscope.errors import SpecError
from hookscope.interventions.storage_format import (
    _META_KEY,
    FORMAT,
    INDEX,
    VERSION,
    _safetensors,
    encode_tree,
)


def _write_atomically(path: Path, write: Any, *, mode: int) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    # safetensors writes its file owner-only (0600) whatever the umask, while
    # index.json gets the umask's; every file of a capture gets the umask's ``mode``
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def _file_mode() -> int:
    """The mode a new file gets from ``open``: 0666 less the process umask.

    NB: Linux shows the umask in /proc; elsewhere reading it means setting it (and
    putting it back at once), which a thread creating a file meanwhile could see."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            mask = next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError, IndexError):
        mask = os.umask(0o022)
        os.umask(mask)
    return 0o666 & ~mask


class ShardWriter:
    """Writes calls' values into safetensors shards of about ``shard_bytes`` each.

    Raises:
        SpecError: ``directory`` already holds a capture (or other files).
    """

    def __init__(self, directory: str | os.PathLike[str], *, shard_bytes: int) -> None:
        self.directory = Path(directory)
        if self.directory.exists() and (
            not self.directory.is_dir() or any(self.directory.iterdir())
        ):
            raise SpecError(
                f"save_to={str(self.directory)!r} exists and is not an empty directory; "
                "pass a new directory (a capture never overwrites files)"
            )
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as e:  # a parent that is a file, a read-only or virtual filesystem
            raise SpecError(
                f"save_to={str(self.directory)!r}: cannot make this directory "
                f"({e.strerror or e}); pass a path in a writable directory"
            ) from None
        self._st = _safetensors()
        self._mode = _file_mode()
        self._limit = shard_bytes
        self._tensors: dict[str, torch.Tensor] = {}
        self._entries: dict[str, dict[str, Any]] = {}
        self._bytes = 0
        self.shards: list[str] = []
        self.index: dict[str, dict[str, Any]] = {}
        self.bytes_written = 0

    def add(self, name: str, value: Any, info: dict[str, Any]) -> None:
        """Queue one call's value; write a shard when the queue reaches the limit."""
        tensors: dict[str, torch.Tensor] = {}
        structure = encode_tree(value, name, tensors)
        if name in self._entries or name in self.index or not tensors.keys().isdisjoint(
                self._tensors):  # a call name is unique, and so is every key from it
            raise RuntimeError(f"hookscope: capture key clash for call {name!r}")
        self._tensors.update(tensors)
        self._entries[name] = {"structure": structure, **info}
        self._bytes += sum(t.numel() * t.element_size() for t in tensors.values())
        if self._bytes >= self._limit:
            self.flush()

    def flush(self) -> None:
        """Write the queued calls as one shard (nothing when the queue is empty)."""
        if not self._entries:
            return
        name = f"shard-{len(self.shards):05d}.safetensors"
        # the queue is emptied first: a shard that failed to write (a full disk) is
        # not tried again when the capture closes, which would hide the first error
        tensors, entries, size = self._tensors, self._entries, self._bytes
        self._tensors, self._entries, self._bytes = {}, {}, 0
        meta = {_META_KEY: json.dumps({"format": FORMAT, "version": VERSION,
                                       "entries": entries})}
        _write_atomically(self.directory / name,
                          lambda tmp: self._st.torch.save_file(tensors, str(tmp), meta),
                          mode=self._mode)
        for key, entry in entries.items():
            self.index[key] = {"shard": name, **entry}
        self.shards.append(name)
        self.bytes_written += size

    def close(self, *, error: BaseException | None) -> None:
        """Write what is queued, then the index: complete when ``error`` is ``None``.

        When writing the last shard fails (a full disk), the index is still written,
        as interrupted by that error, and the error is raised."""
        failed: BaseException | None = None
        try:
            self.flush()
        except Exception as e:
            failed, error = e, error or e
        try:
            self._write_index(error)
        except Exception:
            if failed is None:
                raise
        if failed is not None:
            raise failed

    def _write_index(self, error: BaseException | None) -> None:
        doc = {
            "format": FORMAT, "version": VERSION, "complete": error is None,
            "error": None if error is None else f"{type(error).__name__}: {error}",
            "shards": self.shards, "bytes": self.bytes_written,
            # in the order the calls started (``call``: their index in the run), not as
            # they ended and were added (a recursive module's outer call ends last)
            "entries": dict(sorted(self.index.items(),
                                   key=lambda kv: kv[1].get("call", 0))),
        }
        text = json.dumps(doc, indent=1)  # not sort_keys: the entries are in call order
        _write_atomically(self.directory / INDEX, lambda tmp: tmp.write_text(text),
                          mode=self._mode)
