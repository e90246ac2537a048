"""What a sandbox shows of the host (raas/workspace/binds.py): binds made absolute and required to exist, a
virtual environment with the Python it was made from, the command's relative paths, and a bind under a
folder other uids cannot enter shown to the episode through its own mount namespace."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from lakeflow.errors import ConfigError
from lakeflow.raas.config.sandbox import SandboxConfig
from lakeflow.raas.sandbox import bwrap_status
from lakeflow.raas.workspace.binds import host_binds, sandbox_command, unreachable
from lakeflow.raas.workspace.checks import build_sandbox
from lakeflow.raas.workspace.mounts import can_mount


def test_binds_are_absolute_exist_and_a_venv_brings_its_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    python = tmp_path / "pythons" / "3.11"
    (python / "bin").mkdir(parents=True)
    venv = tmp_path / "harness" / "venv"
    venv.mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text(f"home = {python / 'bin'}\nversion = 3.11.7\n")
    monkeypatch.chdir(tmp_path)
    assert host_binds(["harness/venv", "harness"]) == [str(python), str(tmp_path / "harness")]  # one under another
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")  # the system's Python: the default root shows it
    assert host_binds(["harness/venv"]) == [str(venv)]
    with pytest.raises(ConfigError, match=r"agent.sandbox.binds: harness/missing does not exist .*install-harnesses"):
        host_binds(["harness/missing"])


def test_the_commands_relative_paths_are_made_absolute_and_must_be_under_a_bind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "agent.py").write_text("")
    (tmp_path / "secret.py").write_text("")
    monkeypatch.chdir(tmp_path)
    binds = [str(tmp_path / "agents")]
    command = ["python3", "agents/agent.py", "--out", "secret.py"]  # a bare name is a word, not a path
    assert sandbox_command(command, binds) == ["python3", str(tmp_path / "agents" / "agent.py"), "--out", "secret.py"]
    with pytest.raises(ConfigError, match=r"\./secret.py is not in the sandbox: add its folder .* to agent.sandbox"):
        sandbox_command(["python3", "./secret.py"], binds)


@pytest.fixture
def hidden() -> Iterator[Path]:
    """A folder with a program in it, under a folder only root may enter (as /root/.pyenv is)."""
    top = Path(tempfile.mkdtemp(prefix="lakeflow-hidden-"))
    top.chmod(0o700)
    tool = top / "tool"
    tool.mkdir(mode=0o755)
    (tool / "hello").write_text("#!/bin/sh\necho hello from a hidden bind\n")
    (tool / "hello").chmod(0o755)
    yield tool
    shutil.rmtree(top, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0 or not bwrap_status()[0], reason="the bwrap backend needs root and bubblewrap")
def test_a_bind_other_uids_cannot_reach_is_shown_through_the_overlays_namespace(hidden: Path) -> None:
    assert unreachable(str(hidden)).endswith("is not searchable by other users")
    work_dir = Path(tempfile.mkdtemp(prefix="lakeflow-ws-test-"))
    work_dir.chmod(0o755)
    config = SandboxConfig(backend="bwrap", network="none", binds=[str(hidden)], work_dir=str(work_dir))
    try:
        with pytest.raises(ConfigError, match=r"cannot be read by the sandbox's uid .*chmod o\+rx"):
            build_sandbox(config.model_copy(update={"copy_method": "copy"}), None, "policy")
        if not can_mount()[0]:
            pytest.skip(f"no mount rights here: {can_mount()[1]}")
        sandbox = build_sandbox(config, None, "policy")
        assert sandbox is not None and sandbox.staged == [str(hidden)]
        try:
            run = sandbox.run([str(hidden / "hello")], {}, 10)
            denied = sandbox.run(["sh", "-c", f"echo x > {hidden}/new"], {}, 10)
        finally:
            sandbox.close()
        assert run.exit_code == 0 and run.stdout == "hello from a hidden bind\n", run
        assert denied.exit_code != 0 and "Read-only file system" in denied.stderr, denied
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
