"""Network namespaces for sandboxes, made once and reused: a pool of slots, each a namespace of its own
with its loopback up and the relay's listeners in it.

Creating and destroying a network namespace per episode serialises on the kernel's network locks and
RCU grace periods: measured at 64 episodes in flight, the median start took 3-5x longer with bwrap's
`--unshare-net` than without (docs/sandbox.md). So each episode borrows a slot: the service enters the
slot's namespace (`nsenter`) before bwrap starts, and bwrap unshares every namespace but that one. A slot
serves one episode at a time; what an episode leaves there ends with its processes (its sockets), and it
cannot change the namespace itself (the namespace belongs to the service's user namespace, where the
episode's uid has no capability). Everything here needs CAP_SYS_ADMIN (unshare, setns).
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from lakeflow.raas.workspace.syscalls import check, libc, on_new_thread

T = TypeVar("T")
_CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


def inside(netns_fd: int | None, fn: Callable[[], T]) -> T:
    """Run `fn` on a short-lived thread inside the network namespace `netns_fd` (None: a new one, whose fd
    `fn` may open as /proc/thread-self/ns/net); the thread goes back to its own namespace after, and a
    thread that cannot ends with it (it is never reused)."""

    def run() -> T:
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        try:
            if netns_fd is None:
                check(libc().unshare(_CLONE_NEWNET), "unshare a network namespace")
            else:
                check(libc().setns(netns_fd, _CLONE_NEWNET), "setns into a network namespace")
            try:
                return fn()
            finally:
                check(libc().setns(own, _CLONE_NEWNET), "setns back")
        finally:
            os.close(own)

    return on_new_thread("lakeflow-netns", run)


def listener(port: int) -> socket.socket:
    """A listening socket on 127.0.0.1:<port> of the calling thread's network namespace. IPPROTO_TCP is
    named so that asyncio sets TCP_NODELAY on what it accepts (without it a reply in two writes waits for
    a delayed ACK: 40 ms per request)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen(128)
    s.setblocking(False)
    return s


def _new_namespace() -> int:
    """(On a thread inside a new namespace) bring its loopback up; an fd that keeps the namespace."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(s, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | _IFF_UP))
    return os.open("/proc/thread-self/ns/net", os.O_RDONLY)


@dataclass
class Slot:
    """One reusable network namespace: its fd, and the relay's listeners in it by port."""

    fd: int
    listeners: dict[int, tuple[Any, tuple[str, int]]] = field(default_factory=dict)  # port -> (server, target)


class NetnsPool:
    """Slots handed to one episode at a time; made when none is free, kept until `close`."""

    def __init__(self) -> None:
        self._free: list[Slot] = []
        self._all: list[Slot] = []
        self._lock = threading.Lock()

    def acquire(self) -> Slot:
        with self._lock:
            if self._free:
                return self._free.pop()
        slot = Slot(inside(None, _new_namespace))
        with self._lock:
            self._all.append(slot)
        return slot

    def release(self, slot: Slot) -> None:
        with self._lock:
            self._free.append(slot)

    def close(self) -> list[Slot]:
        """Forget every slot (the caller stops their listeners) and close their namespaces' fds."""
        with self._lock:
            slots, self._all, self._free = self._all, [], []
        for slot in slots:
            os.close(slot.fd)
        return slots
