"""mini-swe-agent, unchanged, in bwrap workspaces through the real `lakeflow run` of
jobs/examples/tiny-harness-sandbox.yaml: each episode acts in its own copy of examples/repos/tiny-calc,
reaches only its gateway, and what it changed is stored in the lake. From the lake: the samples made
requests, every episode's `extra.workspace` names a stored state, and `lakeflow workspace restore` gives
back the seed files with exactly what the episode changed (at least the trajectory mini-swe-agent saves
with --trajectory, whose model calls are the episode's requests).

Skipped, with the reason, where the bwrap backend cannot run (not root, no bubblewrap or user namespaces,
no network namespaces) or the harness is not installed (scripts/install-harnesses); CI has both."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from lakeflow.cli import main
from lakeflow.io import open_store
from lakeflow.lakeview import connect_lake
from lakeflow.raas.sandbox import bwrap_status
from lakeflow.raas.workspace.binds import host_binds, unreachable
from lakeflow.raas.workspace.checks import can_enter_netns
from lakeflow.raas.workspace.mounts import can_mount

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "jobs" / "examples" / "tiny-harness-sandbox.yaml"
SEED = ROOT / "examples" / "repos" / "tiny-calc"
WRAPPER = ROOT / "examples" / "agents" / "mini_swe_agent.py"
HARNESS = ROOT / "build" / "harnesses" / "mini-swe-agent"
TRAJECTORY = "mini-swe-agent.traj.json"


def _why_not() -> str:
    """Why the bwrap backend cannot run mini-swe-agent here ('' when it can)."""
    if not (HARNESS / "bin" / "python").exists():
        return f"mini-swe-agent is not installed in {HARNESS}: run scripts/install-harnesses"
    if os.geteuid() != 0:
        return "the bwrap backend runs each episode as a fresh uid: it needs root"
    for ok, why in (bwrap_status(), can_enter_netns()):
        if not ok:
            return f"bwrap cannot make its namespaces here: {why}"
    hidden = [p for p in host_binds([str(HARNESS)]) if unreachable(p)]
    if hidden and not can_mount()[0]:
        return f"{hidden[0]} is hidden from other uids, and without mount rights it cannot be shown to the sandbox"
    return ""


@pytest.fixture
def work_dir() -> Iterator[Path]:
    """The sandbox's work_dir: every folder above it searchable by the episodes' uids (pytest's tmp_path is not)."""
    path = Path(tempfile.mkdtemp(prefix="lakeflow-ws-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _job(tmp_path: Path, work_dir: Path) -> Path:
    """The shipped job, one step of one group of two episodes. The dataflow issues the next step's tasks while
    the trainer trains; those (prompts `idle-*`) end at once without calling the model, as in harness_agent.py."""
    rows = [json.loads(line) for line in (JOB.parent / "data" / "tiny-calc.jsonl").read_text().splitlines()]
    idle = [{"prompt_id": f"idle-{i}", "prompt": "idle", "answer": "0", "task_type": "math"} for i in range(3)]
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(r) + "\n" for r in [rows[0], *idle]))
    config = yaml.safe_load(JOB.read_text())
    config["steps"] = 1
    config["tasks"] = {"buffer_factor": 1.0}
    model = config["models"][0]
    model["dataflow"].update(n_samples=2, prompts_per_step=1)
    model["dataflow"]["dataset"] = {"type": "file", "path": str(tasks), "name": "tiny-calc"}
    model["trainer"]["model_cache_dir"] = str(tmp_path / "models")
    agent = model["raas"]["config"]["agent"]
    play = shlex.join(["exec", "python3", str(WRAPPER), *agent["command"][2:]])
    agent["command"] = ["sh", "-c", f'case "$LAKEFLOW_TASK" in *\'"idle-\'*) echo 0;; *) {play};; esac']
    sandbox = agent["sandbox"]
    sandbox.update(workspace=str(SEED), binds=[str(WRAPPER.parent), str(HARNESS)], work_dir=str(work_dir))
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every path under `root`: a file's bytes, None for a folder."""
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes() for p in sorted(root.rglob("*"))}


# untraced: the sandbox and the gateway are measured in process (tests/raas/workspace/, tests/raas/gateway/)
# 47-69 s on 2 cores shared with other work (load 3-6; 31-36 s of CPU): the run's start, publish and stop
# ~35 s, two sandboxed episodes ~10 s (mini-swe-agent's litellm import ~6 s of CPU each), one training step,
# the restores under a second.
@pytest.mark.usefixtures("untraced_children")
def test_mini_swe_agent_in_bwrap_workspaces_stores_what_it_changed_in_the_lake(tmp_path: Path, work_dir: Path) -> None:
    if why := _why_not():
        pytest.skip(why)
    lake = tmp_path / "lake"
    cmd = [sys.executable, "-m", "lakeflow", "run", str(_job(tmp_path, work_dir)), "--engine", "hf"]
    cmd += ["--lake", str(lake), "--run-dir", str(tmp_path / "run")]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]

    store = open_store(str(lake))
    view = connect_lake(store)
    rows = view.sql("SELECT episode_id, prompt_id, loss_mask, extra FROM trajectories").to_pylist()
    episodes: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        episodes[row["episode_id"]].append({**row, "extra": json.loads(row["extra"])})
    played = {e: s for e, s in episodes.items() if not s[0]["prompt_id"].startswith("idle-")}
    assert len(played) == 2, sorted({s[0]["prompt_id"] for s in episodes.values()})
    for samples in episodes.values():  # the idle ones too: every sandboxed episode stores its workspace
        (record,) = {json.dumps(s["extra"]["workspace"], sort_keys=True) for s in samples}  # one per episode
        key = json.loads(record)["key"]
        assert key and store.head(key).size > 0, record

    seed = _tree(SEED)
    for episode_id, samples in played.items():
        first = samples[0]["extra"]
        assert first["requests"] > 0 and any(any(s["loss_mask"]) for s in samples), first
        assert first["end"] in {"done", "agent_error"} and (first["end"] == "done" or first.get("error")), first
        to = tmp_path / "restored" / episode_id
        restored = CliRunner().invoke(main, ["workspace", "restore", episode_id, "--to", str(to), "--lake", str(lake)])
        assert restored.exit_code == 0, restored.output
        tree = _tree(to)
        changed = {p for p in seed.keys() | tree.keys() if seed.get(p, b"") != tree.get(p, b"")}
        assert TRAJECTORY in changed and len(changed) == first["workspace"]["files"], (changed, first["workspace"])
        trajectory = json.loads(tree[TRAJECTORY] or b"")  # written by mini-swe-agent itself, in /workspace
        assert trajectory["info"]["model_stats"]["api_calls"] == first["requests"]
        ran = [m for m in trajectory["messages"] if m.get("role") == "tool"]  # the shell commands it ran
        if not ran:  # a random model rarely writes a valid tool call: then only the trajectory changed
            assert changed == {TRAJECTORY} and all(tree[p] == seed[p] for p in seed)
        print(f"{episode_id}: {first['requests']} requests, {len(ran)} commands, changed {sorted(changed)}")
