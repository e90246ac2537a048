"""Start and supervise the processes of one run on this machine.

Each component is the real command (`python -m lakeflow dataflow|train|raas`) with its own
config file written under `<run dir>/configs/`, its output in `<run dir>/logs/`. The run ends
when every trainer has published version `steps` (trainers exit 0 then); the dataflow process
and rollout services are then sent SIGTERM. If a process fails, everything is stopped and the
failure is reported with the tail of its log. Nothing is kept in the launcher: running the
same command again resumes every component from the lake.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml

from lakeflow.io import Store
from lakeflow.lake import layout
from lakeflow.run.config import RunConfig
from lakeflow.weights.manifest import read_latest


@dataclass
class Component:
    name: str
    argv: list[str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = None
    done: bool = False  # exited 0 (trainers: reached `steps`)


@dataclass
class Progress:
    """What the launcher reports per model."""

    version: int | None = None
    reward: float | None = None
    wait_fraction: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Launcher:
    """One run: `start()`, then `wait()` until done, failure or `stop()`."""

    def __init__(self, config: RunConfig, store: Store, lake_url: str, run_dir: Path, endpoint_url: str | None = None):
        self.config = config
        self.store = store
        self.lake_url = lake_url
        self.run_dir = run_dir
        self.endpoint_url = endpoint_url
        self.components: list[Component] = []
        self._stopping = False

    def _write(self, name: str, data: dict[str, Any]) -> Path:
        path = self.run_dir / "configs" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    def _cmd(self, *args: str) -> list[str]:
        base = [sys.executable, "-m", "lakeflow", *args, "--lake", self.lake_url]
        return base + (["--endpoint-url", self.endpoint_url] if self.endpoint_url else [])

    def plan(self) -> list[Component]:
        """The processes of the run, with their config files written."""
        logs = self.run_dir / "logs"
        out = []
        dataflow = self._write("dataflow.yaml", self.config.dataflow().model_dump(mode="json"))
        out.append(
            Component("dataflow", [*self._cmd("dataflow"), "--config", str(dataflow), "--wait"], logs / "dataflow.log")
        )
        for m in self.config.models:
            trainer = self._write(f"trainer-{m.id}.yaml", m.trainer.model_dump(mode="json"))
            out.append(
                Component(
                    f"train-{m.id}",
                    [*self._cmd("train"), "--model", m.id, "--config", str(trainer), "--steps", str(self.config.steps)],
                    logs / f"train-{m.id}.log",
                )
            )
            for i in range(m.raas.replicas):
                raas = m.raas.config.model_copy(update={"id": f"{self.config.name}-{m.id}-{i}"[:64]})
                path = self._write(f"raas-{m.id}-{i}.yaml", raas.model_dump(mode="json"))
                out.append(
                    Component(
                        f"raas-{m.id}-{i}",
                        [*self._cmd("raas"), "--model", m.id, "--config", str(path)],
                        logs / f"raas-{m.id}-{i}.log",
                    )
                )
        return out

    def start(self) -> None:
        self.components = self.plan()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        for c in self.components:
            c.log_path.parent.mkdir(parents=True, exist_ok=True)
            c.log = open(c.log_path, "ab")  # noqa: SIM115 - closed in stop()
            c.process = subprocess.Popen(c.argv, stdout=c.log, stderr=subprocess.STDOUT, env=env)

    def poll(self) -> str | None:
        """'done' when every trainer finished, 'failed: …' when a process died, else None."""
        for c in self.components:
            code = c.process.poll() if c.process else None
            if code is None:
                continue
            if code == 0 and c.name.startswith("train-"):
                c.done = True
            elif not self._stopping:
                return f"failed: {c.name} exited with {code}; last lines of {c.log_path}:\n{_tail(c.log_path)}"
        trainers = [c for c in self.components if c.name.startswith("train-")]
        return "done" if trainers and all(c.done for c in trainers) else None

    def progress(self) -> dict[str, Progress]:
        """Per model: newest published version, latest trainer step's reward and wait fraction."""
        out = {}
        for m in self.config.models:
            p = Progress()
            latest = read_latest(self.store, m.id)
            p.version = latest[0].version if latest else None
            keys = [i.key for i in self.store.list(layout.trainer_stats_prefix(m.id))]
            if keys:
                with contextlib.suppress(FileNotFoundError, ValueError):  # replaced while reading: next poll
                    stats = json.loads(self.store.get(keys[-1]))
                    p.reward = stats.get("reward_mean")
                    total = stats.get("wait_s", 0) + stats.get("step_s", 0)
                    p.wait_fraction = stats.get("wait_s", 0) / total if total else None
            out[m.id] = p
        return out

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM everything still running, wait, then SIGKILL what remains (our children only)."""
        self._stopping = True
        for c in self.components:
            if c.process and c.process.poll() is None:
                c.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for c in self.components:
            if c.process is None:
                continue
            try:
                c.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                c.process.kill()
                c.process.wait()
            if c.log:
                c.log.close()


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
