"""Side B's run: each call's output measured against side A's as the call ends, kept
nowhere.

Side B's outputs are not copied: a probe in a :class:`~hookscope.Tracer` of side B
measures each call's output (``numerics.py``) when the call ends, before a later
in-place op can change it, against the outputs of the side A calls it may be matched
with. The matching (``matching.py``) is made after the run, from both traces; the probe
measures against every candidate the matching can choose among: side A's calls of the
same call index whose path, as it is, with its wrapper segments removed, or mapped by
``match=``, is side B's path as it is or with its wrapper segments removed (usually one,
two for a wrapper and the module it wraps).

A container's output is often its last child's, the same tensor on both sides (side A's
capture keeps one copy of it): such a pair, unchanged since it was measured (the same
objects and version counters), is measured once (:class:`_Remembered`).
"""

from __future__ import annotations

import dataclasses
import weakref
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from hookscope.compare.matching import WRAPPER_PREFIXES, WRAPPER_SEGMENTS
from hookscope.compare.numerics import TensorError, tensor_error, value_errors
from hookscope.core import torch_private
from hookscope.core.engine.probe import Probe
from hookscope.core.records.trace import Call

#: ``(side A call name, side B call name) -> measures of each output tensor``.
Measured = dict[tuple[str, str], list[TensorError]]


def unwrapped(path: str) -> str:
    """``path`` without wrapper segments (``module._orig_mod.fc`` -> ``fc``), as the
    matching removes them."""
    parts = path.split(".") if path else []
    while parts and parts[0] in WRAPPER_PREFIXES:
        parts.pop(0)
    return ".".join(p for p in parts if p not in WRAPPER_SEGMENTS)


def _mapped(path: str, match: Mapping[str, str]) -> list[str]:
    found = []
    for src, dst in match.items():
        if path == src or src == "" or path.startswith(src + "."):
            rest = path[len(src):].lstrip(".")
            found.append(f"{dst}.{rest}" if dst and rest else dst or rest)
    return found


def candidates_index(calls_a: Sequence[Call], match: Mapping[str, str] | None
                     ) -> dict[tuple[str, int], list[str]]:
    """``(path, call index) -> side A call names`` under every path each side A call
    may be matched by (see the module docstring)."""
    index: dict[tuple[str, int], list[str]] = defaultdict(list)
    for call in calls_a:
        paths = {call.path, unwrapped(call.path)}
        for mapped in _mapped(call.path, match or {}):
            paths |= {mapped, unwrapped(mapped)}
        for path in paths:
            index[(path, call.call_index)].append(call.name)
    return index


_Seen = tuple["weakref.ref[torch.Tensor]", "weakref.ref[torch.Tensor]", int, int, TensorError]


class _Remembered:
    """:func:`tensor_error` that measures a pair of tensors once while neither was
    written (see the module docstring)."""

    def __init__(self) -> None:
        self._seen: dict[tuple[int, int], _Seen] = {}

    def __call__(self, a: torch.Tensor, b: torch.Tensor, *, path: str) -> TensorError:
        va, vb = torch_private.version_counter(a), torch_private.version_counter(b)
        if va is None or vb is None:  # inference tensors count no writes
            return tensor_error(a, b, path=path)
        seen = self._seen.get((id(a), id(b)))
        if seen is not None and seen[0]() is a and seen[1]() is b and seen[2:4] == (va, vb):
            return dataclasses.replace(seen[4], path=path)
        found = tensor_error(a, b, path=path)
        self._seen[(id(a), id(b))] = (weakref.ref(a), weakref.ref(b), va, vb, found)
        return found


class SideBMeasure(Probe):
    """Measures each side B call's output against its candidate side A calls' outputs
    as the call ends (see the module docstring)."""

    name = "compare"

    def __init__(self, store_a: Mapping[str, Any],
                 index: Mapping[tuple[str, int], list[str]]) -> None:
        self.store_a = store_a
        self.index = index
        self.measured: Measured = {}
        #: side B call name -> its place in the order the calls ended (a module's call
        #: ends after the calls inside it)
        self.ended: dict[str, int] = {}
        self._measure = _Remembered()

    def on_exit(
        self, call: Call, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
        output: Any, failed: bool,
    ) -> None:
        self.ended[call.name] = len(self.ended)
        if failed:
            return
        names: list[str] = []
        for path in dict.fromkeys((call.path, unwrapped(call.path))):
            names += self.index.get((path, call.call_index), [])
        for name in dict.fromkeys(names):
            self.measured[(name, call.name)] = value_errors(
                self.store_a[name]["output"], output, measure=self._measure)
