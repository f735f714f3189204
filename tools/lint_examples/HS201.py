import torch
from torch import nn

import hookscope


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.scale = torch.ones(8)  # fix: self.register_buffer("scale", torch.ones(8))

    def forward(self, x):
        return self.proj(x) * self.scale


report = hookscope.lint(Net())
