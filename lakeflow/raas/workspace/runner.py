"""One sandboxed episode from start to stored state: `EpisodeSandbox.run(command, env, timeout_s)`.

Make the episode's writable copy of its base (`copies.py`), start the command in its backend (bwrap here,
docker in `docker.py`) with a clean environment, relay the gateway into it (`relay.py`), read its output
under a cap and its time limit while watching its disk, kill every process of it, then store what it
changed in the lake (`state.py`, `lake_states.py`) and remove the copy. `run` never raises on what the
command does: it reports it (`SandboxRun`), and the episode ends with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import resource
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from lakeflow.errors import ConfigError, LakeflowError
from lakeflow.io import Store
from lakeflow.raas.config.sandbox import SandboxConfig
from lakeflow.raas.sandbox_processes import collect_output, kill_group, kill_uid, limit_of, sandbox_uid
from lakeflow.raas.workspace import bwrap, lake_states, netns
from lakeflow.raas.workspace.base import Base, Bases
from lakeflow.raas.workspace.binds import sandbox_command, unreachable
from lakeflow.raas.workspace.copies import EpisodeCopy, make_copy, sweep
from lakeflow.raas.workspace.netns import NetnsPool, Slot
from lakeflow.raas.workspace.relay import Relay, Target
from lakeflow.raas.workspace.routes import routes
from lakeflow.raas.workspace.state import pack

log = logging.getLogger(__name__)

OUTPUT_BYTES = 1 << 20  # of stdout and of stderr kept; more stops the command (limit 'output')
POLL_S = 0.25  # how often a quiet episode's disk is looked at (its exit ends the wait at once: EOF)


@dataclass(frozen=True)
class SandboxRun:
    """What a sandboxed command did. `error`: the sandbox could not run it (then nothing else is set)."""

    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    limit: str = ""  # what stopped it: wall, disk, output; or the limit it likely hit: memory, cpu, processes, …
    error: str = ""
    workspace: dict[str, Any] | None = None  # extra.workspace: key, sha256, bytes, files, truncated, base
    ready_s: float = 0.0  # from `run` to the command let go in its ready workspace
    then: SandboxRun | None = None  # what the `Then` command did, when one was given


@dataclass(frozen=True)
class Then:
    """A second command run in the episode's workspace after the first ended and its change was stored (a
    repository task's tests): no network, the same uid and limits, `restore`d paths and files `named` put back
    from the base first (the task's test files and pytest's configuration, whatever the first command did to
    them; such files the first command added are removed); its own change is not stored."""

    command: list[str]
    env: Mapping[str, str]
    seconds: float
    restore: tuple[str, ...] = ()
    named: frozenset[str] = frozenset()  # files of these names anywhere: the base's put back, the episode's removed


class Backend(Protocol):
    """Starts one episode's sandbox, its command held back until released (bwrap.py, docker.py)."""

    name: str
    pooled_netns: bool  # it joins a network namespace of the pool (else it makes its own)
    private_mounts: bool  # it starts in the mount namespace of its workspace's overlay (else the service's)

    def launch(
        self, copy: Path, space: Path, env: Mapping[str, str], names: list[str], argv: bwrap.Argv
    ) -> bwrap.Launched: ...


@dataclass
class _Episode:
    copy: EpisodeCopy
    uid: int | None
    slot: Slot | None  # the pooled network namespace it borrows (bwrap)
    started: float = field(default_factory=time.monotonic)
    pid: int | None = None  # bwrap's, once started


class EpisodeSandbox:
    """The sandbox of one agent pool: its bases, relay and running episodes (thread-safe `run`)."""

    def __init__(
        self, config: SandboxConfig, backend: Backend, store: Store | None, model_id: str, method: str
    ) -> None:
        """`method`: overlay or copy (`checks.copy_method`). `store`: where states go (None: not stored)."""
        self.config, self.backend, self.store, self.model_id, self.method = config, backend, store, model_id, method
        own_mounts = backend.private_mounts and method == "overlay"
        self.staged = [p for p in config.binds if unreachable(p)] if own_mounts else []  # mounted where uids reach
        root = Path(config.work_dir or os.path.join(tempfile.gettempdir(), "lakeflow-workspaces")).absolute()
        _searchable(root)
        _more_files()
        self.bases = Bases(root / "bases", store, model_id)
        self.episodes_dir = root / "episodes"
        sweep(self.episodes_dir)
        self.relay = Relay() if config.network != "none" else None
        self.slots = NetnsPool() if backend.pooled_netns else None
        self._running: dict[int, _Episode] = {}
        self._lock = threading.Lock()
        self._closed = False
        self.keep_changes = True  # store each episode's change (False: a checker's runs, `lakeflow tasks`)

    def command(self, command: list[str]) -> list[str]:
        """`command` as it runs here: its relative paths absolute and under a bind (`binds.sandbox_command`)."""
        return sandbox_command(command, self.config.binds)

    def base(self) -> Base:
        """The pool's base, built on first use (the first episode waits for it)."""
        return self.bases.get(self.config.workspace)

    def run(
        self,
        command: list[str],
        episode_env: dict[str, str],
        seconds: float,
        source: str | None = None,
        files: Mapping[str, bytes] | None = None,
        then: Then | None = None,
    ) -> SandboxRun:
        """Run `command` in a new sandbox with the episode's variables; stopped after `seconds`. `source`: the
        workspace source of this episode (default: the pool's `workspace`); `files`: written into its copy
        before the command starts (relative path -> bytes); `then`: run after it in the same copy."""
        t0 = time.monotonic()
        if self._closed:
            return SandboxRun(error="the rollout service is stopping")
        try:
            uid = sandbox_uid()
            slot = self.slots.acquire() if self.slots is not None else None
        except OSError as e:
            return SandboxRun(error=f"cannot make the episode's network namespace: {e}")
        try:
            own = self.backend.private_mounts
            base = self.bases.get(source) if source is not None else self.base()
            copy = make_copy(self.episodes_dir, base, self.method, self.config.disk_mb, uid, own, self.staged)
            if files:
                copy.write(files, uid)
        except (OSError, LakeflowError) as e:
            if slot is not None and self.slots is not None:
                self.slots.release(slot)
            return SandboxRun(error=f"cannot make the episode's workspace: {e}")
        episode = _Episode(copy, uid, slot)
        with self._lock:
            self._running[id(episode)] = episode
        try:
            played = self._play(episode, command, episode_env, seconds, t0)
            if then is None or played.error:
                return played
            return replace(played, then=self._then(episode, then))
        finally:
            with self._lock:
                self._running.pop(id(episode), None)
            copy.remove()  # its processes are gone: the sandbox's pid namespace ended with its command
            if slot is not None and self.slots is not None:
                self.slots.release(slot)

    def _play(
        self, e: _Episode, command: list[str], episode_env: dict[str, str], seconds: float, t0: float
    ) -> SandboxRun:
        try:
            plan = routes(self.config, episode_env)
            env = bwrap.base_env(self.config) | plan.env
            if e.slot is not None:
                self._listen(e.slot, plan.ports)
            slot = e.slot.fd if e.slot is not None else None
            argv = bwrap.Argv(command, seconds, e.uid, slot, e.copy.mntns_fd, e.copy.sources)
            launched = self.backend.launch(e.copy.path, e.copy.space, env, plan.names, argv)
        except (OSError, ValueError, subprocess.SubprocessError) as err:  # ConfigError is a ValueError
            return SandboxRun(error=str(err))
        e.pid = launched.proc.pid
        servers: list[Future[asyncio.Server]] = []
        try:
            if self.relay is not None and plan.ports and e.slot is None:
                servers = self.relay.open(launched.netns_pid, plan.ports)
            os.write(launched.release_fd, b"1")
        except OSError as err:
            kill_group(launched.proc.pid)
            launched.proc.wait()
            return SandboxRun(error=f"cannot relay the gateway into the sandbox: {err}")
        finally:
            os.close(launched.release_fd)
        ready = time.monotonic() - t0
        with launched.proc as proc:
            deadline = e.started + seconds
            out, err_bytes, stopped = collect_output(proc, OUTPUT_BYTES, deadline, self._watch(e.copy), POLL_S)
            if launched.stop is not None:
                launched.stop()
            kill_group(proc.pid)
            code = proc.wait()
        if self.relay is not None:
            self.relay.close(servers)
        stderr = err_bytes.decode(errors="replace")
        exit_code = None if stopped else bwrap.exit_code(code)
        limit = stopped or limit_of(exit_code, stderr) or ("disk" if e.copy.full() else "")
        stored = self._store(e) if self.keep_changes else None
        return SandboxRun(exit_code, out.decode(errors="replace"), stderr, limit, "", stored, ready)

    def _then(self, e: _Episode, then: Then) -> SandboxRun:
        """Run `then` in the copy `e` leaves: in a network namespace of its own with nothing in it."""
        try:
            e.copy.reset(then.restore, then.named, e.uid)
            env = bwrap.base_env(self.config) | dict(then.env)
            argv = bwrap.Argv(then.command, then.seconds, e.uid, None, e.copy.mntns_fd, e.copy.sources)
            launched = self.backend.launch(e.copy.path, e.copy.space, env, [], argv)
        except (OSError, ValueError, subprocess.SubprocessError) as err:
            return SandboxRun(error=f"cannot run the command after the episode: {err}")
        try:
            os.write(launched.release_fd, b"1")
        finally:
            os.close(launched.release_fd)
        with launched.proc as proc:
            deadline = time.monotonic() + then.seconds
            out, err_bytes, stopped = collect_output(proc, OUTPUT_BYTES, deadline, self._watch(e.copy), POLL_S)
            if launched.stop is not None:
                launched.stop()
            kill_group(proc.pid)
            code = proc.wait()
        stderr = err_bytes.decode(errors="replace")
        exit_code = None if stopped else bwrap.exit_code(code)
        limit = stopped or limit_of(exit_code, stderr)
        return SandboxRun(exit_code, out.decode(errors="replace"), stderr, limit)

    def _listen(self, slot: Slot, ports: Mapping[int, Target]) -> None:
        """The slot's listeners are exactly `ports`, each relayed to its target (kept between episodes)."""
        for port in [p for p, (_, target) in slot.listeners.items() if ports.get(p) != target]:
            if self.relay is not None:
                self.relay.close([slot.listeners.pop(port)[0]])
        for port, target in ports.items():
            if port not in slot.listeners and self.relay is not None:
                sock = netns.inside(slot.fd, functools.partial(netns.listener, port))
                slot.listeners[port] = (self.relay.serve(sock, target), target)

    def _watch(self, copy: EpisodeCopy) -> Callable[[], str]:
        def check() -> str:
            return "disk" if copy.full() else ""

        return check

    def _store(self, e: _Episode) -> dict[str, Any]:
        """Pack what the episode changed, store it (create-only) when within the cap: its extra.workspace."""
        try:
            change = e.copy.change()
            packed = pack(change, e.copy.base.key, int(self.config.max_change_mb * (1 << 20)))
            key = None
            if self.store is not None and not packed.truncated:
                key = lake_states.save(self.store, self.model_id, packed)
        except (OSError, LakeflowError) as err:  # the episode ran; its state could not be kept
            log.warning("workspace of an episode not stored: %s", err)
            return {"key": None, "error": f"{type(err).__name__}: {err}"[:500]}
        record: dict[str, Any] = {"key": key, "sha256": packed.sha256, "bytes": packed.size, "files": packed.files}
        record |= {"truncated": packed.truncated, "base": e.copy.base.key, "method": e.copy.method}
        if change.skipped:
            record["skipped"] = len(change.skipped)
        return record

    def close(self) -> None:
        """Kill every running episode's processes (their `run` returns) and stop the relay."""
        self._closed = True
        with self._lock:
            running = list(self._running.values())
        for e in running:
            if e.pid is not None:
                kill_group(e.pid)
            if e.uid is not None:
                kill_uid(e.uid)
        slots = self.slots.close() if self.slots is not None else []
        if self.relay is not None:
            self.relay.close([server for slot in slots for server, _ in slot.listeners.values()])
            with contextlib.suppress(RuntimeError):  # the loop has stopped already
                self.relay.stop()


def _searchable(root: Path) -> None:
    """The sandbox's uid passes through `root` and its parents to its own workspace: each must let it."""
    for p in [root, *root.parents]:
        if p.exists() and not os.stat(p).st_mode & stat.S_IXOTH:
            raise ConfigError(
                f"agent.sandbox.work_dir {root}: {p} is not searchable by other users, and each episode's uid passes "
                f"through it to its workspace: chmod o+x {p}, or choose another work_dir"
            )


def _more_files(wanted: int = 1 << 16) -> None:
    """Raise this process's soft limit on open files towards the hard one: each running episode holds a
    few (its pipes, its namespaces, its relayed connections)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
