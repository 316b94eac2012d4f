"""The anchor's job for bench/node_loss.py: bench/recovery_torch.py (the
PyTorch DDP twin of examples/train, checkpoints, "step N done at T" lines)
unchanged, with two additions that node_loss.py needs and recovery_torch.py
does not have:

  --limit N   train on the first N images only, like examples/train's --limit
              (node_loss.py runs both jobs on 6000 images);
  rank 0 prints "world N" once the process group is up, so the benchmark can
  tell that both nodes are in the job before it kills one.

Everything else (model, batch size, learning rate, checkpointing, resume) is
recovery_torch.py's own code."""
import argparse
import sys

import torch.distributed as dist

import recovery_torch


def main():
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--limit", type=int, default=0)
    ours, rest = p.parse_known_args()
    sys.argv = [sys.argv[0]] + rest  # recovery_torch.main() parses the rest

    if ours.limit > 0:
        load = recovery_torch.load

        def limited(split):
            images, labels = load(split)
            return images[:ours.limit], labels[:ours.limit]

        recovery_torch.load = limited

    init = dist.init_process_group

    def init_and_say_world(*args, **kwargs):
        init(*args, **kwargs)
        if dist.get_rank() == 0:
            print("world %d" % dist.get_world_size(), flush=True)

    dist.init_process_group = init_and_say_world  # recovery_torch calls dist.init_process_group
    recovery_torch.main()


if __name__ == "__main__":
    main()
