# A script that makes its ddprun.Healer too late: after a forward with
# gradients, when DDP has begun an iteration. The Healer must refuse,
# saying so, rather than heal into different parameters.
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import ddprun

dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(torch.nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loss = model(torch.ones(2, 4)).sum()  # a forward with gradients, no backward yet
healer = ddprun.Healer(model, optimizer)
