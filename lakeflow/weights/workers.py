"""Running the codec's segments on several cores: threads (default) or forked processes.

Threads share everything and cost nothing to start; the codec's compiled loops, pcodec, zstandard and
hashlib release the GIL, and only the Python glue between their calls holds it, so threads scale on
their own. Processes (`processes=True`, Linux: fork) suit a host whose own Python work contends for
the GIL (a training loop): they run the segments truly in parallel; the children read the
caller's states copy-on-write and decode into outputs allocated in a shared anonymous mapping, so
nothing large is copied back; only small encoded segments are pickled. Fork copies the caller's page
tables (milliseconds per GB of memory) and only the calling thread, so a child runs nothing but the
compiled loops, numpy, pcodec and zstandard on its segments.
"""

from __future__ import annotations

import mmap
import multiprocessing
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")
Wait = Callable[[Any], None]
_TASK: list[Callable[[int], Any]] = []  # what a forked child runs: set before the pool forks
_FORK_LOCK = threading.Lock()  # one process pool at a time (the children inherit _TASK)
_ALIGN = 64
_SHARED: dict[int, int] = {}  # start -> end address of each live mapping made by shared_bytes
_SHARED_LOCK = threading.Lock()


def default_workers() -> int:
    """Workers the codec uses by default: the CPUs this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def run(
    fn: Callable[[T], Any],
    items: Sequence[T],
    workers: int | None,
    side: Callable[[Wait], None] | None = None,
    processes: bool = False,
) -> list[Any]:
    """fn over `items` on `workers` threads or processes (results in order). `side(wait)` runs in the
    calling thread meanwhile; `wait(item)` returns once that item is done (raising its error)."""
    n = min(workers or default_workers(), max(len(items), 1))
    if n <= 1:
        results = [fn(x) for x in items]
        if side is not None:
            side(lambda x: None)
        return results
    if processes and "fork" in multiprocessing.get_all_start_methods():
        with _FORK_LOCK:
            _TASK.append(lambda i: fn(items[i]))
            try:
                pool = ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("fork"))
                return _collect(pool, lambda i: pool.submit(_child, i), items, side)
            finally:
                _TASK.clear()
    threads = ThreadPoolExecutor(n, thread_name_prefix="lakeflow-codec")
    return _collect(threads, lambda i: threads.submit(fn, items[i]), items, side)


def _collect(
    pool: ProcessPoolExecutor | ThreadPoolExecutor,
    submit: Callable[[int], Future[Any]],
    items: Sequence[Any],
    side: Callable[[Wait], None] | None,
) -> list[Any]:
    with pool:
        futures = [submit(i) for i in range(len(items))]
        by_id = {id(x): f for x, f in zip(items, futures, strict=True)}
        try:
            if side is not None:
                side(lambda x: by_id[id(x)].result() and None)
            return [f.result() for f in futures]
        finally:
            for f in futures:
                f.cancel()


def _child(i: int) -> Any:
    return _TASK[0](i)


def empty_like(arrays: Sequence[np.ndarray], shared: bool) -> list[np.ndarray]:
    """Uninitialised arrays shaped like `arrays`: ordinary ones, or views of one shared anonymous
    mapping that forked children can write into (it lives as long as any of the views)."""
    if not shared:
        return [np.empty_like(a) for a in arrays]
    offsets, total = [], 0
    for a in arrays:
        offsets.append(total)
        total += -(-a.nbytes // _ALIGN) * _ALIGN
    buf = shared_bytes(total)
    return [buf[o : o + a.nbytes].view(a.dtype).reshape(a.shape) for o, a in zip(offsets, arrays, strict=True)]


def shared_bytes(size: int) -> np.ndarray:
    """`size` zero bytes in a new shared anonymous mapping (what forked children write into and
    the parent sees), remembered while any view of it lives (see `in_shared_memory`)."""
    buf = np.frombuffer(mmap.mmap(-1, max(size, 1)), dtype=np.uint8)
    start = buf.ctypes.data
    with _SHARED_LOCK:
        _SHARED[start] = start + buf.size
    weakref.finalize(buf, _forget, start)
    return buf


def in_shared_memory(array: np.ndarray) -> bool:
    """Whether `array` lies in a mapping made by `shared_bytes` (so forked children can write it)."""
    lo = array.ctypes.data
    hi = lo + array.nbytes
    with _SHARED_LOCK:
        return any(start <= lo and hi <= end for start, end in _SHARED.items())


def _forget(start: int) -> None:
    with _SHARED_LOCK:
        _SHARED.pop(start, None)
