"""Which process holds a loopback TCP connection: read from Linux's ``/proc``.

The fault proxy (`grid.testing.fault_proxy`) must know which site opened a TCP
connection to it, and a source port says nothing by itself. `tcp_owner` finds
the socket whose local port is the connection's source port and whose remote
port is the proxy's in ``/proc/net/tcp``, then the process among ``pids`` that
has that socket open (its ``/proc/PID/fd`` links name the socket's inode).
Linux only; a socket gone meanwhile, or a process not among ``pids``, is None.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path

PROC = Path("/proc")


def socket_inode(
    local_port: int, remote_port: int, table: Path = PROC / "net" / "tcp"
) -> int | None:
    """The inode of the IPv4 TCP socket from ``local_port`` to ``remote_port``."""
    try:
        lines = table.read_text().splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) < 10:
            continue
        local, remote = fields[1], fields[2]
        if int(local.rsplit(":", 1)[1], 16) == local_port and (
            int(remote.rsplit(":", 1)[1], 16) == remote_port
        ):
            inode = int(fields[9])
            if inode:
                return inode
    return None


def holder(inode: int, pids: Iterable[int], proc: Path = PROC) -> int | None:
    """The process among ``pids`` that has socket ``inode`` open."""
    wanted = f"socket:[{inode}]"
    for pid in pids:
        with contextlib.suppress(OSError), os.scandir(proc / str(pid) / "fd") as fds:
            for fd in fds:
                with contextlib.suppress(OSError):
                    if os.readlink(fd.path) == wanted:
                        return pid
    return None


def tcp_owner(local_port: int, remote_port: int, pids: Iterable[int]) -> int | None:
    """The process among ``pids`` connected from ``local_port`` to ``remote_port``."""
    inode = socket_inode(local_port, remote_port)
    return None if inode is None else holder(inode, pids)
