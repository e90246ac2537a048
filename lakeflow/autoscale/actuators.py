"""Actuators: what changes a rollout pool's size. Small classes in a plain dict, built by `build_actuator`.

- `local`: real `lakeflow raas` processes on this machine. Removing one drains it: SIGTERM, and the
  service commits the group in progress and exits 0; one that outlives `drain_s` is killed (its claim
  expires and the dataflow reissues the task, so nothing committed is lost).
- `k8s`: a Deployment's `spec.replicas` through the official client's scale subresource; Kubernetes then
  sends SIGTERM to the pods it removes and waits terminationGracePeriodSeconds (`lakeflow launch` sizes it).
- `skypilot`: one cluster per service, `sky launch` / `sky down` as subprocesses.
An actuator of the user's own is a class or factory named by `package.module:attr` or an entry point in
`lakeflow.actuators`, called with keyword options, returning an object with the `Actuator` methods.
No cluster is reachable from the machines this project is tested on: `k8s` is tested against a fake API
object and `skypilot` up to its command lines.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

from lakeflow.errors import ConfigError, MissingExtraError, MissingToolError, PluginError, ServiceExitedError
from lakeflow.plugins import call_problem, resolve

log = logging.getLogger(__name__)


class Actuator(Protocol):
    def replicas(self, pool: str) -> int: ...
    def scale(self, pool: str, n: int) -> None: ...
    def check(self) -> None: ...  # raise when a service failed on its own
    def close(self) -> None: ...


@dataclass
class _Proc:
    name: str
    process: subprocess.Popen[bytes]
    log: IO[bytes]
    log_path: Path
    drained_at: float | None = None


@dataclass
class LocalActuator:
    """Rollout services as child processes; `argv(pool, index)` is the command line of a new one."""

    argv: Callable[[str, int], list[str]]
    log_dir: Path
    drain_s: float = 120.0
    env: dict[str, str] | None = None  # the services' environment (default: this process's)
    pools: dict[str, list[_Proc]] = field(default_factory=dict)  # running, oldest first
    draining: list[_Proc] = field(default_factory=list)
    started: dict[str, int] = field(default_factory=dict)  # services ever started per pool: the next index

    def replicas(self, pool: str) -> int:
        return len(self.pools.get(pool, []))

    def scale(self, pool: str, n: int) -> None:
        running = self.pools.setdefault(pool, [])
        while len(running) < n:
            index = self.started.get(pool, 0)
            self.started[pool] = index + 1
            name = f"raas-{pool}-{index}"
            path = self.log_dir / f"{name}.log"
            path.parent.mkdir(parents=True, exist_ok=True)
            out = open(path, "ab")  # noqa: SIM115 - closed when the process is reaped
            env = {**(os.environ if self.env is None else self.env), "PYTHONUNBUFFERED": "1"}
            process = subprocess.Popen(self.argv(pool, index), stdout=out, stderr=subprocess.STDOUT, env=env)
            running.append(_Proc(name, process, out, path))
            log.info("started %s (pid %d)", name, process.pid)
        while len(running) > n:
            self._drain(running.pop())  # the newest first: the oldest have warm caches

    def _drain(self, p: _Proc) -> None:
        if p.process.poll() is None:
            p.process.send_signal(signal.SIGTERM)
        p.drained_at = time.monotonic()
        self.draining.append(p)
        log.info("draining %s (pid %d)", p.name, p.process.pid)

    def check(self) -> None:
        """Reap drained services (kill those past `drain_s`); raise when a running one exited."""
        for p in list(self.draining):
            if p.process.poll() is None and p.drained_at is not None and time.monotonic() - p.drained_at > self.drain_s:
                log.warning("%s did not finish its group within %.0f s: killed", p.name, self.drain_s)
                p.process.kill()
            if p.process.poll() is not None:
                self._reaped(p)
                self.draining.remove(p)
        for running in self.pools.values():
            for p in running:
                code = p.process.poll()
                if code is not None:
                    raise ServiceExitedError(f"{p.name} exited with {code} (not drained); its log: {p.log_path}")

    def close(self) -> None:
        """Drain every service and wait for them (up to `drain_s`, then kill)."""
        for running in self.pools.values():
            while running:
                self._drain(running.pop())
        deadline = time.monotonic() + self.drain_s
        for p in self.draining:
            try:
                p.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.process.kill()
                p.process.wait()
            self._reaped(p)
        self.draining.clear()

    def _reaped(self, p: _Proc) -> None:
        p.log.close()
        log.info("drained %s: exit %s", p.name, p.process.returncode)


class KubernetesActuator:
    """One Deployment per pool (`deployments`: pool -> name), scaled through AppsV1Api's scale subresource."""

    def __init__(self, deployments: dict[str, str], namespace: str = "default", api: Any = None):
        self.deployments = deployments
        self.namespace = namespace
        self.api = api if api is not None else _apps_api()

    def _name(self, pool: str) -> str:
        if pool not in self.deployments:
            raise ConfigError(f"no Deployment for pool {pool!r}; pass --deployment {pool}=NAME")
        return self.deployments[pool]

    def replicas(self, pool: str) -> int:
        scale = self.api.read_namespaced_deployment_scale(self._name(pool), self.namespace)
        return int(scale.spec.replicas or 0)

    def scale(self, pool: str, n: int) -> None:
        self.api.patch_namespaced_deployment_scale(self._name(pool), self.namespace, {"spec": {"replicas": n}})

    def check(self) -> None:
        """Kubernetes restarts failed pods itself."""

    def close(self) -> None:
        """The pool stays as it is: the Deployment owns its pods."""


def _apps_api() -> Any:
    try:
        from kubernetes import client, config
    except ImportError as e:
        raise MissingExtraError("kubernetes", "k8s") from e
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.AppsV1Api()


class SkyPilotActuator:
    """One single-node cluster per service (`<prefix>-raas-<pool>-<i>`), started with `sky launch --num-nodes 1`
    from the pool's task file (`lakeflow launch --target skypilot` renders the pool as one cluster of
    `replicas` nodes; the actuator adds and removes services one node at a time) and removed with `sky down`."""

    def __init__(
        self,
        tasks: dict[str, str],
        prefix: str,
        replicas: dict[str, int] | None = None,
        run: Callable[..., Any] = subprocess.run,
    ):
        self.tasks = tasks  # pool -> task YAML (sky/raas-<model>.yaml of a rendered launch)
        self.prefix = prefix
        self.counts = dict(replicas or {})  # what was launched (sky status is not parsed)
        self.run = run

    def replicas(self, pool: str) -> int:
        return self.counts.get(pool, 0)

    def scale(self, pool: str, n: int) -> None:
        if shutil.which("sky") is None:
            raise MissingToolError("sky is not on PATH: install skypilot and configure a cloud to scale SkyPilot pools")
        if pool not in self.tasks:
            raise ConfigError(f"no task file for pool {pool!r}; pass --task {pool}=PATH")
        count = self.counts.get(pool, 0)
        for i in range(count, n):
            one = ["--num-nodes", "1", "--cluster", self._cluster(pool, i)]
            self.run(["sky", "launch", "--yes", "--detach-run", *one, self.tasks[pool]])
        for i in range(count - 1, n - 1, -1):
            self.run(
                ["sky", "down", "--yes", self._cluster(pool, i)]
            )  # not verified here: whether the job sees SIGTERM first
        self.counts[pool] = n

    def _cluster(self, pool: str, i: int) -> str:
        return f"{self.prefix}-raas-{pool}-{i}".lower()

    def check(self) -> None:
        """Not observed: the services' heartbeats show which are alive."""

    def close(self) -> None:
        """The clusters stay up (autostop ends idle ones)."""


ACTUATORS: dict[str, Callable[..., Actuator]] = {
    "local": LocalActuator,
    "k8s": KubernetesActuator,
    "skypilot": SkyPilotActuator,
}


def build_actuator(kind: str, config_key: str = "--actuator", **options: Any) -> Actuator:
    """The actuator `kind` names (shipped, `package.module:attr`, entry point) built with `options`;
    PluginError naming `config_key` when it does not resolve or does not take them."""
    what = f"actuator({', '.join(options)})"
    factory = resolve(
        "actuator", kind, ACTUATORS, key=config_key, check=lambda f: call_problem(f, what=what, **options)
    )
    actuator = factory(**options)
    missing = [m for m in ("replicas", "scale", "check", "close") if not callable(getattr(actuator, m, None))]
    if missing:
        raise PluginError(f"{config_key}: actuator {kind!r} built an object without {', '.join(missing)}")
    return actuator
