"""The report page: gathers the numbers, draws the plots and writes `index.html` next to them.

One self-contained HTML file (inline CSS, no scripts) that links the PNGs by relative name, so
the output folder can be copied or served as is. Every piece of text is escaped.
"""

from __future__ import annotations

import html
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lakeflow.io import Store
from lakeflow.lake.heartbeats import Production
from lakeflow.report import curve_plots, figures, plots
from lakeflow.report.agents import render_eval_html
from lakeflow.report.agents import render_html as render_agents
from lakeflow.report.data import ModelData, ReportData, gather, summary
from lakeflow.report.mismatch import render_html as render_mismatch

INDEX = "index.html"


@dataclass(frozen=True)
class Plot:
    """One plot of the page: its file, heading, what to look for, and how to draw it."""

    file: str
    title: str
    caption: str
    draw: Callable[[Sequence[ModelData], Path], bool]


PLOTS = (
    Plot(
        "reward.png",
        "Reward per weight version",
        "Mean reward should rise with the version; versions with few samples (bottom) are noisy.",
        plots.reward_plot,
    ),
    Plot(
        "trainer_wait.png",
        "Trainer wait fraction",
        "Time the trainer waits for its next batch: high means rollouts are the bottleneck, "
        "near zero means the trainer is.",
        plots.wait_plot,
    ),
    Plot(
        "throughput.png",
        "Rollout throughput",
        "Samples committed per minute by the rollout services; drops to zero mean they stalled or were stopped.",
        plots.throughput_plot,
    ),
    Plot(
        "pool_size.png",
        "Rollout pool size",
        "From the autoscaler's record: rollout services it asked for (solid) and saw live (dashed); live lags "
        "the ask while new services start and removed ones finish their group.",
        plots.pool_size_plot,
    ),
    Plot(
        "staleness.png",
        "Staleness of trained samples",
        "How many versions behind the trainer each trained sample was; mass far from 0 means off-policy data.",
        plots.staleness_plot,
    ),
    Plot(
        "weights.png",
        "Weight deltas",
        "Bytes each version adds to the lake and the share of weights unchanged; "
        "a delta close to the full state size means updates are dense.",
        plots.weights_plot,
    ),
    Plot(
        "training.png",
        "Loss, KL and entropy per step",
        "From the trainer_steps table. KL: how far the trained policy moved from the policy that sampled its "
        "data (k3, nats per token); entropy falling towards 0 means the policy has become deterministic.",
        curve_plots.training_plot,
    ),
    Plot(
        "rollouts.png",
        "Response lengths and finish reasons",
        "From the rollout_stats table: 'length' means cut off by max_new_tokens.",
        curve_plots.rollout_plot,
    ),
    Plot(
        "eval.png",
        "Held-out evaluation",
        "From the eval table: pass@1 on held-out prompts per weight version, beside the rollouts' mean reward.",
        curve_plots.eval_plot,
    ),
)

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1000px; color: #222; padding: 0 1em; }
h1 { margin-bottom: 0.2em; } .meta { color: #555; margin-top: 0; }
table { border-collapse: collapse; margin: 1em 0; } td, th { border: 1px solid #ccc; padding: 4px 10px; }
th { background: #f3f3f3; text-align: left; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
img { max-width: 100%; border: 1px solid #eee; } .caption { color: #444; margin-top: 0.3em; }
.empty { color: #888; font-style: italic; } .notes { color: #555; font-size: 0.9em; }
td.text { white-space: pre-wrap; font-family: ui-monospace, monospace; font-size: 0.85em; max-width: 30em; }
"""

_COLUMNS = (
    ("model", "model"),
    ("weight_versions", "weight versions"),
    ("latest_version", "latest version"),
    ("batches", "batches"),
    ("samples", "samples"),
    ("first_version", "first sampled version"),
    ("first_reward", "its mean reward"),
    ("latest_sampled_version", "latest sampled version"),
    ("latest_reward", "its mean reward"),
    ("quarantined_rows", "quarantined rows"),
)

_SERVICE_COLUMNS = (
    ("raas_id", "rollout service"),
    ("model_id", "model"),
    ("region", "region"),
    ("engine", "engine"),
    ("state", "state"),
    ("at", "last heartbeat"),
    ("groups", "groups"),
    ("samples", "samples"),
    ("tokens_per_s", "tokens/s while generating"),
    ("samples_per_s", "samples/s over its life"),
    ("share", "share of its pool's samples"),
    ("weights_version", "weights version"),
)

_POOL_COLUMNS = (
    ("model_id", "model"),
    ("region", "region"),
    ("live", "live services"),
    ("services", "services"),
    ("groups", "groups"),
    ("samples", "samples"),
    ("samples_per_s", "samples/s (live services)"),
    ("oldest_version", "oldest weights version (live)"),
    ("newest_version", "newest weights version (live)"),
    ("version_lag", "versions behind the newest published"),
    ("pulled_bytes", "weight bytes pulled"),
)


def write_report(store: Store, out: Path, now: datetime | None = None) -> Path:
    """Write `out/index.html` and its PNGs (replacing earlier ones) for the lake at `store`; returns the page."""
    figures.require_matplotlib()
    now = now or datetime.now(UTC)
    data = gather(store, now)
    out.mkdir(parents=True, exist_ok=True)
    models = list(data.models.values())
    drawn = {p.file: p.draw(models, out / p.file) for p in PLOTS}
    page = out / INDEX
    tmp = out / f".{INDEX}.tmp"
    tmp.write_text(render(data, drawn, now), encoding="utf-8")
    os.replace(tmp, page)  # a browser refreshing the page never sees half of it
    return page


def render(data: ReportData, drawn: dict[str, bool], now: datetime) -> str:
    """The page for `data`; `drawn[file]` says whether that plot's PNG was written."""
    e = html.escape
    when = now.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>lakeflow report: {e(data.lake_url)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>lakeflow report: {e(data.lake_url)}</h1>",
        f'<p class="meta">Generated {e(when)} · {len(data.models)} model(s)</p>',
        "<h2>Summary</h2>",
        _summary_table(data),
        "<h2>Rollout services</h2>",
        _rollout_tables(data.rollout),
        render_agents(data.agents),
        render_eval_html(data.agent_evals),
        render_mismatch(data.mismatch),
    ]
    for plot in PLOTS:
        parts.append(f"<h2>{e(plot.title)}</h2>")
        if drawn.get(plot.file):
            parts.append(f'<img src="{e(plot.file)}" alt="{e(plot.title)}">')
            parts.append(f'<p class="caption">{e(plot.caption)}</p>')
        else:
            parts.append('<p class="empty">No data yet.</p>')
    parts.append("<h2>Sample completions</h2>")
    parts.append(_completions(data))
    if data.notes:
        parts.append("<h2>Left out</h2>")
        parts.append('<ul class="notes">' + "".join(f"<li>{e(n)}</li>" for n in data.notes) + "</ul>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _summary_table(data: ReportData) -> str:
    rows = summary(data)
    if not rows:
        return '<p class="empty">No data yet: the lake has no samples, batches or weights.</p>'
    head = "".join(f"<th>{html.escape(label)}</th>" for _, label in _COLUMNS)
    body = []
    for row in rows:
        cells = "".join(_cell(row[name]) for name, _ in _COLUMNS)
        body.append(f"<tr>{cells}</tr>")
    extra = ""
    if data.quarantined_unattributed:
        extra = f'<p class="notes">Quarantined rows naming no model: {data.quarantined_unattributed}</p>'
    return f"<table><tr>{head}</tr>{''.join(body)}</table>{extra}"


def _rollout_tables(made: Production) -> str:
    """Per service and per pool (model, region), from the heartbeats: tasks are claimed, not assigned,
    so a faster service makes a larger share of its pool's samples."""
    if not made.services:
        return '<p class="empty">No rollout service has written a heartbeat.</p>'
    parts = []
    for rows, columns in ((made.services, _SERVICE_COLUMNS), (made.pools, _POOL_COLUMNS)):
        head = "".join(f"<th>{html.escape(label)}</th>" for _, label in columns)
        body = "".join(
            "<tr>" + "".join(_rollout_cell(name, getattr(r, name)) for name, _ in columns) + "</tr>" for r in rows
        )
        parts.append(f"<table><tr>{head}</tr>{body}</table>")
    note = "Tokens/s: the service's own measure over its recent groups; samples/s: samples over its whole life."
    return "".join(parts) + f'<p class="notes">{note}</p>'


def _completions(data: ReportData) -> str:
    """Per model and shown version: the best and worst sample by reward and one cut off at max_new_tokens."""
    e = html.escape
    parts = []
    for model in data.models.values():
        if not model.completions:
            continue
        head = "".join(
            f"<th>{label}</th>" for label in ("version", "", "reward", "finish", "tokens", "prompt", "response")
        )
        rows = []
        for s in model.completions:
            prompt = e(s.prompt) if s.prompt is not None else "<i>no tokenizer in the lake</i>"
            response = e(s.response) if s.response is not None else "<i>no tokenizer in the lake</i>"
            rows.append(
                f"<tr>{_cell(s.version)}<td>{e(s.kind)}</td>{_cell(s.reward)}<td>{e(s.finish_reason)}</td>"
                f'{_cell(s.tokens)}<td class="text">{prompt}</td><td class="text">{response}</td></tr>'
            )
        parts.append(f"<h3>{e(model.model_id)}</h3><table><tr>{head}</tr>{''.join(rows)}</table>")
    if not parts:
        return '<p class="empty">No samples yet.</p>'
    note = (
        "Text decoded from the token ids with the model's tokenizer (SQL: prompt_text, response_text of "
        "trajectories). Agent episodes' turns are not shown here yet."
    )
    return "".join(parts) + f'<p class="notes">{note}</p>'


def _rollout_cell(name: str, value: Any) -> str:
    if value is not None and name == "share":
        return f'<td class="n">{value:.0%}</td>'
    if value is not None and name == "at":
        return _cell(value[:19].replace("T", " "))  # UTC to the second
    return _cell(value)


def _cell(value: Any) -> str:
    if value is None:
        return '<td class="n">–</td>'
    if isinstance(value, float):
        return f'<td class="n">{value:.3f}</td>'
    if isinstance(value, int):
        return f'<td class="n">{value}</td>'
    return f"<td>{html.escape(str(value))}</td>"
