import torch
from torch import nn

import hookscope


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.gate = nn.Parameter(torch.ones(8))

    def forward(self, x):
        return self.proj(x) * self.gate.detach()  # the gate gets no gradient


report = hookscope.lint(Net(), torch.randn(4, 8), backward=True)
