"""Observability of a local run: the evaluation processes of the models with an `eval:` section, and the
run's tracker handed to every trainer, rollout pool and evaluation that has none of its own."""

from __future__ import annotations

from pathlib import Path

from lakeflow.run.config import RunConfig
from lakeflow.run.processes import ProcessSpec
from lakeflow.tracking.config import TrackerConfig


def eval_specs(config: RunConfig) -> list[ProcessSpec]:
    """One `lakeflow eval` process per model with an `eval:` section: it follows the model's versions and
    exits once version `steps` is evaluated (the run waits for it, as for the trainers). Its engine is the
    model's rollout pool's unless the section names one, and so are its reward, chat template, and an agent
    pool's `environment` or `agent` (the eval then plays whole episodes)."""
    out = []
    for m in config.models:
        if m.eval is None:
            continue
        section = m.eval if m.eval.engine is not None else m.eval.model_copy(update={"engine": m.raas.config.engine})
        if section.reward is None and isinstance(m.raas.config.reward, str):  # a judge, a reward model: not the eval's
            section = section.model_copy(update={"reward": m.raas.config.reward})
        if section.chat_template is None:
            section = section.model_copy(update={"chat_template": m.raas.config.chat_template})
        section = section.model_copy(update=m.eval_episodes())
        flags = ("--model", m.id, "--until-version", str(config.steps))
        data = section.model_dump(mode="json")
        out.append(ProcessSpec(f"eval-{m.id}", "eval", m.id, "eval", flags, f"eval-{m.id}.yaml", data))
    return out


def with_tracker(config: RunConfig, tracker: TrackerConfig | None, run_dir: Path) -> RunConfig:
    """`config` with `tracker` (the run's, else the config's `tracker:`) set on every trainer, rollout pool
    and evaluation without one of their own; a tracker left at the default folder writes under
    `<run_dir>/trackers`, grouped by the run's name."""
    tracker = tracker or config.tracker
    if tracker is None:
        return config
    default = TrackerConfig.model_fields["dir"].default
    updates = {"group": tracker.group or config.name}
    if tracker.dir == default:
        updates["dir"] = str(run_dir / "trackers")
    tracker = tracker.model_copy(update=updates)
    models = []
    for m in config.models:
        trainer = m.trainer if m.trainer.tracker else m.trainer.model_copy(update={"tracker": tracker})
        pool = m.raas.config if m.raas.config.tracker else m.raas.config.model_copy(update={"tracker": tracker})
        evaluation = m.eval if m.eval is None or m.eval.tracker else m.eval.model_copy(update={"tracker": tracker})
        raas = m.raas.model_copy(update={"config": pool})
        models.append(m.model_copy(update={"trainer": trainer, "raas": raas, "eval": evaluation}))
    return config.model_copy(update={"models": models, "tracker": tracker})
