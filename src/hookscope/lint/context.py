"""What every rule reads: the model through the library's structure walk, and what one
forward (and backward) pass showed.

The runner builds one :class:`LintContext` per :func:`hookscope.lint` run from
:func:`hookscope.inspect` (parameters, buffers, tied tensors) and
:func:`hookscope.core.model.module_table.module_table` (each module once, by first path). When
inputs are given, ``lint/traced_pass.py`` runs the model once and stores what it saw in
:attr:`LintContext.forward` (a :class:`ForwardFacts`). Rules only read the context.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

import torch
from torch import nn

from hookscope.core.model.module_table import module_table
from hookscope.core.model.structure import ModelInfo, inspect
from hookscope.core.records.trace import Call

# Containers whose items are attributes of the module that holds the container.
CONTAINERS = (nn.ModuleList, nn.ModuleDict, nn.ParameterList, nn.ParameterDict)

_TORCH_ATTRIBUTES = frozenset(vars(nn.Module()))

Lost = Literal["parameters", "buffers", "mode"]


@dataclass(slots=True)
class ForeignCall:
    """Calls of a module that is not registered in the model, grouped by where it is held.

    Attributes:
        path: the module of the model whose plain attribute holds it, or (when none
            does: made inside ``forward``) the innermost registered module running when
            it was called.
        attribute: that plain attribute (a list, say), or ``None`` when none holds it.
        class_name: the unregistered module's class.
        lost: what goes wrong: ``"parameters"`` the model does not have (never
            trained), ``"buffers"`` it does not have (never saved), or ``"mode"`` (a
            ``training`` flag that ``.train()``/``.eval()`` do not reach, and that its
            class reads).
        calls: how many calls were seen (a module made inside ``forward`` is a new
            object each time: each object counts once per call).
        objects: how many distinct module objects were called.
        location: ``(file, line, col)`` where the forward made the first of them (or,
            for one that registers nothing when built, called it), for one that no
            attribute holds; ``None`` otherwise or when not known.
    """

    path: str
    attribute: str | None
    class_name: str
    lost: Lost
    calls: int = 0
    objects: int = 0
    location: tuple[str, int, int] | None = None


@dataclass(frozen=True, slots=True)
class LateMember:
    """A submodule or parameter that the forward registered on a module of the model
    (``if not hasattr(self, "proj"): self.proj = nn.Linear(...)``).

    Attributes:
        path: the module of the model it was registered on.
        name: its attribute.
        class_name: its class (``Parameter`` for a parameter).
        numel: its parameter values that the model did not have before.
        location: ``(file, line, col)`` of the line of the forward that registered
            it, when known.
    """

    path: str
    name: str
    class_name: str
    numel: int
    location: tuple[str, int, int] | None = None


@dataclass
class ForwardFacts:
    """What one forward (and backward) pass of the model showed.

    Attributes:
        calls: every call of a registered module, as the tracer recorded it.
        foreign: calls of modules not registered in the model.
        late: submodules and parameters the forward registered (the run takes them
            out again).
        no_grad: with ``backward=True``, paths of the parameters that require grad and
            got no gradient; ``None`` without a backward pass.
        backward_skipped: why no backward pass ran although one was asked for
            (no floating output that requires grad), else ``None``.
    """

    calls: list[Call]
    foreign: list[ForeignCall] = field(default_factory=list)
    late: list[LateMember] = field(default_factory=list)
    no_grad: list[str] | None = None
    backward_skipped: str | None = None

    @cached_property
    def called_paths(self) -> set[str]:
        return {call.path for call in self.calls}


def modules_by_id(module: nn.Module) -> list[nn.Module]:
    """``module`` and the modules in it, each once, in ``module.modules()``'s order.

    Tracked by ``id``: ``modules()`` puts them in a set, and a module class that
    defines ``__eq__`` (without ``__hash__``) is not hashable.
    """
    found: dict[int, nn.Module] = {}
    stack = [module]
    while stack:
        m = stack.pop()
        if id(m) in found:
            continue
        found[id(m)] = m
        children = [c for c in vars(m).get("_modules", {}).values() if c is not None]
        stack.extend(reversed(children))
    return list(found.values())


class LintContext:
    """The model as rules see it.

    Attributes:
        model: the linted model (rules must not change it).
        info: :func:`hookscope.inspect` of the model.
        members: ``(path, module)`` of each module once, at its first path, in tree order.
        forward: what the forward pass showed, or ``None`` when no inputs were given.
    """

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.info: ModelInfo = inspect(model)
        self.members: Sequence[tuple[str, nn.Module]] = module_table(
            model, extra_repr=False).members
        self.forward: ForwardFacts | None = None
        self._extremes: dict[int, tuple[float, float]] = {}
        #: ``id`` of every registered parameter and buffer, read before any forward
        #: (which may register more: HS505)
        self.tensor_ids: set[int] = {id(t) for _, t in self.tensors()}

    @cached_property
    def modules(self) -> dict[str, nn.Module]:
        """Each module by its first path."""
        return dict(self.members)

    @cached_property
    def module_ids(self) -> set[int]:
        """``id`` of every registered module."""
        return {id(m) for _, m in self.members}

    def tensors(self, *, buffers: bool = True) -> Iterator[tuple[str, torch.Tensor]]:
        """``(path, tensor)`` of each parameter (then buffer) once, at its first path."""
        tables = ("_parameters", "_buffers") if buffers else ("_parameters",)
        seen: set[int] = set()
        for table in tables:
            for path, module in self.members:
                for name, t in getattr(module, table).items():
                    if t is not None and id(t) not in seen:
                        seen.add(id(t))
                        yield (f"{path}.{name}" if path else name), t

    def extremes(self, t: torch.Tensor) -> tuple[float, float]:
        """``(min, max)`` of a real floating tensor, computed once per tensor per run
        (NaN when it holds a NaN): one read pass, no temporary tensor."""
        key = id(t)
        if key not in self._extremes:
            low, high = torch.aminmax(t.detach())
            self._extremes[key] = (float(low), float(high))
        return self._extremes[key]

    def plain_attributes(self) -> Iterator[tuple[str, nn.Module, str, Any]]:
        """``(path, module, name, value)`` of every attribute in ``vars(module)`` that
        torch does not register (neither submodule, parameter nor buffer), skipping
        the bookkeeping ``nn.Module.__init__`` itself sets (``training``, hook dicts)."""
        for path, module in self.members:
            for name, value in vars(module).items():
                if name not in _TORCH_ATTRIBUTES:
                    yield path, module, name, value

    def owner(self, path: str) -> tuple[str, str | None]:
        """``(module path, attribute)`` that a path is assigned to in source.

        ``encoder.layers.3.fc`` -> ``("encoder.layers.3", "fc")``; an item of a
        container (``encoder.layers.3``) -> ``("encoder", "layers")``; the root ->
        ``("", None)``.
        """
        if not path:
            return "", None
        parent, _, name = path.rpartition(".")
        while isinstance(self.modules.get(parent), CONTAINERS) and parent:
            parent, _, name = parent.rpartition(".")
        return parent, name

    def split(self, tensor_path: str) -> tuple[str, str]:
        """``"encoder.fc.weight"`` -> ``("encoder.fc", "weight")``."""
        parent, _, name = tensor_path.rpartition(".")
        return parent, name
