"""Agent episodes per weight version in `lakeflow status --agents` and the report, from samples' extra."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from lakeflow.cli.dataflow import status
from lakeflow.io import open_store
from lakeflow.lake import write_samples
from lakeflow.lakeview import connect_lake
from lakeflow.report.agents import agent_by_version, render_html, render_text
from tests.lake.helpers import sample


def _episode(version: int, turns: int, calls: dict[str, int], errors: int) -> dict[str, object]:
    info = {"turns": turns, "tool_calls": calls, "tool_errors": errors, "malformed_calls": 0, "end": "done"}
    return sample(policy_version=version, max_version=version, extra=json.dumps(info))


def test_agent_rows_per_version_in_status_and_report(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "lake"))
    write_samples(
        store,
        [
            _episode(0, 2, {}, 0),
            _episode(0, 2, {"search": 1}, 1),
            _episode(1, 3, {"search": 2, "open": 1}, 0),
            sample(policy_version=1, max_version=1),  # not an agent sample: left out
        ],
    )
    rows = agent_by_version(connect_lake(store))
    assert [
        (r.version, r.samples, r.turns_per_episode, r.tool_calls_per_turn, r.tool_errors_per_episode) for r in rows
    ] == [
        (0, 2, 2.0, 0.25, 0.5),
        (1, 1, 3.0, 1.0, 0.0),
    ]
    assert "tool calls/turn" in render_text(rows)[1] and "<h2>Agent episodes</h2>" in render_html(rows)
    assert render_html([]) == "" and render_text([]) == ["agent episodes: none in the lake"]

    out = CliRunner().invoke(status, ["--lake", store.url, "--agents"], catch_exceptions=False).output
    assert "agent episodes per weight version:" in out and "0.25" in out
    report = json.loads(CliRunner().invoke(status, ["--lake", store.url, "--agents", "--json"]).output)
    assert [r["tool_calls_per_turn"] for r in report["agents"]] == [0.25, 1.0]
