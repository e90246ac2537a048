"""Which sandbox a pool gets, checked before the first episode: `build_sandbox` returns the pool's
`EpisodeSandbox` (None for backend `none`) or refuses with what to change."""

from __future__ import annotations

import functools
import os

from lakeflow.errors import ConfigError
from lakeflow.io import Store
from lakeflow.raas.config.sandbox import SandboxConfig
from lakeflow.raas.sandbox import bwrap_status
from lakeflow.raas.workspace.binds import host_binds, unreachable
from lakeflow.raas.workspace.bwrap import BwrapBackend
from lakeflow.raas.workspace.docker import DockerBackend, daemon_status
from lakeflow.raas.workspace.mounts import can_mount
from lakeflow.raas.workspace.netns import inside
from lakeflow.raas.workspace.runner import Backend, EpisodeSandbox


def copy_method(config: SandboxConfig) -> str:
    """overlay where this process may mount (auto or overlay), else copy; ConfigError when overlay was asked
    for and cannot be had."""
    if config.copy_method == "copy":
        return "copy"
    ok, why = can_mount()
    if not ok and config.copy_method == "overlay":
        raise ConfigError(
            f"agent.sandbox.copy_method 'overlay' needs mount rights (CAP_SYS_ADMIN), and mounting failed: {why}; "
            "use copy_method: copy (or auto)"
        )
    return "overlay" if ok else "copy"


@functools.cache
def can_enter_netns() -> tuple[bool, str]:
    """Whether this process may make and enter network namespaces (unshare and setns need CAP_SYS_ADMIN): the
    pool's and the relay's need."""
    try:
        inside(None, lambda: None)
    except OSError as e:
        return False, str(e)
    return True, ""


def _bwrap(config: SandboxConfig) -> Backend:
    ok, why = bwrap_status()
    if not ok:
        raise ConfigError(
            f"agent.sandbox.backend bwrap: bubblewrap cannot run here ({why}); install it (apt-get install -y "
            "bubblewrap) where user namespaces are allowed, or use backend docker"
        )
    if os.geteuid() != 0:
        raise ConfigError(
            "agent.sandbox.backend bwrap runs each episode as a fresh uid (its own process limit, killed by uid): "
            "run the rollout service as root (in its container), or use backend docker"
        )
    if not (entered := can_enter_netns())[0]:
        raise ConfigError(
            "agent.sandbox.backend bwrap: each sandbox's network namespace comes from a pool the service makes, "
            f"and the gateway is relayed into it, which needs CAP_SYS_ADMIN ({entered[1]}); grant it, or use "
            "backend docker"
        )
    return BwrapBackend(config)


def _docker(config: SandboxConfig) -> Backend:
    ok, why = daemon_status()
    if not ok:
        raise ConfigError(f"agent.sandbox.backend docker: no container daemon answers ({why}); start one, or use bwrap")
    return DockerBackend(config)


def build_sandbox(config: SandboxConfig, store: Store | None, model_id: str) -> EpisodeSandbox | None:
    """The pool's sandbox (None: backend none, plain subprocesses); ConfigError when it cannot run here."""
    if config.backend == "none":
        return None
    if config.backend == "kubernetes":
        raise ConfigError(
            "agent.sandbox.backend kubernetes: the rollout service does not create episode pods yet; "
            "`lakeflow workspace pod` prints the pod and NetworkPolicy of an episode (docs/sandbox.md). "
            "Use bwrap or docker to run episodes"
        )
    config = config.model_copy(update={"binds": host_binds(config.binds)})
    backend = _bwrap(config) if config.backend == "bwrap" else _docker(config)
    method = copy_method(config)
    if backend.private_mounts and method != "overlay":
        _reachable(config.binds)
    return EpisodeSandbox(config, backend, store, model_id, method)


def _reachable(binds: list[str]) -> None:
    """Without an overlay's mount namespace the sandbox's uid reads each bind at its own path: it must be able to."""
    for path in binds:
        if why := unreachable(path):
            raise ConfigError(
                f"agent.sandbox.binds: {path} cannot be read by the sandbox's uid ({why}), and only an overlay "
                "workspace (copy_method auto or overlay, with mount rights) mounts such a path for it: let other "
                "users read it (chmod o+rx), or install it elsewhere"
            )
