# PyTorch's own TCPStore client (1.13's protocol or 2.x's) against the store
# ddprun's agent hosts, and PyTorch's own servers against ours.
#   ops:     every store operation (rank 0), then init_process_group("env://")
#            and an all_reduce on every rank.
#   restart: attempt 0 leaves a key behind and rank 1 fails; attempt 1 must
#            find a fresh key space, then init_process_group + all_reduce.
#   host [libuv|classic]: hosts a TCPStore (is_master=True) on a free port,
#            prints it, and checks what a ddprun client did there (tests of
#            our client). 2.x serves with libuv by default; 1.13 has only
#            the classic server.
import datetime
import os
import sys

import torch
import torch.distributed as dist

mode = sys.argv[1]
ms = lambda n: datetime.timedelta(milliseconds=n)


def expect(cond, what):
    if not cond:
        print(f"FAILED: {what}", flush=True)
        sys.exit(5)


def raw_client():
    return dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), None, False,
                         timeout=datetime.timedelta(seconds=10))


def times_out(store, keys, n):
    try:
        store.wait(keys, ms(n))
    except RuntimeError:
        return True
    return False


def all_reduce_check():
    dist.init_process_group("gloo", init_method="env://")
    t = torch.tensor([dist.get_rank() + 1.0])
    dist.all_reduce(t)
    n = dist.get_world_size()
    expect(t.item() == n * (n + 1) / 2, f"all_reduce gave {t.item()}")
    print(f"all_reduce ok on rank {dist.get_rank()} of {n}: {t.item():g}", flush=True)
    dist.destroy_process_group()


if mode == "ops":
    expect(os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True", "TORCHELASTIC_USE_AGENT_STORE")
    if int(os.environ["RANK"]) == 0:
        s = raw_client()
        s.set("ops/a", "1")
        expect(s.get("ops/a") == b"1", "set/get")
        expect(s.add("ops/n", 3) == 3 and s.add("ops/n", 4) == 7, "add")
        expect(s.get("ops/n") == b"7", "add's value is decimal text")
        expect(s.compare_set("ops/c", "", "x") == b"x", "compare_set creates")
        expect(s.compare_set("ops/c", "wrong", "y") == b"x", "compare_set keeps on mismatch")
        expect(s.compare_set("ops/c", "x", "y") == b"y", "compare_set swaps")
        n = s.num_keys()
        expect(n >= 3, f"num_keys {n}")
        expect(s.delete_key("ops/a") and not s.delete_key("ops/a"), "delete_key")
        expect(s.num_keys() == n - 1, "num_keys after delete")
        if hasattr(s, "multi_get"):  # PyTorch 2.x
            expect(s.check(["ops/n", "ops/c"]) and not s.check(["ops/n", "ops/none"]), "check")
            s.multi_set(["ops/m1", "ops/m2"], ["x", "yz"])
            expect(s.multi_get(["ops/m2", "ops/m1"]) == [b"yz", b"x"], "multi_set/multi_get")
            s.append("ops/m1", "w")
            expect(s.get("ops/m1") == b"xw", "append")
        t0 = datetime.datetime.now()
        expect(times_out(s, ["ops/never"], 300), "wait with timeout")
        took = (datetime.datetime.now() - t0).total_seconds()
        # Not early, and its own timeout, not the client's 10 s one.
        expect(0.25 < took < 9.0, f"wait timeout took {took:.2f} s")
        s.set("ops/late", "z")  # the connection still works after a timeout
        expect(s.get("ops/late") == b"z", "get after a timed-out wait")
        # Past the store's limits (max_value_bytes, 1 MiB): cut off, nothing stored.
        big = raw_client()
        try:
            big.set("ops/big", b"x" * (2 << 20))
            big.get("ops/big")
            expect(False, "a 2 MiB value was accepted")
        except RuntimeError:
            pass
        expect(times_out(s, ["ops/big"], 50), "the refused value was stored")
        print("store ops ok", flush=True)
    all_reduce_check()
elif mode == "restart":
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    rank = int(os.environ["RANK"])
    s = raw_client()
    if attempt == 0:
        s.set("leftover", "from attempt 0")
        s.add("leftover/count", 1)
        if rank == 1:
            s.wait(["leftover"], ms(5000))
            print("rank 1 fails on purpose", flush=True)
            sys.exit(3)
        s.wait(["never"], datetime.timedelta(seconds=60))  # stopped by ddprun
    expect(times_out(s, ["leftover"], 100), "attempt 1 sees attempt 0's keys")
    print(f"fresh key space on attempt {attempt}", flush=True)
    all_reduce_check()
elif mode == "host":
    server = sys.argv[2] if len(sys.argv) > 2 else "classic"
    kw = {}
    if torch.__version__.split(".")[0] != "1":
        kw["use_libuv"] = server == "libuv"
    elif server != "classic":
        print(f"no {server} server in PyTorch {torch.__version__}", flush=True)
        sys.exit(77)
    s = dist.TCPStore("127.0.0.1", 0, None, True, timeout=datetime.timedelta(seconds=30), **kw)
    if kw:
        expect(s.libuvBackend == kw["use_libuv"], f"the {server} server")
    s.set("from_python", "hello")
    print(f"port {s.port} torch {torch.__version__}", flush=True)
    s.wait(["from_cpp"])
    expect(s.get("from_cpp") == b"world", "the C++ client's set")
    expect(s.get("counter") == b"12", "the C++ client's add")
    print("host ok", flush=True)
else:
    sys.exit(f"unknown mode {mode}")

# PyTorch 2.15's ProcessGroupGloo can still be dropping a finished work
# (and the tensors it holds) on its own thread while the interpreter shuts
# down; that thread then dies taking the GIL, and the process aborts
# ("terminate called without an active exception"): about half the runs of
# a small script under torchrun 2.15. Leaving without the shutdown avoids it.
sys.stdout.flush()
os._exit(0)
