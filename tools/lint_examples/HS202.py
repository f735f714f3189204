import torch
from torch import nn

import hookscope


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.ones(8, requires_grad=True))  # fix: nn.Parameter

    def forward(self, x):
        return x * self.scale


report = hookscope.lint(Net())
