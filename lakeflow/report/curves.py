"""The report's curves from the lake's metric tables (`lakeflow sql` views): trainer loss, KL, entropy and
the engine-trainer mismatch per step, rollout response lengths and finish reasons per window, held-out eval
per version."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from lakeflow.lakeview import LakeQuery


@dataclass
class Curves:
    """One model's metric curves (empty lists: the table has no rows for it)."""

    steps: list[int] = field(default_factory=list)
    loss: list[float | None] = field(default_factory=list)
    kl: list[float | None] = field(default_factory=list)
    entropy: list[float | None] = field(default_factory=list)
    # |trainer - engine| log-probability of the sampled tokens (nats): mean and p99 (None: not measured)
    mismatch_mean: list[float | None] = field(default_factory=list)
    mismatch_p99: list[float | None] = field(default_factory=list)
    # rollout windows, by end time: mean response length (tokens) and the share of each finish reason
    window_at: list[datetime] = field(default_factory=list)
    response_len: list[float | None] = field(default_factory=list)
    finish_share: dict[str, list[float]] = field(default_factory=dict)
    # held-out evaluation: dataset -> [(version, pass@1, mean reward)]
    eval: dict[str, list[tuple[int, float, float]]] = field(default_factory=dict)


def curves(lake: LakeQuery) -> dict[str, Curves]:
    """Per model, from the trainer_steps, rollout_stats and eval views."""
    out: dict[str, Curves] = {}
    steps = lake.sql(
        "SELECT model_id, step, arg_max(loss, created_at) AS loss, arg_max(kl, created_at) AS kl, "
        "arg_max(entropy, created_at) AS entropy, arg_max(mismatch_mean, created_at) AS mismatch_mean, "
        "arg_max(mismatch_p99, created_at) AS mismatch_p99 "
        "FROM trainer_steps GROUP BY model_id, step ORDER BY model_id, step"  # a retrained step: its last row
    )
    for r in steps.to_pylist():
        c = out.setdefault(r["model_id"], Curves())
        c.steps.append(r["step"])
        c.loss.append(r["loss"])
        c.kl.append(r["kl"])
        c.entropy.append(r["entropy"])
        c.mismatch_mean.append(r["mismatch_mean"])
        c.mismatch_p99.append(r["mismatch_p99"])
    windows = lake.sql(
        "SELECT model_id, created_at AS window_end, sum(tokens) / nullif(sum(samples), 0) AS len, sum(samples) AS n, "
        "sum(finish_stop) AS stop, sum(finish_length) AS length, sum(finish_other) AS other "
        "FROM rollout_stats GROUP BY model_id, window_end HAVING sum(samples) > 0 ORDER BY model_id, window_end"
    )
    for r in windows.to_pylist():
        c = out.setdefault(r["model_id"], Curves())
        c.window_at.append(r["window_end"])
        c.response_len.append(r["len"])
        for reason in ("stop", "length", "other"):
            c.finish_share.setdefault(reason, []).append(r[reason] / r["n"])
    evals = lake.sql(
        "SELECT model_id, dataset, policy_version, arg_max(pass_at_1, created_at) AS p, "
        "arg_max(reward_mean, created_at) AS r "
        "FROM eval GROUP BY ALL ORDER BY model_id, dataset, policy_version"
    )
    for r in evals.to_pylist():
        c = out.setdefault(r["model_id"], Curves())
        c.eval.setdefault(r["dataset"], []).append((r["policy_version"], r["p"], r["r"]))
    return out
