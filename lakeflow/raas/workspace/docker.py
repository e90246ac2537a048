"""The docker backend: one container per episode, where a Docker (or Podman) daemon answers on this machine.

`docker run` with the pool's image, no network (`--network none`), CPU, memory, process and file limits,
every capability dropped, a read-only root, private tmpfs /tmp and home, the episode's workspace (made
as for bwrap, `copies.py`) at /workspace, the clean environment in an env file only root can read, and
the episode's uid. The gateway is relayed into the container's network namespace as for bwrap
(`relay.py`, found through the container's pid); the command waits, in `/bin/sh`, for the relay to
listen (a file in a read-only mount), so the image needs a shell. At the end the container is killed.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from lakeflow.raas.config.sandbox import SandboxConfig
from lakeflow.raas.sandbox_processes import SAFE_PATH
from lakeflow.raas.workspace.bwrap import HOME, INNER, Argv, Launched

GATE = "/run/lakeflow"  # the read-only mount where `go` appears once the relay listens
_WAIT = f'while [ ! -e {GATE}/go ]; do sleep 0.01; done; exec "$@"'
_PID_WAIT_S = 60.0
NOBODY = 65534  # the uid a container runs as when this service is not root (no fresh uid to give)


@functools.cache
def client() -> str | None:
    """The container client on PATH: docker, else podman."""
    return shutil.which("docker") or shutil.which("podman")


@functools.cache
def daemon_status() -> tuple[bool, str]:
    """Whether a daemon answers the client (and why not)."""
    binary = client()
    if binary is None:
        return False, "neither docker nor podman is installed"
    try:
        done = subprocess.run(
            [binary, "version", "--format", "{{.Server.Version}}"], capture_output=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError) as e:
        return False, f"{binary} version: {e}"
    if done.returncode != 0:
        return False, done.stderr.decode(errors="replace").strip()[-300:] or f"{binary} version failed"
    return True, ""


def run_line(config: SandboxConfig, binary: str, name: str, paths: Mapping[str, Path], argv: Argv) -> list[str]:
    """`docker run` for one episode. `paths`: workspace (the copy), gate (its `go` directory), env_file."""
    assert config.image is not None  # the config requires it for this backend
    uid = argv.uid if argv.uid is not None else NOBODY
    tmp = f"rw,nosuid,nodev,size={config.tmp_mb}m"
    line = [binary, "run", "--rm", "--init", "--name", name, "--hostname", "sandbox", "--network", "none"]
    line += ["--cpus", f"{config.cpu:g}", "--memory", f"{config.memory_mb}m", "--memory-swap", f"{config.memory_mb}m"]
    line += ["--pids-limit", str(config.pids), "--ulimit", "nofile=4096:4096", "--ulimit", "core=0"]
    line += ["--ulimit", f"fsize={config.disk_mb << 20}", "--cap-drop", "ALL"]
    line += ["--security-opt", "no-new-privileges", "--read-only", "--user", f"{uid}:{uid}"]
    line += ["--tmpfs", f"/tmp:{tmp},mode=1777", "--tmpfs", f"{HOME}:{tmp},uid={uid},gid={uid},mode=0700"]
    line += ["--volume", f"{paths['workspace']}:{INNER}:rw", "--volume", f"{paths['gate']}:{GATE}:ro"]
    line += ["--workdir", INNER, "--env-file", str(paths["env_file"])]
    for path in config.binds:
        line += ["--volume", f"{path}:{path}:ro"]
    line += ["--entrypoint", "/bin/sh", config.image, "-c", _WAIT, "lakeflow-episode", *argv.command]
    return line


class DockerBackend:
    """Starts each episode's container (the backend `runner.EpisodeSandbox` drives)."""

    name = "docker"
    pooled_netns = False  # docker makes the container's (--network none); the relay listens in it
    private_mounts = False  # the daemon mounts the workspace: it must be in the service's mount namespace

    def __init__(self, config: SandboxConfig) -> None:
        binary = client()
        if binary is None:
            raise OSError("neither docker nor podman is installed")
        self.config, self.binary = config, binary

    def launch(self, copy: Path, space: Path, env: Mapping[str, str], names: list[str], argv: Argv) -> Launched:
        """Start the container (its command waiting), find its pid, and return the fd that lets it go."""
        gate = space / "gate"
        gate.mkdir(mode=0o755)
        env_file = space / "env"
        own = {k: v for k, v in env.items() if not (k == "PATH" and v == SAFE_PATH)}  # the image's PATH
        env_file.write_text("".join(f"{k}={v}\n" for k, v in own.items() if "\n" not in v))
        env_file.chmod(0o600)
        name = f"lakeflow-episode-{space.name}"
        line = run_line(self.config, self.binary, name, {"workspace": copy, "gate": gate, "env_file": env_file}, argv)
        for host in names:
            line[line.index("--entrypoint") : line.index("--entrypoint")] = ["--add-host", f"{host}:127.0.0.1"]
        proc = subprocess.Popen(
            line, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
        )
        pid = self._pid(name, proc)
        release_r, release_w = os.pipe()
        threading.Thread(target=_open_gate, args=(release_r, gate), daemon=True).start()
        return Launched(proc, pid, release_w, functools.partial(self._kill, name))

    def _pid(self, name: str, proc: subprocess.Popen[bytes]) -> int:
        deadline = time.monotonic() + _PID_WAIT_S
        while time.monotonic() < deadline and proc.poll() is None:
            done = subprocess.run(
                [self.binary, "inspect", "--format", "{{.State.Pid}}", name], capture_output=True, check=False
            )
            pid = done.stdout.decode().strip()
            if done.returncode == 0 and pid.isdigit() and int(pid) > 0:
                return int(pid)
            time.sleep(0.05)
        self._kill(name)
        _, err = proc.communicate(timeout=30)
        raise OSError(f"the container did not start: {err.decode(errors='replace').strip()[-500:]}")

    def _kill(self, name: str) -> None:
        subprocess.run([self.binary, "kill", name], capture_output=True, check=False, timeout=30)


def _open_gate(fd: int, gate: Path) -> None:
    """Wait for the runner's byte on `fd`, then let the container's command go."""
    try:
        if os.read(fd, 1):
            (gate / "go").touch()
    finally:
        os.close(fd)
