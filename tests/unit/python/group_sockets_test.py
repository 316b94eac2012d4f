"""A heal's dropped group ends its connections though a forked child (a
DataLoader worker) holds copies of their sockets (python/ddprun/_sockets.py).

    group_sockets_test.py PYTHONPATH_OF_THE_PACKAGE

A "group" connects to a peer inside GroupSockets.around(), beside a
connection to the job's store (MASTER_PORT); a forked child keeps both
open. Closing the group's descriptor then ends nothing (the first check,
which shows what the fix is for); shut_down() ends the group's connection
at once and leaves the store's open, and the group's listener listening.
Exit 0 when so.
"""
import importlib.util
import os
import socket
import sys
import time
import types


def load_sockets(package_path):
    """ddprun._sockets without the package's __init__ (which imports torch)."""
    package = types.ModuleType("ddprun")
    package.__path__ = [os.path.join(package_path, "ddprun")]
    sys.modules["ddprun"] = package
    return importlib.import_module("ddprun._sockets")


def listener():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(4)
    return s


def ended(peer, within):
    """Whether the peer's side sees the connection end within `within` s."""
    peer.settimeout(within)
    try:
        return peer.recv(1) == b""
    except socket.timeout:
        return False
    except ConnectionResetError:
        return True


def main():
    sockets = load_sockets(sys.argv[1])
    store, peer_listener = listener(), listener()
    os.environ["MASTER_PORT"] = str(store.getsockname()[1])
    made = []

    def connect():  # what init_process_group does: the store, its listener, then the peers
        for port in (store.getsockname()[1], peer_listener.getsockname()[1], peer_listener.getsockname()[1]):
            c = socket.create_connection(("127.0.0.1", port))
            made.append(c)
        made.append(listener())

    group = sockets.GroupSockets()
    group.around(connect)
    store_peer, _ = store.accept()
    first_peer, _ = peer_listener.accept()
    second_peer, _ = peer_listener.accept()
    child = os.fork()
    if child == 0:  # a DataLoader worker: holds every descriptor, does nothing
        time.sleep(60)
        os._exit(0)
    try:
        # 1. Closing this process's descriptor ends nothing: the child holds it.
        made[1].close()
        if ended(first_peer, 1.0):
            print("FAIL: a close ended the connection though a child holds it (the check shows nothing)")
            return 1
        # 2. shut_down ends the group's connection still open, not the store's.
        started = time.monotonic()
        group.shut_down()
        if not ended(second_peer, 5.0):
            print("FAIL: the group's connection did not end after shut_down")
            return 1
        if ended(store_peer, 0.5):
            print("FAIL: the store's connection ended too")
            return 1
        # A listener is left alone: PyTorch 2.x's Gloo aborts the process
        # when its listener's accept fails.
        try:
            socket.create_connection(made[3].getsockname(), timeout=2).close()
            made[3].settimeout(2)
            made[3].accept()[0].close()
        except OSError as e:
            print(f"FAIL: the group's listener was shut down too ({e})")
            return 1
        print(f"ok: the group's connection ended {time.monotonic() - started:.3f} s after shut_down; "
              "the store's stays open")
        return 0
    finally:
        os.kill(child, 9)
        os.waitpid(child, 0)


if __name__ == "__main__":
    sys.exit(main())
