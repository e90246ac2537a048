"""Check requests against a policy document, and the role x action table of docs/security.md.

`allowed` evaluates the subset of IAM the lake's documents use (Allow/Deny, Action and Resource
wildcards, StringLike/StringEquals/Null conditions) the way AWS does: an explicit Deny wins, else
any matching Allow, else denied. `PROBES` are the requests of the table: every write the layout
knows, the reads that matter, and requests outside the lake's prefix; tests send the same requests
to a real S3 server with each role's credentials.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Any, Literal

from lakeflow.infra.model import ROLES
from lakeflow.infra.policy import policy_document

Op = Literal["get", "put", "create", "swap", "delete", "list"]


@dataclass(frozen=True)
class Probe:
    """One request: `op` on `key` (a listing prefix for `list`), relative to the lake root unless `outside`."""

    label: str
    op: Op
    key: str
    outside: bool = False  # `key` is relative to the bucket, outside the lake's prefix

    def request(self, bucket: str, root: str, partition: str = "aws") -> tuple[str, str, dict[str, str]]:
        """(IAM action, resource ARN, condition context) of the probe against `s3://bucket/root`."""
        key = self.key if self.outside else root + self.key
        if self.op == "list":
            return "s3:ListBucket", f"arn:{partition}:s3:::{bucket}", {"s3:prefix": key}
        action = {"get": "s3:GetObject", "delete": "s3:DeleteObject"}.get(self.op, "s3:PutObject")
        context = {"create": {"s3:if-none-match": "*"}, "swap": {"s3:if-match": '"etag"'}}.get(self.op, {})
        return action, f"arn:{partition}:s3:::{bucket}/{key}", context


_SHARD = "trajectories/model=policy/date=2025-01-01/probe-0123456789ab-00000001.parquet"
PROBES: tuple[Probe, ...] = (
    Probe("create a trajectory shard", "create", _SHARD),
    Probe("overwrite a trajectory shard (plain PUT)", "put", _SHARD),
    Probe("create a commit record", "create", "_commits/2025-01-01/00/00-00.000000-probe-00000001.json"),
    Probe("issue a task", "create", "tasks/policy/tprobe.parquet"),
    Probe("claim a task", "create", "tasks/policy/tprobe.claim"),
    Probe("renew a claim (compare-and-swap)", "swap", "tasks/policy/tseed.claim"),
    Probe("overwrite a claim (plain PUT)", "put", "tasks/policy/tseed.claim"),
    Probe("delete a claim", "delete", "tasks/policy/tgone.claim"),
    Probe("delete a task", "delete", "tasks/policy/tgone.parquet"),
    Probe("write a batch", "create", "batches/policy/00000099.parquet"),
    Probe("write weights", "put", "weights/policy/00000099/model.safetensors"),
    Probe("move weights LATEST (compare-and-swap)", "swap", "weights/policy/LATEST"),
    Probe("delete weights (gc)", "delete", "weights/policy/00000098/manifest.json"),
    Probe("write an optimizer checkpoint", "put", "checkpoints/policy/00000001/optimizer.pt"),
    Probe("take the trainer lease (compare-and-swap)", "swap", "weights/policy/LEASE"),
    Probe("write another model's weights", "put", "weights/other/00000099/model.safetensors"),
    Probe("move another model's LATEST", "swap", "weights/other/LATEST"),
    Probe("write another model's manifest", "create", "weights/other/00000099/manifest.json"),
    Probe("take another model's trainer lease", "swap", "weights/other/LEASE"),
    Probe("delete another model's weights", "delete", "weights/other/00000098/manifest.json"),
    Probe("write another model's optimizer checkpoint", "put", "checkpoints/other/00000001/optimizer.pt"),
    Probe("write another model's trainer stats", "put", "stats/trainer/other/00000001.json"),
    Probe("claim another model's task", "create", "tasks/other/tprobe.claim"),
    Probe("swap another model's claim", "swap", "tasks/other/tseed.claim"),
    Probe("delete another model's claim", "delete", "tasks/other/tgone.claim"),
    Probe("create another model's trajectory shard", "create", _SHARD.replace("model=policy", "model=other")),
    Probe("store a workspace state", "create", "workspaces/policy/" + "0" * 64 + ".tar.zst"),
    Probe("overwrite a workspace state (plain PUT)", "put", "workspaces/policy/" + "0" * 64 + ".tar.zst"),
    Probe("store another model's workspace state", "create", "workspaces/other/" + "0" * 64 + ".tar.zst"),
    Probe("write the catalog", "put", "catalog/checkpoints/00000001/manifest.json"),
    Probe("take the dataflow lease (compare-and-swap)", "swap", "_dataflow/lease.json"),
    Probe("write quarantine records", "put", "_quarantine/2025-01-01/probe.json"),
    Probe("write a rollout heartbeat", "put", "stats/raas/probe.json"),
    Probe("write trainer stats", "put", "stats/trainer/policy/00000001.json"),
    Probe("write the balance report", "put", "stats/dataflow/balance.json"),
    Probe("write rollout metrics", "create", "metrics/rollout_stats/date=2025-01-01/probe-00000001.parquet"),
    Probe("write eval metrics", "create", "metrics/eval/date=2025-01-01/probe-00000001.parquet"),
    Probe("write the run manifest", "put", "lakeflow.json"),
    Probe("read a trajectory shard", "get", _SHARD),
    Probe("read weights", "get", "weights/policy/LATEST"),
    Probe("read a batch", "get", "batches/policy/00000000.parquet"),
    Probe("read the catalog", "get", "catalog/LATEST"),
    Probe("read an optimizer checkpoint", "get", "checkpoints/policy/00000000/optimizer.pt"),
    Probe("list tasks/", "list", "tasks/policy/"),
    Probe("list _commits/", "list", "_commits/"),
    Probe("list weights/", "list", "weights/policy/"),
    Probe("list the whole lake", "list", ""),
    Probe("read another run's weights", "get", "other-run/weights/policy/LATEST", outside=True),
    Probe("write another run's trajectories", "create", "other-run/" + _SHARD, outside=True),
    Probe("list another run", "list", "other-run/", outside=True),
    Probe("list the whole bucket", "list", "", outside=True),
)


def allowed(document: dict[str, Any], action: str, resource: str, context: dict[str, str] | None = None) -> bool:
    """Whether `document` allows `action` on `resource` with request `context` (condition keys)."""
    context = context or {}
    verdicts = [_statement(s, action, resource, context) for s in _statements(document)]
    return "Deny" not in verdicts and "Allow" in verdicts


def decided_by_condition(document: dict[str, Any], action: str, resource: str, context: dict[str, str]) -> bool:
    """Whether a statement whose action and resource match was left out only by its condition:
    servers that ignore conditions (moto) would allow this request."""
    for s in _statements(document):
        if s.get("Effect") == "Allow" and _matches(s, action, resource) and not _conditions(s, context):
            return True
    return False


Row = tuple[Probe, dict[str, bool], dict[str, bool]]


TABLE_MODEL = "policy"  # the table's trainer and rollout identities are those of this model


def probe_table(bucket: str = "lake", prefix: str = "run") -> list[Row]:
    """Per probe: whether each role is allowed, and whether a denial rests on a condition alone. The
    trainer and rollout documents are those of model TABLE_MODEL's identities."""
    root = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
    documents = {role: policy_document(role, bucket, prefix, model=TABLE_MODEL) for role in ROLES}
    rows: list[Row] = []
    for probe in PROBES:
        action, resource, context = probe.request(bucket, root)
        verdict: dict[str, bool] = {role: allowed(documents[role], action, resource, context) for role in ROLES}
        by_condition: dict[str, bool] = {
            role: not verdict[role] and decided_by_condition(documents[role], action, resource, context)
            for role in ROLES
        }
        rows.append((probe, verdict, by_condition))
    return rows


def markdown_table(bucket: str = "lake", prefix: str = "run") -> str:
    """The table of docs/security.md: allowed / denied per role and probe."""
    head = "| request | " + " | ".join(ROLES) + " |\n|---|" + "---|" * len(ROLES) + "\n"
    lines = []
    for probe, verdict, by_condition in probe_table(bucket, prefix):
        cells = [
            ("allowed" if verdict[r] else "**denied**" + (" (condition)" if by_condition[r] else "")) for r in ROLES
        ]
        lines.append(f"| {probe.label} | " + " | ".join(cells) + " |")
    return head + "\n".join(lines) + "\n"


def _statements(document: dict[str, Any]) -> list[dict[str, Any]]:
    statements = document.get("Statement", [])
    return [statements] if isinstance(statements, dict) else list(statements)


def _statement(s: dict[str, Any], action: str, resource: str, context: dict[str, str]) -> str | None:
    if not _matches(s, action, resource) or not _conditions(s, context):
        return None
    return str(s.get("Effect"))


def _matches(s: dict[str, Any], action: str, resource: str) -> bool:
    return _any_like(s.get("Action", []), action, ignore_case=True) and _any_like(s.get("Resource", []), resource)


def _any_like(patterns: str | list[str], value: str, ignore_case: bool = False) -> bool:
    items = [patterns] if isinstance(patterns, str) else patterns
    return any(_like(p, value, ignore_case) for p in items)


def _like(pattern: str, value: str, ignore_case: bool = False) -> bool:
    """IAM wildcard match: `*` any run of characters (including `/`), `?` one character."""
    regex = fnmatch.translate(pattern.replace("[", "[[]"))
    return re.match(regex, value, re.IGNORECASE if ignore_case else 0) is not None


def _conditions(s: dict[str, Any], context: dict[str, str]) -> bool:
    for operator, checks in s.get("Condition", {}).items():
        for key, expected in checks.items():
            values = [expected] if isinstance(expected, str) else list(expected)
            actual = context.get(key)
            if operator == "Null":
                if (actual is None) != (values[0] == "true"):
                    return False
            elif operator in ("StringLike", "StringEquals"):
                like = operator == "StringLike"
                if actual is None or not any((_like(v, actual) if like else v == actual) for v in values):
                    return False
            else:
                raise ValueError(f"condition operator {operator!r} is not supported by this evaluator")
    return True
