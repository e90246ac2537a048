"""Shared fixtures: a real S3 server (moto on a free loopback port, or the endpoint in
LAKEFLOW_TEST_S3_ENDPOINT) and a `store` fixture parametrised over every backend.

Every torch in the suite (this process and the trainers, rollout services and runs it starts) uses one
OpenMP thread unless the caller's environment says otherwise: the test models are tiny, and torch's
spinning OpenMP workers on a machine whose cores are busy (several processes of a run, other jobs) turn
a millisecond step into seconds."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before anything imports torch; inherited by subprocesses
# lakeflow subprocesses import torch & co. before coverage traces them (tests/preimport/, installed by make venv)
os.environ.setdefault("LAKEFLOW_TEST_PREIMPORT", "1")
# Bytecode is cached (__pycache__, gitignored) even where the environment says not to (a container's
# PYTHONDONTWRITEBYTECODE=1): the suite starts hundreds of Python processes, and each compiled every lakeflow
# module it imported from source, ~0.5 s of CPU per service process.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

import boto3
import pytest

from lakeflow.io import S3Options, Store, open_store
from tests.servers import moto_server

sys.dont_write_bytecode = False  # this process too (the environment was read at its start)


@pytest.fixture
def untraced_children(monkeypatch: pytest.MonkeyPatch) -> None:
    """The processes this test starts run without coverage's tracer (1.3-1.8x faster on Python 3.11). For
    end-to-end tests whose processes run code that other tests measure; each use says which."""
    for key in [k for k in os.environ if k.startswith("COVERAGE_")]:
        monkeypatch.delenv(key)


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """URL of an S3 server: the user's (MinIO, …) when LAKEFLOW_TEST_S3_ENDPOINT is set, else moto's."""
    external = os.environ.get("LAKEFLOW_TEST_S3_ENDPOINT")
    if external:
        yield external
        return
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    with moto_server() as endpoint:
        yield endpoint


@pytest.fixture
def second_s3_endpoint() -> Iterator[str]:
    """Another S3 server beside the lake's (a second region or account), for one test."""
    with moto_server() as endpoint:
        yield endpoint


@pytest.fixture
def s3_url(s3_endpoint: str) -> str:
    """A fresh bucket (and prefix) on the test S3 server, as an s3:// URL."""
    bucket = f"lakeflow-test-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    return f"s3://{bucket}/run"


@pytest.fixture
def s3_env(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Point boto3 (and subprocesses) at the test server the way a user would: AWS_ENDPOINT_URL."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    return s3_endpoint


@pytest.fixture(params=["local", "memory", "s3"])
def lake_url(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> str:
    """A fresh, empty lake URL on each backend."""
    if request.param == "local":
        return str(tmp_path) + "/lake"
    if request.param == "memory":
        return f"memory://lake-{uuid.uuid4().hex[:8]}"
    request.getfixturevalue("s3_env")
    return str(request.getfixturevalue("s3_url"))


@pytest.fixture
def store(lake_url: str, request: pytest.FixtureRequest) -> Store:
    endpoint = request.getfixturevalue("s3_endpoint") if lake_url.startswith("s3://") else None
    return open_store(lake_url, S3Options(endpoint_url=endpoint))
