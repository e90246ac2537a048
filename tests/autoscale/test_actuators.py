"""Actuators: local processes started, drained and killed for real; Kubernetes and SkyPilot up to the
calls they make (no cluster is reachable here: a fake AppsV1Api records calls; `sky` is a stub)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from lakeflow.autoscale.actuators import ACTUATORS, KubernetesActuator, LocalActuator, build_actuator
from lakeflow.errors import ConfigError, MissingExtraError, MissingToolError

# A stand-in rollout service: "works on a group" until SIGTERM, then commits it (a file) and exits 0.
SERVICE = """
import signal, sys, time, pathlib
out = pathlib.Path(sys.argv[1]); mode = sys.argv[2]
stopping = []
if mode != "stubborn":
    signal.signal(signal.SIGTERM, lambda *a: stopping.append(1))
else:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
(out / "started").touch()
if mode == "crash":
    sys.exit(3)
while not stopping:
    time.sleep(0.05)
(out / "committed").touch()
"""


def _local(tmp_path: Path, mode: str = "ok", drain_s: float = 30.0) -> LocalActuator:
    script = tmp_path / "service.py"
    script.write_text(SERVICE)

    def argv(pool: str, index: int) -> list[str]:
        d = tmp_path / f"{pool}-{index}"
        d.mkdir()
        return [sys.executable, str(script), str(d), mode]

    return LocalActuator(argv, tmp_path / "logs", drain_s=drain_s)


def _wait_for(path: Path) -> None:
    import time

    deadline = time.monotonic() + 120  # a guard against a hang: they start in well under a second when idle
    while time.monotonic() < deadline:
        if path.exists():
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


def test_local_actuator_starts_and_drains_real_processes(tmp_path: Path) -> None:
    act = _local(tmp_path)
    act.scale("policy", 3)
    assert act.replicas("policy") == 3
    for i in range(3):
        _wait_for(tmp_path / f"policy-{i}" / "started")
    act.scale("policy", 1)  # the two newest are drained
    assert act.replicas("policy") == 1
    for p in list(act.draining):
        p.process.wait(timeout=20)
    act.check()
    assert act.draining == []
    assert (tmp_path / "policy-2" / "committed").exists() and (tmp_path / "policy-1" / "committed").exists()
    assert not (tmp_path / "policy-0" / "committed").exists()
    act.scale("policy", 2)  # a new index, never a reused one
    _wait_for(tmp_path / "policy-3" / "started")
    act.close()
    assert (tmp_path / "policy-0" / "committed").exists() and (tmp_path / "policy-3" / "committed").exists()
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == [f"raas-policy-{i}.log" for i in range(4)]


def test_local_actuator_kills_a_service_that_does_not_drain(tmp_path: Path) -> None:
    act = _local(tmp_path, "stubborn", drain_s=0.0)
    act.scale("policy", 1)
    _wait_for(tmp_path / "policy-0" / "started")
    act.scale("policy", 0)
    [p] = act.draining
    act.check()  # past drain_s: SIGKILL
    assert p.process.wait(timeout=20) == -9
    act.check()
    assert act.draining == []


def test_local_actuator_reports_a_service_that_exits_on_its_own(tmp_path: Path) -> None:
    act = _local(tmp_path, "crash")
    act.scale("policy", 1)
    act.pools["policy"][0].process.wait(timeout=20)
    with pytest.raises(RuntimeError, match=r"raas-policy-0 exited with 3 \(not drained\)"):
        act.check()
    act.close()


class FakeAppsV1Api:
    """Records the calls KubernetesActuator makes, answering like the scale subresource."""

    def __init__(self, replicas: dict[str, int]):
        self.replicas = replicas
        self.calls: list[tuple[str, str, str, Any]] = []

    def read_namespaced_deployment_scale(self, name: str, namespace: str) -> Any:
        self.calls.append(("read", name, namespace, None))
        return SimpleNamespace(spec=SimpleNamespace(replicas=self.replicas[name]))

    def patch_namespaced_deployment_scale(self, name: str, namespace: str, body: dict[str, Any]) -> Any:
        self.calls.append(("patch", name, namespace, body))
        self.replicas[name] = body["spec"]["replicas"]


def test_kubernetes_actuator_patches_the_deployment_scale() -> None:
    api = FakeAppsV1Api({"run-raas-policy": 2})
    act = build_actuator("k8s", deployments={"policy": "run-raas-policy"}, namespace="rl", api=api)
    assert act.replicas("policy") == 2
    act.scale("policy", 5)
    assert api.calls[-1] == ("patch", "run-raas-policy", "rl", {"spec": {"replicas": 5}})
    assert act.replicas("policy") == 5
    with pytest.raises(ConfigError, match="--deployment other=NAME"):
        act.scale("other", 1)


def test_kubernetes_actuator_names_the_extra_when_the_client_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "kubernetes", None)  # import kubernetes -> ImportError
    with pytest.raises(MissingExtraError, match=r"lakeflow\[k8s\]"):
        KubernetesActuator({"policy": "x"})


def test_skypilot_actuator_launches_and_downs_one_cluster_per_service(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[str]] = []
    act = build_actuator("skypilot", tasks={"policy": "sky/raas-policy.yaml"}, prefix="Run", run=calls.append)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(MissingToolError, match="sky is not on PATH"):
        act.scale("policy", 1)
    (tmp_path / "sky").write_text("#!/bin/sh\n")
    (tmp_path / "sky").chmod(0o755)
    act.scale("policy", 2)
    act.scale("policy", 1)
    launch = ["sky", "launch", "--yes", "--detach-run", "--num-nodes", "1", "--cluster"]  # one node per service
    assert calls == [
        [*launch, "run-raas-policy-0", "sky/raas-policy.yaml"],
        [*launch, "run-raas-policy-1", "sky/raas-policy.yaml"],
        ["sky", "down", "--yes", "run-raas-policy-1"],
    ]
    assert act.replicas("policy") == 1


def test_unknown_actuator() -> None:
    with pytest.raises(ConfigError, match=r"--actuator: unknown actuator 'nomad'; known: k8s, local, skypilot"):
        build_actuator("nomad")
    assert set(ACTUATORS) == {"local", "k8s", "skypilot"}


class Counted:
    """An actuator of a user's own, named by import path: it only counts."""

    def __init__(self, start: str = "0") -> None:
        self.n = int(start)

    def replicas(self, pool: str) -> int:
        return self.n

    def scale(self, pool: str, n: int) -> None:
        self.n = n

    def check(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_an_actuator_by_import_path_is_built_with_its_options() -> None:
    act = build_actuator(f"{__name__}:Counted", start="2")
    act.scale("policy", 3)
    assert isinstance(act, Counted) and act.replicas("policy") == 3
    with pytest.raises(ConfigError, match=r"is not callable as actuator\(colour\)"):
        build_actuator(f"{__name__}:Counted", colour="red")
    with pytest.raises(ConfigError, match="built an object without replicas, scale, check, close"):
        build_actuator("builtins:dict")
