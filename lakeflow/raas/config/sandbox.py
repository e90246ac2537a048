"""The `sandbox` section of an agent pool (`agent.sandbox`): where a `command` episode runs, with which
workspace, under which limits, reaching what. The default backend `none` runs the command as a plain
subprocess of the service (the behaviour before sandboxes); docs/sandbox.md describes each backend."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from lakeflow.configfile import StrictConfig

Backend = Literal["none", "bwrap", "docker", "kubernetes"]
_HOST_PORT = re.compile(r"^(?P<host>[A-Za-z0-9][A-Za-z0-9.-]{0,252}):(?P<port>[0-9]{1,5})$")
# variables the sandbox sets itself, and prefixes that name credentials: never taken from `env`
_SET_BY_LAKEFLOW = ("OPENAI_", "ANTHROPIC_", "LAKEFLOW_", "AWS_", "GOOGLE_", "AZURE_")


class AllowList(StrictConfig):
    """Addresses an episode may reach besides the gateway, each relayed from inside the sandbox."""

    allow: list[str] = Field(
        default_factory=list,
        description="'host:port' entries: inside the sandbox host resolves to 127.0.0.1 and port is relayed to "
        "the real host:port by the service (TCP, so TLS goes through end to end).",
    )

    @field_validator("allow")
    @classmethod
    def _host_ports(cls, value: list[str]) -> list[str]:
        for entry in value:
            m = _HOST_PORT.match(entry)
            if m is None or not 0 < int(m["port"]) < 65536:
                raise ValueError(f"network.allow: {entry!r} is not 'host:port' (a name or an IPv4 address, a port)")
        return value


class SandboxConfig(StrictConfig):
    """Where each `command` episode runs: its backend, workspace, limits and network (docs/sandbox.md)."""

    backend: Backend = Field(
        "none",
        description="'none': a plain subprocess (no isolation); 'bwrap': bubblewrap namespaces on this machine; "
        "'docker': a container per episode (where a Docker or Podman daemon answers); 'kubernetes': a pod per "
        "episode, rendered and validated (`lakeflow workspace pod`), not run by the rollout service.",
    )
    image: str | None = Field(None, description="The container image of the docker and kubernetes backends.")
    root: str | None = Field(
        None,
        description="bwrap: a directory mounted read-only as the sandbox's root file system (an unpacked image); "
        "default: this machine's /usr, /etc, /bin and /lib, read-only.",
    )
    binds: list[str] = Field(
        default_factory=list,
        description="Host paths mounted read-only at the same place (the harness's own files: its wrapper, an "
        "installed CLI, a virtual environment, which brings the Python it was made from); relative ones are from the "
        "service's working directory. Each must exist when the service starts. Never the lake or a credentials file.",
    )
    workspace: str | None = Field(
        None,
        description="What each episode starts from, as its own writable copy at /workspace: a directory, an archive "
        "(.tar, .tar.gz, .tgz, .tar.zst) or lake://<key> (a state an earlier episode stored: a fork). None: empty.",
    )
    cpu: float = Field(
        1.0,
        gt=0,
        le=256,
        description="CPU cores: docker --cpus, the pod's cpu limit; under bwrap the CPU time one process may use "
        "is cpu x seconds (RLIMIT_CPU).",
    )
    memory_mb: int = Field(
        4096, ge=64, description="Memory: docker --memory, the pod's limit; under bwrap each process's address space."
    )
    disk_mb: int = Field(
        1024, ge=1, description="Most bytes the episode may add to its workspace; past it the episode is stopped."
    )
    tmp_mb: int = Field(256, ge=1, description="Size of the sandbox's private /tmp and of its home directory (each).")
    pids: int = Field(256, ge=8, le=65536, description="Most processes (and threads) the episode may run at once.")
    seconds: float | None = Field(
        None,
        gt=0,
        description="Wall time of the command; then every process is killed (timeout). Default 0.9 x "
        "agent.max_seconds, so the workspace is stored before the episode's own time is up.",
    )
    network: Literal["gateway-only", "none"] | AllowList = Field(
        "gateway-only",
        description="'gateway-only': only the episode's gateway URL is reachable; 'none': nothing (no gateway "
        "either); {allow: [host:port, ...]}: the gateway and these.",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Extra variables of the command's clean environment (what the harness needs); credentials and "
        "the variables lakeflow sets (OPENAI_*, ANTHROPIC_*, LAKEFLOW_*, AWS_*) are refused.",
    )
    copy_method: Literal["auto", "overlay", "copy"] = Field(
        "auto",
        description="How each episode's writable copy is made: 'overlay' (copy-on-write over the cached base, its "
        "changes on a tmpfs of disk_mb; needs mount rights), 'copy' (a plain copy), 'auto': overlay where it works.",
    )
    max_change_mb: float = Field(
        64.0,
        gt=0,
        description="The largest change (compressed) stored in the lake per episode; a larger one is recorded "
        "(files, bytes, truncated: true) and not stored.",
    )
    tests_python: str = Field(
        "python3",
        description="The interpreter (with pytest) that runs a repository task's tests in the episode's workspace "
        "after the agent ends (task_type repo_tests, docs/tasks.md); a virtual environment's must be in binds.",
    )
    tests_seconds: float = Field(
        60.0,
        gt=0,
        description="Wall time of a repository task's tests after the agent ends; it comes out of the episode's "
        "time, so the agent's command is stopped this much earlier.",
    )
    work_dir: str | None = Field(
        None,
        description="Where cached bases and the episodes' workspaces live (default: <temp dir>/lakeflow-workspaces).",
    )

    @field_validator("binds")
    @classmethod
    def _plain_paths(cls, value: list[str]) -> list[str]:
        for path in value:
            if not path.strip("/") or ".." in path.split("/"):
                raise ValueError(f"sandbox.binds: {path!r} must be a path below / without '..'")
        return value

    @field_validator("env")
    @classmethod
    def _no_credentials(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if name.upper().startswith(_SET_BY_LAKEFLOW) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ValueError(
                    f"sandbox.env: {name!r} is refused: a variable name, not one lakeflow sets or one that holds "
                    f"credentials ({', '.join(p + '*' for p in _SET_BY_LAKEFLOW)})"
                )
        return value

    @model_validator(mode="after")
    def _backend_needs(self) -> SandboxConfig:
        if self.backend in ("docker", "kubernetes") and not self.image:
            raise ValueError(f"sandbox: backend {self.backend!r} needs an `image`")
        if self.root is not None and self.backend != "bwrap":
            raise ValueError("sandbox.root is the bwrap backend's root file system; containers use `image`")
        return self

    def command_seconds(self, max_seconds: float) -> float:
        """The command's wall time: `seconds`, or 0.9 x the episode's `max_seconds`."""
        return self.seconds if self.seconds is not None else 0.9 * max_seconds

    @property
    def allowed(self) -> list[str]:
        """The host:port entries reachable besides the gateway."""
        return self.network.allow if isinstance(self.network, AllowList) else []
