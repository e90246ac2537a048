"""The report's plots: one function per PNG, drawn with matplotlib's Agg canvas (no display, no pyplot).

Each function takes the gathered numbers and a path, writes the PNG and returns True, or
returns False (and removes a PNG left by an earlier report) when there is nothing to draw.
A model keeps the same colour in every plot (what plots share is in figures.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from lakeflow.report.data import ModelData
from lakeflow.report.figures import colour, date_axis, integer_x, new_figure, nothing_to_draw, save, utc_times


def reward_plot(models: Sequence[ModelData], path: Path) -> bool:
    """Mean reward per weight version (top) and samples per version (bottom), one line per model."""
    drawn = [(i, m) for i, m in enumerate(models) if m.rewards]
    if not drawn:
        return nothing_to_draw(path)
    fig, (top, bottom) = new_figure(2, 3.2, sharex=True)
    for i, m in drawn:
        versions = [r.version for r in m.rewards]
        top.plot(versions, [r.mean_reward for r in m.rewards], "o-", color=colour(i), label=m.model_id)
        bottom.plot(versions, [r.samples for r in m.rewards], "o-", color=colour(i), label=m.model_id)
    top.set(title="Mean reward per weight version", ylabel="mean reward (reward units)")
    bottom.set(title="Samples per weight version", xlabel="weight version (policy_version)", ylabel="samples")
    bottom.set_ylim(bottom=0)
    for ax in (top, bottom):
        integer_x(ax)
        ax.grid(alpha=0.3)
    top.legend(title="model")
    return save(fig, path)


def wait_plot(models: Sequence[ModelData], path: Path) -> bool:
    """The trainer's wait / (wait + step) per step over wall-clock time, one line per model."""
    drawn = [(i, m) for i, m in enumerate(models) if m.trainer]
    if not drawn:
        return nothing_to_draw(path)
    fig, (ax,) = new_figure(1, 4.0)
    for i, m in drawn:
        times = utc_times([s.at for s in m.trainer])
        ax.plot(times, [100 * s.wait_fraction for s in m.trainer], "o-", ms=3, color=colour(i), label=m.model_id)
    ax.set(title="Trainer wait fraction per step", xlabel="time (UTC)", ylabel="waiting for a batch (% of step)")
    ax.set_ylim(0, 100)
    date_axis(ax)
    ax.grid(alpha=0.3)
    ax.legend(title="model")
    return save(fig, path)


def throughput_plot(models: Sequence[ModelData], path: Path) -> bool:
    """Samples committed per minute (by the samples' created_at, per actual bin duration), one line per model."""
    drawn = [(i, m) for i, m in enumerate(models) if m.rate_per_min]
    if not drawn:
        return nothing_to_draw(path)
    fig, (ax,) = new_figure(1, 4.0)
    for i, m in drawn:
        edges = utc_times([datetime.fromtimestamp(s, UTC) for s in m.rate_edges_s])
        label = m.model_id if m.rate_bin_min == 1 else f"{m.model_id} ({m.rate_bin_min}-minute bins)"
        # each rate holds for its whole bin: repeat the last one at the end of the last bin
        ax.step(edges, [*m.rate_per_min, m.rate_per_min[-1]], where="post", color=colour(i), label=label)
        ax.plot(edges[:-1], m.rate_per_min, "o", ms=3, color=colour(i))
    ax.set(title="Rollout throughput", xlabel="time (UTC)", ylabel="samples per minute")
    ax.set_ylim(bottom=0)
    date_axis(ax)
    ax.grid(alpha=0.3)
    ax.legend(title="model")
    return save(fig, path)


def pool_size_plot(models: Sequence[ModelData], path: Path) -> bool:
    """Rollout services the autoscaler asked for (solid) and saw live (dashed) over time, one colour per model."""
    from matplotlib.ticker import MaxNLocator

    drawn = [(i, m) for i, m in enumerate(models) if m.pool_size]
    if not drawn:
        return nothing_to_draw(path)
    fig, (ax,) = new_figure(1, 4.0)
    top = 1
    for i, m in drawn:
        times = utc_times([p.at for p in m.pool_size])
        ax.step(
            times, [p.replicas for p in m.pool_size], where="post", color=colour(i), label=f"{m.model_id}: asked for"
        )
        seen = [(t, p.live) for t, p in zip(times, m.pool_size, strict=True) if p.live is not None]
        if seen:
            ax.step(
                [t for t, _ in seen],
                [n for _, n in seen],
                "--",
                where="post",
                color=colour(i),
                label=f"{m.model_id}: live",
            )
        top = max(top, *(p.replicas for p in m.pool_size), *(n for _, n in seen))
    ax.set(title="Rollout pool size", xlabel="time (UTC)", ylabel="rollout services")
    ax.set_ylim(0, top + 1)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # services come whole
    date_axis(ax)
    ax.grid(alpha=0.3)
    ax.legend(title="model")
    return save(fig, path)


def staleness_plot(models: Sequence[ModelData], path: Path) -> bool:
    """Histogram of step - policy_version over every trained row, one panel per model, fresh and replay stacked."""
    drawn = [m for m in models if any(m.staleness.values())]
    if not drawn:
        return nothing_to_draw(path)
    fig, axes = new_figure(len(drawn), 2.8)
    kinds = {"fresh": "C2", "replay": "C1"}
    for ax, m in zip(axes, drawn, strict=True):
        top = max(max(v) for v in m.staleness.values() if v)
        low = min(0, *(min(v) for v in m.staleness.values() if v))
        xs = list(range(low, top + 1))
        base = [0] * len(xs)
        for kind in sorted(m.staleness, key=lambda k: (k not in kinds, k)):
            counts = [0] * len(xs)
            for s in m.staleness[kind]:
                counts[s - low] += 1
            ax.bar(xs, counts, bottom=base, color=kinds.get(kind, "C7"), label=f"{kind} ({sum(counts)} rows)")
            base = [b + c for b, c in zip(base, counts, strict=True)]
        ax.set(title=f"Staleness of trained samples: {m.model_id}", ylabel="rows")
        integer_x(ax)
        ax.grid(alpha=0.3, axis="y")
        ax.legend()
    axes[-1].set_xlabel("staleness (trainer step − policy_version, in versions)")
    return save(fig, path)


def weights_plot(models: Sequence[ModelData], path: Path) -> bool:
    """Stored delta size (top) and sparsity (bottom) per weight version, one line per model."""
    drawn = [(i, m) for i, m in enumerate(models) if m.weights]
    if not drawn:
        return nothing_to_draw(path)
    sizes = [w.delta_bytes for _, m in drawn for w in m.weights if w.delta_bytes is not None]
    unit, scale = _byte_unit(max(sizes, default=0))
    fig, (top, bottom) = new_figure(2, 3.2, sharex=True)
    full_labelled = False
    for i, m in drawn:
        deltas = [(w.version, w.delta_bytes / scale) for w in m.weights if w.delta_bytes is not None]
        state = _byte_text(m.weights[-1].state_bytes)
        top.plot(*_xy(deltas), "o-", color=colour(i), label=f"{m.model_id} (full state {state})")
        fulls = [(w.version, w.delta_bytes / scale) for w in m.weights if w.kind == "full" and w.delta_bytes]
        if fulls:
            label = None if full_labelled else "version with a full copy"
            top.plot(*_xy(fulls), "s", ms=9, mfc="none", color="black", label=label)
            full_labelled = True
        sparsity = [(w.version, 100 * w.sparsity) for w in m.weights if w.sparsity is not None]
        bottom.plot(*_xy(sparsity), "o-", color=colour(i), label=m.model_id)
    top.set(title="Delta size per weight version", ylabel=f"delta size ({unit})")
    top.set_ylim(0, 1.4 * max(sizes, default=1) / scale)  # headroom for the legend
    bottom.set(
        title="Sparsity of each update",
        xlabel="weight version",
        ylabel="elements unchanged (%)",
    )
    for ax in (top, bottom):
        integer_x(ax)
        ax.grid(alpha=0.3)
    top.legend(title="model")
    return save(fig, path)


def _xy(points: list[tuple[int, float]]) -> tuple[list[int], list[float]]:
    return [p[0] for p in points], [p[1] for p in points]


_UNITS = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def _byte_unit(largest: int) -> tuple[str, float]:
    for name, size in _UNITS:
        if largest >= size:
            return name, float(size)
    return "bytes", 1.0


def _byte_text(n: int) -> str:
    unit, scale = _byte_unit(n)
    return f"{n / scale:.1f} {unit}" if scale > 1 else f"{n} bytes"
