import torch
from torch import nn

import hookscope


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)  # made, never used

    def forward(self, x):
        return self.proj(x)


report = hookscope.lint(Net(), torch.randn(4, 8))
