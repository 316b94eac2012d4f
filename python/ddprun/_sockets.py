"""The sockets a process group's connect made, shut down when a heal drops
the group.

A rank's forked children (a DataLoader's worker processes, persistent or
not) hold copies of every socket it had when they were forked, Gloo's
connections to its peers among them. Closing the rank's own descriptors
then closes no connection: a peer blocked in the dropped group's collective
with this rank waits on, until found hung. shutdown() acts on the
connection itself, whoever else holds it: the peer's wait fails at once, as
it does when a rank dies (what ddprun does in C++ to Gloo's pairs too).

Which sockets: the TCP connections that appeared while init_process_group
ran (Gloo's pairs), less the one to the job's store (the
MASTER_ADDR:MASTER_PORT endpoint: the next generation uses it), and never
a listening socket (PyTorch 2.x's Gloo aborts the process when its
listener's accept fails). Linux's
/proc/self/fd names each socket by its inode, so a descriptor number used
again since is never touched."""
import os
import socket
from . import _contract


def _open_sockets():
    """{fd: "socket:[inode]"} of this process."""
    out = {}
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return out
    for name in names:
        try:
            target = os.readlink("/proc/self/fd/" + name)
        except OSError:
            continue
        if target.startswith("socket:["):
            out[int(name)] = target
    return out


def _peer_port(fd):
    s = socket.socket(fileno=os.dup(fd))
    try:
        if s.family not in (socket.AF_INET, socket.AF_INET6) or s.type != socket.SOCK_STREAM:
            return None
        try:
            return s.getpeername()[1]
        except OSError:
            return -1  # a listener
    finally:
        s.close()


class GroupSockets:
    """The TCP sockets of the newest default group (see the top of this file)."""

    def __init__(self):
        self._made = []

    def around(self, init):
        """init(), noting the sockets it made."""
        before = _open_sockets()
        try:
            return init()
        finally:
            store_port = int(os.environ.get(_contract.MASTER_PORT, "0") or 0)
            made = []
            for fd, name in _open_sockets().items():
                if before.get(fd) == name:
                    continue
                try:
                    port = _peer_port(fd)
                except OSError:
                    continue
                # Connections only: Gloo's listener thread takes a shut-down
                # listening socket for a fatal error (it aborts the process).
                if port is not None and port > 0 and port != store_port:
                    made.append((fd, name))
            self._made = made

    def shut_down(self):
        """Every connection noted, both ways (those still open as noted)."""
        made, self._made = self._made, []
        for fd, name in made:
            try:
                if os.readlink("/proc/self/fd/%d" % fd) != name:
                    continue
                s = socket.socket(fileno=fd)
            except OSError:
                continue
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # not connected (a listener), or closed by the peer already
            finally:
                s.detach()  # the descriptor stays the group's to close
