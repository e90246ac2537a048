"""Servers the tests start as processes of their own: moto's S3 server, and the environment for children
that run none of lakeflow's code."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path


def untraced_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's) without coverage's variables, for a child that runs none of
    lakeflow's code (an S3 server, pip): coverage's subprocess patch would otherwise trace it, which
    on Python 3.11 makes a Python server or installer 1.5-2x slower and measures nothing."""
    return {k: v for k, v in (os.environ if env is None else env).items() if not k.startswith("COVERAGE_")}


@contextlib.contextmanager
def moto_server(host: str = "127.0.0.1", log: str | None = None) -> Iterator[str]:
    """A moto S3 server (a process of its own, untraced, its conditional writes atomic: moto_atomic.py) on a
    free port of `host` while the block runs: its endpoint URL. A process, not moto's in-process thread: its
    request handling runs on the other core instead of under the test process's lock and coverage tracer."""
    with tempfile.NamedTemporaryFile(prefix="moto-", suffix=".log", delete=log is None) as tmp:
        path = log or tmp.name
        with open(path, "wb") as out:
            cmd = [sys.executable, str(Path(__file__).with_name("moto_atomic.py")), "-H", host, "-p", "0"]
            server = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=untraced_env())
        try:
            yield _wait_for_endpoint(server, path)
        finally:
            stop(server)


def stop(server: subprocess.Popen[bytes]) -> None:
    """End a server this test started: SIGTERM, then SIGKILL if it is still up after 10 s."""
    server.terminate()
    try:
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def _wait_for_endpoint(server: subprocess.Popen[bytes], log: str) -> str:
    """The URL the server prints ("Running on http://HOST:PORT") once it listens."""
    deadline = time.monotonic() + 120  # a guard against a hang: moto starts in about a second when idle
    while True:
        found = re.search(rb"Running on (http://[0-9.]+:[0-9]+)", Path(log).read_bytes())
        if found:
            return found.group(1).decode()
        if server.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"moto's S3 server did not start: {Path(log).read_text()[-2000:]}")
        time.sleep(0.05)
