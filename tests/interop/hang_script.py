# An unmodified PyTorch script that hangs: rank 1 stops in a Python
# function of its own while the other ranks wait for it in all_reduce.
# With --train-steps N the ranks first train N steps (an optimizer that
# steps, gradients all-reduced), so that ddprun's learned hang timeout
# knows the script's rhythm. With --no-stuck nobody is stuck and the script
# ends; --slow-exit S then keeps its interpreter from exiting for S seconds
# after the script's last line (a thread it does not join: the slow exits
# of real interpreters), which is no hang.
import sys
import threading
import time

import torch
import torch.distributed as dist


def stuck_in_python():
    print(f"rank {dist.get_rank()} is stuck", flush=True)
    while True:
        time.sleep(0.05)


def train(steps):
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.ones(8, 4)).sum().backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
        time.sleep(0.01)


dist.init_process_group("gloo")
if "--train-steps" in sys.argv:
    train(int(sys.argv[sys.argv.index("--train-steps") + 1]))
if dist.get_rank() == 1 and "--no-stuck" not in sys.argv:
    stuck_in_python()
t = torch.ones(4)
print(f"rank {dist.get_rank()} enters all_reduce", flush=True)
dist.all_reduce(t)
print(f"rank {dist.get_rank()} is done", flush=True)
if "--slow-exit" in sys.argv:
    linger = float(sys.argv[sys.argv.index("--slow-exit") + 1])
    threading.Thread(target=time.sleep, args=(linger,)).start()  # joined by the interpreter as it exits
