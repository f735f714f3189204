"""Built-in example models: the ones ``hookscope demo`` runs, usable as model specs.

The seed notes build a nested custom model from four tiny "functions" grouped in two
layers; :func:`seed_model` rebuilds it, so that everything the notes do by hand
(``named_modules``, ``get_parameter('ab.b.W1')``, ``get_buffer('cd.c.duck')``, a
forward hook printing shapes) can be compared with what hookscope shows. The
:func:`small_cnn` is the kind of image model the first seed traces layer by layer.

Both factories take no arguments, so they work as command-line specs::

    hookscope summary hookscope.examples:seed_model --input 2,2
    hookscope trace hookscope.examples:small_cnn --input 1,3,32,32

Example:
    >>> model = seed_model()
    >>> model.get_parameter("ab.b.W1").item(), model.get_buffer("cd.c.duck").item()
    (10.0, 7.0)
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import Parameter

__all__ = [
    "SEED_INPUT_SHAPE",
    "SMALL_CNN_INPUT_SHAPE",
    "Function_A",
    "Function_B",
    "Function_C",
    "Function_D",
    "Layer_AB",
    "Layer_CD",
    "Model",
    "SmallCNN",
    "seed_model",
    "small_cnn",
]

SEED_INPUT_SHAPE = (2, 2)
"""The seed notes feed a 2×2 matrix through :class:`Model`."""

SMALL_CNN_INPUT_SHAPE = (1, 3, 32, 32)
"""One 32×32 RGB image, as in the first seed's ``nn.Conv2d`` example."""


class _Function(nn.Module):
    """Common part of the seed's four functions: a name shown by ``print(model)``."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    def extra_repr(self) -> str:
        return f"name={self.name}"


# The class names below follow the seed notes (``Function_A`` ... ``Layer_CD``), which
# the user knows; they are not PEP 8 CapWords on purpose (ruff selects no N rules).
class Function_A(_Function):
    """``x + W``."""

    def __init__(self) -> None:
        super().__init__("plus")
        self.W = Parameter(torch.tensor([1.0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.W


class Function_B(_Function):
    """``x - W1`` (the seed looks this parameter up as ``ab.b.W1``)."""

    def __init__(self) -> None:
        super().__init__("substract")
        self.W1 = Parameter(torch.tensor([10.0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - self.W1


class Function_C(_Function):
    """``x * W``; also holds the buffer ``duck`` (a tensor that is not trained)."""

    duck: torch.Tensor

    def __init__(self) -> None:
        super().__init__("multiply")
        self.W = Parameter(torch.tensor([3.0]))
        self.register_buffer("duck", torch.tensor([7.0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.W


class Function_D(_Function):
    """``x / W``."""

    def __init__(self) -> None:
        super().__init__("divide")
        self.W = Parameter(torch.tensor([2.0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / self.W


class Layer_AB(nn.Module):
    """``b(a(x))``."""

    def __init__(self) -> None:
        super().__init__()
        self.a = Function_A()
        self.b = Function_B()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.b(self.a(x))
        return out


class Layer_CD(nn.Module):
    """``d(c(x))``."""

    def __init__(self) -> None:
        super().__init__()
        self.c = Function_C()
        self.d = Function_D()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.d(self.c(x))
        return out


class Model(nn.Module):
    """The seed notes' nested model: ``cd(ab(x))``.

    Its tree is ``ab: Layer_AB(a, b)`` and ``cd: Layer_CD(c, d)``; four parameters of
    one element each (``ab.a.W``, ``ab.b.W1``, ``cd.c.W``, ``cd.d.W``) and one buffer
    (``cd.c.duck``).
    """

    def __init__(self) -> None:
        super().__init__()
        self.ab = Layer_AB()
        self.cd = Layer_CD()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.cd(self.ab(x))
        return out


class SmallCNN(nn.Module):
    """A small image classifier: two conv blocks, global pooling and a linear head.

    Args:
        num_classes: size of the output.
    """

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, kernel_size=3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, kernel_size=3, padding=1),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(32, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.classifier(self.features(x))
        return out


def seed_model() -> Model:
    """The seed notes' :class:`Model` (its values are fixed; no randomness)."""
    return Model()


def small_cnn(seed: int = 0) -> SmallCNN:
    """A :class:`SmallCNN` in eval mode with weights drawn from ``seed``.

    torch's global random state is left as it was.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return SmallCNN().eval()
