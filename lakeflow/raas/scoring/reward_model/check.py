"""The checks of a reward-model section before a rollout service starts: the workflow it scores, the model's
architecture and output labels where its config.json can be read here (`reward_model_problems`), and what this
machine must have to load it, its files and its device (`reward_model_here_problems`). Nothing is loaded."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lakeflow.errors import ConfigError
from lakeflow.models.check import device_problem, model_problem
from lakeflow.models.info import read_model_config
from lakeflow.raas.config.reward_model import RewardModelConfig

SCORED_WORKFLOWS = ("rlvr",)  # the workflows whose samples a reward model scores (the runner generates them itself)
CLASSIFIER = "ForSequenceClassification"  # how a sequence-classification architecture's name ends


def num_labels(config: Mapping[str, Any]) -> int:
    """The outputs of a model's config.json, as transformers counts them: its id2label, else num_labels, else 2."""
    labels = config.get("id2label")
    if isinstance(labels, dict) and labels:
        return len(labels)
    n = config.get("num_labels")
    return n if isinstance(n, int) else 2


def architecture_problem(architectures: Any) -> str | None:
    """Why a model of `architectures` (config.json's list) cannot be a reward model (None: it can): it is not a
    sequence classifier, so the score head transformers would put on it is random."""
    names = [a for a in architectures if isinstance(a, str)] if isinstance(architectures, list) else []
    if any(a.endswith(CLASSIFIER) for a in names):
        return None
    found = f"its architectures are {names}" if names else "its config.json names no architecture"
    return (
        f"not a sequence-classification model ({found}): its score head would be random; give a reward model "
        f"whose config.json names a *{CLASSIFIER} architecture"
    )


def label_problem(outputs: int, label: int | None) -> str | None:
    """Why `label` cannot choose the reward among a model's `outputs` logits (None: it can): more than one and
    none chosen, or one past them."""
    if label is None and outputs > 1:
        return (
            f"the model has {outputs} outputs (num_labels {outputs}): set `label` to the index of the logit that "
            f"is the reward (0 to {outputs - 1})"
        )
    if label is not None and label >= outputs:
        return f"label {label} is past the model's {outputs} outputs: set `label` from 0 to {outputs - 1}"
    return None


def reward_model_problems(config: RewardModelConfig, workflow: str, key: str) -> list[str]:
    """Problems of reward model `config` (at `key`) for a pool of `workflow`, one line each: a workflow it does
    not score; where the model's config.json can be read here, an architecture that is not a sequence
    classifier or a `label` its outputs do not have."""
    problems = []
    if workflow not in SCORED_WORKFLOWS:
        problems.append(
            f"{key}: a reward model scores workflow {', '.join(SCORED_WORKFLOWS)} only, not {workflow!r} (its "
            "rewards are functions or its environment's); use workflow rlvr or a reward function"
        )
    try:
        found = read_model_config(config.model)
    except ConfigError as e:
        return [*problems, f"{key}.model: {e}"]
    if found is None:
        return problems  # not here: the check here says so (reward_model_here_problems)
    if (problem := architecture_problem(found.get("architectures"))) is not None:
        problems.append(f"{key}.model: {config.model}: {problem}")
    elif (problem := label_problem(num_labels(found), config.label)) is not None:
        problems.append(f"{key}.label: {config.model}: {problem}")
    return problems


def reward_model_here_problems(config: RewardModelConfig, key: str) -> list[str]:
    """What this machine lacks to load reward model `config` (at `key`): its files (a directory with config.json
    and weights, or a hub id cached or on a hub that answers) and its device."""
    problems = []
    if (problem := model_problem(config.model)) is not None:
        problems.append(f"{key}.model: {problem}")
    if config.device != "auto" and (problem := device_problem(config.device)) is not None:
        problems.append(f"{key}.device: {problem}")
    return problems
