"""The check of a whole run config before `lakeflow run` or `lakeflow launch` starts anything.

`check_run_config` collects the problems of every process's config (`check_raas_config` of each rollout pool,
`check_trainer_config`, `check_dataset`, `check_eval_config`), each naming its key in the run config
(`models[0].raas.config.workflow: unknown workflow 'rvlr'; known: ...`), and the run's own: a task type
of a model's dataset that no reward scores, in a pool with no explicit `reward`; a config that contradicts
a model that can be read here (vocabulary, positions, no chat template). `check_run_here` (`lakeflow run`
only: a launched run's nodes are not this machine) adds what this machine lacks: models that are neither
directories nor cached nor on a hub that answers, devices it does not have, a judge's API key variable,
a reward model's files and device;
`check_run_speed` warns of settings that will run but slowly here (bf16 on a CPU without bf16
instructions); `check_run_tools` of tool-using pools whose chat template drops the tools (the model would
never see them), and of warm-up demonstrations whose tools are not the pool environment's. The processes
check their own configs again when they start (a name must resolve there too: import paths and entry points
do; a registration made only in the launching process does not).
"""

from __future__ import annotations

import json

from lakeflow.dataflow.check import check_dataset
from lakeflow.dataflow.datasets import task_types
from lakeflow.errors import ConfigError
from lakeflow.evaluation.check import check_eval_config
from lakeflow.models.check import chat_template_problem, device_problem, model_problem
from lakeflow.models.host import fastest_autocast, fastest_dtype, gpu_driver_present, slow_bf16_note
from lakeflow.models.info import model_vocab_size, read_model_dtype, read_model_info, tokenizer_digest
from lakeflow.raas.check import (
    check_raas_config,
    check_rollout_model,
    engine_device_problems,
    engine_model_problems,
    environment_tools,
    lora_engine_problems,
    reward_here_problems,
    task_type_problem,
    tool_template_warnings,
)
from lakeflow.raas.config import EngineConfig, HFEngineConfig, RaasConfig, VLLMEngineConfig
from lakeflow.raas.scoring.judge import JudgeConfig
from lakeflow.raas.scoring.reward_model import RewardModelConfig
from lakeflow.run.config import PoolConfig, RunConfig, RunModel
from lakeflow.trainer.check import check_trainer_config, lora_target_problems
from lakeflow.trainer.config import publish_dtype_for
from lakeflow.trainer.demos import read_conversations

# Keys of a region's overrides that its pool's check must look at again (the rest are the home pool's).
_REGION_KEYS = ("workflow", "roles", "reward", "environment", "agent", "model", "chat_template")


def check_run_config(config: RunConfig) -> list[str]:
    """Every problem of the run config (empty: it can start), one line each, naming its key."""
    problems: list[str] = []
    for i, m in enumerate(config.models):
        at = f"models[{i}]"
        problems += check_trainer_config(m.trainer, f"{at}.trainer")
        if (vocab := m.vocab_problem()) is not None:
            problems.append(f"{at}.dataflow.vocab_size: {vocab}")
        dataset = m.dataflow_section().dataset
        problems += check_dataset(dataset, f"{at}.dataflow.dataset")
        pools = [(f"{at}.raas.config", m.raas), *_region_pools(m, at, _REGION_KEYS)]
        for key, pool in pools:
            problems += check_raas_config(pool.config, key)
            for ref, model_key in _rollout_models(config, m, pool.config, key):
                problems += check_rollout_model(pool.config, ref, model_key, key)
            if m.trainer.lora is not None and pool.config.model is None:  # the pool serves the trainer's adapters
                problems += lora_engine_problems(pool.config.engine, m.trainer.lora.rank, f"{key}.engine")
        try:
            types = sorted(task_types(dataset) or ()) if dataset is not None else []
        except ConfigError as e:  # a dataset file that cannot be read: the dataflow would stop on it
            problems.append(f"{at}.dataflow.dataset: {e}")
            types = []
        for key, pool in pools:
            if pool.config.environment is not None or pool.config.agent is not None:
                continue  # an environment or agent program scores its own episodes (an agent's answers: at run time)
            for task_type in types:
                if (problem := task_type_problem(task_type, pool.config.reward, f"{at}.dataflow.dataset")) is not None:
                    problems.append(problem if key.endswith(".raas.config") else f"{problem} (the pool of {key})")
        if m.trainer.advantages.distill is not None and not any(p.config.teachers for _, p in pools):
            problems.append(
                f"{at}.trainer.advantages.distill: the model's rollout pool has no teachers, so no sample would "
                f"carry teacher logprobs: add `teachers: [{{pool: <a served id>}}]` to {at}.raas.config"
            )
        if m.eval is not None:  # the eval process scores with the pool's reward unless its section names one
            reward = m.eval.reward if m.eval.reward is not None else m.raas.config.reward
            if isinstance(reward, JudgeConfig | RewardModelConfig):
                what = "a judge" if isinstance(reward, JudgeConfig) else "a reward model"
                problems.append(
                    f"{at}.eval.reward: the pool scores with {what}, which `lakeflow eval` does not call: name the "
                    "eval's own reward function (e.g. math) or remove the eval section"
                )
                reward = None
            section = m.eval.model_copy(update={"reward": reward, **m.eval_episodes()})
            problems += check_eval_config(section, f"{at}.eval")
            if m.trainer.lora is not None:
                problems += lora_engine_problems(m.eval.engine, m.trainer.lora.rank, f"{at}.eval.engine")
            problems += _eval_model_problems(m, at)
    return list(dict.fromkeys(problems))


def _region_pools(m: RunModel, at: str, keys: tuple[str, ...]) -> list[tuple[str, PoolConfig]]:
    """(key, pool) of each region of `m` whose config overrides one of `keys` of the home pool's."""
    pools = zip(m.regions, m.pools()[1:], strict=True)
    return [(f"{at}.regions[{j}].config", pool) for j, (r, (_, pool)) in enumerate(pools) if set(r.config) & set(keys)]


def _rollout_models(config: RunConfig, m: RunModel, pool: RaasConfig, key: str) -> list[tuple[str, str]]:
    """(model reference, its key) of each model a pool of `m` rolls out: its frozen `model`, else the published
    weights of each role's model (a copy of that model's trainer model, tokenizer included)."""
    if pool.model is not None:
        return [(pool.model, f"{key}.model")]
    index = {other.id: i for i, other in enumerate(config.models)}
    ids = dict.fromkeys((pool.roles or {"policy": m.id}).values())
    return [(config.models[index[i]].trainer.model, f"models[{index[i]}].trainer.model") for i in ids if i in index]


def _eval_model_problems(m: RunModel, at: str) -> list[str]:
    """The eval engine's positions and the chat template its prompts are rendered with, against the model."""
    problems = engine_model_problems(m.eval.engine if m.eval else None, m.trainer.model, f"{at}.eval.engine")
    if (m.eval and m.eval.chat_template) or m.raas.config.chat_template:
        return problems  # rendered with the configured template, not the model's
    info = read_model_info(m.trainer.model)
    if info is not None and (problem := chat_template_problem(info)) is not None:
        problems.append(f"{at}.trainer.model: {problem}")
    return problems


def check_run_here(config: RunConfig) -> list[str]:
    """What this machine lacks to run `config` (empty: nothing), one line each naming its key: a model that is
    not a directory, not in the Hugging Face cache and not on a hub that answers (asked once per model, a few
    seconds at most); a device (trainer, transformers engines) that does not exist here; a judge's API key
    variable that is not set here (the run's processes inherit this environment); a reward model's files and
    device."""
    problems: list[str] = []
    models: dict[str, str | None] = {}  # reference -> its problem, each looked up once

    def model_at(ref: str, key: str) -> None:
        if ref not in models:
            models[ref] = model_problem(ref)
        if (problem := models[ref]) is not None:
            problems.append(f"{key}: {problem}")

    for i, m in enumerate(config.models):
        at = f"models[{i}]"
        model_at(m.trainer.model, f"{at}.trainer.model")
        if (problem := device_problem(m.trainer.device)) is not None:
            problems.append(f"{at}.trainer.device: {problem}")
        problems += lora_target_problems(m.trainer, f"{at}.trainer.")
        problems += engine_device_problems(m.raas.config.engine, f"{at}.raas.config.engine")  # regions share it
        for key, pool in [(f"{at}.raas.config", m.raas), *_region_pools(m, at, ("model", "reward"))]:
            if pool.config.model is not None:
                model_at(pool.config.model, f"{key}.model")
            problems += reward_here_problems(pool.config, key)
        if m.eval is not None:
            problems += engine_device_problems(m.eval.engine, f"{at}.eval.engine")
        problems += _teacher_vocab_problems(config, m, at)
    return list(dict.fromkeys(problems))


def _teacher_vocab_problems(config: RunConfig, m: RunModel, at: str) -> list[str]:
    """A served teacher of `m`'s pools whose vocabulary is not the student's (its logprobs would be of other
    tokens), as far as the files here tell (a model not here is checked by the rollout service at its first
    request)."""
    served = {s.id: s.model for s in config.serve}
    student = tokenizer_digest(m.trainer.model), model_vocab_size(m.trainer.model)
    problems = []
    for key, pool in [(f"{at}.raas.config", m.raas), *_region_pools(m, at, ("teachers",))]:
        for j, t in enumerate(pool.config.teachers):
            ref = served.get(t.pool)
            if ref is None:
                continue
            theirs = tokenizer_digest(ref), model_vocab_size(ref)
            if any(a is not None and b is not None and a != b for a, b in zip(student, theirs, strict=True)):
                problems.append(
                    f"{key}.teachers[{j}]: teacher {t.pool!r} ({ref}) has another vocabulary than the student "
                    f"({m.trainer.model}): its logprobs would be of other tokens; distil from a model of the "
                    "student's tokenizer"
                )
    return problems


def _engine_precision(engine: EngineConfig | None) -> tuple[str | None, str]:
    """(dtype, device) an engine computes in, as far as this machine tells: vLLM runs on the CPU where no GPU
    driver is present."""
    if isinstance(engine, HFEngineConfig):
        return engine.dtype, engine.device
    if isinstance(engine, VLLMEngineConfig):
        return engine.dtype, "cuda" if gpu_driver_present() else "cpu"
    return None, "cpu"


def check_run_speed(config: RunConfig) -> list[str]:
    """Settings that will run but slowly on this machine, one line each naming its key (warnings, not
    refusals): bfloat16 compute (trainer autocast, an engine's dtype) on a CPU without bf16 instructions."""
    notes: list[str] = []
    for i, m in enumerate(config.models):
        at = f"models[{i}]"
        settings: list[tuple[str, str | None, str]] = [(f"{at}.trainer.autocast", m.trainer.autocast, m.trainer.device)]
        settings.append((f"{at}.raas.config.engine.dtype", *_engine_precision(m.raas.config.engine)))
        if m.eval is not None and m.eval.engine is not None:  # unset: the pool's engine, noted above
            settings.append((f"{at}.eval.engine.dtype", *_engine_precision(m.eval.engine)))
        for key, dtype, device in settings:
            if (note := slow_bf16_note(dtype, device)) is not None:
                notes.append(f"{key}: {note}")
    return notes


def check_run_precision(config: RunConfig) -> list[str]:
    """Trainers that compute in full precision over float32 master weights but publish a narrower dtype
    (warnings: the run starts). The engine then samples from the rounded weights, which the trainer never
    scores: the updates below the rounding step accumulate in the master weights alone, and the two
    policies drift apart with every version (measured on SmolLM2: 0.39 nats per sampled token by version 8,
    docs/models.md)."""
    notes: list[str] = []
    for i, m in enumerate(config.models):
        t = m.trainer
        autocast = fastest_autocast(t.device) if t.autocast == "fastest" else t.autocast
        if autocast is not None or t.dtype != "float32":
            continue
        model_dtype = read_model_dtype(t.model) if t.publish_dtype is None else None
        published = publish_dtype_for(t, model_dtype)
        if published != "float32":
            notes.append(
                f"models[{i}].trainer.publish_dtype: the trainer computes in float32 but publishes {published}, so "
                "the engine samples rounded weights the trainer never scores and the two drift apart with every "
                "version: set publish_dtype: float32 (or fastest, with autocast: fastest), or autocast: bfloat16"
            )
            continue
        for key, pool in [(f"models[{i}].raas.config", m.raas), *_region_pools(m, f"models[{i}]", ("engine",))]:
            narrow = _engine_dtype(pool.config.engine)
            if narrow in ("bfloat16", "float16") and pool.config.model is None:
                notes.append(
                    f"{key}.engine.dtype: the engine computes in {narrow} but the trainer in float32, so the engine "
                    "samples rounded weights the trainer never scores and the two drift apart with every version "
                    "(the mismatch table shows it): set the engine's dtype to float32, or the trainer's autocast "
                    "to bfloat16 (or fastest)"
                )
    return notes


def _engine_dtype(engine: EngineConfig) -> str | None:
    """The dtype a local engine computes in, where the config says it (None: the model's own, or a plugin's)."""
    if isinstance(engine, HFEngineConfig):
        return fastest_dtype(engine.device) if engine.dtype == "fastest" else engine.dtype
    if isinstance(engine, VLLMEngineConfig) and engine.dtype not in (None, "auto", "fastest"):
        return engine.dtype
    if isinstance(engine, VLLMEngineConfig) and engine.dtype == "fastest" and not gpu_driver_present():
        return fastest_dtype("cpu")  # on a GPU vLLM's fastest is the model's own dtype
    return None


def check_run_tools(config: RunConfig) -> list[str]:
    """Rollout pools whose episodes use tools that their chat template drops, so the model never sees
    them (warnings, not refusals: the run starts), one line each naming the pool's `chat_template`: the
    configured template, else each rolled-out model's own where its files can be read here."""
    notes: list[str] = []
    for i, m in enumerate(config.models):
        at = f"models[{i}]"
        for key, pool in [(f"{at}.raas.config", m.raas), *_region_pools(m, at, _REGION_KEYS)]:
            for ref, _ in _rollout_models(config, m, pool.config, key):
                notes += tool_template_warnings(pool.config, ref, key)
        notes += warmup_tools_warnings(m, at)
    return list(dict.fromkeys(notes))


def warmup_tools_warnings(m: RunModel, at: str) -> list[str]:
    """A warning when the warm-up's demonstrations give the template other tool schemas than the pool's
    environment does (other tools, or the same in another key order: a template renders them as given), so
    the warm-up trains the model under a system turn that RL's episodes never show it (measured on the
    calculator recipe: sorted keys left version 0 copying the schema's words into its calls, docs/models.md)."""
    warmup, environment = m.trainer.warmup, m.raas.config.environment
    if warmup is None or environment is None or (found := environment_tools(environment)) is None:
        return []
    schemas = found[0]
    try:
        conversations = read_conversations(warmup.data)
    except ConfigError:
        return []  # the trainer's check names the file's problem
    for number, row in enumerate(conversations, 1):
        if json.dumps(row.get("tools") or []) != json.dumps(schemas):
            return [
                f"{at}.trainer.warmup.data: conversation {number}'s `tools` are not the schemas the pool's "
                f"environment {environment.name!r} gives its chat template (key order counts: a template renders them "
                "as given), so the warm-up trains under a prompt the episodes never show: write each "
                "conversation's `tools` as the environment's `tools()` schemas (`python -m "
                "lakeflow.raas.agent.envs NAME --demos` does)"
            ]
    return []
