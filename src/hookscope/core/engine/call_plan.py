"""The plan of an exclusive run's fast path: which modules the stand-in for
``Module._call_impl`` observes (``core/engine/fast_path.py``), which keep per-module hooks
(``core/engine/module_hooks.py``), and which are fast leaves, kept off the call stack.

A plan depends on the modules' hooks, classes and instance ``forward``s; a model traced
again (its table reused, ``core/model/table_reuse.py``) gets the plan made for it last time
when none of those changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from enum import Enum
from typing import TYPE_CHECKING, NamedTuple

import torch
from torch import nn

from hookscope.core import torch_private

if TYPE_CHECKING:
    from hookscope.core.model.table_reuse import ModelScan


class Kind(Enum):
    """What the tracer needs to know about a module class."""

    SCRIPTED = "scripted"  # TorchScript: runs no module hooks
    TORCH_NN = "torch.nn"  # a class of torch.nn itself, not a subclass of the user's
    OTHER = "other"


def kind_of(cls: type) -> Kind:
    if issubclass(cls, torch.jit.ScriptModule):
        return Kind.SCRIPTED
    if cls.__module__.startswith("torch.nn.modules."):
        return Kind.TORCH_NN
    return Kind.OTHER


Entries = dict[int, tuple[str, str, int, bool]]
"""``id(module) -> (path, class name, its place in the run's counts, is a fast leaf)``:
read-only, and kept from run to run for a model traced again (no list per module
and per run: the garbage collector's young generation fills with what a run
allocates, and a collection in the middle of a run walks cold objects, 0.2-0.4 ms
on MobileNetV3-Large; ``docs/architecture.md``, "Few objects per run for the garbage
collector")."""


class Plan(NamedTuple):
    """What a run installs: the modules the stand-in observes, by ``id`` (``entries``),
    how many times each was called so far in this run (``counts``, by the entries'
    places), the classes it stands in for (those of the entries' modules), and the
    modules that get per-module hooks (``hooked``)."""

    entries: Entries
    counts: list[int]
    classes: tuple[type, ...]
    hooked: list[tuple[str, nn.Module]]


def plan_calls(
    members: Iterable[tuple[str, nn.Module]], matches: Callable[[str], bool] | None,
    fast: bool, leaves_fast: bool, scan: ModelScan | None = None,
) -> Plan:
    """Which modules the stand-in observes and which get per-module hooks, of the
    ``members`` that ``matches`` selects; TorchScript modules get neither (they run no
    module hooks: their work is their caller's).

    With ``fast``, a module keeps per-module hooks only when it has forward (pre-)hooks
    of its own, or when its calls never reach the stand-in: compiled in place
    (``module.compile()``: they go to the compiled ``_call_impl`` it captured), or a
    ``_call_impl`` of its class's or its own (``torch.compiler.disable`` on the class).
    With ``leaves_fast``, a hook-free module of a ``torch.nn`` class, without
    submodules and without a ``forward`` patched on the instance, is a fast leaf.

    With ``scan`` (a model traced again, its table reused: ``core/model/table_reuse.py``),
    a plan made for the same modules is made again from what it was, if nothing it
    depends on changed: no module with forward hooks or a call path of its own
    (``scan.plain``), the same ``forward`` patched on the same instances, no class
    with a ``_call_impl`` of its own since.

    One loop over every module, every run: per-class facts looked up once per
    class, the per-module checks inline.
    """
    again = scan is not None and fast and matches is None and scan.plain
    if again:
        assert scan is not None
        kept: _KeptPlan | None = scan.plans.get(leaves_fast)
        if kept is not None and kept.own_forward == scan.own_forward and not any(
            map(torch_private.overrides_call_impl, set(scan.types))
        ):
            return Plan(kept.entries, [0] * len(kept.entries), kept.classes, [])
    entries: Entries = {}
    hooked: list[tuple[str, nn.Module]] = []
    classes: dict[type, tuple[Kind, bool, str]] = {}
    scripted, torch_nn = Kind.SCRIPTED, Kind.TORCH_NN
    for path, module in members:
        if matches is not None and not matches(path):
            continue
        cls = type(module)
        facts = classes.get(cls)
        if facts is None:
            facts = classes[cls] = (
                kind_of(cls), torch_private.overrides_call_impl(cls), cls.__name__
            )
        kind = facts[0]
        if kind is scripted:
            continue
        if fast:
            own = module.__dict__
            if not (
                facts[1] or module._forward_hooks or module._forward_pre_hooks
                or own.get("_compiled_call_impl") is not None or "_call_impl" in own
            ):
                entries[id(module)] = (
                    path, facts[2], len(entries),
                    leaves_fast and kind is torch_nn and not module._modules
                    and "forward" not in own,  # no forward patched on the instance
                )
                continue
        hooked.append((path, module))
    # the stand-in goes to the classes of the modules it observes (and to a class
    # whose every module is hooked: harmless, they go on to torch's); never to one with
    # a _call_impl of its own or of a base's, which it would shadow
    observed = tuple(
        cls for cls, facts in classes.items() if facts[0] is not scripted and not facts[1]
    ) if entries else ()
    if again and not hooked:
        assert scan is not None
        scan.plans[leaves_fast] = _KeptPlan(scan.own_forward, entries, observed)
    return Plan(entries, [0] * len(entries), observed, hooked)


class _KeptPlan(NamedTuple):
    """A plan of a model traced again (``ModelScan.plans``), and what it depended on
    besides the fingerprint: which modules had a ``forward`` of their own."""

    own_forward: list[bool]
    entries: Entries
    classes: tuple[type, ...]
