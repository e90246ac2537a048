"""The `launch:` section of a run config: where `lakeflow launch` places each process on a cluster.

Per role (dataflow, trainer, raas, eval; serve: the run's served models) the resources a process asks for
(CPU, memory, GPUs and their type, shared memory, node selectors, tolerations, time limit, partition,
account; trainers also nodes), overridable per model (`models.<id>.<role>`) and per region
(`regions.<name>`, the rollout pools there); the container image, the Hugging Face token and model cache,
and how processes get lake credentials.
`lakeflow run` ignores it (one machine places everything itself).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from lakeflow.configfile import StrictConfig

ROLES = ("dataflow", "trainer", "raas", "eval")
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|K|M|G|T)?$")
_UNITS = {None: 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_TIME = re.compile(r"^(?:(\d+)-)?(\d+):(\d{2}):(\d{2})$")


def quantity_bytes(value: str) -> int:
    """Bytes of a Kubernetes quantity ('64Gi', '512Mi', '16G'); ValueError otherwise."""
    match = _QUANTITY.match(value)
    if not match:
        raise ValueError(f"{value!r} is not a size like 64Gi, 512Mi or 16G")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def time_seconds(value: str) -> int:
    """Seconds of a Slurm-style time limit ('HH:MM:SS' or 'D-HH:MM:SS'); ValueError otherwise."""
    match = _TIME.match(value)
    if not match:
        raise ValueError(f"{value!r} is not a time limit like 12:00:00 or 2-00:00:00")
    days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


class Toleration(StrictConfig):
    """A Kubernetes toleration (pods may run on nodes tainted this way)."""

    key: str | None = Field(None, description="Taint key (None with operator Exists: every taint).")
    operator: Literal["Equal", "Exists"] = Field("Equal", description="Equal matches `value`; Exists any value.")
    value: str | None = Field(None, description="Taint value (with operator Equal).")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        None, description="Taint effect tolerated (None: every effect)."
    )


class Resources(StrictConfig):
    """What one process (one node of a multi-node trainer) asks for; unset fields keep the role's default."""

    cpus: float | None = Field(None, gt=0, description="CPU cores.")
    memory: str | None = Field(None, description="Memory, as a size (64Gi, 512Mi, 16G).")
    gpus_per_node: int | None = Field(
        None, ge=0, description="GPUs per process (per node for a trainer; torchrun starts one rank per GPU)."
    )
    gpu_type: str | None = Field(None, description="GPU model (H100, A100-80GB, L4, …; see docs/launch.md).")
    nodes: int | None = Field(None, ge=1, description="Trainer only: machines the trainer spans (torchrun).")
    shm: str | None = Field(None, description="Kubernetes: size of /dev/shm (a memory volume); NCCL and vLLM use it.")
    disk: str | None = Field(None, description="SkyPilot: the node's disk, as a size (256Gi).")
    node_selector: dict[str, str] | None = Field(None, description="Kubernetes: node labels the pod needs.")
    tolerations: list[Toleration] | None = Field(None, description="Kubernetes: taints the pod tolerates.")
    time: str | None = Field(None, description="Time limit (HH:MM:SS or D-HH:MM:SS): Slurm --time, a Job's deadline.")
    partition: str | None = Field(None, description="Slurm: partition.")
    account: str | None = Field(None, description="Slurm: account charged.")
    qos: str | None = Field(None, description="Slurm: quality of service.")
    use_spot: bool | None = Field(None, description="SkyPilot: spot instances (a preempted process resumes).")

    @field_validator("memory", "shm", "disk")
    @classmethod
    def _size(cls, value: str | None) -> str | None:
        if value is not None:
            quantity_bytes(value)
        return value

    @field_validator("time")
    @classmethod
    def _time(cls, value: str | None) -> str | None:
        if value is not None:
            time_seconds(value)
        return value

    def over(self, base: Resources) -> Resources:
        """`base` with the fields set here replacing its own."""
        return base.model_copy(update={name: getattr(self, name) for name in self.model_fields_set})


# What each role asks for unless the config says otherwise: a trainer shared memory for its collectives, a
# rollout service memory for the engine; GPU counts follow the configs' devices (see launch.render).
DEFAULTS: dict[str, Resources] = {
    "dataflow": Resources(cpus=2, memory="8Gi"),
    "trainer": Resources(cpus=8, memory="64Gi", nodes=1, shm="16Gi"),
    "raas": Resources(cpus=4, memory="32Gi", shm="8Gi"),
    "eval": Resources(cpus=4, memory="32Gi", shm="8Gi"),
    "serve": Resources(cpus=4, memory="32Gi", shm="8Gi"),
}


class ModelResources(StrictConfig):
    """Overrides for one model's processes."""

    trainer: Resources = Field(default_factory=Resources, description="The model's trainer.")
    raas: Resources = Field(default_factory=Resources, description="Each rollout service of the model's pools.")
    eval: Resources = Field(default_factory=Resources, description="The model's evaluation.")


class ModelCache(StrictConfig):
    """Where the Hugging Face cache lives (HF_HOME) for the processes that read a hub id (the trainer's
    rank 0 publishing version 0; rollout services with `model:`), so a restart does not download again."""

    path: str = Field("/models", description="HF_HOME inside the pod or on the nodes (a shared path on Slurm).")
    claim: str | None = Field(None, description="Kubernetes: a PersistentVolumeClaim mounted at `path`.")


class Credentials(StrictConfig):
    """How the processes of each role reach the lake (one identity per role, least privilege)."""

    type: Literal["irsa", "workload_identity", "secret", "none"] = Field(
        "none",
        description="irsa: an IAM role per service account (EKS); workload_identity: a GCP service account per "
        "service account (GKE); secret: a Kubernetes Secret / SkyPilot secret of access keys per role "
        "(MinIO, R2, any S3-compatible store); none: the nodes' own credentials.",
    )
    roles: dict[str, str] = Field(
        default_factory=dict,
        description="Role -> IAM role ARN (irsa), GCP service account e-mail (workload_identity) or Secret name "
        "holding AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (secret).",
    )

    @field_validator("roles")
    @classmethod
    def _roles(cls, value: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(value) - set(ROLES))
        if unknown:
            raise ValueError(f"unknown roles {unknown}; roles: {', '.join(ROLES)}")
        return value


class LaunchConfig(StrictConfig):
    """Placement of the run's processes on a cluster (`lakeflow launch`)."""

    image: str | None = Field(
        None, description="Container image with lakeflow (Dockerfile); default lakeflow:cuda or lakeflow:cpu."
    )
    software: Literal["auto", "cpu", "cuda"] = Field(
        "auto",
        description="Which lock a node installs (SkyPilot setup, Slurm venv, image variant): auto is cuda for "
        "processes with GPUs, cpu for the others.",
    )
    dataflow: Resources = Field(default_factory=Resources, description="The dataflow process.")
    trainer: Resources = Field(default_factory=Resources, description="Every trainer.")
    raas: Resources = Field(default_factory=Resources, description="Every rollout service.")
    eval: Resources = Field(default_factory=Resources, description="Every evaluation.")
    serve: Resources = Field(
        default_factory=Resources,
        description="Every served model of `serve:` (a judge or a teacher): its own pod on Kubernetes; on SkyPilot "
        "and Slurm it runs beside each rollout service that uses it, which asks for these resources as well.",
    )
    models: dict[str, ModelResources] = Field(default_factory=dict, description="Overrides per model id.")
    regions: dict[str, Resources] = Field(
        default_factory=dict, description="Overrides for the rollout services of a region (`regions:` pools)."
    )
    hf_token_secret: str | None = Field(
        None,
        description="Name of the Kubernetes Secret (key `token`) or SkyPilot secret holding HF_TOKEN, for gated "
        "models; given to the processes that read the hub.",
    )
    model_cache: ModelCache | None = Field(None, description="A Hugging Face cache shared across restarts.")
    credentials: Credentials = Field(default_factory=Credentials, description="Lake credentials per role.")
    rdzv_port: int = Field(29500, ge=1024, le=65535, description="torchrun's rendezvous port on a trainer's node 0.")
    serve_port: int = Field(
        8000,
        ge=1024,
        le=64535,
        description="Port of the served models: each Kubernetes Service's; on SkyPilot the i-th served model of a "
        "node listens on serve_port + i; on Slurm serve_port + i*1000 + the job id % 1000 (jobs share nodes).",
    )

    def resources(self, role: str, model_id: str | None = None, region: str = "") -> Resources:
        """What a process of `role` (of `model_id`, in `region`) asks for: role default < role < model <
        region."""
        mine: Resources = getattr(self, role)
        out = mine.over(DEFAULTS[role])
        if model_id is not None and model_id in self.models and role in ("trainer", "raas", "eval"):
            theirs: Resources = getattr(self.models[model_id], role)
            out = theirs.over(out)
        if role == "raas" and region and region in self.regions:
            out = self.regions[region].over(out)
        return out
