"""`python -m benchmarks rescore` at its smallest: every stored sample re-scored and written, the read-only
pass beside it. No timing assertions."""

from __future__ import annotations

from benchmarks.rescore import run


def test_the_rescore_bench_rescores_every_sample_beside_a_plain_read() -> None:
    result = run(samples=16, response_tokens=8)
    assert result["read_rows"] == result["rows_written"] == 16
    assert 0 <= result["reward_mean"] <= 1 and result["ratio_to_read_only"] > 0
