"""A TCP relay on 127.0.0.1 in front of a server that a test can cut (every connection dropped, new ones
refused) and restore on the same port: a storage outage without touching the server."""

from __future__ import annotations

import socket
import threading
from contextlib import suppress


class CuttableRelay:
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self.port = 0
        self.restore()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def restore(self) -> None:
        """Listen (again) on the relay's port."""
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        """Stop listening and drop every open connection: requests now fail with 'connection refused'."""
        with self._lock:
            listener, self._listener = self._listener, None
            sockets, self._sockets = self._sockets, set()
        if listener is not None:
            with suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for s in sockets:
            with suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets |= {client, server}
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        with suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with suppress(OSError):
            dst.shutdown(socket.SHUT_WR)
