"""Agent programs in worker processes, so that an agent's own CPU (its client, its JSON, its logic) does not
share the service's GIL with the engine.

`ProgramWorkers` starts `agent.processes` workers (`python -m lakeflow.raas.episodes.workers`, each in its
own session), and each loads the program once and plays every episode it is given on a thread of its own.
They speak JSON lines: the first line a worker reads is its setup ({program, args}), then one episode per
line ({job, task, client}); it answers on its own copy of stdout ({job, outcome}), while whatever the
program prints goes to stderr, the service's log. A worker that dies fails the episodes it was playing
with the reason and is started again for the next episode; a worker whose service died (or closed its
stdin) exits at once, abandoning its programs, whose requests the gateway refuses anyway.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import asdict
from typing import IO, Any

from lakeflow.errors import ConfigError
from lakeflow.plugins import load_import_path
from lakeflow.raas.episodes.results import Outcome, call_program

_CLOSE_S = 2.0  # how long a closed worker may take to exit before it is killed
_LOAD_S = 120.0  # how long the workers may take to start and load the program


class ProgramWorkers:
    """The pool's worker processes; calling it plays one episode on the least busy worker."""

    def __init__(self, program: str, args: dict[str, Any], processes: int) -> None:
        try:
            setup = json.dumps({"program": program, "args": args})
        except (TypeError, ValueError) as e:
            raise ConfigError(f"agent.args must be plain data (JSON) to reach the worker processes: {e}") from e
        self._setup, self._lock, self._jobs = setup, threading.Lock(), itertools.count()
        self._workers = [_Worker(setup) for _ in range(processes)]
        for w in self._workers:  # started together; each is ready once it has loaded the program
            if not w.ready.wait(_LOAD_S) or w.why:
                self.close()
                raise ConfigError(w.why or f"agent.program: the worker processes did not load it in {_LOAD_S:g} s")

    def __call__(self, task: dict[str, Any], client: dict[str, str], timeout_s: float) -> Outcome:
        """Play one episode to its end. The gateway ends an episode at its `max_seconds` (`timeout_s`); a
        program still running a little later is given up here, so the service's thread is free (its
        worker's thread runs on until the program returns, its requests refused)."""
        with self._lock:
            i = min(range(len(self._workers)), key=lambda i: self._workers[i].busy())
            if self._workers[i].ended():
                self._workers[i].close()
                self._workers[i] = _Worker(self._setup)
            future = self._workers[i].submit(next(self._jobs), task, client)
        try:
            return future.result(timeout=timeout_s + _CLOSE_S)
        except FutureTimeout:
            return Outcome(error=f"timeout: the episode ran past {timeout_s:g} s", timed_out=True)

    def pids(self) -> list[int]:
        return [w.proc.pid for w in self._workers]

    def close(self) -> None:
        """End every worker (the programs still running are abandoned) and wait for them."""
        with self._lock:
            for w in self._workers:
                w.close()


class _Worker:
    """One worker process and the episodes it is playing (futures by job number)."""

    def __init__(self, setup: str) -> None:
        path = os.pathsep.join(p or os.getcwd() for p in sys.path)  # the program imports what the service can
        env = os.environ | {"PYTHONPATH": path}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", __name__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
            start_new_session=True,  # the worker and whatever its programs start are killed as one group
        )
        self._stdin: IO[str] = self.proc.stdin  # type: ignore[assignment]
        self._pending: dict[int, Future[Outcome]] = {}
        self._lock = threading.Lock()
        self.ready = threading.Event()  # set once it has loaded the program (or failed to, or ended)
        self.why = ""  # why it could not load the program
        self._send(setup)
        self._reader = threading.Thread(target=self._read, name=f"lakeflow-worker-{self.proc.pid}", daemon=True)
        self._reader.start()

    def busy(self) -> int:
        with self._lock:
            return len(self._pending)

    def ended(self) -> bool:
        return self.proc.poll() is not None

    def submit(self, job: int, task: dict[str, Any], client: dict[str, str]) -> Future[Outcome]:
        future: Future[Outcome] = Future()
        with self._lock:
            self._pending[job] = future
        self._send(json.dumps({"job": job, "task": task, "client": client}))
        return future

    def _send(self, line: str) -> None:
        with contextlib.suppress(OSError):  # a dead worker: its reader fails what it was given
            self._stdin.write(line + "\n")
            self._stdin.flush()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                message = json.loads(line)
            except ValueError:  # not an answer (nothing else should write there)
                continue
            if "ready" in message or "error" in message:
                self.why = message.get("error", "")
                self.ready.set()
                continue
            with self._lock:
                future = self._pending.pop(message["job"], None)
            if future is not None:
                future.set_result(Outcome(**message["outcome"]))
        self.proc.stdout.close()
        code = self.proc.wait()
        self.ready.set()
        why = self.why or f"the worker process playing the agent program exited with {code}"
        with self._lock:
            pending, self._pending = self._pending, {}
        for future in pending.values():
            future.set_result(Outcome(error=why))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._stdin.close()
        try:
            self.proc.wait(timeout=_CLOSE_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self._reader.join(timeout=_CLOSE_S)


def main() -> None:
    """A worker: load the program, then play each episode read from stdin on its own thread."""
    channel = os.fdopen(os.dup(1), "w")  # the answers; the program's own prints go to stderr
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    lock = threading.Lock()

    def send(message: dict[str, Any]) -> None:
        with lock:
            channel.write(json.dumps(message) + "\n")
            channel.flush()

    setup = json.loads(sys.stdin.readline() or "{}")
    try:
        program = load_import_path(setup["program"], key="agent.program")
    except Exception as e:  # the service loaded it already; this worker could not (its reason fails its episodes)
        send({"error": f"the worker process cannot load the agent program: {type(e).__name__}: {e}"})
        return
    send({"ready": True})

    def play(job: int, task: dict[str, Any], client: dict[str, str]) -> None:
        send({"job": job, "outcome": asdict(call_program(program, task, client, setup["args"]))})

    for line in sys.stdin:
        message = json.loads(line)
        threading.Thread(target=play, args=(message["job"], message["task"], message["client"]), daemon=True).start()
    os._exit(0)  # the service closed stdin (it closed, or died): abandon the programs still running


if __name__ == "__main__":
    main()
