"""The error a call introduced: side B's module run again on side A's inputs.

For a matched call, side B's module is called with side A's inputs of that call (copied,
cast to side B's dtype and moved to its device, under its autocast: ``sides.py``) and
its output measured against side A's (``numerics.py``). While it runs, each submodule
that side A's call called gives back side A's output of that call instead of running
(its ``forward`` is replaced on the instance for the re-run and put back after), so the
error is that of the module's own code: a block's residual add, an attention's softmax,
a leaf's kernel. A submodule side A did not call there (or called fewer times) runs as
it is.

Side A's values are handed to the re-runs as they are stored, though a module may write
them in place (an in-place ReLU, a residual ``+=``), where that is their last use: a
call's inputs serve its own re-run, its output first its own re-run's reference, then
its parent's re-run (so the calls are re-run children first, in reverse call order:
:func:`introduced_errors`). One stored copy can serve several calls (the capture keeps
one copy of a tensor that one call returns and the next receives unchanged, and of a
container's output that is its last child's): such a copy is handed to a re-run that
may write it as a new copy, unless no use of it is left after that one
(:class:`StoredUses`). The measures from the two runs were taken before any re-run.

Nothing of the model is left changed: the instance ``forward`` attributes are removed
again (or the ones there were put back), and buffers that a forward in training mode
moves (BatchNorm's running statistics) are restored (``core/model/buffer_state.py``).
"""

from __future__ import annotations

import contextlib
import math
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from hookscope.compare.numerics import max_abs_error
from hookscope.compare.sides import SideB
from hookscope.core.model.buffer_state import restore_buffers, saved_buffers
from hookscope.core.records.tensor_paths import iter_tensors
from hookscope.core.records.trace import Call, Trace


@dataclass(frozen=True)
class Introduced:
    """The error a call introduced (``max_abs`` ``None``: not measured, ``note`` says
    why)."""

    max_abs: float | None
    note: str = ""


class StoredUses:
    """How many uses by the re-runs each stored tensor has left (none counted: every
    stored tensor is used as it is, as for values read from disk, which are read anew
    for each use)."""

    def __init__(self, counts: Counter[int] | None = None) -> None:
        self.left: Counter[int] = counts if counts is not None else Counter()

    @classmethod
    def of(cls, pairs: Sequence[tuple[Call, Call]], trace_a: Trace,
           store_a: Mapping[str, Any]) -> StoredUses:
        """The uses the re-runs of ``pairs`` can make: each call's inputs and output,
        and its children's outputs (replayed)."""
        counts: Counter[int] = Counter()
        for a, _ in pairs:
            for name, parts in ((a.name, ("input", "output")),
                                *((trace_a.calls[i].name, ("output",)) for i in a.children)):
                value = store_a.get(name, {})
                for part in parts:
                    counts.update(id(t) for _, t in iter_tensors(value.get(part), "v"))
        return cls(counts)

    def spend(self, value: Any) -> set[int]:
        """Spend one use of each tensor of ``value``; the ``id``s of those with uses
        left."""
        left = set()
        for _, t in iter_tensors(value, "v"):
            self.left[id(t)] -= 1
            if self.left[id(t)] > 0:
                left.add(id(t))
        return left

    def take(self, value: Any, side: SideB) -> Any:
        """``value`` as side B takes it (:meth:`SideB.inputs`) for a use that may write
        it: a tensor with uses left after this one is handed as a new copy."""
        return side.inputs(value, copy_ids=self.spend(value))


def introduced_errors(pairs: Sequence[tuple[Call, Call]], trace_a: Trace,
                      store_a: Mapping[str, Any], side: SideB, *,
                      uses: StoredUses | None = None) -> list[Introduced]:
    """:func:`introduced_error` of each matched pair, in the order given, run in reverse
    call order (see the module docstring); ``uses``: the stored tensors' uses, counted
    where one stored copy can serve several calls."""
    uses = uses or StoredUses()
    found = {a.index: introduced_error(a, b, trace_a, store_a, side, uses)
             for a, b in sorted(pairs, key=lambda pair: -pair[0].index)}
    return [found[a.index] for a, _ in pairs]


def introduced_error(a: Call, b: Call, trace_a: Trace, store_a: Mapping[str, Any],
                     side: SideB, uses: StoredUses) -> Introduced:
    """Side B's module of call ``b`` re-run on side A's inputs of call ``a``, measured
    against side A's output (see the module docstring)."""
    try:
        module = side.model.get_submodule(b.path)
    except AttributeError:
        return Introduced(None, f"side B has no module {b.path!r} to run again")
    value = store_a[a.name]
    args, kwargs = value["input"]
    args, kwargs = uses.take(args, side), uses.take(kwargs, side)
    replays = _replays(a, trace_a, store_a, module, side, uses)
    saved = saved_buffers(module.modules())
    try:
        with _replaying(replays), torch.no_grad(), side.running():
            out = module(*args, **kwargs)
    except Exception as e:  # NB: a module that cannot run alone (it reads state its
        # parent set) has no introduced error, the row says why
        return Introduced(None, f"could not run alone: {type(e).__name__}: {e}"[:200])
    finally:
        restore_buffers(saved)
    uses.spend(value["output"])  # read only: the reference
    max_abs = max_abs_error(value["output"], out)
    return Introduced(None if math.isnan(max_abs) else max_abs,
                      "no output tensor to compare" if math.isnan(max_abs) else "")


def _replays(a: Call, trace_a: Trace, store_a: Mapping[str, Any], module: nn.Module,
             side: SideB, uses: StoredUses) -> dict[int, tuple[nn.Module, list[Callable[[], Any]]]]:
    """Side B's submodules that side A's call ``a`` called, each with side A's outputs
    of those calls in order (read when replayed: a spilled store loads them then)."""
    out: dict[int, tuple[nn.Module, list[Callable[[], Any]]]] = {}
    prefix = f"{a.path}." if a.path else ""
    for i in a.children:
        child = trace_a.calls[i]
        try:
            sub = module.get_submodule(child.path.removeprefix(prefix))
        except AttributeError:
            continue
        out.setdefault(id(sub), (sub, []))[1].append(_reader(store_a, child.name, side, uses))
    return out


def _reader(store_a: Mapping[str, Any], name: str, side: SideB,
            uses: StoredUses) -> Callable[[], Any]:
    return lambda: uses.take(store_a[name]["output"], side)


@contextlib.contextmanager
def _replaying(replays: Mapping[int, tuple[nn.Module, list[Callable[[], Any]]]]) -> Iterator[None]:
    """Each module of ``replays`` gives back its queued outputs instead of running."""
    saved: list[tuple[nn.Module, bool, Any]] = []
    try:
        for module, queue in replays.values():
            had = "forward" in module.__dict__
            saved.append((module, had, module.__dict__.get("forward")))
            module.__dict__["forward"] = _replay(queue, module.forward)
        yield
    finally:
        for module, had, old in saved:
            if had:
                module.__dict__["forward"] = old
            else:
                module.__dict__.pop("forward", None)


def _replay(queue: list[Callable[[], Any]], forward: Callable[..., Any]) -> Callable[..., Any]:
    def replay(*args: Any, **kwargs: Any) -> Any:
        return queue.pop(0)() if queue else forward(*args, **kwargs)

    return replay
