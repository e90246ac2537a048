"""The crash guarantee, checked from the lake alone after a run (used by `lakeflow chaos`).

- every committed sample is readable (its shard matches its commit record) and visible exactly once;
- no fresh group is served twice, and every served row is within its staleness bound at its step;
- the batches of a model are contiguous (0..N), and every row they reference is a committed sample;
- weight versions are contiguous (0..LATEST) and each rebuilds bit for bit to its manifest's state hash;
- the run completed: every model reached `steps`.
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from dataclasses import dataclass, field

from lakeflow.errors import LakeflowError
from lakeflow.io import Store
from lakeflow.lake import CommitRecord, LakeReader, SampleRef, iter_commits
from lakeflow.lake.batch import list_batch_steps, read_batch
from lakeflow.run.config import RunConfig
from lakeflow.weights import TransferOptions, latest_version, list_versions, pull


@dataclass
class Verdict:
    """What was checked (counts) and what broke (one line each)."""

    checked: dict[str, int] = field(default_factory=dict)
    broken: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.broken


def check_run(store: Store, config: RunConfig) -> Verdict:
    verdict = Verdict()
    samples = _check_samples(store, verdict)
    for m in config.models:
        flow = config.dataflow().model(m.id)
        _check_batches(store, m.id, flow.max_staleness, samples, verdict)
        _check_weights(store, m.id, config.steps, verdict)
    return verdict


def _check_samples(store: Store, verdict: Verdict) -> set[tuple[str, str]]:
    """Every committed shard read whole and checked against its record; returns (shard, sample id)."""
    reader = LakeReader(store)
    shards, _ = reader.visible_shards()
    records: dict[str, CommitRecord] = {}
    for _, record in iter_commits(reader):
        records.setdefault(record.shard, record)
    ids: Counter[str] = Counter()
    found: set[tuple[str, str]] = set()
    for shard in shards:
        record = records[shard]
        try:
            table = reader.read_shard(record)
        except (LakeflowError, OSError, ValueError) as e:  # a committed shard that cannot be read is the finding
            verdict.broken.append(f"committed shard {shard} cannot be read: {e}")
            continue
        for sid in table.column("sample_id").to_pylist():
            ids[sid] += 1
            found.add((shard, sid))
    twice = [sid for sid, n in ids.items() if n > 1]
    if twice:
        verdict.broken.append(f"{len(twice)} sample ids are committed more than once, e.g. {twice[0]}")
    verdict.checked["committed shards"] = len(shards)
    verdict.checked["committed samples"] = sum(ids.values())
    return found


def _check_batches(
    store: Store, model_id: str, max_staleness: int, samples: set[tuple[str, str]], verdict: Verdict
) -> None:
    steps = list_batch_steps(store, model_id)
    if steps != list(range(len(steps))):
        verdict.broken.append(f"{model_id}: batch steps are not contiguous from 0: {steps[:10]}…")
    served_fresh: Counter[str] = Counter()
    rows = 0
    for step in steps:
        table, _ = read_batch(store, model_id, step)
        rows += table.num_rows
        for r in table.select(["group_id", "kind", "policy_version", "shard", "sample_id"]).to_pylist():
            if step - r["policy_version"] > max_staleness:
                verdict.broken.append(
                    f"{model_id} step {step}: sample {r['sample_id']} of version {r['policy_version']} is past "
                    f"its staleness bound {max_staleness}"
                )
            if (r["shard"], r["sample_id"]) not in samples:
                verdict.broken.append(f"{model_id} step {step}: {r['sample_id']} is not a committed sample")
        fresh = {r["group_id"] for r in table.select(["group_id", "kind"]).to_pylist() if r["kind"] == "fresh"}
        served_fresh.update(fresh)
    twice = [g for g, n in served_fresh.items() if n > 1]
    if twice:
        verdict.broken.append(f"{model_id}: {len(twice)} fresh groups served more than once, e.g. {twice[0]}")
    if steps:  # the batch object references resolve to the rows they name
        table, _ = read_batch(store, model_id, steps[-1])
        refs = [SampleRef(r["shard"], r["row"], r["sample_id"]) for r in table.to_pylist()]
        try:
            LakeReader(store).read_samples(refs, columns=["sample_id"])
        except (LakeflowError, OSError, ValueError) as e:
            verdict.broken.append(f"{model_id} step {steps[-1]}: references do not resolve: {e}")
    verdict.checked[f"{model_id} batches"] = len(steps)
    verdict.checked[f"{model_id} served rows"] = rows


def _check_weights(store: Store, model_id: str, steps: int, verdict: Verdict) -> None:
    newest = latest_version(store, model_id)
    versions = list_versions(store, model_id)
    if newest is None or newest < steps:
        verdict.broken.append(f"{model_id}: the run did not complete (newest version {newest}, wanted {steps})")
    if newest is not None and versions[: newest + 1] != list(range(newest + 1)):
        verdict.broken.append(f"{model_id}: weight versions are not contiguous: {versions[:10]}…")
    with tempfile.TemporaryDirectory(prefix="lakeflow-chaos-") as tmp:
        dest = os.path.join(tmp, "model")
        for version in range(0, (newest or 0) + 1):
            try:  # pull checks every object's SHA-256 and the rebuilt state's hash against the manifest
                result = pull(store, model_id, dest, version, TransferOptions(progress=False))
            except (LakeflowError, OSError, ValueError) as e:
                verdict.broken.append(f"{model_id} version {version} does not rebuild: {e}")
                continue
            if result.version != version or result.fell_back:
                verdict.broken.append(f"{model_id} version {version}: its delta chain did not verify (fell back)")
    verdict.checked[f"{model_id} weight versions verified"] = (newest or 0) + 1
