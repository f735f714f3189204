import torch
from torch import nn

import hookscope


class Net(nn.Module):
    def forward(self, x):
        return nn.Linear(8, 2)(x)  # a new, untrained layer at every call


report = hookscope.lint(Net(), torch.randn(4, 8))
