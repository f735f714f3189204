from torch import nn

import hookscope


class Head(nn.Module):
    def __init__(self, owner):
        super().__init__()
        self.owner = owner  # registers the owner as a child: fix: object.__setattr__
        self.proj = nn.Linear(8, 2)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = Head(self)


report = hookscope.lint(Net())
