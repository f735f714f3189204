import torch
from torch import nn

import hookscope

model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU())
model.train()
report = hookscope.lint(model, torch.randn(1, 3, 8, 8))  # a batch of one in training mode
