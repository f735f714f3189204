import torch
from torch import nn

import hookscope

model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
with torch.no_grad():
    model[2].weight[0, 0] = float("nan")  # a diverged run, or a bad checkpoint
report = hookscope.lint(model)
