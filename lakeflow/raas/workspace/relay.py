"""The gateway, and only the gateway, inside a sandbox with no network: TCP relayed by the service.

A sandbox has its own network namespace, holding only a loopback (a bwrap sandbox borrows one of the
pool's, `netns.py`; a container has docker's). Before its command starts, the service enters that
namespace on a short-lived thread (setns(2), which needs CAP_SYS_ADMIN), opens a listening socket on
127.0.0.1:<port> there, and returns; the socket stays in the sandbox's namespace. The relay's event loop
(one thread for every sandbox) accepts on it and connects each connection to its target from the
service's own network: the gateway (and `network.allow` entries). Nothing runs inside the sandbox for
it, so the sandbox's root needs no relay program; the agent reaches the gateway at the same URL, and
nothing else exists on its network.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
from collections.abc import Mapping
from concurrent.futures import Future

from lakeflow.raas.workspace.netns import inside, listener

log = logging.getLogger(__name__)

_CHUNK = 1 << 16
Target = tuple[str, int]


def listen_in(pid: int, ports: list[int]) -> list[socket.socket]:
    """Listening sockets on 127.0.0.1:<port> inside the network namespace of process `pid`."""
    fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    try:
        return inside(fd, lambda: [listener(port) for port in ports])
    finally:
        os.close(fd)


class Relay:
    """Relays connections accepted inside sandboxes to their targets, on one event-loop thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="lakeflow-relay", daemon=True)
        self._thread.start()

    def open(self, pid: int, routes: Mapping[int, Target]) -> list[Future[asyncio.Server]]:
        """Serve `routes` (port inside -> target outside) in the network namespace of `pid`."""
        sockets = listen_in(pid, list(routes))
        return [self.serve(sock, target) for sock, target in zip(sockets, routes.values(), strict=True)]

    def serve(self, sock: socket.socket, target: Target) -> Future[asyncio.Server]:
        """Relay what `sock` (listening already: a connection waits in its backlog until the loop serves it, so
        this does not wait for the loop) accepts to `target`."""
        return asyncio.run_coroutine_threadsafe(self._serve(sock, target), self.loop)

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
