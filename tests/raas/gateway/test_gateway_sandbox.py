"""Gateway episodes in bubblewrap sandboxes (agent.sandbox, docs/sandbox.md), with real agents
(`sandbox_agents.py`, run by the sandbox's own python3): the OpenAI client reaches the gateway through the
relay, what an episode changed is stored in the lake and restored, a later pool forks from it; and the
hostile agents (fork bomb, full disk, writes outside, snooping, the network, sleeping past their time)
are each stopped or refused with their reason while an honest episode beside them goes on."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import socket
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lakeflow.cli import main
from lakeflow.io import open_store
from lakeflow.lake import write_samples
from lakeflow.raas.config.agent import AgentConfig
from lakeflow.raas.config.sandbox import SandboxConfig
from lakeflow.raas.sandbox import bwrap_status
from lakeflow.raas.trajectory import sample_row
from lakeflow.raas.workspace import lake_states
from lakeflow.raas.workspace.checks import build_sandbox, can_enter_netns
from tests.raas.agent.helpers import Scripted, make_task

AGENTS = Path(__file__).resolve().parent
COMMAND = ["python3", "-B", str(AGENTS / "sandbox_agents.py")]


def _why_not() -> str:
    if os.geteuid() != 0:
        return "the bwrap backend runs as root (fresh uids, mounts, the relay's setns)"
    if not bwrap_status()[0]:
        return f"bubblewrap cannot run here: {bwrap_status()[1]}"
    if not can_enter_netns()[0]:
        return f"cannot enter a network namespace: {can_enter_netns()[1]}"
    return ""


pytestmark = pytest.mark.skipif(bool(_why_not()), reason=_why_not() or "-")


@pytest.fixture
def work_dir() -> Iterator[str]:
    """Under /tmp and searchable by other users (the sandbox's uid passes through it); removed after."""
    path = Path(tempfile.mkdtemp(prefix="lakeflow-ws-test-"))
    path.chmod(0o755)
    yield str(path)
    shutil.rmtree(path, ignore_errors=True)


def _site() -> str:
    spec = importlib.util.find_spec("openai")  # found, not imported: the test itself never uses it
    assert spec is not None and spec.origin is not None, "the gateway tests need the openai client"
    return os.path.realpath(Path(spec.origin).parents[1])  # the sandbox's python3 imports the client from here


def _sandbox(work_dir: str, **kw: Any) -> SandboxConfig:
    return SandboxConfig(
        backend="bwrap", binds=[str(AGENTS), _site()], env={"PYTHONPATH": _site()}, work_dir=work_dir, **kw
    )


def test_an_openai_agent_edits_its_workspace_which_is_stored_restored_and_forked(
    tok: Any, drive: Any, tmp_path: Path, work_dir: str
) -> None:
    store = open_store(str(tmp_path / "lake"))
    base = tmp_path / "base"
    (base / "sub").mkdir(parents=True)
    for name, text in {"a.txt": "a\n", "gone.txt": "bye\n", "sub/b.txt": "b\n"}.items():
        (base / name).write_text(text)
    engine = Scripted(tok, lambda context: "It is 7")
    config = AgentConfig(command=COMMAND, sandbox=_sandbox(work_dir, workspace=str(base)), max_seconds=60)
    driver = drive(engine, config, sandbox=build_sandbox(config.sandbox, store, "policy"))
    task = make_task(1, prompt="honest", answer="7")
    driver.add("h", task)
    (group,) = driver.groups(timeout_s=90)
    (honest,) = group.trajectories
    record = honest.extra["workspace"]
    assert honest.extra["end"] == "done" and honest.reward == 1.0, honest.extra
    assert record["files"] == 3 and not record["truncated"] and record["base"].startswith("workspaces/policy/")
    key = record["key"]
    row = sample_row(task, honest, "policy", {"policy": 0}, "raas-1", "")
    write_samples(store, [row])

    runner = CliRunner()
    lake = ["--lake", str(tmp_path / "lake")]
    shown = runner.invoke(main, ["workspace", "show", *lake, honest.episode_id])
    assert shown.exit_code == 0, shown.output
    assert {"D gone.txt", "M a.txt  9 bytes", "A notes.txt  7 bytes"} <= set(shown.output.splitlines())
    out = tmp_path / "restored"
    restored = runner.invoke(main, ["workspace", "restore", *lake, key, "--to", str(out)])  # by key: no SQL
    assert restored.exit_code == 0, restored.output
    files = {str(p.relative_to(out)): p.read_text() for p in out.rglob("*") if p.is_file()}
    assert files == {"a.txt": "a\nedited\n", "notes.txt": "It is 7", "sub/b.txt": "b\n"}
    assert (base / "gone.txt").exists() and (base / "a.txt").read_text() == "a\n"  # the source is untouched

    fork = AgentConfig(command=COMMAND, sandbox=_sandbox(work_dir, workspace=f"lake://{key}"), max_seconds=60)
    driver = drive(engine, fork, sandbox=build_sandbox(fork.sandbox, store, "policy"))
    driver.add("f", make_task(1, prompt="forked", answer="7"))
    (group,) = driver.groups(timeout_s=60)
    (t,) = group.trajectories
    assert t.extra["end"] == "done" and t.reward == 1.0  # it read the notes the first episode left
    assert t.extra["workspace"]["base"] == key and t.extra["workspace"]["files"] == 0


@dataclass(frozen=True)
class Hostile:
    """A hostile agent of sandbox_agents.py and how its episode must end."""

    agent: str
    end: str  # extra.end
    error: str  # in extra.error


HOSTILE = [
    Hostile("fork_bomb", "timeout", "timeout: the sandbox stopped the command"),
    Hostile("fill_disk", "agent_error", "the sandbox stopped the command: it filled its workspace"),
    Hostile("write_outside", "agent_error", "refused: every write outside"),
    Hostile("snoop", "agent_error", "refused: gathered"),
    Hostile("reach_out", "agent_error", "refused: no address but the gateway answers"),
    Hostile("sleeper", "timeout", "timeout: the sandbox stopped the command at 2 s"),
]
PIDS = 32


def _host_ip() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))  # no packet is sent: picks the interface a route would use
            return str(s.getsockname()[0])
        except OSError:
            return "10.0.0.1"


@pytest.fixture
def bucket() -> Iterator[socket.socket]:
    """A TCP endpoint on every interface of the host: it stands for the bucket."""
    with socket.create_server(("0.0.0.0", 0)) as server:
        server.setblocking(False)
        yield server


@pytest.fixture
def shared() -> Iterator[Path]:
    """A host directory anyone may write (not under /tmp: a sandbox has a /tmp of its own); removed after."""
    path = Path(tempfile.mkdtemp(prefix="lakeflow-ws-host-", dir="/var/tmp"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_hostile_agents_are_stopped_or_refused_and_the_others_go_on(
    tok: Any,
    drive: Any,
    tmp_path: Path,
    work_dir: str,
    bucket: socket.socket,
    shared: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret = f"service-secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)  # the service's credentials: never the agent's
    (shared / "secret.txt").write_text(secret)
    (shared / "secret.txt").chmod(0o644)
    store = open_store(str(tmp_path / "lake"))
    marker = uuid.uuid4().hex  # in every hostile process's environment: none may outlive its episode
    args = {
        "host_paths": [str(shared / "secret.txt"), str(tmp_path / "lake"), work_dir],
        "host_dirs": [str(shared), str(tmp_path / "lake"), work_dir],
        "bucket_port": bucket.getsockname()[1],
        "host_ip": _host_ip(),
        "marker": marker,
    }
    limits = {"seconds": 2.0, "disk_mb": 8, "pids": PIDS, "tmp_mb": 8}
    config = AgentConfig(
        command=COMMAND,
        sandbox=_sandbox(work_dir, **limits),
        max_seconds=4,
        on_failure="score",
        failed_reward=-1,
        max_concurrent_episodes=16,
    )
    driver = drive(Scripted(tok, lambda context: "7"), config, sandbox=build_sandbox(config.sandbox, store, "policy"))
    for case in [*HOSTILE, Hostile("plain", "done", "")]:
        driver.add(case.agent, make_task(1, prompt=case.agent, answer=json.dumps(args), task_id=case.agent))
    ended = {g.key: g.trajectories[0] for g in driver.groups(len(HOSTILE) + 1, timeout_s=60)}
    for case in HOSTILE:
        t = ended[case.agent]
        assert (t.extra["end"], case.error in t.extra.get("error", "")) == (case.end, True), (case, t.extra)
    assert ended["plain"].extra["end"] == "done"  # the honest episode beside them
    forks = [int(n) for n in re.findall(r"forked (\d+)", ended["fork_bomb"].extra["stderr"])]
    assert 0 < max(forks) < PIDS  # refused at the episode's process limit

    loot_dir = tmp_path / "loot"
    lake_states.restore(store, ended["snoop"].extra["workspace"]["key"], loot_dir)
    loot = (loot_dir / "loot.txt").read_text()
    assert secret not in loot and "ls " + str(tmp_path / "lake") + ": False" in loot
    assert len(set(re.findall(r'OPENAI_API_KEY(?:=|": ")([\w-]{20,})', loot))) == 1  # its own token, no other's

    assert sorted(p.name for p in shared.iterdir()) == ["secret.txt"]  # nothing written outside
    assert not (tmp_path / "lake" / "probe").exists() and not Path(work_dir, "probe").exists()
    with pytest.raises(BlockingIOError):
        bucket.accept()  # nobody connected to the "bucket"
    leftovers = [p for p in Path("/proc").glob("[0-9]*/environ") if marker.encode() in _read(p)]
    assert leftovers == []  # every process of every episode is gone
    driver.add("after", make_task(1, prompt="plain", answer=json.dumps(args), task_id="after"))
    assert driver.groups(len(HOSTILE) + 2, timeout_s=30)[-1].trajectories[0].extra["end"] == "done"  # it goes on


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:  # exited meanwhile
        return b""
