"""What the namespace modules (`mounts.py`, `netns.py`) share: libc, a system call's failure as an OSError,
and running a function on a thread of its own (a thread that enters a namespace leaves no other thread in
it)."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


@functools.cache
def libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def check(done: int, what: str) -> None:
    """OSError naming `what` and the reason when a libc call returned non-zero."""
    if done != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def on_new_thread(name: str, fn: Callable[[], T]) -> T:
    """`fn()` run on a new thread and waited for; its OSError is raised here."""
    out: list[T] = []
    failed: list[OSError] = []

    def run() -> None:
        try:
            out.append(fn())
        except OSError as e:
            failed.append(e)

    thread = threading.Thread(target=run, name=name)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return out[0]
