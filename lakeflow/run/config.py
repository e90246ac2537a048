"""A run's config: per model its dataflow settings, its trainer and its rollout pool, in one file.

Each section is the config of the process it launches (`lakeflow.dataflow.config.ModelConfig`,
`lakeflow.trainer.config.TrainerConfig`, `lakeflow.raas.config.RaasConfig`), so every key is
validated where it is used; unknown keys are refused with the key and the file named.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from lakeflow.configfile import StrictConfig, load_config_file
from lakeflow.dataflow.config import DataflowConfig, LoopConfig, ModelConfig, TasksConfig
from lakeflow.errors import ConfigError
from lakeflow.evaluation.config import EvalConfig
from lakeflow.models.chat import SHIPPED_TEMPLATES
from lakeflow.models.info import model_vocab_size
from lakeflow.raas.config import HFEngineConfig, RaasConfig, ServeConfig, VLLMEngineConfig
from lakeflow.raas.scoring.judge import JudgeConfig
from lakeflow.run.cluster import LaunchConfig
from lakeflow.tracking.config import TrackerConfig
from lakeflow.trainer.config import TrainerConfig

_UNKNOWN_VOCAB = 1 << 31  # stands in for a vocabulary not set and not readable while the file is validated


class PoolConfig(StrictConfig):
    """The rollout services of one model."""

    replicas: int = Field(1, ge=0, description="Rollout service processes to start.")
    config: RaasConfig = Field(default_factory=RaasConfig, description="Each instance's config.")


class RegionPool(StrictConfig):
    """A further rollout pool of the model in another region: the home pool's config with this region, its
    weights source and any overrides. Its samples go to the run's lake like the home pool's."""

    region: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,47}$", description="Region label (stamped on samples, heartbeats)."
    )
    replicas: int = Field(1, ge=0, description="Rollout service processes to start (not autoscaled).")
    weights_url: str | None = Field(
        None, description="Where this region pulls weights: a mirror (`lakeflow weights mirror`), https://, s3://…"
    )
    weights_options: dict[str, Any] = Field(default_factory=dict, description="fsspec options of weights_url.")
    mirror: bool = Field(
        False,
        description="`lakeflow run` keeps weights_url current with a `lakeflow weights mirror --loop` process "
        "(a directory or bucket it can write; cluster launches note the command to run in the region).",
    )
    mirror_to: str | None = Field(
        None,
        description="Where the mirror process writes when the region reads it by another route (a bucket or "
        "directory behind the CDN or HTTP server that weights_url names); default: weights_url.",
    )
    mirror_interval_s: float = Field(2.0, gt=0, description="Seconds between the mirror's passes.")
    config: dict[str, Any] = Field(
        default_factory=dict, description="lakeflow.raas.config.RaasConfig fields that differ from the home pool's."
    )

    def pool(self, home: PoolConfig) -> PoolConfig:
        """This region's pool: the home pool's config, overridden."""
        fields = {"region": self.region, "weights_url": self.weights_url, "weights_options": self.weights_options}
        merged = {**home.config.model_dump(), **self.config, **fields}
        return PoolConfig(replicas=self.replicas, config=RaasConfig.model_validate(merged))


class AutoscaleConfig(StrictConfig):
    """`lakeflow run --autoscale` (or this section): a `lakeflow autoscale --actuator local` process sizes
    every rollout pool, starting it at its `replicas` (within [min, max])."""

    min: int = Field(1, ge=0, description="Fewest rollout services per pool.")
    max: int = Field(4, ge=1, description="Most rollout services per pool.")
    interval_s: float = Field(5.0, gt=0, description="Seconds between decisions.")
    cooldown_s: float = Field(20.0, ge=0, description="No change this soon after the previous one.")
    confirm: int = Field(2, ge=1, description="Consecutive decisions pointing the same way before acting.")
    window_s: float | None = Field(None, gt=0, description="Observation window (default: the balance report's).")


class RunModel(StrictConfig):
    """One model of the run: how its data flows, how it trains, who rolls it out."""

    id: str = Field(description="Model id.")
    dataflow: dict[str, Any] = Field(
        description="lakeflow.dataflow.config.ModelConfig fields, without `id`; `vocab_size` may be left out "
        "when the trainer's model says it (tiny models, local directories, hub ids in the local cache)."
    )
    trainer: TrainerConfig = Field(description="The model's trainer.")
    raas: PoolConfig = Field(default_factory=PoolConfig, description="The model's (home) rollout pool.")
    regions: list[RegionPool] = Field(
        default_factory=list, description="Further pools of the model, each in its own region with its weights source."
    )
    eval: EvalConfig | None = Field(None, description="Held-out evaluation of each version (`lakeflow eval`).")

    def vocab_problem(self) -> str | None:
        """What is wrong with `dataflow.vocab_size` against the trainer's model (None: nothing): not set while
        the model cannot be read here, or contradicting the model's."""
        given, derived = self.dataflow.get("vocab_size"), model_vocab_size(self.trainer.model)
        if given is None and derived is None:
            return (
                f"not set, and the vocabulary of {self.trainer.model!r} cannot be read here (not a tiny model, a "
                "model directory or a hub id in the Hugging Face cache): set it"
            )
        if given is not None and derived is not None and given != derived:
            return (
                f"{given} contradicts {self.trainer.model!r}, whose vocabulary is {derived}: remove the key (it is "
                "read from the model) or fix it"
            )
        return None

    def dataflow_config(self) -> ModelConfig:
        """The model's dataflow section, its vocabulary size taken from the trainer's model where it can be read;
        ConfigError when `vocab_problem` finds one (the run's check reports it first)."""
        if (problem := self.vocab_problem()) is not None:
            raise ConfigError(f"model {self.id}: dataflow.vocab_size: {problem}")
        fields = {"id": self.id, **self.dataflow}
        if fields.get("vocab_size") is None:
            fields["vocab_size"] = model_vocab_size(self.trainer.model)
        return ModelConfig.model_validate(fields)

    def dataflow_section(self) -> ModelConfig:
        """The dataflow section validated on its own (a placeholder vocabulary when it is not set: checking it
        against the model is the run check's, `vocab_problem`)."""
        fields = {"id": self.id, **self.dataflow}
        if fields.get("vocab_size") is None:
            fields["vocab_size"] = model_vocab_size(self.trainer.model) or _UNKNOWN_VOCAB
        return ModelConfig.model_validate(fields)

    def eval_episodes(self) -> dict[str, Any]:
        """The eval's `environment` and `agent`: its own, else its pool's (an agent pool's eval plays episodes)."""
        if self.eval is None or self.eval.environment is not None or self.eval.agent is not None:
            return {}
        return {"environment": self.raas.config.environment, "agent": self.raas.config.agent}

    def pools(self) -> list[tuple[str, PoolConfig]]:
        """(region name, pool) of every rollout pool: the home pool ("") first, then the regions."""
        return [("", self.raas), *((r.region, r.pool(self.raas)) for r in self.regions)]

    @model_validator(mode="after")
    def _regions(self) -> RunModel:
        names = [r.region for r in self.regions]
        if len(set(names)) != len(names) or self.raas.config.region in names:
            raise ValueError(f"model {self.id}: region names must be unique and differ from the home pool's")
        for r in self.regions:
            if "engine" in r.config:
                raise ValueError(f"model {self.id}, region {r.region}: the engine is the home pool's (raas.config)")
            if r.mirror and r.weights_url is None:
                raise ValueError(f"model {self.id}, region {r.region}: mirror: true needs a weights_url to mirror to")
            if r.mirror_to is not None and not r.mirror:
                raise ValueError(f"model {self.id}, region {r.region}: mirror_to is for mirror: true")
            try:
                r.pool(self.raas)
            except ValueError as e:
                raise ValueError(f"model {self.id}, region {r.region}: {e}") from e
        return self


class RunCredentials(StrictConfig):
    """Which credentials each process gets (S3 lakes): an AWS profile of the shared credentials file
    (~/.aws/credentials or AWS_SHARED_CREDENTIALS_FILE) per role, e.g. the access keys `infra/terraform`
    made for that role. A process of a role given here sees only that profile (the launcher's
    AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN are removed from its environment)."""

    dataflow: str | None = Field(None, description="AWS profile of the dataflow process (None: the launcher's).")
    trainer: str | None = Field(None, description="AWS profile of the trainers (None: the launcher's).")
    raas: str | None = Field(None, description="AWS profile of the rollout services (None: the launcher's).")
    eval: str | None = Field(None, description="AWS profile of the evaluation services (None: the launcher's).")


class RunConfig(StrictConfig):
    """The whole file."""

    name: str = Field(description="Run name; the default lake is ./runs/<name>.")
    lake: str | None = Field(None, description="Lake URL (default: ./runs/<name>; --lake overrides).")
    steps: int = Field(ge=1, description="Stop when every trainer has published weight version `steps`.")
    seed: int | None = Field(
        None,
        ge=0,
        description="Seed of the run: every trainer's torch seed (its warm-up order, its initial model) and every "
        "rollout service's sampler (replica i of a pool: seed * 1000 + i), over what their sections say. The "
        "tasks and their order come from the datasets' own seeds. None: the sections' own seeds.",
    )
    models: list[RunModel] = Field(min_length=1, description="The models of the run.")
    serve: list[ServeConfig] = Field(
        default_factory=list,
        description="Frozen models the run serves through lakeflow's OpenAI-compatible endpoint (`lakeflow "
        "serve`), started before the pools and stopped with the run: a pool's judge names one with "
        "`reward: {type: judge, pool: <id>}` (docs/judges.md), a pool's teacher with `teachers: [{pool: <id>}]` "
        "(docs/distillation.md).",
    )
    tasks: TasksConfig = Field(default_factory=TasksConfig, description="Dataflow task settings.")
    loop: LoopConfig = Field(default_factory=LoopConfig, description="Dataflow loop settings.")
    credentials: RunCredentials = Field(
        default_factory=RunCredentials,
        description="AWS profile per process role (least privilege, see docs/security.md).",
    )
    autoscale: AutoscaleConfig | None = Field(None, description="Size the rollout pools automatically.")
    tracker: TrackerConfig | None = Field(
        None, description="Log trainers, rollout pools and evaluations to this tracker too (`--tracker`)."
    )
    restarts: int = Field(
        3,
        ge=0,
        le=100,
        description="Times `lakeflow run` starts a process again after a signal killed it (the kernel's OOM "
        "killer sends SIGKILL), saying why, before it stops the run; a process that exits with an error "
        "code stops the run at once.",
    )
    launch: LaunchConfig = Field(
        default_factory=LaunchConfig, description="Placement on a cluster for `lakeflow launch` (resources, image)."
    )

    @model_validator(mode="after")
    def _consistent(self) -> RunConfig:
        flow = DataflowConfig(  # validates every model's dataflow section
            models=[m.dataflow_section() for m in self.models], tasks=self.tasks, loop=self.loop
        )
        models = {m.id: m for m in self.models}
        regions = {r.region for m in self.models for r in m.regions}
        for key, known, what in ((self.launch.models, models, "models"), (self.launch.regions, regions, "regions")):
            unknown = sorted(set(key) - set(known))
            if unknown:
                raise ValueError(f"launch.{what}: {unknown} not in the run's {what} ({', '.join(sorted(known))})")
        _check_judge_pools(self.models, self.serve)
        for m in self.models:
            pool = m.raas.config
            roles = pool.roles or {"policy": m.id}
            replicas = sum(p.replicas for _, p in m.pools())
            if flow.model(m.id).dataset is None and replicas > 0:
                raise ValueError(
                    f"model {m.id}: has no dataset, so it issues no tasks for its {replicas} rollout services; "
                    "set raas.replicas: 0 and give it a role in another model's pool (raas.config.roles)"
                )
            if m.id not in roles.values():
                raise ValueError(f"model {m.id}: raas.config.roles {roles} must give the model itself a role")
            for role, model_id in roles.items():
                if model_id not in models:
                    raise ValueError(f"model {m.id}: role {role!r} names model {model_id!r}, which is not in models")
                trainer = models[model_id].trainer
                if pool.temperature != trainer.temperature:
                    raise ValueError(
                        f"model {m.id}: raas temperature {pool.temperature} != trainer temperature "
                        f"{trainer.temperature} of {model_id} (role {role!r}); the trainer's importance ratios need "
                        "the sampling temperature"
                    )
        return self

    def dataflow(self) -> DataflowConfig:
        return DataflowConfig(models=[m.dataflow_config() for m in self.models], tasks=self.tasks, loop=self.loop)

    def with_engine(self, kind: str) -> RunConfig:
        """Every rollout pool on engine `kind` ('hf' or 'vllm'): a pool already on it keeps its settings,
        the others get that engine's defaults."""
        models = []
        for m in self.models:
            engine = m.raas.config.engine
            if engine.type != kind:
                engine = HFEngineConfig() if kind == "hf" else VLLMEngineConfig()
            raas = m.raas.config.model_copy(update={"engine": engine})
            models.append(m.model_copy(update={"raas": m.raas.model_copy(update={"config": raas})}))
        return self.model_copy(update={"models": models})


def _check_judge_pools(models: list[RunModel], served: list[ServeConfig]) -> None:
    """ValueError, saying what to do, for a judge or teacher `pool` that names no served model (or a trained one), and
    for served ids that repeat or are a trained model's."""
    trained, ids = {m.id for m in models}, [s.id for s in served]
    if len(set(ids)) != len(ids) or set(ids) & trained:
        raise ValueError(f"serve: ids {ids} must be unique and differ from the trained models' ({sorted(trained)})")
    for m in models:
        for region, pool in m.pools():
            where = f"model {m.id}{f', region {region}' if region else ''}: raas.config"
            for t in pool.config.teachers:
                if t.pool in trained:
                    raise ValueError(
                        f"{where}.teachers names {t.pool!r}, a model this run trains; a teacher is frozen: declare "
                        f"it under `serve:` with its own id (serve: [{{id: {t.pool}-teacher, model: <its weights>}}])"
                    )
                if t.endpoint is None and t.pool not in ids:
                    raise ValueError(
                        f"{where}.teachers names {t.pool!r}, which the run does not serve: add `serve: [{{id: "
                        f"{t.pool}, model: <a directory, hub id or tiny:name>}}]`, or give the teacher an endpoint"
                    )
            judge = pool.config.reward
            if not isinstance(judge, JudgeConfig) or judge.pool is None:
                continue
            at = f"{where}.reward.pool"
            if judge.pool in trained:
                raise ValueError(
                    f"{at} names {judge.pool!r}, a model this run trains; a judge is frozen: declare it under "
                    f"`serve:` with its own id (serve: [{{id: {judge.pool}-judge, model: <the model>}}]) and name that"
                )
            if judge.pool not in ids:
                known = f"it serves {', '.join(ids)}" if ids else "its `serve:` section is empty"
                raise ValueError(
                    f"{at} names {judge.pool!r}, which the run does not serve ({known}): add "
                    f"`serve: [{{id: {judge.pool}, model: <tiny:name, a directory or a hub id>}}]`"
                )


def load_run_config(path: str | Path) -> RunConfig:
    """Parse and validate a run config (YAML or JSON); errors name the key and the file. Relative paths of
    dataset files, policy files, chat template files, judge rubric files and warm-up demonstrations are taken
    from the config file's folder when the file is there (else from the working directory, as before), so a
    job runs from any directory."""
    config = load_config_file(RunConfig, path)
    base = Path(path).resolve().parent
    models = []
    for m in config.models:
        flow = dict(m.dataflow)
        dataset = flow.get("dataset")
        if isinstance(dataset, dict) and dataset.get("type") == "file":
            flow["dataset"] = {**dataset, "path": _rebase(str(dataset.get("path", "")), base)}
        policies = flow.get("policies")
        if isinstance(policies, dict):
            flow["policies"] = {k: _rebase(v, base) if str(v).endswith(".sql") else v for k, v in policies.items()}
        update: dict[str, Any] = {"dataflow": flow}
        if m.eval is not None and getattr(m.eval.dataset, "type", None) == "file":
            eval_set = m.eval.dataset.model_copy(update={"path": _rebase(m.eval.dataset.path, base)})  # type: ignore[union-attr]
            update["eval"] = m.eval.model_copy(update={"dataset": eval_set})
        update.update(_rebased_templates(m, update.get("eval", m.eval), base))
        if m.trainer.warmup is not None:
            update["trainer"] = _rebased_warmup(m.trainer, update["raas"].config.chat_template, base)
        models.append(m.model_copy(update=update))
    return config.model_copy(update={"models": models})


def _rebased_templates(m: RunModel, section: EvalConfig | None, base: Path) -> dict[str, Any]:
    """Updates of `m` whose `chat_template` files (of its pool, regions and eval) and judge `rubric_file`s
    (of its pool and regions) are taken from `base`."""

    def rebased(setting: str | None) -> str | None:
        return setting if setting is None or setting in SHIPPED_TEMPLATES else _rebase(setting, base)

    pool = m.raas.config
    changes: dict[str, Any] = {"chat_template": rebased(pool.chat_template)}
    if isinstance(pool.reward, JudgeConfig) and pool.reward.rubric_file is not None:
        changes["reward"] = pool.reward.model_copy(update={"rubric_file": _rebase(pool.reward.rubric_file, base)})
    raas = m.raas.model_copy(update={"config": pool.model_copy(update=changes)})
    regions = [r.model_copy(update={"config": _rebased_region(r.config, base, rebased)}) for r in m.regions]
    update: dict[str, Any] = {"raas": raas, "regions": regions}
    if section is not None:
        update["eval"] = section.model_copy(update={"chat_template": rebased(section.chat_template)})
    return update


def _rebased_warmup(trainer: TrainerConfig, pool_template: str | None, base: Path) -> TrainerConfig:
    """`trainer` with its warm-up's files taken from `base`, and the pool's chat template where the warm-up
    names none (the model learns the format it is prompted in)."""
    warmup = trainer.warmup
    assert warmup is not None
    template = warmup.chat_template
    if template is None:
        template = pool_template  # already rebased
    elif template not in SHIPPED_TEMPLATES:
        template = _rebase(template, base)
    section = warmup.model_copy(update={"data": _rebase(warmup.data, base), "chat_template": template})
    return trainer.model_copy(update={"warmup": section})


def _rebased_region(config: dict[str, Any], base: Path, rebased: Callable[[str | None], str | None]) -> dict[str, Any]:
    """A region's config overrides with its chat template and judge rubric files taken from `base`."""
    out = dict(config)
    if isinstance(out.get("chat_template"), str):
        out["chat_template"] = rebased(out["chat_template"])
    reward = out.get("reward")
    if isinstance(reward, dict) and isinstance(reward.get("rubric_file"), str):
        out["reward"] = {**reward, "rubric_file": _rebase(reward["rubric_file"], base)}
    return out


def _rebase(path: str, base: Path) -> str:
    """`path` under `base` when it is relative and the file exists there; else `path` unchanged."""
    if not path or "://" in path or Path(path).is_absolute():
        return path
    candidate = base / path
    return str(candidate) if candidate.exists() else path
