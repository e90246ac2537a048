"""Start and supervise the processes of one run on this machine.

Each component is the real command (`python -m lakeflow dataflow|train|raas`) with its own
config file written under `<run dir>/configs/`, its output in `<run dir>/logs/`. The run ends
when every trainer has published version `steps` (trainers exit 0 then); the rollout services, then
the dataflow process (which compacts everything committed before it exits), are sent SIGTERM.
If a process fails, everything is stopped and the failure is reported with the tail of its log.
Nothing is kept in the launcher: running the same command again resumes every component from the lake.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import yaml

from lakeflow.catalog.stats import STARVING_WAIT, starvation
from lakeflow.errors import StorePermissionError
from lakeflow.io import Store
from lakeflow.lake import layout
from lakeflow.lake.heartbeats import JudgeCounts, failure_summary, judge_counts, production, read_heartbeats
from lakeflow.lake.metrics import latest_metrics
from lakeflow.lake.run_record import write_run_manifest
from lakeflow.run.config import RunConfig
from lakeflow.run.observe import eval_specs
from lakeflow.run.processes import ProcessSpec, process_specs, serve_specs, with_judge_endpoints
from lakeflow.weights.manifest import latest_version


@dataclass
class Component:
    name: str
    argv: list[str]
    log_path: Path
    role: str = ""  # dataflow | trainer | raas | autoscale: picks its credentials
    process: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = None
    done: bool = False  # exited 0 (trainers: reached `steps`)
    restarts: int = 0  # times started again after a signal killed it


STARVATION_POLL_S = 10.0  # how often the progress reads dataflow_stats and the rollout heartbeats
JUDGE_ALARM_S = 300.0  # every judge request of a model's pools failing this long is said in the terminal


@dataclass
class Progress:
    """What the launcher reports per model."""

    version: int | None = None
    reward: float | None = None
    wait_fraction: float | None = None
    failed: int = 0  # episodes of the model's rollout services whose agent or environment failed
    top_failure: str | None = None  # the most frequent end of those, with its count
    starving: str | None = None  # why the trainer starves (catalog/stats.py starvation), from dataflow_stats
    judge: JudgeCounts | None = None  # its pools' judge requests (None: no judge)
    extra: dict[str, Any] = field(default_factory=dict)


class Launcher:
    """One run: `start()`, then `wait()` until done, failure or `stop()`."""

    def __init__(
        self,
        config: RunConfig,
        store: Store,
        lake_url: str,
        run_dir: Path,
        endpoint_url: str | None = None,
    ):
        self.config = config
        self.store = store
        self.lake_url = lake_url
        self.run_dir = run_dir
        self.endpoint_url = endpoint_url
        self.components: list[Component] = []
        self.notices: list[str] = []  # one line per process started again after a signal killed it
        self._stopping = False
        self._starving_read = -STARVATION_POLL_S  # time.monotonic() of the last look at dataflow_stats
        self._starving_seen: dict[str, str | None] = {}
        self._failures_seen: dict[str, tuple[int, str | None]] = {}
        self._judges_seen: dict[str, JudgeCounts | None] = {}
        self._judge_alarmed: set[str] = set()  # models whose failing judge the terminal was told of

    def _write(self, name: str, data: dict[str, Any]) -> Path:
        path = self.run_dir / "configs" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    def _cmd(self, *args: str) -> list[str]:
        base = [sys.executable, "-m", "lakeflow", *args, "--lake", self.lake_url]
        return base + (["--endpoint-url", self.endpoint_url] if self.endpoint_url else [])

    def command(self, spec: ProcessSpec) -> list[str]:
        """The local command line of `spec`, its config file written under `<run dir>/configs/`."""
        if spec.role == "serve":  # a frozen model: no lake
            path = self._write(spec.config_name, spec.config)
            return [sys.executable, "-m", "lakeflow", "serve", *spec.flags, "--config", str(path)]
        if not spec.config_name:
            return [*self._cmd(*spec.verb.split()), *spec.flags]
        config = spec.config
        one_process = spec.role == "eval" or (spec.role == "raas" and config.get("id") is not None)
        if one_process and config.get("cache_dir") is None:
            # a weights cache of its own under the run directory: a restarted service (or a rerun of the
            # command) pulls only the versions it lacks instead of the whole chain
            config = {**config, "cache_dir": str((self.run_dir / "cache" / spec.name).resolve())}
        path = self._write(spec.config_name, config)
        return [*self._cmd(*spec.verb.split()), *spec.flags, "--config", str(path)]

    def plan(self) -> list[Component]:
        """The processes of the run, with their config files written. With `autoscale` in the config, one
        `lakeflow autoscale --actuator local` process starts and sizes the rollout pools instead. The frozen
        models of `serve:` come first, each on a free port of 127.0.0.1 that the judges naming it are given."""
        ports = {s.id: free_port() for s in self.config.serve}
        urls = {name: f"http://127.0.0.1:{port}/v1" for name, port in ports.items()}
        self.config = with_judge_endpoints(self.config, urls)
        specs = serve_specs(self.config, ports) + process_specs(self.config) + eval_specs(self.config)
        a = self.config.autoscale
        if a is not None:
            flags = ["--actuator", "local", "--run-dir", str(self.run_dir), "--min", str(a.min), "--max", str(a.max)]
            flags += ["--interval-s", str(a.interval_s), "--cooldown-s", str(a.cooldown_s), "--confirm", str(a.confirm)]
            flags += ["--window-s", str(a.window_s)] if a.window_s else []
            run = self.config.model_dump(mode="json")
            specs = [s for s in specs if s.role != "raas" or s.region]  # region pools keep their size
            specs.append(ProcessSpec("autoscale", "autoscale", None, "autoscale", tuple(flags), "run.yaml", run))
        return [Component(s.name, self.command(s), self.run_dir / "logs" / f"{s.name}.log", s.role) for s in specs]

    def start(self) -> None:
        # the resolved config in the lake: trackers and export-metrics log it as the run's hyperparameters.
        # A launcher running with read-only credentials (the analyst's, each process with its own role)
        # cannot write it: the run goes on without it, and says so.
        try:
            write_run_manifest(self.store, self.config.name, self.config.model_dump(mode="json"))
        except StorePermissionError as e:
            self.notices.append(f"run manifest not written ({e}); trackers will lack the run's config")
        self.components = self.plan()
        for c in self.components:
            self.restart(c)

    def restart(self, c: Component) -> None:
        """Start (or start again, after it died) one component's process, appending to its log."""
        if c.log is None or c.log.closed:
            c.log_path.parent.mkdir(parents=True, exist_ok=True)
            c.log = open(c.log_path, "ab")  # noqa: SIM115 - closed in stop()
        env = self.environment(c.role)
        # its own session: a signal for the process group reaches its children (vLLM workers), nothing else
        c.process = subprocess.Popen(c.argv, stdout=c.log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        c.done = False

    def environment(self, role: str) -> dict[str, str]:
        """The environment a process of `role` runs with (its credentials, unbuffered output)."""
        return self._env({**os.environ, "PYTHONUNBUFFERED": "1"}, role)

    def _env(self, env: dict[str, str], role: str) -> dict[str, str]:
        """`env` with only the AWS profile of `role` when the config names one (least privilege)."""
        profile = getattr(self.config.credentials, role, None)
        if profile is None:
            return env
        keys = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_DEFAULT_PROFILE")
        return {**{k: v for k, v in env.items() if k not in keys}, "AWS_PROFILE": profile}

    def poll(self) -> str | None:
        """'done' when every trainer (and evaluation) finished, else 'failed: …' when a process died, else
        None. A process that dies after the run is done does not turn it into a failure."""
        failure = None
        for c in self.components:
            code = c.process.poll() if c.process else None
            if code is None:
                continue
            if code == 0 and c.name.startswith(("train-", "eval-")):
                c.done = True
            elif code < 0 and not self._stopping and c.restarts < self.config.restarts:
                # killed by a signal we did not send (SIGKILL: usually the kernel's OOM killer): every process
                # resumes from the lake, so start it again, and say so
                c.restarts += 1
                self.notices.append(
                    f"{c.name} was killed by {_signal_name(-code)}"
                    f"{' (out of memory?)' if -code == signal.SIGKILL else ''}; "
                    f"starting it again ({c.restarts}/{self.config.restarts}), log {c.log_path}"
                )
                self.restart(c)
            elif failure is None and not self._stopping:
                failure = f"failed: {c.name} exited with {code}; last lines of {c.log_path}:\n{_tail(c.log_path)}"
        finishers = [c for c in self.components if c.name.startswith(("train-", "eval-"))]  # evals: version `steps`
        if finishers and all(c.done for c in finishers):
            return "done"
        return failure

    def progress(self) -> dict[str, Progress]:
        """Per model: newest published version, latest trainer step's reward and wait fraction, failed
        episodes of its rollout services."""
        out = {}
        starving, failures = self._slow_view()
        for m in self.config.models:
            p = Progress()
            p.version = latest_version(self.store, m.id)
            keys = [i.key for i in self.store.list(layout.trainer_stats_prefix(m.id))]
            if keys:
                with contextlib.suppress(FileNotFoundError, ValueError):  # replaced while reading: next poll
                    stats = json.loads(self.store.get(keys[-1]))
                    p.reward = stats.get("reward_mean")
                    total = stats.get("wait_s", 0) + stats.get("step_s", 0)
                    p.wait_fraction = stats.get("wait_s", 0) / total if total else None
            p.failed, p.top_failure = failures.get(m.id, (0, None))
            # few groups kept starves only a trainer that waits for them: a fast rollout pool may keep up
            waiting = p.wait_fraction is None or p.wait_fraction >= STARVING_WAIT
            p.starving = starving.get(m.id) if waiting else None
            p.judge = self._judges_seen.get(m.id)
            self._judge_alarm(m.id, p.judge)
            out[m.id] = p
        return out

    def _judge_alarm(self, model_id: str, judge: JudgeCounts | None) -> None:
        """A notice, once until the judge gives a verdict again, when every judge request of the model's
        pools has failed for JUDGE_ALARM_S."""
        failing = judge.failing_s if judge is not None else None
        if judge is None or failing is None or failing < JUDGE_ALARM_S:
            if failing is None:
                self._judge_alarmed.discard(model_id)
            return
        if model_id in self._judge_alarmed:
            return
        self._judge_alarmed.add(model_id)
        logs = self.run_dir / "logs" / f"raas-{model_id}-*.log"
        self.notices.append(
            f"{model_id}: every judge request has failed for {failing / 60:.0f} min ({judge.top() or 'no reason'}); "
            f"{judge.held} groups held, nothing scored 0; the reasons are in {logs} (docs/judges.md)"
        )

    def _slow_view(self) -> tuple[dict[str, str | None], dict[str, tuple[int, str | None]]]:
        """Per model, why its trainer starves (the dataflow's newest dataflow_stats window) and its rollout
        services' failed episodes (their heartbeats): read at most every STARVATION_POLL_S, not every poll."""
        if time.monotonic() - self._starving_read < STARVATION_POLL_S:
            return self._starving_seen, self._failures_seen
        self._starving_read = time.monotonic()
        rows = latest_metrics(self.store, "dataflow_stats")
        if rows is not None:
            self._starving_seen = {str(r.get("model_id")): starvation(r) for r in rows.to_pylist()}
        services = production(read_heartbeats(self.store), datetime.now(UTC)).services
        models = {s.model_id for s in services if s.model_id is not None}
        self._failures_seen = {m: failure_summary([s for s in services if s.model_id == m]) for m in models}
        self._judges_seen = {m: judge_counts([s for s in services if s.model_id == m]) for m in models}
        return self._starving_seen, self._failures_seen

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM everything still running, wait, then SIGKILL what remains of each one's process group (our
        children and theirs only). The
        dataflow process goes last, so its final compaction covers every sample the others committed; the served
        models go before it and after the rollout services, whose judges ask them once more as they stop."""
        self._stopping = True
        first = [c for c in self.components if c.role not in ("dataflow", "serve")]
        groups = (
            first,
            [c for c in self.components if c.role == "serve"],
            [c for c in self.components if c.role == "dataflow"],
        )
        for group in groups:
            for c in group:
                if c.process and c.process.poll() is None:
                    c.process.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + timeout_s
            for c in group:
                if c.process is None:
                    continue
                try:
                    c.process.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    c.process.kill()
                    c.process.wait()
                # what outlived it in its session (a vLLM engine core still starting when its parent stopped)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(c.process.pid, signal.SIGKILL)
                if c.log:
                    c.log.close()


def free_port() -> int:
    """A TCP port of 127.0.0.1 free now (the served model binds it a moment later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
