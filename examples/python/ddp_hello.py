"""An unmodified PyTorch DDP script, as torchrun runs it: fit y = 3x + 1 with
gradients averaged over the ranks. Everything comes from the environment the
launcher sets (RANK, WORLD_SIZE, MASTER_ADDR, ...), so it runs the same under

    ddprun --nproc 2 examples/python/ddp_hello.py
    torchrun --standalone --nproc_per_node 2 examples/python/ddp_hello.py
"""
import gc

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # every rank starts from the same model and data
    x = torch.rand(1024, 1)
    data = TensorDataset(x, 3 * x + 1)
    sampler = DistributedSampler(data)  # each rank reads its own share
    model = DDP(torch.nn.Linear(1, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(20):
        sampler.set_epoch(epoch)
        for xb, yb in DataLoader(data, batch_size=32, sampler=sampler):
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(xb), yb).backward()
            optimizer.step()
    w, b = model.module.weight.item(), model.module.bias.item()
    if rank == 0:
        print(f"{world} ranks learned y = {w:.2f}x + {b:.2f}", flush=True)
    # Let the process group go while Python still runs. DDP holds it, in a
    # reference cycle, so without these two lines it lives on until the
    # interpreter shuts down; PyTorch 2.x's Gloo threads may then still be
    # dropping a finished all_reduce, and the process aborts ("terminate
    # called without an active exception", about 1 run in 10 here, under
    # torchrun as under ddprun).
    del model, optimizer
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
