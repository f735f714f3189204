from torch import nn

import hookscope

model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
nn.init.constant_(model[0].weight, 0.5)  # every unit computes the same: symmetry unbroken
report = hookscope.lint(model)
