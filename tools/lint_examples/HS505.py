import torch
from torch import nn

import hookscope


class Net(nn.Module):
    def forward(self, x):
        if not hasattr(self, "proj"):
            self.proj = nn.Linear(x.shape[-1], 2)  # made on the first call
        return self.proj(x)


report = hookscope.lint(Net(), torch.randn(4, 8))
