"""Sample completions for the report: per model, a few weight versions, and for each the best and the
worst sample by reward and one cut off by max_new_tokens, with their text (the `trajectories` view's
`prompt_text` / `response_text`, decoded by the model's tokenizer; NULL without one).

Two queries: the choice reads ids and rewards only, then only the chosen samples are decoded.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from lakeflow.lakeview import LakeQuery

VERSIONS_SHOWN = 5  # weight versions per model: the first, the last and evenly spaced ones between
TEXT_CHARS = 600  # longest text shown per cell; the rest is in `lakeflow sql`


@dataclass(frozen=True)
class SampleShown:
    """One sample the report prints."""

    model_id: str
    version: int
    kind: str  # best | worst | truncated
    sample_id: str
    reward: float
    finish_reason: str
    tokens: int  # response tokens
    prompt: str | None  # None: no tokenizer to decode with
    response: str | None


def spread(versions: list[int], n: int = VERSIONS_SHOWN) -> list[int]:
    """At most `n` of the sorted `versions`: the first, the last and evenly spaced ones between."""
    if len(versions) <= n:
        return versions
    picks = {versions[round(i * (len(versions) - 1) / (n - 1))] for i in range(n)}
    return sorted(picks)


def _chosen(lake: LakeQuery) -> pa.Table:
    versions = lake.sql("SELECT DISTINCT model_id, policy_version FROM trajectories ORDER BY 1, 2").to_pylist()
    by_model: dict[str, list[int]] = {}
    for r in versions:
        by_model.setdefault(r["model_id"], []).append(r["policy_version"])
    pairs = [(m, v) for m, vs in by_model.items() for v in spread(vs)]
    if not pairs:
        return pa.table({})
    values = ", ".join(f"('{m.replace(chr(39), chr(39) * 2)}', {int(v)})" for m, v in pairs)
    ranked = (
        "SELECT t.model_id, t.policy_version, t.sample_id, t.reward, t.finish_reason, len(t.response_ids) AS tokens, "
        "row_number() OVER (PARTITION BY t.model_id, t.policy_version ORDER BY t.reward DESC, t.sample_id) AS best, "
        "row_number() OVER (PARTITION BY t.model_id, t.policy_version ORDER BY t.reward, t.sample_id) AS worst, "
        "row_number() OVER (PARTITION BY t.model_id, t.policy_version, t.finish_reason = 'length' "
        "ORDER BY t.sample_id) AS cut "
        f"FROM trajectories t JOIN (VALUES {values}) p(model_id, policy_version) USING (model_id, policy_version)"
    )
    return lake.sql(
        f"WITH r AS ({ranked}) "
        "SELECT 'best' AS kind, * FROM r WHERE best = 1 "
        "UNION ALL SELECT 'worst', * FROM r WHERE worst = 1 "
        "UNION ALL SELECT 'truncated', * FROM r WHERE cut = 1 AND finish_reason = 'length' "
        "ORDER BY model_id, policy_version, kind"
    )


def sample_completions(lake: LakeQuery) -> dict[str, list[SampleShown]]:
    """Per model, the samples the report shows (best, worst, truncated for a few versions)."""
    chosen = _chosen(lake).to_pylist()
    if not chosen:
        return {}
    ids = ", ".join("'" + r["sample_id"].replace("'", "''") + "'" for r in chosen)
    texts = {
        r["sample_id"]: (r["prompt_text"], r["response_text"])
        for r in lake.sql(
            f"SELECT sample_id, prompt_text, response_text FROM trajectories WHERE sample_id IN ({ids})"
        ).to_pylist()
    }
    order = {"best": 0, "worst": 1, "truncated": 2}
    out: dict[str, list[SampleShown]] = {}
    for r in sorted(chosen, key=lambda r: (r["model_id"], r["policy_version"], order[r["kind"]])):
        prompt, response = texts.get(r["sample_id"], (None, None))
        out.setdefault(r["model_id"], []).append(
            SampleShown(
                r["model_id"],
                r["policy_version"],
                r["kind"],
                r["sample_id"],
                float(r["reward"]),
                r["finish_reason"],
                int(r["tokens"]),
                _cut(prompt, tail=True),  # a prompt's question is at its end
                _cut(response),
            )
        )
    return out


def _cut(text: str | None, tail: bool = False) -> str | None:
    if text is None or len(text) <= TEXT_CHARS:
        return text
    return "…" + text[1 - TEXT_CHARS :] if tail else text[: TEXT_CHARS - 1] + "…"
