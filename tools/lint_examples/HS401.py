import torch
from torch import nn

import hookscope


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.register_buffer("table", torch.zeros(4, device="meta"))  # another device


report = hookscope.lint(Net())
