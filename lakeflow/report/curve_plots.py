"""Plots of the metric-table curves (see curves.py), drawn like plots.py: one PNG each, False when empty."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from lakeflow.report.data import ModelData
from lakeflow.report.figures import colour, date_axis, integer_x, new_figure, nothing_to_draw, save, utc_times


def training_plot(models: Sequence[ModelData], path: Path) -> bool:
    """Loss, KL(current || behaviour) and token entropy per trainer step, one line per model; and the
    engine-trainer mismatch (mean solid, p99 dashed) where the trainer measured it."""
    drawn = [(i, m) for i, m in enumerate(models) if m.curves.steps]
    if not drawn:
        return nothing_to_draw(path)
    measured = any(v is not None for _, m in drawn for v in m.curves.mismatch_mean)
    fig, axes = new_figure(4 if measured else 3, 2.6, sharex=True)
    panels = (
        ("loss", "Loss per step", "loss (token mean)"),
        ("kl", "KL(current || behaviour) per step", "nats per token (k3)"),
        ("entropy", "Token entropy per step", "nats per token"),
    )
    for ax, (name, title, unit) in zip(axes, panels, strict=False):
        for i, m in drawn:
            ax.plot(m.curves.steps, _nan(getattr(m.curves, name)), "-", color=colour(i), label=m.model_id)
        ax.set(title=title, ylabel=unit)
    if measured:
        for i, m in drawn:
            axes[3].plot(m.curves.steps, _nan(m.curves.mismatch_mean), "-", color=colour(i), label=m.model_id)
            axes[3].plot(m.curves.steps, _nan(m.curves.mismatch_p99), "--", color=colour(i))
        axes[3].set(title="Engine-trainer mismatch per step (mean, p99 dashed)", ylabel="|Δ log p| (nats)")
    for ax in axes:
        integer_x(ax)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("trainer step")
    axes[0].legend(title="model")
    return save(fig, path)


def _nan(values: Sequence[float | None]) -> list[float]:
    return [float("nan") if v is None else v for v in values]


def rollout_plot(models: Sequence[ModelData], path: Path) -> bool:
    """Mean response length (top) and share of finish reasons (bottom) per rollout window."""
    drawn = [(i, m) for i, m in enumerate(models) if m.curves.window_at]
    if not drawn:
        return nothing_to_draw(path)
    fig, (top, bottom) = new_figure(2, 3.0, sharex=True)
    styles = {"stop": "-", "length": "--", "other": ":"}
    for i, m in drawn:
        times = utc_times(m.curves.window_at)
        lengths = [float("nan") if v is None else v for v in m.curves.response_len]
        top.plot(times, lengths, "o-", ms=3, color=colour(i), label=m.model_id)
        for reason, shares in m.curves.finish_share.items():
            label = f"{m.model_id}: {reason}"
            bottom.plot(times, [100 * s for s in shares], styles.get(reason, "-"), color=colour(i), label=label)
    top.set(title="Response length per rollout window", ylabel="tokens (mean)")
    bottom.set(title="Finish reasons per rollout window", xlabel="time (UTC)", ylabel="% of samples")
    bottom.set_ylim(-3, 103)  # lines at 0 and 100 stay visible
    for ax in (top, bottom):
        date_axis(ax)
        ax.grid(alpha=0.3)
    top.legend(title="model")
    bottom.legend(fontsize="small")
    return save(fig, path)


def eval_plot(models: Sequence[ModelData], path: Path) -> bool:
    """Held-out pass@1 per version beside the training (rollout) mean reward per version."""
    drawn = [(i, m) for i, m in enumerate(models) if m.curves.eval]
    if not drawn:
        return nothing_to_draw(path)
    fig, (ax,) = new_figure(1, 4.0)
    for i, m in drawn:
        if m.rewards:
            versions = [r.version for r in m.rewards]
            ax.plot(
                versions,
                [r.mean_reward for r in m.rewards],
                "-",
                alpha=0.5,
                color=colour(i),
                label=f"{m.model_id}: training reward (rollouts)",
            )
        for dataset, points in m.curves.eval.items():
            ax.plot(
                [p[0] for p in points],
                [p[1] for p in points],
                "s-",
                color=colour(i),
                label=f"{m.model_id}: eval pass@1 ({dataset})",
            )
    ax.set(title="Held-out evaluation per weight version", xlabel="weight version", ylabel="pass@1 / mean reward")
    integer_x(ax)
    ax.grid(alpha=0.3)
    ax.legend()
    return save(fig, path)
