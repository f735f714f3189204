"""Captured activations on disk: safetensors shards written while the forward runs, and
a JSON index written last.

Layout of a capture directory::

    shard-00000.safetensors   # tensors of whole calls, flushed every ``shard_mib`` MiB
    shard-00001.safetensors   # each shard's metadata names the calls it holds
    index.json                # written last, atomically: the capture's seal

Every file is written to a temporary name (``.NAME.tmp``) and renamed when complete,
so a file under its final name is never half-written. ``index.json`` says whether the
run finished (``"complete": true``) or was interrupted (``false``, with the error). A
capture killed outright (SIGKILL, power loss) has shards and no index.
:func:`load_activations` rejects both unless asked for ``partial=True``, then reads what
the finished shards hold. Nothing is pickled: tensors are safetensors, the structure of
a call's value (tuples, dicts, ``None``) is JSON in the shard metadata; a nested tensor,
which safetensors cannot hold, is saved as its components.

Memory: the writer holds at most one shard's tensors (plus the largest single call)
before writing them; reading opens a shard only when a value is asked for
(``safe_open``, memory-mapped), so a capture larger than memory can be browsed.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NamedTuple

import torch

from hookscope.errors import MissingDependencyError, SpecError

FORMAT = "hookscope-activations"
VERSION = 1
INDEX = "index.json"
_META_KEY = "hookscope"


class ModuleInputs(NamedTuple):
    """What a module's ``forward`` received: positional and keyword arguments."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]


def _safetensors() -> Any:
    try:
        import safetensors.torch
    except ImportError as e:  # pragma: no cover - a required dependency
        raise MissingDependencyError("safetensors", "capture") from e
    return safetensors


# -- the structure of a value, as JSON ------------------------------------------------------


def encode_tree(value: Any, key: str, tensors: dict[str, torch.Tensor]) -> Any:
    """JSON for ``value``; its tensors go into ``tensors`` under keys from ``key``.

    NB: a step into a container (or a dataclass's field) is written ``[0]`` or
    ``["name"]``, never ``.0``: a dotted step made the key of a tuple's element the key
    of a child module's call (``layers.0`` returning a tuple, and ``layers.0.0``), and
    one overwrote the other.
    (The keys are read back from the structure, so any earlier scheme still reads.)"""
    if isinstance(value, torch.Tensor):
        if value.is_nested:  # safetensors holds dense tensors only: its components
            return {"nested": _encode_nested(value, key, tensors)}
        if value.layout != torch.strided:
            value = value.to_dense()  # sparse: safetensors holds dense tensors only
        if key in tensors:  # NB: distinct keys that read alike (two NaN keys of a dict)
            raise SpecError(
                f"save_to: two tensors of one call's value would be saved as {key!r} (a "
                "dict with two NaN keys?); give them distinct keys, or capture without "
                "save_to= to keep both in memory"
            )
        tensors[key] = value.contiguous()
        return {"tensor": key}
    if isinstance(value, ModuleInputs):
        return {"inputs": [encode_tree(value.args, f"{key}:args", tensors),
                           encode_tree(value.kwargs, f"{key}:kwargs", tensors)]}
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        return {"dict": {k: encode_tree(v, f"{key}[{json.dumps(k)}]", tensors)
                         for k, v in value.items()}}
    if isinstance(value, Mapping) and all(map(_plain_key, value)):
        # keys JSON has no object key for (``{0: head_0, 1: head_1}``): as pairs
        return {"mapping": [[encode_tree(k, key, {}), encode_tree(v, f"{key}[{_step(k)}]",
                                                                  tensors)]
                            for k, v in value.items()]}
    if isinstance(value, (tuple, list)):
        kind = "list" if isinstance(value, list) else "tuple"
        return {kind: [encode_tree(v, f"{key}[{i}]", tensors) for i, v in enumerate(value)]}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"value": value}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        # its fields, by name (read back as a namespace: the class is not imported)
        cls = type(value)
        return {"fields": {"class": f"{cls.__module__}.{cls.__qualname__}", "values": {
            f.name: encode_tree(getattr(value, f.name), f"{key}[{json.dumps(f.name)}]", tensors)
            for f in dataclasses.fields(value)
        }}}
    # NB: an object safetensors/JSON cannot hold is kept as its repr, never pickled
    return {"repr": repr(value)}


def _encode_nested(value: torch.Tensor, key: str, tensors: dict[str, torch.Tensor]) -> Any:
    """A nested tensor as its layout and components (``value.unbind()``), each saved as
    a tensor; :func:`decode_tree` builds it again with ``torch.nested.nested_tensor``
    (which finds a jagged tensor's ragged dimension, a transposed one's too, from the
    components' shapes)."""
    layout = "jagged" if value.layout == torch.jagged else "strided"
    return {"layout": layout, "components": [
        encode_tree(part, f"{key}[{i}]", tensors) for i, part in enumerate(value.unbind())]}


def decode_tree(doc: Any, tensor: Any) -> Any:
    """The value of :func:`encode_tree`'s JSON; ``tensor(key)`` reads one tensor."""
    (kind, body), = doc.items()
    if kind == "tensor":
        return tensor(body)
    if kind == "nested":
        layout = torch.jagged if body["layout"] == "jagged" else torch.strided
        return torch.nested.nested_tensor([decode_tree(part, tensor)
                                           for part in body["components"]], layout=layout)
    if kind == "inputs":
        return ModuleInputs(decode_tree(body[0], tensor), decode_tree(body[1], tensor))
    if kind == "dict":
        return {k: decode_tree(v, tensor) for k, v in body.items()}
    if kind == "mapping":
        return {decode_tree(k, tensor): decode_tree(v, tensor) for k, v in body}
    if kind in ("tuple", "list"):
        items = [decode_tree(v, tensor) for v in body]
        return tuple(items) if kind == "tuple" else items
    if kind == "value":
        return body
    if kind == "fields":
        return Fields(body["class"], **{k: decode_tree(v, tensor)
                                         for k, v in body["values"].items()})
    return _Unrestorable(body)


def _plain_key(key: Any) -> bool:
    """A dict key that reads back as itself: a scalar, or a tuple of them."""
    if isinstance(key, tuple):
        return all(map(_plain_key, key))
    return key is None or type(key) in (bool, int, float, str)


def _step(key: Any) -> str:
    """The text of a step into a dict by ``key``: JSON for a scalar, the repr of a tuple.

    NB: a tuple's repr unquoted, so that ``(1, 2)`` and the string ``"(1, 2)"`` (JSON:
    quoted) are two steps: as one, the second value overwrote the first on disk."""
    return repr(key) if isinstance(key, tuple) else json.dumps(key)


class Fields(SimpleNamespace):
    """A dataclass value read back from disk: its fields as attributes (``.hidden``),
    and the name of its class (``fields_of``), which is not imported."""

    def __init__(self, fields_of: str, **values: Any) -> None:
        super().__init__(**values)
        self.__dict__["fields_of"] = fields_of


class _Unrestorable(str):
    """The repr of a value that was not a tensor, container or plain scalar."""


# -- writing ---------------------------------------------------------------------------------


def _write_atomically(path: Path, write: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    os.replace(tmp, path)


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
                self._tensors):  # NB: a call name is unique, and so is every key from it
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
        # NB: the queue is emptied first: a shard that failed to write (a full disk) is
        # not tried again when the capture closes, which would hide the first error
        tensors, entries, size = self._tensors, self._entries, self._bytes
        self._tensors, self._entries, self._bytes = {}, {}, 0
        meta = {_META_KEY: json.dumps({"format": FORMAT, "version": VERSION,
                                       "entries": entries})}
        _write_atomically(self.directory / name,
                          lambda tmp: self._st.torch.save_file(tensors, str(tmp), meta))
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
        text = json.dumps(doc, indent=1)  # NB: not sort_keys: the entries are in call order
        _write_atomically(self.directory / INDEX, lambda tmp: tmp.write_text(text))


# -- reading ---------------------------------------------------------------------------------


class Activations(Mapping[str, Any]):
    """Captured values read lazily from a capture directory, by call name
    (``path`` or ``path#N``). A value is read from its shard when it is asked for.

    Attributes:
        directory: where the capture lives.
        complete: whether the run that wrote it finished.
        error: what interrupted it (``None`` when complete, or killed with no index).
    """

    def __init__(self, directory: Path, index: dict[str, dict[str, Any]], *,
                 complete: bool, error: str | None, device: str) -> None:
        self.directory, self.complete, self.error = directory, complete, error
        self._index, self._device = index, device

    def __getitem__(self, name: str) -> Any:
        entry = self._index[name]
        st = _safetensors()
        with st.safe_open(str(self.directory / entry["shard"]), framework="pt",
                          device=self._device) as f:
            return decode_tree(entry["structure"], f.get_tensor)

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)

    def info(self, name: str) -> dict[str, Any]:
        """What was recorded about a call besides its value (``path``, ``call_index``,
        ``module_class``, ``call``: its index among the run's calls, ``batch``)."""
        return {k: v for k, v in self._index[name].items() if k not in ("structure", "shard")}

    def calls_of(self, path: str) -> list[Any]:
        """The values of every call of the module at ``path``, in call order (NB: by
        ``call_index``: an index written by an earlier hookscope sorted them by name)."""
        found = [(e.get("call_index", 0), k) for k, e in self._index.items()
                 if e.get("path") == path]
        return [self[k] for _, k in sorted(found, key=lambda f: f[0])]

    def __repr__(self) -> str:
        state = "complete" if self.complete else "PARTIAL"
        return f"<Activations {state}: {len(self)} calls in {str(self.directory)!r}>"


def load_activations(
    directory: str | os.PathLike[str], *, partial: bool = False, device: str = "cpu"
) -> Activations:
    """Open a directory written by ``hookscope.capture(..., save_to=DIR)``.

    Args:
        directory: the capture directory.
        partial: also open a capture that did not finish (interrupted, or killed with no
            index): its finished shards are read and ``.complete`` is ``False``.
        device: where tensors are read to.

    Returns:
        A lazy mapping from call name to value.

    Raises:
        SpecError: not a capture directory, or an unfinished one without ``partial=True``.

    Example:
        >>> acts = hookscope.load_activations("acts/")
        >>> acts["layer1.0.conv1"].shape
    """
    root = Path(directory)
    if not root.is_dir():
        raise SpecError(f"load_activations: {str(root)!r} is not a directory")
    index_path = root / INDEX
    if index_path.exists():
        doc = json.loads(index_path.read_text())
        if doc.get("format") != FORMAT:
            raise SpecError(f"{str(index_path)!r} is not a hookscope activation index")
        if not doc["complete"] and not partial:
            raise SpecError(
                f"{str(root)!r} holds an interrupted capture ({doc['error']}); "
                f"{len(doc['entries'])} calls were saved before it stopped: pass "
                "partial=True to read them"
            )
        return Activations(root, doc["entries"], complete=doc["complete"],
                           error=doc["error"], device=device)
    shards = sorted(root.glob("shard-*.safetensors"))
    if not shards:
        raise SpecError(f"{str(root)!r} holds no hookscope capture (no {INDEX}, no shards)")
    if not partial:
        raise SpecError(
            f"{str(root)!r} has no {INDEX}: the capture did not finish (it was killed, or "
            f"is still running); pass partial=True to read its {len(shards)} finished shards"
        )
    return Activations(root, _scan(shards), complete=False, error=None, device=device)


def _scan(shards: list[Path]) -> dict[str, dict[str, Any]]:
    """The index of finished shards, from their own metadata."""
    st = _safetensors()
    index: dict[str, dict[str, Any]] = {}
    for shard in shards:
        with st.safe_open(str(shard), framework="pt") as f:
            meta = json.loads((f.metadata() or {})[_META_KEY])
        for key, entry in meta["entries"].items():
            index[key] = {"shard": shard.name, **entry}
    return index
