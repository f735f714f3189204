from torch import nn

import hookscope

model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
model[0].requires_grad_(False)  # frozen: no gradient, never trained
report = hookscope.lint(model)
