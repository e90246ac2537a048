"""The sandbox section and its backends (raas/config/sandbox.py, raas/workspace/): what the config refuses,
the relay's routes, an episode on an overlay and on a plain copy with its disk limit, the `docker run`
line (run where a daemon answers), and the kubernetes pod and NetworkPolicy validated offline."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from pydantic import ValidationError

from lakeflow.cli import main
from lakeflow.errors import ConfigError
from lakeflow.raas.config.agent import AgentConfig
from lakeflow.raas.config.sandbox import SandboxConfig
from lakeflow.raas.sandbox import bwrap_status
from lakeflow.raas.workspace import docker
from lakeflow.raas.workspace.bwrap import Argv
from lakeflow.raas.workspace.checks import build_sandbox
from lakeflow.raas.workspace.kubernetes import episode_pod, network_policy
from lakeflow.raas.workspace.routes import routes


@pytest.mark.parametrize(
    ("sandbox", "message"),
    [
        ({"backend": "docker"}, "needs an `image`"),
        ({"backend": "bwrap", "env": {"AWS_SECRET_ACCESS_KEY": "x"}}, "refused"),
        ({"backend": "bwrap", "env": {"OPENAI_BASE_URL": "x"}}, "refused"),
        ({"backend": "bwrap", "binds": ["harness/../../etc"]}, "without '..'"),
        ({"backend": "bwrap", "network": {"allow": ["no-port"]}}, "host:port"),
        ({"backend": "bwrap", "seconds": 10}, "below agent.max_seconds"),
        ({"backend": "bwrap", "cpus": 2}, "Extra inputs are not permitted"),
        ({"backend": "docker", "image": "x", "root": "/srv/root"}, "root file system"),
    ],
)
def test_the_sandbox_section_refuses_what_cannot_be_honoured(sandbox: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        AgentConfig.model_validate({"command": ["agent"], "max_seconds": 10, "sandbox": sandbox})


def test_a_program_cannot_be_sandboxed_and_the_default_is_no_sandbox() -> None:
    with pytest.raises(ValidationError, match="cannot be sandboxed"):
        AgentConfig.model_validate({"program": "m:f", "sandbox": {"backend": "bwrap"}})
    config = AgentConfig(command=["agent"], max_seconds=100)
    assert config.sandbox.backend == "none" and config.sandbox.command_seconds(100) == 90
    assert build_sandbox(config.sandbox, None, "policy") is None


def test_routes_keep_the_gateway_url_and_relay_only_what_is_allowed() -> None:
    env = {"OPENAI_BASE_URL": "http://0.0.0.0:8123/e/t/v1", "ANTHROPIC_BASE_URL": "https://gw.internal/e/t"}
    plan = routes(SandboxConfig(backend="bwrap", network={"allow": ["pypi.internal:8443", "10.1.2.3:80"]}), env)
    assert plan.env["OPENAI_BASE_URL"] == "http://127.0.0.1:8123/e/t/v1"  # an address: the sandbox's loopback
    assert plan.env["ANTHROPIC_BASE_URL"] == "https://gw.internal/e/t"  # a name: pinned in /etc/hosts
    assert plan.ports == {8123: ("127.0.0.1", 8123), 443: ("gw.internal", 443), 8443: ("pypi.internal", 8443)} | {
        80: ("10.1.2.3", 80)
    }
    assert sorted(plan.names) == ["gw.internal", "pypi.internal"]
    with pytest.raises(ConfigError, match="port 443"):  # one relay per port: two names cannot share one
        routes(SandboxConfig(backend="bwrap", network={"allow": ["other.internal:443"]}), env)
    assert routes(SandboxConfig(backend="bwrap", network="none"), env).ports == {}


def _can_bwrap() -> str:
    if os.geteuid() != 0 or not bwrap_status()[0]:
        return "the bwrap backend needs root and a working bubblewrap"
    return ""


@pytest.fixture
def work_dir() -> Iterator[str]:
    path = Path(tempfile.mkdtemp(prefix="lakeflow-ws-test-"))
    path.chmod(0o755)
    yield str(path)
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.skipif(bool(_can_bwrap()), reason=_can_bwrap() or "-")
@pytest.mark.parametrize("method", ["overlay", "copy"])
def test_an_episode_on_an_overlay_or_a_copy_keeps_its_change_and_its_disk_limit(
    method: str, work_dir: str, tmp_path: Path
) -> None:
    base = tmp_path / "base"
    base.mkdir()
    (base / "a.txt").write_text("a\n")
    config = SandboxConfig(backend="bwrap", network="none", copy_method=method, workspace=str(base), disk_mb=4)
    sandbox = build_sandbox(config.model_copy(update={"work_dir": work_dir}), None, "policy")
    assert sandbox is not None and sandbox.method == method
    try:
        edit = sandbox.run(["sh", "-c", "echo b >> a.txt && echo new > n.txt && id -u && echo {}"], {}, 10)
        assert edit.exit_code == 0 and edit.workspace is not None, edit
        assert edit.workspace["files"] == 2 and edit.workspace["method"] == method
        assert int(edit.stdout.split()[0]) != 0  # its own unprivileged uid
        forever = "i=0; while true; do head -c 1048576 /dev/zero > f$i; i=$((i+1)); done"
        fill = sandbox.run(["sh", "-c", forever], {}, 10)
        assert fill.limit == "disk" and fill.exit_code is None and fill.workspace is not None, fill
    finally:
        sandbox.close()
    assert (base / "a.txt").read_text() == "a\n" and sorted(os.listdir(Path(work_dir) / "episodes")) == []


def test_the_docker_run_line_and_a_run_where_a_daemon_answers(tmp_path: Path) -> None:
    config = SandboxConfig(backend="docker", image="python:3.12-slim", cpu=2, memory_mb=1024, pids=64, disk_mb=100)
    paths = {"workspace": tmp_path / "ws", "gate": tmp_path / "gate", "env_file": tmp_path / "env"}
    line = docker.run_line(config, "docker", "lakeflow-episode-x", paths, Argv(["python", "agent.py"], 60, 123456))
    joined = " ".join(line)
    for flag in ("--network none", "--cpus 2", "--memory 1024m", "--pids-limit 64", "--cap-drop ALL", "--read-only"):
        assert flag in joined, flag
    assert f"{tmp_path / 'ws'}:/workspace:rw" in line and "--user" in line and "123456:123456" in line
    assert line[-2:] == ["python", "agent.py"] and "--env-file" in line  # values never on the command line
    ok, why = docker.daemon_status()
    if not ok:
        pytest.skip(f"no container daemon answers here: {why}")
    sandbox = build_sandbox(config.model_copy(update={"network": "none"}), None, "policy")
    assert sandbox is not None
    try:
        run = sandbox.run(["sh", "-c", "echo hi > /workspace/x && echo {}"], {}, 60)
    finally:
        sandbox.close()
    assert run.exit_code == 0 and run.workspace is not None and run.workspace["files"] == 1, run


def test_a_kubernetes_episode_is_a_validated_pod_and_network_policy(tmp_path: Path) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    config = SandboxConfig(
        backend="kubernetes", image="ghcr.io/x/agent:1", workspace="/opt/repo", network={"allow": ["10.0.0.8:443"]}
    )
    names = {"run": "tiny-agent", "episode": "Ep_1", "namespace": "lakeflow"}
    pod = episode_pod(config, command=["python", "agent.py"], env={"OPENAI_BASE_URL": "http://gw:8000/e/t/v1"}, **names)
    policy = network_policy(config, gateway_url="http://gw:8000", **names)
    for doc in (pod, policy):
        kubernetes_validate.validate(doc, "1.37.0", strict=True)
    spec = pod["spec"]
    assert spec["automountServiceAccountToken"] is False and spec["enableServiceLinks"] is False
    assert spec["securityContext"]["runAsNonRoot"] and spec["initContainers"][0]["command"][-1].startswith("cp -a")
    assert spec["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    egress = policy["spec"]["egress"]
    assert policy["spec"]["ingress"] == [] and egress[0]["ports"] == [{"protocol": "TCP", "port": 8000}]
    assert egress[-1]["to"] == [{"ipBlock": {"cidr": "10.0.0.8/32"}}]
    with pytest.raises(ConfigError, match="does not create episode pods"):
        build_sandbox(config, None, "policy")

    path = tmp_path / "raas.yaml"
    path.write_text(json.dumps({"workflow": "agent", "agent": {"command": ["agent"], "sandbox": config.model_dump()}}))
    out = CliRunner().invoke(main, ["workspace", "pod", "--config", str(path), "--gateway-url", "http://gw:8000"])
    assert out.exit_code == 0, out.output
    kinds = [d["kind"] for d in yaml.safe_load_all(out.output)]
    assert kinds == ["Pod", "NetworkPolicy"]


@pytest.mark.skipif(bool(_can_bwrap()), reason=_can_bwrap() or "-")
def test_the_service_gives_a_sandboxed_pool_its_lake(tmp_path: Path, work_dir: str) -> None:
    from lakeflow.io import open_store
    from lakeflow.raas.config import RaasConfig
    from lakeflow.raas.service.runners import build_runner

    sandbox = {"backend": "bwrap", "work_dir": work_dir}
    config = RaasConfig.model_validate({"workflow": "agent", "agent": {"command": ["agent"], "sandbox": sandbox}})
    store = open_store(str(tmp_path / "lake"))
    engines: dict[str, Any] = {"policy": object()}  # the runner only keeps it until an episode runs
    runner: Any = build_runner(config, engines, {"policy": "policy"}, "policy", store=store)
    try:
        assert runner.commands.sandbox.store is store and runner.commands.sandbox.model_id == "policy"
    finally:
        runner.close()
