"""The grants of a role as an IAM policy document (AWS IAM, moto, MinIO's policy language).

Object verbs become s3:GetObject / s3:PutObject / s3:DeleteObject on `arn:…:s3:::bucket/root+pattern`;
`create` and `swap` require the conditional-write headers through S3's `s3:if-none-match` and
`s3:if-match` condition keys (stores that do not know those keys, such as MinIO, take the
document without them: `write_conditions=False`); `list` is one s3:ListBucket on the bucket
restricted by an `s3:prefix` condition. No `s3:*`, no `*` resource.
"""

from __future__ import annotations

from typing import Any

from lakeflow.errors import InputError
from lakeflow.infra.model import EVERYTHING, VERBS, Grant, grants_for

ACTIONS = {
    "read": "s3:GetObject",
    "create": "s3:PutObject",
    "swap": "s3:PutObject",
    "write": "s3:PutObject",
    "delete": "s3:DeleteObject",
}
_PRESENT = "false"  # IAM's Null operator: "false" means the key is in the request
_STATEMENT = {"read": "Read", "create": "Create", "write": "Write", "delete": "Delete"}


def lake_root(prefix: str) -> str:
    """The key prefix of a lake at `s3://bucket/prefix`: '' or 'prefix/'."""
    prefix = prefix.strip("/")
    if any(part in ("", ".", "..") for part in prefix.split("/")) and prefix:
        raise InputError(f"invalid lake prefix {prefix!r}: use a path like 'runs/exp1'")
    if "*" in prefix or "?" in prefix:
        raise InputError(f"invalid lake prefix {prefix!r}: wildcards are not allowed")
    return f"{prefix}/" if prefix else ""


def policy_document(
    role: str,
    bucket: str,
    prefix: str = "",
    partition: str = "aws",
    write_conditions: bool = True,
    model: str | None = None,
) -> dict[str, Any]:
    """The identity policy of `role` for the lake at `s3://bucket/prefix`; for a trainer or rollout
    identity of one `model` (None: of every model)."""
    if not bucket or any(c in bucket for c in "/*?"):
        raise InputError(f"invalid bucket name {bucket!r}")
    return template_document(role, bucket, lake_root(prefix), partition, write_conditions, model)


def template_document(
    role: str,
    bucket: str,
    root: str,
    partition: str = "aws",
    write_conditions: bool = True,
    model: str | None = None,
) -> dict[str, Any]:
    """Like `policy_document` with `root` (and `model`) used verbatim (Terraform templates pass `${root}`
    and `${model}`)."""
    grants = grants_for(role, model)
    objects = f"arn:{partition}:s3:::{bucket}/{root}"
    statements: list[dict[str, Any]] = []
    by_verb: dict[str, list[str]] = {v: [] for v in VERBS}
    for g in grants:
        by_verb[g.verb].append(g.pattern)
    if by_verb["list"]:
        statements.append(_list_statement(by_verb["list"], f"arn:{partition}:s3:::{bucket}", root))
    for verb in VERBS:
        patterns = sorted(set(by_verb[verb]))
        if verb == "list" or not patterns:
            continue
        resources = [objects + p for p in patterns]
        if verb in ("create", "swap") and write_conditions:
            statements.append(_put(f"{verb.title()}IfNoneMatch", resources, "s3:if-none-match"))
            if verb == "swap":
                statements.append(_put("SwapIfMatch", resources, "s3:if-match"))
            continue
        sid = _STATEMENT.get(verb, verb.title())
        if verb in ("create", "swap"):  # without the condition keys: a plain put
            sid = f"{verb.title()}Unconditional"
        statements.append({"Sid": sid, "Effect": "Allow", "Action": ACTIONS[verb], "Resource": resources})
    return {"Version": "2012-10-17", "Statement": statements}


def _list_statement(patterns: list[str], bucket_arn: str, root: str) -> dict[str, Any]:
    statement: dict[str, Any] = {"Sid": "List", "Effect": "Allow", "Action": "s3:ListBucket", "Resource": bucket_arn}
    if not (root == "" and EVERYTHING in patterns):  # the lake is the whole bucket: no prefix to restrict to
        statement["Condition"] = {"StringLike": {"s3:prefix": sorted({root + p for p in patterns})}}
    return statement


def _put(sid: str, resources: list[str], header_key: str) -> dict[str, Any]:
    return {
        "Sid": sid,
        "Effect": "Allow",
        "Action": "s3:PutObject",
        "Resource": resources,
        "Condition": {"Null": {header_key: _PRESENT}},
    }


def describe(grant: Grant) -> str:
    """One line: verb, pattern and why."""
    return f"{grant.verb:<6} {grant.pattern:<28} {grant.why}"
