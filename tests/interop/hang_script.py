# An unmodified PyTorch script that hangs: rank 1 stops in a Python
# function of its own while the other ranks wait for it in all_reduce.
# With --train-steps N the ranks first train N steps (an optimizer that
# steps, gradients all-reduced), so that ddprun's learned hang timeout
# knows the script's rhythm. With --no-stuck nobody is stuck and the script
# ends; --slow-exit S then keeps its interpreter from exiting for S seconds
# after the script's last line (a thread it does not join: the slow exits
# of real interpreters), which is no hang. With --spin rank 1 computes for
# ever in Python instead of sleeping; with --hold-gil it stays in one C call
# that holds the GIL (no thread of its interpreter runs). With --deadlock
# nobody is stuck alone: rank 0 waits in a barrier, rank 1 in an all_reduce
# of another group (each inside torch.distributed, so each one beats).
import sys
import threading
import time

import torch
import torch.distributed as dist


def stuck_in_python():
    print(f"rank {dist.get_rank()} is stuck", flush=True)
    while True:
        time.sleep(0.05)


def spin_in_python():
    print(f"rank {dist.get_rank()} spins", flush=True)
    x = 0
    while True:
        x += 1


def hold_the_gil():
    print(f"rank {dist.get_rank()} holds the GIL", flush=True)
    while True:
        sum(range(10**12))


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
if "--deadlock" in sys.argv:
    other = dist.new_group([0, 1])
    print(f"rank {dist.get_rank()} waits for ever", flush=True)
    if dist.get_rank() == 0:
        dist.barrier()
    else:
        dist.all_reduce(torch.ones(4), group=other)
if dist.get_rank() == 1 and "--no-stuck" not in sys.argv:
    if "--spin" in sys.argv:
        spin_in_python()
    if "--hold-gil" in sys.argv:
        hold_the_gil()
    stuck_in_python()
t = torch.ones(4)
print(f"rank {dist.get_rank()} enters all_reduce", flush=True)
dist.all_reduce(t)
print(f"rank {dist.get_rank()} is done", flush=True)
if "--slow-exit" in sys.argv:
    linger = float(sys.argv[sys.argv.index("--slow-exit") + 1])
    threading.Thread(target=time.sleep, args=(linger,)).start()  # joined by the interpreter as it exits
