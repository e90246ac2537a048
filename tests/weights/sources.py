"""Helpers of the weight-source tests: a static HTTP server over a directory, on 127.0.0.1."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _Quiet(SimpleHTTPRequestHandler):
    listing = True

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def list_directory(self, path: Any) -> Any:
        if self.listing:
            return super().list_directory(path)
        self.send_error(404, "no listings here (like a CDN)")
        return None


class _NoListing(_Quiet):
    listing = False


@contextmanager
def http_server(directory: str, listing: bool = True) -> Iterator[str]:
    """Serve `directory` read-only like `python -m http.server`; yields its base URL. Without
    `listing`, directory URLs answer 404, as a CDN would."""
    handler = partial(_Quiet if listing else _NoListing, directory=directory)
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
