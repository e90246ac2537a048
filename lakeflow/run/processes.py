"""The processes of one run, wherever they run (this machine, Kubernetes, SkyPilot, Slurm): one
`ProcessSpec` per process, built from the run config. `lakeflow run` starts them (`launcher.py`);
`lakeflow launch` renders them for a cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lakeflow.raas.config import JudgeConfig, TeacherConfig
from lakeflow.run.config import PoolConfig, RunConfig, RunModel


@dataclass(frozen=True)
class ProcessSpec:
    """One process of a run, wherever it runs (here, Kubernetes, SkyPilot, Slurm): the lakeflow verb, its
    flags (without --lake, --endpoint-url and --config, which depend on the place) and its config file."""

    name: str  # dataflow, train-<model>, raas-<model>[-<region>]-<i> (no -<i> for a replicated pool), mirror-…, serve-…
    role: str  # dataflow | trainer | raas | eval | mirror | serve (| autoscale, in a run with --autoscale)
    model_id: str | None
    verb: str  # the lakeflow command, e.g. "raas" or "weights mirror"
    flags: tuple[str, ...]
    config_name: str  # "": the command takes no config file
    config: dict[str, Any]
    region: str = ""  # rollout pools of `regions:` (not autoscaled) and their mirrors


def dataflow_spec(config: RunConfig) -> ProcessSpec:
    flow = config.dataflow().model_dump(mode="json")
    return ProcessSpec("dataflow", "dataflow", None, "dataflow", ("--wait",), "dataflow.yaml", flow)


def trainer_spec(config: RunConfig, m: RunModel) -> ProcessSpec:
    # --wait: a restarted trainer waits out its killed predecessor's lease (one trainer per model)
    flags = ("--model", m.id, "--steps", str(config.steps), "--wait")
    trainer = m.trainer.model_dump(mode="json")
    if config.seed is not None:
        trainer["seed"] = config.seed
    return ProcessSpec(f"train-{m.id}", "trainer", m.id, "train", flags, f"trainer-{m.id}.yaml", trainer)


def raas_spec(
    config: RunConfig, m: RunModel, index: int | None, region: str = "", pool: PoolConfig | None = None
) -> ProcessSpec:
    """Rollout service `index` of `m`'s pool in `region` ("": the home pool, `m.raas`); None: one config
    shared by every replica of the pool (no `id`: each instance takes a random one)."""
    base = f"raas-{m.id}-{region}" if region else f"raas-{m.id}"
    name = base if index is None else f"{base}-{index}"
    raas_id = None if index is None else f"{config.name}-{name.removeprefix('raas-')}"[:64]
    raas = (pool or m.raas).config.model_copy(update={"id": raas_id}).model_dump(mode="json")
    if config.seed is not None:
        raas["seed"] = config.seed * 1000 + (index or 0)  # replicas of a pool sample apart
    return ProcessSpec(name, "raas", m.id, "raas", ("--model", m.id), f"{name}.yaml", raas, region)


def mirror_specs(config: RunConfig) -> list[ProcessSpec]:
    """A `lakeflow weights mirror --loop` per region pool with `mirror: true`: it keeps the region's
    `weights_url` (or `mirror_to`, where weights_url reads it through a CDN) current from the lake, one
    per model and target."""
    out, seen = [], set()
    for m in config.models:
        for r in m.regions:
            to = r.mirror_to or r.weights_url
            if not r.mirror or to is None or (m.id, to) in seen:
                continue
            seen.add((m.id, to))
            flags = ("--to", to, "--model", m.id, "--loop", "--interval", str(r.mirror_interval_s))
            out.append(
                ProcessSpec(f"mirror-{m.id}-{r.region}", "mirror", m.id, "weights mirror", flags, "", {}, r.region)
            )
    return out


def process_specs(config: RunConfig) -> list[ProcessSpec]:
    """Every process `lakeflow run` starts: the dataflow process, then per model its trainer and pool."""
    out = [dataflow_spec(config)]
    for m in config.models:
        out.append(trainer_spec(config, m))
        for region, pool in m.pools():
            out += [raas_spec(config, m, i, region, pool) for i in range(pool.replicas)]
    return out + mirror_specs(config)


def serve_specs(config: RunConfig, ports: dict[str, int]) -> list[ProcessSpec]:
    """A `lakeflow serve` per frozen model of the run's `serve:` section, on 127.0.0.1 at its port in `ports`."""
    out = []
    for served in config.serve:
        flags = ("--host", "127.0.0.1", "--port", str(ports[served.id]))
        data = served.model_dump(mode="json")
        out.append(ProcessSpec(f"serve-{served.id}", "serve", None, "serve", flags, f"serve-{served.id}.yaml", data))
    return out


def _served_region(config: dict[str, Any], judged: Any, taught: Any) -> dict[str, Any]:
    out = dict(config)
    if "reward" in out:
        out["reward"] = judged(out["reward"])
    if "teachers" in out:
        out["teachers"] = taught(out["teachers"])
    return out


def with_judge_endpoints(config: RunConfig, urls: dict[str, str]) -> RunConfig:
    """`config` with the endpoint of every judge and teacher that names a `pool` set to that served model's
    base URL (`urls`: served id -> URL), in home pools and region overrides alike."""

    def judged(reward: Any) -> Any:
        if isinstance(reward, JudgeConfig) and reward.pool in urls:
            return reward.model_copy(update={"endpoint": urls[reward.pool]})
        if isinstance(reward, dict) and reward.get("type") == "judge" and reward.get("pool") in urls:
            return {**reward, "endpoint": urls[reward["pool"]]}
        return reward

    def taught(teachers: Any) -> Any:  # each teacher that names a served pool gets its URL
        def one(t: Any) -> Any:
            if isinstance(t, TeacherConfig) and t.pool in urls:
                return t.model_copy(update={"endpoint": urls[t.pool]})
            if isinstance(t, dict) and t.get("pool") in urls:
                return {**t, "endpoint": urls[t["pool"]]}
            return t

        return [one(t) for t in teachers]

    models = []
    for m in config.models:
        changes = {"reward": judged(m.raas.config.reward), "teachers": taught(m.raas.config.teachers)}
        pool = m.raas.config.model_copy(update=changes)
        regions = [
            r.model_copy(update={"config": _served_region(r.config, judged, taught)})
            if "reward" in r.config or "teachers" in r.config
            else r
            for r in m.regions
        ]
        models.append(m.model_copy(update={"raas": m.raas.model_copy(update={"config": pool}), "regions": regions}))
    return config.model_copy(update={"models": models})
