"""`python -m benchmarks window` end to end at a tiny size (a longer window packs more groups per shard; no
timing assertion), and the tables of `bench window` and `bench remote` from given results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from benchmarks.cli import main as bench
from benchmarks.remote import render as render_remote
from benchmarks.window import render as render_window

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
# untraced: the benchmark itself runs here traced; its `lakeflow run`s are tests/run/test_run.py's
@pytest.mark.usefixtures("untraced_children")
def test_bench_window_packs_groups_with_a_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # the job's dataset path is relative to the checkout
    args = ["window", "--windows", "0,5", "--steps", "2", "--replicas", "1", "--json"]
    result = CliRunner().invoke(bench, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    none, five = report["runs"]
    assert (none["window_s"], five["window_s"]) == (0, 5)
    assert none["groups_per_shard"] == 1.0 and five["groups_per_shard"] > 1.0
    assert five["shards_per_step"] < none["shards_per_step"]
    assert none["staleness_max"] <= 2 and 0 <= none["untrained"] < 1
    assert "groups/shard" in render_window(report)


def test_bench_remote_table_lists_each_region_of_each_run() -> None:
    region = {"share": 0.5, "trained_share": 0.4, "pulls": 3, "bytes_per_pull": 2e5, "s_per_pull": 1.5}
    region["staleness_mean"] = 1.25
    runs = [
        {"variant": "home only", "wait_fraction": 0.9, "wall_s": 10.0, "regions": {"home": {**region, "share": 1}}},
        {
            "variant": "home + far",
            "wait_fraction": 0.5,
            "wall_s": 8.0,
            "regions": {"far": {**region, "staleness_mean": None}, "home": region},
        },
    ]
    result = {"steps": 4, "rate_mbit": 20, "rtt_ms": 100, "prompts_per_step": 8, "max_new_tokens": 8, "pace_s": 0.05}
    text = render_remote({**result, "runs": runs})
    lines = [line.split() for line in text.splitlines()]
    assert ["home", "only", "90%", "10.0", "home", "100%", "40%", "3", "200", "1.50", "1.25"] in lines
    assert ["far", "50%", "40%", "3", "200", "1.50", "-"] in [line[-7:] for line in lines]
    assert "20 Mbit/s and +100 ms RTT" in text


def test_bench_remote_shapes_the_link_it_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    """The far link gets the rate and round trip the table names (bits per second: an earlier version
    divided by 8 twice and measured a link eight times slower than it said)."""
    from benchmarks import link as link_module
    from benchmarks import remote as bench_remote
    from lakeflow.run.config import load_run_config

    made: list[tuple[float, float, bool]] = []

    class Stop(Exception):
        pass

    class Recorder(link_module.ShapedLink):
        def __init__(self, upstream: tuple[str, int], rate_bps: float, rtt_s: float, pipelined: bool = False):
            made.append((rate_bps, rtt_s, pipelined))
            super().__init__(upstream, rate_bps, rtt_s, pipelined)

    def stop(*args: object, **kwargs: object) -> None:
        raise Stop

    monkeypatch.setattr("benchmarks.regions.ShapedLink", Recorder)
    monkeypatch.setattr(bench_remote, "run_variant", stop)
    with pytest.raises(Stop):
        bench_remote.run(load_run_config(str(REPO / "jobs/examples/tiny-math.yaml")), rate_mbit=20.0, rtt_ms=100.0)
    assert made == [(20e6, 0.1, True)]
