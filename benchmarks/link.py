"""`ShapedLink`: a TCP relay on 127.0.0.1 that makes a local server look far away.

Each direction has a rate limit (one token bucket shared by all connections, like one link) and
adds half the round-trip time to every chunk. By default a connection's chunks go one at a time
(the next is read once the previous one was delivered), so each chunk pays the delay; with
`pipelined` a chunk is read as soon as it arrives and delivered when due, as on a real link, so one
request and its response pay one round trip whatever the number of chunks they come in.
"""

from __future__ import annotations

import queue
import socket
import threading
import time
from contextlib import suppress

_CHUNK = 64 << 10


class ShapedLink:
    """A TCP relay from a local port to `upstream` with a rate limit per direction and added delay."""

    def __init__(self, upstream: tuple[str, int], rate_bps: float, rtt_s: float, pipelined: bool = False) -> None:
        self.upstream, self.rate, self.delay = upstream, rate_bps / 8, rtt_s / 2
        self.pipelined = pipelined
        self.connections = 0  # accepted so far
        self._free = {"up": 0.0, "down": 0.0}  # when each direction's link is next idle (monotonic)
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._sockets: set[socket.socket] = set()
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
                server = socket.create_connection(self.upstream)
            except OSError:
                return
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sockets |= {client, server}
                self.connections += 1
            for src, dst, way in ((client, server, "up"), (server, client, "down")):
                threading.Thread(target=self._pump, args=(src, dst, way), daemon=True).start()

    def _due(self, size: int, way: str) -> float:
        """When a chunk of `size` bytes read now is delivered: after the delay, and after the chunks
        before it on this direction's link have gone at the line rate."""
        arrive = time.monotonic() + self.delay
        with self._lock:  # serialise on the direction's link: one chunk at a time at the line rate
            start = max(arrive, self._free[way])
            self._free[way] = start + size / self.rate
            return self._free[way]

    def _pump(self, src: socket.socket, dst: socket.socket, way: str) -> None:
        """Copy src to dst until src ends; then end dst's sending side and close src (its only reader)."""
        out: queue.SimpleQueue[tuple[float, bytes] | None] | None = None
        sender = None
        if self.pipelined:
            out = queue.SimpleQueue()
            sender = threading.Thread(target=self._deliver, args=(out, dst), daemon=True)
            sender.start()
        try:
            while data := src.recv(_CHUNK):
                done = self._due(len(data), way)
                if out is not None:
                    out.put((done, data))
                    continue
                time.sleep(max(0.0, done - time.monotonic()))
                dst.sendall(data)
        except OSError:
            pass
        finally:
            if out is not None and sender is not None:
                out.put(None)
                sender.join()
            with suppress(OSError):
                dst.shutdown(socket.SHUT_WR)
            with self._lock:
                self._sockets.discard(src)
            src.close()

    @staticmethod
    def _deliver(out: queue.SimpleQueue[tuple[float, bytes] | None], dst: socket.socket) -> None:
        """Send each queued chunk to dst when it is due (chunks are queued in order of their due times)."""
        broken = False
        while (item := out.get()) is not None:
            if broken:
                continue  # drain: the reader ends when its side closes
            done, data = item
            time.sleep(max(0.0, done - time.monotonic()))
            try:
                dst.sendall(data)
            except OSError:
                broken = True
