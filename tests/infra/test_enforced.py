"""The Terraform module applied to a real S3 + IAM server (moto on 127.0.0.1) with IAM enforced:
a tiny `lakeflow run` completes with each process holding only its role's access key, and every
request of docs/security.md's table is answered as the policy says.

moto evaluates Action and Resource but ignores Conditions, so the cells that only a condition
denies (`s3:prefix` on listings, the conditional-write headers) are allowed by moto; those are
marked '(condition)' in the table and checked by the policy evaluator (tests/infra/test_permissions.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
import yaml
from botocore.exceptions import ClientError

from lakeflow.infra import ROLES
from lakeflow.infra.evaluate import TABLE_MODEL, probe_table
from lakeflow.infra.model import PER_MODEL
from tests.infra.conftest import Terraform
from tests.servers import moto_server

pytestmark = [pytest.mark.slow, pytest.mark.s3, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
BUCKET, PREFIX = "lakeflow-lake", "runs/tiny"
LAKE = f"s3://{BUCKET}/{PREFIX}"
# examples/moto creates per-model identities for model "policy": the lakeflow role -> its identity
IDENTITY = {r: f"{r}-{TABLE_MODEL}" if r in PER_MODEL else r for r in ROLES}


@pytest.fixture(scope="module")
def moto_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A moto server of our own (IAM enforcement is switched on for it alone)."""
    with moto_server(log=str(tmp_path_factory.mktemp("moto") / "moto.log")) as endpoint:
        yield endpoint


def enforce(endpoint: str, on: bool) -> None:
    """moto's INITIAL_NO_AUTH_ACTION_COUNT, set at run time: 0 checks every request, inf none."""
    request = urllib.request.Request(
        f"{endpoint}/moto-api/reset-auth", data=b"0" if on else b"inf", headers={"Content-Type": "text/plain"}
    )
    urllib.request.urlopen(request, timeout=5).close()


@pytest.fixture(scope="module")
def keys(terraform: Terraform, moto_endpoint: str) -> dict[str, dict[str, str]]:
    """Apply examples/moto (bucket, lifecycle, a user with an inline policy and an access key per identity:
    the trainer and rollout ones of model "policy")."""
    enforce(moto_endpoint, False)
    terraform.init("examples/moto")
    variables = ["-var", f"endpoint={moto_endpoint}", "-var", f"bucket={BUCKET}", "-var", f"prefix={PREFIX}"]
    terraform("examples/moto", "apply", "-auto-approve", "-input=false", "-no-color", *variables, timeout=400)
    out: dict[str, dict[str, str]] = json.loads(terraform("examples/moto", "output", "-json", "access_keys"))
    assert sorted(out) == sorted(IDENTITY.values())
    enforce(moto_endpoint, True)
    return out


def client(endpoint: str, key: dict[str, str]) -> object:
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=key["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=key["AWS_SECRET_ACCESS_KEY"],
    )


def lakeflow_env(tmp_path: Path, endpoint: str, keys: dict[str, dict[str, str]], profile: str) -> dict[str, str]:
    """An environment with one shared credentials file holding every role's profile, using `profile`."""
    credentials = tmp_path / "credentials"
    credentials.write_text(
        "".join(
            f"[lakeflow-{r}]\naws_access_key_id = {k['AWS_ACCESS_KEY_ID']}\naws_secret_access_key = "
            f"{k['AWS_SECRET_ACCESS_KEY']}\n"
            for r, k in keys.items()
        )
    )
    (tmp_path / "config").write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return env | {
        "AWS_SHARED_CREDENTIALS_FILE": str(credentials),
        "AWS_CONFIG_FILE": str(tmp_path / "config"),
        "AWS_PROFILE": profile,
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_REGION": "us-east-1",
    }


def lakeflow(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "lakeflow", *args]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


# Over 60 s (~120 s with its fixtures): Terraform applies the roles to moto's IAM, then a whole run in which
# moto checks every request against them; neither can be smaller than one run and one apply.
# untraced: its processes run the tiny run that tests/run/test_run.py measures; this test is about the roles
@pytest.mark.usefixtures("untraced_children")
def test_tiny_run_with_one_role_per_process(
    keys: dict[str, dict[str, str]], moto_endpoint: str, tmp_path: Path
) -> None:
    """jobs/examples/tiny-math.yaml (--engine hf), 2 steps: dataflow, trainer and rollout service each
    with its own role; the launcher (progress) and the checks after it with the analyst's."""
    config = yaml.safe_load((REPO / "jobs/examples/tiny-math.yaml").read_text())
    config["steps"] = 2
    config["lake"] = LAKE
    data = REPO / "jobs/examples"  # the copy lives elsewhere: its data paths must not be relative
    config["models"][0]["dataflow"]["dataset"]["path"] = str(data / config["models"][0]["dataflow"]["dataset"]["path"])
    config["models"][0]["eval"]["dataset"]["path"] = str(data / config["models"][0]["eval"]["dataset"]["path"])
    config["loop"] |= {"checkpoint_s": 1}  # the dataflow also writes (and supersedes) catalog checkpoints
    config["models"][0]["trainer"]["model_cache_dir"] = str(tmp_path / "models")
    config["credentials"] = {r: f"lakeflow-{IDENTITY[r]}" for r in ("dataflow", "trainer", "raas", "eval")}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    env = lakeflow_env(tmp_path, moto_endpoint, keys, "lakeflow-analyst")
    run = lakeflow(env, "run", str(path), "--engine", "hf", "--run-dir", str(tmp_path / "run"), timeout=300)
    logs = "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted((tmp_path / "run/logs").glob("*.log")))
    assert run.returncode == 0, run.stderr[-3000:] + logs
    assert "AccessDenied" not in logs  # no process needed more than its role allows

    sql = lakeflow(env, "sql", "--lake", LAKE, "--format", "csv", "SELECT count(*) AS n FROM trajectories")
    assert sql.returncode == 0 and int(sql.stdout.split()[-1]) > 0, sql.stderr
    status = lakeflow(env, "status", "--lake", LAKE)
    assert status.returncode == 0, status.stderr

    # through lakeflow too: `synth` writes what a rollout service writes, which the analyst may not
    synth = ["synth", "--lake", LAKE, "--samples", "16", "--prompt-tokens", "8", "--response-tokens", "8"]
    assert lakeflow({**env, "AWS_PROFILE": f"lakeflow-{IDENTITY['raas']}"}, *synth).returncode == 0
    denied = lakeflow(env, *synth)
    assert denied.returncode != 0 and "PutObject" in denied.stderr and "trajectories/" in denied.stderr
    assert "Traceback" not in denied.stderr  # one line naming the key and the action


def test_every_request_is_answered_as_the_policy_says(
    keys: dict[str, dict[str, str]], moto_endpoint: str, terraform: Terraform
) -> None:
    rows = probe_table(BUCKET, PREFIX)
    etags = seed(moto_endpoint, [p.key if p.outside else f"{PREFIX}/{p.key}" for p, _, _ in rows])
    clients = {role: client(moto_endpoint, keys[IDENTITY[role]]) for role in ROLES}
    mismatches = []
    for probe, verdict, by_condition in rows:
        key = probe.key if probe.outside else f"{PREFIX}/{probe.key}"
        for role in ROLES:
            seen = send(clients[role], probe.op, key, etags.get(key, ""))
            if seen != verdict[role] and not (seen and by_condition[role]):
                mismatches.append(f"{probe.label} / {role}: server {'allowed' if seen else 'denied'}")
    assert mismatches == []


def seed(endpoint: str, keys: list[str]) -> dict[str, str]:
    """Objects for the requests to find (enforcement off meanwhile); their etags."""
    enforce(endpoint, False)
    try:
        s3 = boto3.client(
            "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
        )
        etags = {}
        for key in keys:
            if key.endswith("/") or key == "" or "gone" in key:
                continue
            etags[key] = s3.put_object(Bucket=BUCKET, Key=key, Body=b"seed")["ETag"]
        return etags
    finally:
        enforce(endpoint, True)


def send(s3: object, op: str, key: str, etag: str) -> bool:
    """True unless the server answers AccessDenied (a 404 or 412 means the request was authorized)."""
    call = {
        "get": lambda: s3.get_object(Bucket=BUCKET, Key=key),  # type: ignore[attr-defined]
        "put": lambda: s3.put_object(Bucket=BUCKET, Key=key, Body=b"probe"),  # type: ignore[attr-defined]
        "create": lambda: s3.put_object(Bucket=BUCKET, Key=key, Body=b"probe", IfNoneMatch="*"),  # type: ignore[attr-defined]
        "swap": lambda: s3.put_object(Bucket=BUCKET, Key=key, Body=b"probe", IfMatch=etag),  # type: ignore[attr-defined]
        "delete": lambda: s3.delete_object(Bucket=BUCKET, Key=key),  # type: ignore[attr-defined]
        "list": lambda: s3.list_objects_v2(Bucket=BUCKET, Prefix=key),  # type: ignore[attr-defined]
    }[op]
    try:
        call()
    except ClientError as e:
        return str(e.response.get("Error", {}).get("Code")) != "AccessDenied"
    return True
