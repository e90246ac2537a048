"""The run as a cluster sees it: the launch options, one workload per process to place, and the plan
that holds them with their config files (`render.plan` builds it, a target renders it)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from lakeflow.run.cluster import Resources
from lakeflow.run.config import RunConfig, RunModel
from lakeflow.run.processes import ProcessSpec


@dataclass(frozen=True)
class LaunchOptions:
    """Where and how the run's processes are placed; the run config says what they do (its `launch:`
    section: resources, image, credentials), these options override it."""

    lake: str
    endpoint_url: str | None = None
    image: str | None = None  # an image built from the Dockerfile; None: launch.image, else lakeflow:cuda|cpu
    namespace: str = "default"
    role_arns: dict[str, str] = field(default_factory=dict)  # role -> IAM role ARN (eks.amazonaws.com/role-arn)
    raas_gpus: int | None = None  # per rollout service; None: from the config (see pool_gpus)
    trainer_gpus: int | None = None  # per trainer node, torchrun --nproc_per_node; None: from the config
    trainer_nodes: int | None = None  # machines per trainer; None: launch.trainer.nodes
    grace_s: int | None = None  # rollout drain time after SIGTERM; None: the pool's claim lifetime + 30 s
    autostop_min: int = 10  # SkyPilot: stop an idle cluster after this many minutes
    workdir: str = "."  # SkyPilot and Slurm: the lakeflow checkout (setup installs it from the lock)
    offline: bool = False  # render without reaching the lake or dataset stores (their checks are skipped)
    put_data: bool = False  # copy local datasets too big to ship with the configs into the lake (data/)


@dataclass(frozen=True)
class Workload:
    """One process of the run on a cluster: its spec, replicas (rollout pools), resources (per node; a
    trainer spans `nodes`), and which lock its nodes install."""

    spec: ProcessSpec
    replicas: int
    resources: Resources
    model: RunModel | None

    @property
    def gpus(self) -> int:
        """GPUs per node (per process of a one-node role)."""
        return self.resources.gpus_per_node or 0

    @property
    def nodes(self) -> int:
        return self.resources.nodes or 1


@dataclass
class Plan:
    """The run as a cluster sees it; `config_dir` is where configs and shipped data are found on a node."""

    config: RunConfig
    options: LaunchOptions
    config_dir: str
    workloads: list[Workload]
    files: dict[str, str]  # file name in config_dir -> text: each process's config and shipped datasets
    notes: list[str]
    served: list[Workload] = field(default_factory=list)  # the `serve:` models (launch.served places them)

    def command(self, w: Workload, rendezvous: tuple[str, ...] = ()) -> list[str]:
        """`lakeflow VERB …` of a workload; a trainer runs under torchrun, across nodes with the target's
        `rendezvous` flags (--nnodes, --node_rank, --master_addr, --master_port)."""
        config = ["--config", f"{self.config_dir}/{w.spec.config_name}"]
        if w.spec.role == "serve":  # a frozen model: no lake
            return ["lakeflow", "serve", *w.spec.flags, *config]
        lake = ["--lake", self.options.lake] + (
            ["--endpoint-url", self.options.endpoint_url] if self.options.endpoint_url else []
        )
        if w.spec.role == "trainer":
            where = list(rendezvous) if w.nodes > 1 else ["--standalone"]
            head = ["torchrun", *where, f"--nproc_per_node={max(1, w.gpus)}", "-m", "lakeflow"]
        else:
            head = ["lakeflow"]
        return [*head, w.spec.verb, *lake, *w.spec.flags, *config]

    def shell(self, w: Workload, rendezvous: tuple[str, ...] = ()) -> str:
        """The command as a shell line; the rendezvous flags stay unquoted (they expand the target's variables)."""
        raw = set(rendezvous)
        return " ".join(a if a in raw else shlex.quote(a) for a in self.command(w, rendezvous))

    def reads_hub(self, w: Workload) -> bool:
        """Whether `w` may download a model from the hub: a trainer (rank 0 publishes version 0 from it when
        the lake has none) or a rollout service with a frozen `model:` hub id."""
        ref = w.model.trainer.model if w.spec.role == "trainer" and w.model else w.spec.config.get("model")
        return bool(ref) and not str(ref).startswith(("tiny:", "/", "."))

    def software(self, w: Workload) -> str:
        """'cuda' or 'cpu': the lock `w`'s nodes install (launch.software; auto: cuda where it has GPUs)."""
        chosen = self.config.launch.software
        return chosen if chosen != "auto" else ("cuda" if w.gpus else "cpu")

    @property
    def image(self) -> str:
        """The container image of every process (one image runs every role)."""
        if self.options.image:
            return self.options.image
        if self.config.launch.image:
            return self.config.launch.image
        return "lakeflow:cuda" if any(self.software(w) == "cuda" for w in self.workloads) else "lakeflow:cpu"

    def credentials(self) -> tuple[str, dict[str, str]]:
        """(kind, role -> identity): --role-arn options are IRSA roles on top of the config's."""
        creds = self.config.launch.credentials
        if self.options.role_arns:
            return "irsa", {**(creds.roles if creds.type == "irsa" else {}), **self.options.role_arns}
        return creds.type, dict(creds.roles)


def dns_name(*parts: str) -> str:
    """A DNS-1123 label from run, role and model names (lowercase, '-', at most 63 characters)."""
    name = re.sub(r"[^a-z0-9-]+", "-", "-".join(parts).lower()).strip("-")
    return name[:63].rstrip("-") or "lakeflow"
