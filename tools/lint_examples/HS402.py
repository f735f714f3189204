import torch
from torch import nn

import hookscope

model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
model[2].to(torch.float64)  # one layer converted on its own
report = hookscope.lint(model)
