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

Where each part lives (every public name is re-exported here):

- ``storage_format.py``: the format's name, version and file names, and a call's value
  as tensors plus JSON (:func:`encode_tree`, :func:`decode_tree`,
  :class:`ModuleInputs`, :class:`Fields`);
- ``storage_writer.py``: :class:`ShardWriter`, which writes the shards and the index;
- ``storage_reader.py``: :func:`load_activations` and the lazy :class:`Activations`.
"""

from __future__ import annotations

from hookscope.interventions.storage_format import (
    FORMAT,
    INDEX,
    VERSION,
    Fields,
    ModuleInputs,
    decode_tree,
    encode_tree,
)
from hookscope.interventions.storage_reader import Activations, load_activations
from hookscope.interventions.storage_writer import ShardWriter

__all__ = [
    "FORMAT",
    "INDEX",
    "VERSION",
    "Activations",
    "Fields",
    "ModuleInputs",
    "ShardWriter",
    "decode_tree",
    "encode_tree",
    "load_activations",
]
