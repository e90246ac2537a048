"""The bwrap backend: one bubblewrap sandbox per episode on this machine.

New user, pid, network, ipc and uts namespaces; a fresh unprivileged uid per episode (so the process
limit is the episode's own and every leftover process is killed by uid at the end); a read-only root
(this machine's /usr, /etc, /bin, /lib, or `sandbox.root`), `sandbox.binds` read-only (`binds.py`), the episode's
workspace at /workspace, private tmpfs /tmp and /home/agent; rlimits set by prlimit before bwrap starts
(`sandbox_processes`, shared with the code sandbox). bwrap holds the command back (`--block-fd`) until
the relay listens inside its network namespace, so the gateway answers from the command's first line.
"""

from __future__ import annotations

import json
import math
import os
import resource
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lakeflow.raas.config.sandbox import SandboxConfig
from lakeflow.raas.sandbox_processes import SAFE_PATH, prlimit_prefix, system_binds

INNER = "/workspace"
HOME = "/home/agent"
OPEN_FILES = 4096
_MIB = 1 << 20
_INFO_WAIT_S = 30.0  # bwrap sets its namespaces up in milliseconds; a stuck start is given up after this


@dataclass(frozen=True)
class Launched:
    """A started sandbox, its command held back: the process whose output is the command's (and whose
    session is killed at the end), a pid inside the sandbox's network namespace, and the fd a byte on
    which lets the command run (the backend closes it)."""

    proc: subprocess.Popen[bytes]
    netns_pid: int
    release_fd: int
    stop: Callable[[], None] | None = None  # what else ends it (a container outlives its client)


@dataclass(frozen=True)
class Argv:
    """What to run: the command, its wall time, the uid it runs as (None: this process's), and the network
    namespace it joins (an fd of a pooled one, `netns.py`; None: a new one of its own)."""

    command: list[str]
    seconds: float
    uid: int | None
    netns_fd: int | None = None
    mntns_fd: int | None = None  # the mount namespace holding its workspace's overlay (None: the service's)
    sources: Mapping[str, str] = field(default_factory=dict)  # a bind -> where it is read (staged there); else itself


def base_env(config: SandboxConfig) -> dict[str, str]:
    """The clean environment every sandboxed command starts with (the episode's variables go on top)."""
    env = {"PATH": SAFE_PATH, "HOME": HOME, "LANG": "C.UTF-8", "TMPDIR": "/tmp", "USER": "agent"}
    # git refuses a repository owned by another uid (the base's files are the service's): trust /workspace
    env |= {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*"}
    return env | dict(config.env)


def rlimits(config: SandboxConfig, seconds: float) -> dict[int, tuple[int, int]]:
    """The episode's rlimits: CPU time cpu x seconds per process, address space, file size, processes."""
    cpu_s = max(1, math.ceil(config.cpu * seconds))
    return {
        resource.RLIMIT_CPU: (cpu_s, cpu_s + 1),
        resource.RLIMIT_AS: (config.memory_mb * _MIB,) * 2,
        resource.RLIMIT_FSIZE: (config.disk_mb * _MIB,) * 2,
        resource.RLIMIT_NPROC: (config.pids, config.pids),
        resource.RLIMIT_NOFILE: (OPEN_FILES, OPEN_FILES),
        resource.RLIMIT_CORE: (0, 0),
    }


def command_line(
    config: SandboxConfig,
    workspace: Path,
    hosts: Path | None,
    env: Mapping[str, str],
    command: list[str],
    fds: tuple[int, int],
    own_netns: bool = True,
    sources: Mapping[str, str] | None = None,
) -> list[str]:
    """bwrap's arguments for one episode; `hosts`: the /etc/hosts to mount (None: the root's own); `fds`:
    (info fd, block fd); `own_netns`: a new network namespace (False: the one bwrap is started in);
    `sources`: where a bind is read from, when not from its own path."""
    binary = shutil.which("bwrap", path=SAFE_PATH) or "bwrap"
    cmd = [binary, "--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]
    cmd += ["--unshare-net"] if own_netns else []
    cmd += ["--disable-userns", "--die-with-parent", "--new-session"]
    cmd += ["--hostname", "sandbox", "--clearenv"] + [a for k, v in env.items() for a in ("--setenv", k, v)]
    cmd += ["--ro-bind", config.root, "/"] if config.root else system_binds()
    if hosts is not None:
        cmd += ["--ro-bind", str(hosts), "/etc/hosts"]
    cmd += ["--proc", "/proc", "--dev", "/dev"]
    tmp = str(config.tmp_mb * _MIB)
    cmd += ["--size", tmp, "--tmpfs", "/tmp", "--size", tmp, "--tmpfs", HOME]
    for path in config.binds:  # after the tmpfs: a bind under /tmp stays seen
        cmd += ["--ro-bind", (sources or {}).get(path, path), path]
    cmd += ["--bind", str(workspace), INNER, "--chdir", INNER, "--remount-ro", "/"]
    cmd += ["--info-fd", str(fds[0]), "--block-fd", str(fds[1]), "--", *command]
    return cmd


def hosts_file(path: Path, names: list[str]) -> Path:
    """The sandbox's /etc/hosts: localhost, and each relayed name on 127.0.0.1."""
    lines = ["127.0.0.1 localhost", "::1 localhost"] + [f"127.0.0.1 {n}" for n in sorted(set(names))]
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o644)
    return path


def _prefix(config: SandboxConfig, argv: Argv) -> tuple[list[str], dict[str, Any]]:
    """What runs before bwrap: nsenter (into the pooled namespace), setpriv (the episode's uid: it leaves Popen
    its vfork, where Popen's own `user=` forks and copies a large service's page tables), prlimit."""
    util = {name: shutil.which(name, path=SAFE_PATH) for name in ("prlimit", "setpriv", "nsenter")}
    limits = prlimit_prefix(rlimits(config, argv.seconds))
    if limits is None or util["nsenter"] is None:
        raise OSError("util-linux's prlimit and nsenter must be on the PATH: the sandbox cannot be set up")
    prefix: list[str] = []
    enter = [f"--net=/proc/self/fd/{argv.netns_fd}"] if argv.netns_fd is not None else []
    enter += [f"--mount=/proc/self/fd/{argv.mntns_fd}"] if argv.mntns_fd is not None else []
    if enter:
        prefix += [str(util["nsenter"]), *enter, "--"]
    ids: dict[str, Any] = {}
    if argv.uid is not None and util["setpriv"] is not None:
        prefix += [util["setpriv"], f"--reuid={argv.uid}", f"--regid={argv.uid}", "--clear-groups"]
    elif argv.uid is not None:
        ids = {"user": argv.uid, "group": argv.uid, "extra_groups": []}
    return [*prefix, *limits], ids


def start(line: list[str], config: SandboxConfig, argv: Argv, fds: dict[str, int]) -> Launched:
    """Start bwrap (its command held back) and wait for its command's pid; OSError when it cannot start.
    `fds`: info_r, info_w, block_r, block_w (the two pipes in `line`); the child's ends are closed here."""
    prefix, ids = _prefix(config, argv)
    passed = (fds["info_w"], fds["block_r"], *(fd for fd in (argv.netns_fd, argv.mntns_fd) if fd is not None))
    try:
        proc = subprocess.Popen(
            [*prefix, *line],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={},
            pass_fds=passed,
            start_new_session=True,
            **ids,
        )
    finally:
        os.close(fds["info_w"])
        os.close(fds["block_r"])
    info = _read_info(fds["info_r"])
    if "child-pid" not in info:
        os.close(fds["block_w"])
        _, err = proc.communicate(timeout=10)
        raise OSError(f"bwrap could not start the sandbox: {err.decode(errors='replace').strip()[-500:]}")
    return Launched(proc, int(str(info["child-pid"])), fds["block_w"])


def _read_info(fd: int) -> dict[str, object]:
    data = b""
    deadline = time.monotonic() + _INFO_WAIT_S
    poller = select.poll()  # not select(): a busy service has fds past 1024
    poller.register(fd, select.POLLIN)
    try:
        while time.monotonic() < deadline:
            ready = poller.poll(max(0.0, deadline - time.monotonic()) * 1000)
            chunk = os.read(fd, 4096) if ready else b""
            if not chunk:
                break
            data += chunk
            try:
                value = json.loads(data)
            except ValueError:
                continue
            return value if isinstance(value, dict) else {}
    finally:
        os.close(fd)
    return {}


def pipes() -> dict[str, int]:
    """The info and block pipes of one start."""
    info_r, info_w = os.pipe()
    block_r, block_w = os.pipe()
    return {"info_r": info_r, "info_w": info_w, "block_r": block_r, "block_w": block_w}


def exit_code(code: int) -> int:
    """bwrap reports a command killed by signal n as 128 + n: make it -n, as subprocess does."""
    return 128 - code if 128 < code < 128 + signal.NSIG else code


class BwrapBackend:
    """Starts each episode's bwrap sandbox (the backend `runner.EpisodeSandbox` drives)."""

    name = "bwrap"
    pooled_netns = True  # it joins a network namespace of the pool (netns.py)
    private_mounts = True  # it starts in its overlay's own mount namespace (copies.py)

    def __init__(self, config: SandboxConfig) -> None:
        self.config = config

    def launch(self, copy: Path, space: Path, env: Mapping[str, str], names: list[str], argv: Argv) -> Launched:
        """Start `argv.command` on the workspace `copy`; `space`: the episode's directory (its /etc/hosts)."""
        pin = self.config.root is None or names  # a root of the user's keeps its /etc/hosts unless names are relayed
        hosts = hosts_file(space / "hosts", names) if pin else None
        fds = pipes()
        own = argv.netns_fd is None
        pipe_fds = (fds["info_w"], fds["block_r"])
        line = command_line(self.config, copy, hosts, env, argv.command, pipe_fds, own, argv.sources)
        return start(line, self.config, argv, fds)
