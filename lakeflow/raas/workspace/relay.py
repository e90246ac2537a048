"""The gateway, and only the gateway, inside a sandbox with no network: TCP relayed by the service.

A bwrap sandbox has its own network namespace, holding only a loopback. Before its command starts (bwrap
waits on `--block-fd`), the service enters that namespace on a short-lived thread (setns(2), which needs
CAP_SYS_ADMIN), opens a listening socket on 127.0.0.1:<port> there, and returns; the socket stays in the
sandbox's namespace. The relay's event loop (one thread for every sandbox) accepts on it and connects
each connection to its target from the service's own network: the gateway (and `network.allow`
entries). Nothing runs inside the sandbox for it, so the sandbox's root needs no relay program; the
agent reaches the gateway at the same URL, and nothing else exists on its network.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import functools
import logging
import os
import socket
import threading
from collections.abc import Mapping
from concurrent.futures import Future

log = logging.getLogger(__name__)

_CLONE_NEWNET = 0x40000000
_CHUNK = 1 << 16
Target = tuple[str, int]


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc().setns(fd, _CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"setns into a network namespace: {os.strerror(errno)}")


def listen_in(pid: int, ports: list[int]) -> list[socket.socket]:
    """Listening sockets on 127.0.0.1:<port> inside the network namespace of process `pid`."""
    made: list[socket.socket] = []
    failed: list[BaseException] = []

    def inside() -> None:  # on its own thread: setns changes only the calling thread's namespace
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        try:
            target = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
            try:
                _setns(target)
                for port in ports:
                    # IPPROTO_TCP named: asyncio then sets TCP_NODELAY on what it accepts (no Nagle stalls)
                    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    s.bind(("127.0.0.1", port))
                    s.listen(128)
                    s.setblocking(False)
                    made.append(s)
            finally:
                os.close(target)
                _setns(own)  # back home; if this failed the thread ends here and is never reused
        except OSError as e:
            failed.append(e)
        finally:
            os.close(own)

    thread = threading.Thread(target=inside, name="lakeflow-netns")
    thread.start()
    thread.join()
    if failed:
        for s in made:
            s.close()
        raise failed[0]
    return made


class Relay:
    """Relays connections accepted inside sandboxes to their targets, on one event-loop thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="lakeflow-relay", daemon=True)
        self._thread.start()

    def open(self, pid: int, routes: Mapping[int, Target]) -> list[Future[asyncio.Server]]:
        """Serve `routes` (port inside -> target outside) in the network namespace of `pid`. The sockets listen
        when this returns (a connection waits in the backlog until the loop serves it), so it does not wait
        for the loop."""
        sockets = listen_in(pid, list(routes))
        return [
            asyncio.run_coroutine_threadsafe(self._serve(sock, target), self.loop)
            for sock, target in zip(sockets, routes.values(), strict=True)
        ]

    def close(self, servers: list[Future[asyncio.Server]]) -> None:
        """Stop accepting (the sandbox's processes are gone, so are their connections)."""
        for future in servers:
            future.add_done_callback(self._close)

    def _close(self, future: Future[asyncio.Server]) -> None:
        if not future.cancelled() and future.exception() is None:
            with contextlib.suppress(RuntimeError):  # the loop was closed: its servers with it
                self.loop.call_soon_threadsafe(future.result().close)

    def stop(self) -> None:
        """Stop the loop (connections still open are dropped) and close it."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self.loop.close()

    async def _serve(self, sock: socket.socket, target: Target) -> asyncio.Server:
        async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await _relay(reader, writer, target)

        return await asyncio.start_server(connected, sock=sock)


async def _relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, target: Target) -> None:
    try:
        up_reader, up_writer = await asyncio.open_connection(*target)
    except OSError as e:
        log.warning("sandbox relay: cannot reach %s:%d: %s", *target, e)
        writer.close()
        return
    try:
        await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))
    finally:
        writer.close()
        up_writer.close()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until end of stream, then half-close (the other direction may still be answering)."""
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):  # either end went away: close this side, the other pump ends too
        writer.close()
