"""`lakeflow dataflow`, `status`, `policy check`, `sql` over the catalog, and config validation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from lakeflow.catalog.policy import load_policy
from lakeflow.catalog.state import Catalog
from lakeflow.cli import main
from lakeflow.dataflow.balance import target_pool
from lakeflow.dataflow.config import load_config
from lakeflow.errors import ConfigError, PolicyError

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, code: int = 0) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == code, result.output
    return result.output


def test_dataflow_status_and_sql_end_to_end(tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    run("synth", "--lake", lake, "--samples", "2000", "--versions", "0-0", "--response-tokens", "16")
    out = run(
        "dataflow", "--lake", lake, "--config", str(ROOT / "jobs/examples/dataflow-tiny.yaml"), "--iterations", "2"
    )
    counters = json.loads(out.strip().splitlines()[-1])
    assert counters["samples"] == 2000 and counters["batches"] >= 1 and counters["tasks_issued"] > 0
    status = run("status", "--lake", lake)
    assert "policy" in status and "fresh" in status and "quarantined rows: 0" in status
    report = json.loads(run("status", "--lake", lake, "--json"))
    assert report["models"]["policy"]["batches"] == counters["batches"]
    assert report["models"]["policy"]["tasks_open"] == counters["tasks_issued"]
    rows = run(
        "sql",
        "--lake",
        lake,
        "--format",
        "json",
        "SELECT (SELECT count(*) FROM samples) AS samples, (SELECT count(*) FROM served) AS served, "
        "(SELECT count(*) FROM tasks) AS tasks, (SELECT count(*) FROM prompts) AS prompts",
    )
    got = json.loads(rows)
    assert got["samples"] == 2000 and got["served"] == 32 * counters["batches"] and got["prompts"] == 1000


def test_a_second_dataflow_process_is_refused(tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    from lakeflow.dataflow.lease import serving_lease
    from lakeflow.io import open_store

    held = serving_lease(open_store(lake), ttl=__import__("datetime").timedelta(minutes=5), owner="other-host")
    held.acquire()
    out = run("dataflow", "--lake", lake, "--config", str(ROOT / "jobs/examples/dataflow-tiny.yaml"), code=1)
    assert "lake is served by dataflow process other-host" in out and "--wait" in out


def test_policy_check_reports_what_is_wrong(tmp_path: Path) -> None:
    assert run("policy", "check", "replay", "reward_weighted").startswith("ok: replay policy")
    evil = tmp_path / "evil.sql"
    evil.write_text("SELECT group_id FROM read_csv('/etc/passwd')")
    assert "disabled by configuration" in run("policy", "check", "filter", str(evil), code=1)
    two = tmp_path / "two.sql"
    two.write_text("SELECT group_id FROM candidates; DROP TABLE groups")
    assert "exactly one SELECT" in run("policy", "check", "filter", str(two), code=1)
    wrong = tmp_path / "wrong.sql"
    wrong.write_text("SELECT prompt_id FROM candidates")
    assert "must return column(s) group_id" in run("policy", "check", "fresh", str(wrong), code=1)
    unknown = tmp_path / "unknown.sql"
    unknown.write_text("SELECT group_id FROM candidates WHERE reward_mean > $bar")
    assert "uses $bar" in run("policy", "check", "fresh", str(unknown), code=1)
    assert "no filter policy named" in run("policy", "check", "filter", "nope", code=1)


def test_policy_check_accepts_the_shipped_advantage_policies_and_refuses_a_hostile_one(tmp_path: Path) -> None:
    for name in ("episode", "turn_return", "turn_group_norm", "step_group"):
        assert run("policy", "check", "advantage", name).startswith("ok: advantage policy")
    evil = tmp_path / "evil.sql"
    evil.write_text("SELECT sample_id, NULL AS turn, 1.0 AS advantage FROM read_parquet('/etc/*.parquet')")
    assert "disabled by configuration" in run("policy", "check", "advantage", str(evil), code=1)
    stranger = tmp_path / "stranger.sql"
    stranger.write_text("SELECT 'x' AS sample_id, 0 AS turn, 1.0 AS advantage")
    assert "not candidates" in run("policy", "check", "advantage", str(stranger), code=1)


def test_a_runaway_policy_is_interrupted(tmp_path: Path) -> None:
    slow = tmp_path / "slow.sql"
    slow.write_text("SELECT 'g' AS group_id FROM range(1000000000) a, range(1000000000) b ORDER BY a.range + b.range")
    catalog = Catalog()
    with pytest.raises(PolicyError, match=r"interrupted after 0\.5 s"):
        catalog.check_policy(load_policy("filter", str(slow)), timeout_s=0.5)
    catalog.close()


def test_config_errors_name_the_key_and_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("models:\n  - id: m\n    vocab_size: 10\n    colour: red\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: models.0.colour: Extra inputs are not permitted"):
        load_config(bad)
    bad.write_text("models: []\n")
    with pytest.raises(ConfigError, match="models"):
        load_config(bad)
    bad.write_text("models: [{id: m, vocab_size: 10}, {id: m, vocab_size: 10}]\n")
    with pytest.raises(ConfigError, match="model ids must be unique"):
        load_config(bad)
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "missing.yaml")


@pytest.mark.parametrize("path", sorted((ROOT / "jobs").rglob("dataflow*.yaml")), ids=lambda p: p.name)
def test_every_dataflow_config_in_jobs_parses_and_names_real_policies(path: Path) -> None:
    assert path.read_text().startswith("# lakeflow ")  # opens with the command that launches it
    config = load_config(path)
    for model in config.models:
        for kind, name in model.policies.model_dump().items():
            if name != "none":
                load_policy(kind, name)


@pytest.mark.parametrize(
    ("g", "wait", "produced", "consumed", "target"),
    [
        (4, 0.5, 100, 100, 8),
        (4, 0.2, 100, 100, 5),
        (4, 0.07, 100, 100, 4),
        (8, 0.01, 100, 50, 5),
        (8, 0.01, 100, 200, 8),
        (4, None, 0, 0, 4),
        (0, 0.9, 0, 0, 0),
    ],
)
def test_balance_formula(g: int, wait: float | None, produced: int, consumed: int, target: int) -> None:
    assert target_pool(g, wait, produced, consumed) == target


def test_balance_report_reads_heartbeats_and_trainer_stats(tmp_path: Path) -> None:
    from datetime import UTC, datetime, timedelta

    from lakeflow.dataflow.balance import balance_report
    from lakeflow.io import open_store
    from lakeflow.lake import layout

    store = open_store(str(tmp_path / "lake"))
    now = datetime.now(UTC)
    for i in range(4):
        store.put(
            layout.raas_stats_key(f"raas-{i}"), json.dumps({"raas_id": f"raas-{i}", "at": now.isoformat()}).encode()
        )
    store.put(
        layout.raas_stats_key("raas-dead"), json.dumps({"raas_id": "dead", "at": "2020-01-01T00:00:00+00:00"}).encode()
    )
    store.put(
        layout.trainer_stats_key("policy", 3), json.dumps({"wait_s": 3, "step_s": 7, "at": now.isoformat()}).encode()
    )
    catalog = Catalog()
    catalog.set_weights_version("policy", 3)
    report = balance_report(store, catalog, timedelta(minutes=5), now)
    catalog.close()
    assert report["raas"] == 4 and report["trainer_wait_fraction"] == 0.3
    assert report["target_raas"] == 6  # ceil(4 / (1 - 0.3))
    assert json.loads(store.get(layout.BALANCE_REPORT)) == report
