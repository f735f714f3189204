import torch
from torch import nn

import hookscope


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.scales = [nn.Parameter(torch.ones(8)) for _ in range(2)]  # fix: nn.ParameterList

    def forward(self, x):
        return x * self.scales[0] * self.scales[1]


report = hookscope.lint(Net())
