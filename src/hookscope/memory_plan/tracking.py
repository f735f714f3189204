"""Live storages over one step: what is allocated, by which module, in which phase.

:class:`StorageTracker` is a ``TorchDispatchMode`` that sees every op's outputs. Each
output storage it has not seen is a new allocation (a view shares its base's storage
and costs nothing); a weak reference to the storage object tells when the last tensor
using it is gone (torch keeps one Python object per storage while it lives, so the
reference dies with the storage itself, as ``torch.distributed._tools.mem_tracker``
also relies on). Every change is logged with the bytes allocated after it and where
it happened, so the peak, the timeline and the storages alive at the peak (replayed
from the log) all come from the same data.

Where: the phase is set by the caller (:attr:`StorageTracker.phase`); the module is
the innermost module whose forward runs (a stack kept by hooks on the plan's copy of
the model), else, in the backward pass, the module whose forward made the autograd
node that runs (each module call records the range of node sequence numbers its
forward made), else the module that owns an input of the op (the optimizer step:
parameters, gradients and the states made from them), else the root.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable
from typing import Any

import torch

from hookscope.core import torch_private
from hookscope.core.torch_private import TorchDispatchMode, pytree, storage_key
from hookscope.core.torch_private.fake import WORKSPACE_OPS, real_workspace_nbytes


@torch_private.unwrapped_dispatch_mode
class StorageTracker(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch: untyped
    """Log of allocations and frees of storages, each with its phase and module.

    Attributes:
        phase: the phase the next changes belong to (set by the step's driver).
        stack: the paths of the module forwards running, innermost last.
        nbytes: bytes of each storage id ever tracked.
        born: where (an index into :attr:`places`) each storage id was allocated.
        changes: storage ids in log order, negative for a free.
        totals: bytes allocated after each change.
        at: an index into :attr:`places` for each change.
        places: the distinct ``(phase, module path)`` pairs.
        owners: storage id -> module path that owns it (parameters, and what the
            optimizer makes from them).
        saved: storage ids autograd saved for backward.
        opaque: the ops that ran whose workspace the plan cannot see (the real kernel
            could not be asked: ``core/torch_private/fake.py``).
    """

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # torch leaves it untyped
        self.phase = "start"
        self.stack: list[str] = []
        self.nbytes: dict[int, int] = {}
        self.born: dict[int, int] = {}
        self.changes: list[int] = []
        self.totals: list[int] = []
        self.at: list[int] = []
        self.places: list[tuple[str, str]] = []
        self.owners: dict[int, str] = {}
        self.saved: set[int] = set()
        self.opaque: set[str] = set()
        self._place_index: dict[tuple[str, str], int] = {}
        self._ids: dict[int, int] = {}  # storage key -> id, while the storage lives
        self._refs: dict[int, weakref.ref[Any]] = {}
        self._total = 0
        self._seq_owner: dict[int, str] = {}
        self._owner_now = ""  # the owner of the running optimizer op's inputs
        #: ``id`` of an exception -> the innermost module whose forward it left
        self.raised_in: dict[int, str] = {}

    # -- storages ---------------------------------------------------------------------

    def track(self, t: torch.Tensor, *, owner: str | None = None) -> int:
        """The id of ``t``'s storage, tracking it (an allocation now) if new."""
        storage = t.untyped_storage()
        key = storage_key(storage)
        sid = self._ids.get(key)
        if sid is None:
            sid = len(self.nbytes) + 1
            self._ids[key] = sid
            self.nbytes[sid] = storage.nbytes()
            self._refs[key] = weakref.ref(storage, self._freed_callback(key, sid))
            self.born[sid] = self._log(sid, self.nbytes[sid])
        if owner is not None:
            self.owners.setdefault(sid, owner)
        return sid

    def storage_id(self, t: torch.Tensor) -> int | None:
        """The id of ``t``'s storage, ``None`` if it is not tracked."""
        return self._ids.get(storage_key(t.untyped_storage()))

    def _freed_callback(self, key: int, sid: int) -> Callable[[Any], None]:
        def freed(_ref: Any) -> None:
            if self._ids.get(key) == sid:
                del self._ids[key]
                del self._refs[key]
                self._log(-sid, -self.nbytes[sid])

        return freed

    def _log(self, change: int, delta: int) -> int:
        self._total += delta
        place = self._place()
        self.changes.append(change)
        self.totals.append(self._total)
        self.at.append(place)
        return place

    def _place(self) -> int:
        where = (self.phase, self._module())
        index = self._place_index.get(where)
        if index is None:
            index = self._place_index[where] = len(self.places)
            self.places.append(where)
        return index

    # -- where ------------------------------------------------------------------------

    def _module(self) -> str:
        if self.stack:
            return self.stack[-1]
        if self.phase == "backward":
            seq = torch_private.node_sequence_nr(torch_private.current_autograd_node())
            if seq is not None:
                return self._seq_owner.get(seq, "")
        return self._owner_now


    def enter(self, path: str) -> int | None:
        """A module's forward starts: the sequence number its first node will get."""
        self.stack.append(path)
        return torch_private.next_sequence_nr()

    def exit(self, path: str, start: int | None) -> None:
        """A module's forward ended; the nodes it made since ``start`` are its own,
        but those of an inner module (which ended first) stay that module's."""
        if self.stack and self.stack[-1] == path:
            self.stack.pop()
        raised = sys.exc_info()[1]  # the hook runs in torch's except block when it raised
        if raised is not None:
            self.raised_in.setdefault(id(raised), path)  # the innermost module ends first
        end = torch_private.next_sequence_nr()
        if start is not None and end is not None:
            for seq in range(start, end):
                self._seq_owner.setdefault(seq, path)

    # -- the mode ---------------------------------------------------------------------

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if func in WORKSPACE_OPS:
            out = self._with_workspace(func, args, kwargs or {}, out)
        owner = self._input_owner(args) if self.phase == "optimizer" else None
        self._owner_now = owner or ""
        if isinstance(out, torch.Tensor):  # most ops: no pytree walk
            self.track(out, owner=owner)
        else:
            for leaf in pytree.tree_leaves(out):
                if isinstance(leaf, torch.Tensor):
                    self.track(leaf, owner=owner)
        self._owner_now = ""
        return out

    def _with_workspace(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                        out: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        """``out`` with its empty fake workspace replaced by one of the size the real
        kernel returns (the fake mode below this one makes it), which autograd then
        saves for the backward as it would the real one."""
        if out[3].numel():
            return out
        nbytes = real_workspace_nbytes(func, args, kwargs)
        if nbytes is None:
            self.opaque.add(func.name())
            return out
        workspace = torch.empty(nbytes // out[3].element_size(), dtype=out[3].dtype,
                                device=out[3].device)
        return (*out[:3], workspace, *out[4:])

    def _input_owner(self, args: Any) -> str | None:
        for leaf in pytree.tree_leaves(args):
            if isinstance(leaf, torch.Tensor):
                sid = self.storage_id(leaf)
                if sid is not None and sid in self.owners:
                    return self.owners[sid]
        return None

    # -- saved tensors ----------------------------------------------------------------

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        """Autograd's pack hook: note that ``t``'s storage is saved for backward."""
        sid = self.storage_id(t)
        if sid is not None:
            self.saved.add(sid)
        return t
