"""The second seed's "Python List vs PyTorch ModuleList" example, as its reader would
write it: the layers are kept in a plain list, so ``print(model)`` shows none of them,
``model.parameters()`` is empty and ``state_dict()`` saves nothing."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.parameter import Parameter


class FunctionA(nn.Module):
    def __init__(self, value: float) -> None:
        super().__init__()
        self.W = Parameter(torch.tensor([value]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.W


class ListModel(nn.Module):
    """The bug: a plain ``list`` of modules."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = [FunctionA(1.0), FunctionA(2.0), FunctionA(3.0)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class ModuleListModel(nn.Module):
    """The fix: ``nn.ModuleList``."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([FunctionA(1.0), FunctionA(2.0), FunctionA(3.0)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x
