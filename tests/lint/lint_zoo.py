"""One small model per lint rule that triggers it, and a corrected twin that does not.

``CASES[code] = (bad, good, inputs, options)``: ``bad()`` and ``good()`` build the two
models, ``inputs()`` their forward inputs (``None``: static rules only), ``options``
extra keyword options of :func:`hookscope.lint` (``backward=True``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn


class _Linear2(nn.Module):
    """Base of the small models: ``fc`` maps 4 features to 4."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


class NestedPlainDict(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.heads = {"a": [nn.Linear(4, 4)], "b": (nn.Linear(4, 2),)}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.heads["a"][0](x)


class NestedModuleDict(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.heads = nn.ModuleDict({"a": nn.ModuleList([nn.Linear(4, 4)]),
                                    "b": nn.ModuleList([nn.Linear(4, 2)])})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.heads["b"][0](self.heads["a"][0](x))


class ReferenceList(_Linear2):
    """A plain list of references to registered modules: harmless."""

    def __init__(self) -> None:
        super().__init__()
        self.order = [self.fc]


class ParamList(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scales = [nn.Parameter(torch.ones(4)), nn.Parameter(torch.ones(4))]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scales[0] * self.scales[1]


class ParamListFixed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scales = nn.ParameterList([nn.Parameter(torch.ones(4)), nn.Parameter(torch.ones(4))])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scales[0] * self.scales[1]


class PlainTensor(_Linear2):
    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.full((4,), 2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) * self.scale


class BufferTensor(_Linear2):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.full((4,), 2.0))
        self.alias = self.scale  # a second name of the buffer: not reported

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) * self.scale


class GradBuffer(_Linear2):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("shift", torch.zeros(4, requires_grad=True))


class PlainBuffer(_Linear2):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("shift", torch.zeros(4))


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(ids))


class Untied(Tied):
    def __init__(self) -> None:
        super().__init__()
        self.head.weight = nn.Parameter(self.embed.weight.detach().clone())


def frozen() -> nn.Module:
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    model[0].requires_grad_(False)
    return model


def nan_weight() -> nn.Module:
    model = _Linear2()
    with torch.no_grad():
        model.fc.weight[0, 0] = float("nan")
        model.fc.weight[1, 1] = float("inf")
    return model


def zero_weight() -> nn.Module:
    model = _Linear2()
    nn.init.zeros_(model.fc.weight)
    return model


def constant_kernel() -> nn.Module:
    model = nn.Sequential(nn.Conv2d(3, 4, 3))
    nn.init.constant_(model[0].weight, 0.5)
    return model


def mixed_devices() -> nn.Module:
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    model[1].to("meta")
    return model


def mixed_dtypes() -> nn.Module:
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    model[1].double()
    return model


class MadeInForward(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.Linear(4, 4)(x)


class DropoutInForward(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.Dropout(0.5)(x)


class StatelessInForward(_Linear2):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.ReLU()(self.fc(x))  # stateless, same behaviour in both modes: harmless


class Forgotten(_Linear2):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(4)


class Auxiliary(_Linear2):
    """``aux`` runs only in training mode: a branch, not a forgotten layer."""

    def __init__(self) -> None:
        super().__init__()
        self.aux = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        return y + self.aux(x) if self.training else y


class UnusedParameter(_Linear2):
    def __init__(self) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) * self.gain.detach()


class UsedParameter(UnusedParameter):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) * self.gain


class RegistersInForward(nn.Module):
    """A layer made on the first call: not in parameters() before it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not hasattr(self, "proj"):
            self.proj = nn.Linear(4, 4)
        return self.proj(x)


class RegistersInInit(RegistersInForward):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)


def bn_model() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))


Case = tuple[Callable[[], nn.Module], Callable[[], nn.Module],
             Callable[[], tuple[Any, ...]] | None, dict[str, Any]]


def _x() -> tuple[Any, ...]:
    return (torch.randn(2, 4),)


class _Head(nn.Module):
    """Keeps its owner, as a child that calls back into it would."""

    def __init__(self, owner: nn.Module, *, registered: bool) -> None:
        super().__init__()
        if registered:
            self.owner = owner  # registers the owner as a submodule: a cycle
        else:
            object.__setattr__(self, "owner", owner)  # a plain reference
        self.fc = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


class KeepsItsOwner(nn.Module):
    registered = True

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(4, 4)
        self.head = _Head(self, registered=self.registered)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


class KeepsItsOwnerUnregistered(KeepsItsOwner):
    registered = False


CASES: dict[str, Case] = {
    "HS101": (NestedPlainDict, NestedModuleDict, None, {}),
    "HS102": (ParamList, ParamListFixed, None, {}),
    "HS103": (KeepsItsOwner, KeepsItsOwnerUnregistered, _x, {}),
    "HS201": (PlainTensor, BufferTensor, None, {}),
    "HS202": (GradBuffer, PlainBuffer, None, {}),
    "HS203": (Tied, Untied, None, {}),
    "HS204": (frozen, lambda: nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4)), None, {}),
    "HS301": (nan_weight, _Linear2, None, {}),
    "HS302": (zero_weight, _Linear2, None, {}),
    "HS401": (mixed_devices, lambda: nn.Sequential(nn.Linear(4, 4)), None, {}),
    "HS402": (mixed_dtypes, lambda: nn.Sequential(nn.Linear(4, 4)), None, {}),
    "HS501": (MadeInForward, _Linear2, _x, {}),
    "HS502": (Forgotten, lambda: Auxiliary().eval(), _x, {}),
    "HS503": (UnusedParameter, UsedParameter, _x, {"backward": True}),
    "HS504": (lambda: bn_model().train(), lambda: bn_model().eval(),
              lambda: (torch.randn(1, 3, 8, 8),), {}),
    "HS505": (RegistersInForward, RegistersInInit, _x, {}),
}
