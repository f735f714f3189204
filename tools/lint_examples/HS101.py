from torch import nn

import hookscope


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = [nn.Linear(8, 8) for _ in range(3)]  # fix: nn.ModuleList([...])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


report = hookscope.lint(Net())
