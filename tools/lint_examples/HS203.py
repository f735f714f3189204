from torch import nn

import hookscope


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(100, 16)
        self.lm_head = nn.Linear(16, 100, bias=False)
        self.lm_head.weight = self.embed.weight  # one tensor under two names


report = hookscope.lint(Net())
