"""Reading a capture directory back (the layout: ``storage.py``).

:func:`load_activations` checks ``index.json`` (or, with ``partial=True`` and no index,
reads the finished shards' own metadata) and returns :class:`Activations`, a mapping
that opens a shard only when a value is asked for (``safe_open``, memory-mapped).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from hookscope.errors import SpecError
from hookscope.interventions.storage_format import (
    _META_KEY,
    FORMAT,
    INDEX,
    _safetensors,
    decode_tree,
)


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
        """The values of every call of the module at ``path``, in call order (by
        ``call_index``: the order of the index's entries is not relied on)."""
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
