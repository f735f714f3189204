"""Which call of one run is which call of another: matching by module path and call index.

Two runs of "the same" model rarely have the same module tree to the letter: a
``DistributedDataParallel``/``DataParallel`` wrapper puts the model under ``module.``,
``torch.compile`` under ``_orig_mod.``, FSDP and activation checkpointing insert
``_fsdp_wrapped_module``/``_checkpoint_wrapped_module`` segments, a fused conv-bn model
has no ``bn``. :func:`match_calls` pairs the calls of side A with those of side B by
``(path, call_index)`` after

1. the user's mapping (``match={"a.path": "b.path"}``; a path maps its subtree too),
2. removing wrapper segments on a side, only where that pairs more calls (a model's
   own submodule named ``module`` is left alone when the trees already agree).

Calls left without a partner are listed (:attr:`CallMatching.only_a`/``only_b``), never
dropped: the wrapper modules themselves, a removed ``bn``, a layer the other model
does not have.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from hookscope.core.records.trace import Call
from hookscope.errors import SpecError

__all__ = ["WRAPPER_CLASSES", "WRAPPER_PREFIXES", "WRAPPER_SEGMENTS", "CallMatching", "match_calls"]

#: Path segments a wrapper puts in front of the model it wraps (DDP/DataParallel,
#: ``torch.compile``): removed at the start of a path only, since a model may well
#: have a submodule of its own named ``module``.
WRAPPER_PREFIXES: tuple[str, ...] = ("module", "_orig_mod")

#: Path segments a wrapper inserts anywhere in the tree (FSDP, activation
#: checkpointing): names no model picks for its own submodules.
WRAPPER_SEGMENTS: tuple[str, ...] = (
    "_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod",
)


@dataclass(frozen=True)
class CallMatching:
    """The calls of two runs, paired.

    Attributes:
        pairs: ``(call_a, call_b)`` per matched call, in side A's call order.
        only_a: side A's calls with no partner in B, in A's call order.
        only_b: side B's calls with no partner in A, in B's call order.
        unwrapped: the sides whose wrapper segments were removed to match
            (``("b",)`` when B is a DDP-wrapped copy of A).
    """

    pairs: list[tuple[Call, Call]] = field(default_factory=list)
    only_a: list[Call] = field(default_factory=list)
    only_b: list[Call] = field(default_factory=list)
    unwrapped: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.pairs)

    def __repr__(self) -> str:
        return (f"<CallMatching: {len(self.pairs)} pairs, {len(self.only_a)} only in A, "
                f"{len(self.only_b)} only in B>")


def _unwrap(path: str) -> str:
    """``path`` without wrapper segments (``module._orig_mod.fc`` -> ``fc``)."""
    parts = path.split(".") if path else []
    while parts and parts[0] in WRAPPER_PREFIXES:
        parts.pop(0)
    return ".".join(p for p in parts if p not in WRAPPER_SEGMENTS)


def _mapped(path: str, mapping: Sequence[tuple[str, str]]) -> str | None:
    """``path`` under the first (longest) mapping prefix that covers it, else ``None``."""
    for src, dst in mapping:
        if path == src:
            return dst
        if src == "" or path.startswith(src + "."):
            rest = path[len(src):].lstrip(".")
            return f"{dst}.{rest}" if dst and rest else dst or rest
    return None


#: The classes of those wrappers: where two ways of matching pair as many calls, the
#: one that pairs a model's root with the wrapped model, not with its wrapper, wins.
WRAPPER_CLASSES: frozenset[str] = frozenset((
    "DistributedDataParallel", "DataParallel", "OptimizedModule",
    "FullyShardedDataParallel", "CheckpointWrapper",
))

_Key = tuple[str, int]


def _index(calls: Sequence[Call], paths: Sequence[str], mapped: Sequence[bool],
           ) -> dict[_Key, int]:
    """Key -> position of the call that holds it. Where paths collide (a wrapper and
    the module it wraps both become ``""``), a mapped path wins, then the longer
    original path: the wrapped module, not its wrapper."""
    index: dict[_Key, int] = {}
    for i, (call, path) in enumerate(zip(calls, paths, strict=True)):
        key = (path, call.call_index)
        held = index.get(key)
        if held is None or (mapped[i], len(call.path)) > (mapped[held], len(calls[held].path)):
            index[key] = i
    return index


def _pair(calls_a: Sequence[Call], paths_a: Sequence[str], mapped: Sequence[bool],
          calls_b: Sequence[Call], paths_b: Sequence[str]) -> list[tuple[int, int]]:
    index_a = _index(calls_a, paths_a, mapped)
    index_b = _index(calls_b, paths_b, [False] * len(calls_b))
    owners_a = set(index_a.values())
    return [(i, index_b[(p, c.call_index)])
            for i, (c, p) in enumerate(zip(calls_a, paths_a, strict=True))
            if i in owners_a and (p, c.call_index) in index_b]


def _score(pairs: Sequence[tuple[int, int]], a: Sequence[Call], b: Sequence[Call],
           ) -> tuple[int, int, int]:
    """How good a way of matching is: pairs made, then pairs of one class, then pairs
    without a wrapper in them."""
    same = sum(a[i].module_class == b[j].module_class for i, j in pairs)
    wrappers = sum(a[i].module_class in WRAPPER_CLASSES or b[j].module_class in WRAPPER_CLASSES
                   for i, j in pairs)
    return len(pairs), same, -wrappers


def _check_mapping(match: Mapping[str, str], calls_a: Sequence[Call],
                   calls_b: Sequence[Call]) -> list[tuple[str, str]]:
    """The mapping as ``(a, b)`` pairs, longest ``a`` first.

    Raises:
        SpecError: a key or value that is not a string, or names no module that ran.
    """
    for side, paths, names in (("A", {c.path for c in calls_a}, match.keys()),
                               ("B", {c.path for c in calls_b}, match.values())):
        for name in names:
            if not isinstance(name, str):
                raise SpecError(f"match= maps module paths to module paths (str), got "
                                f"{name!r} of type {type(name).__name__}")
            if not any(p == name or not name or p.startswith(name + ".") for p in paths):
                close = difflib.get_close_matches(name, sorted(paths), n=3)
                hint = f"; close matches: {close}" if close else ""
                raise SpecError(f"match= names {name!r}, but no module at or under that "
                                f"path ran on side {side}{hint}")
    return sorted(match.items(), key=lambda kv: -len(kv[0]))


def match_calls(
    calls_a: Iterable[Call],
    calls_b: Iterable[Call],
    *,
    match: Mapping[str, str] | None = None,
) -> CallMatching:
    """Pair the calls of two runs by module path and call index.

    Args:
        calls_a: side A's calls (a :class:`~hookscope.Trace` is an iterable of them).
        calls_b: side B's calls.
        match: side A's path -> side B's path, for modules whose paths differ
            (``{"features.1": "features.0.bn"}``); a path maps its whole subtree,
            ``""`` the root. Wrapper prefixes (``module.`` of DDP, ``_orig_mod.`` of
            ``torch.compile``, in calls recorded by other tools: hookscope's own traces
            look through those wrappers) need no mapping.

    Returns:
        The pairs, in side A's call order, and the calls of each side left without
        a partner.

    Raises:
        SpecError: ``match`` names a path that no call on its side has (nor under it).

    Example:
        >>> m = match_calls(trace_a, trace_b)  # B recorded under a wrapper: "module."
        >>> first, second = m.pairs[:2]
        >>> second[0].path, second[1].path
        ('conv1', 'module.conv1')
    """
    a, b = list(calls_a), list(calls_b)
    mapping = _check_mapping(match or {}, a, b)
    mapped_paths = [_mapped(c.path, mapping) for c in a]
    mapped = [m is not None for m in mapped_paths]
    raw_a = [c.path if m is None else m for c, m in zip(a, mapped_paths, strict=True)]
    raw_b = [c.path for c in b]
    best: tuple[tuple[int, int, int], list[tuple[int, int]], tuple[str, ...]] | None = None
    for unwrap_a, unwrap_b in ((False, False), (False, True), (True, False), (True, True)):
        paths_a = [_unwrap(p) for p in raw_a] if unwrap_a else raw_a
        paths_b = [_unwrap(p) for p in raw_b] if unwrap_b else raw_b
        found = _pair(a, paths_a, mapped, b, paths_b)
        score = _score(found, a, b)
        if best is None or score > best[0]:  # ties keep the fewer removals
            # a side counts as unwrapped when a path of its own had a wrapper segment
            sides = (("a",) if unwrap_a and any(_unwrap(c.path) != c.path for c in a) else ()) \
                + (("b",) if unwrap_b and any(_unwrap(p) != p for p in raw_b) else ())
            best = (score, found, sides)
    assert best is not None
    _, pairs, unwrapped = best
    paired_a, paired_b = {i for i, _ in pairs}, {j for _, j in pairs}
    return CallMatching(
        pairs=[(a[i], b[j]) for i, j in pairs],
        only_a=[c for i, c in enumerate(a) if i not in paired_a],
        only_b=[c for j, c in enumerate(b) if j not in paired_b],
        unwrapped=unwrapped,
    )
