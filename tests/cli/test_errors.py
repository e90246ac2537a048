"""Truthful CLI errors: a missing lake, bucket, credentials or endpoint ends in one line and exit 1,
and a read command creates nothing."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from botocore.exceptions import ClientError
from click.testing import CliRunner

from lakeflow.cli import main
from lakeflow.errors import StoreAccessError, StorePermissionError
from lakeflow.io import S3Options, open_store
from lakeflow.io.s3errors import translate

# (command words, arguments after --lake)
READ_COMMANDS = [
    (["sql"], ["SELECT count(*) FROM trajectories"]),
    (["status"], []),
    (["weights", "ls"], ["--model", "policy"]),
    (["weights", "verify"], ["--model", "policy"]),
    (["report"], ["--out", "REPORT"]),
]


def invoke(args: list[str]) -> tuple[int, str]:
    result = CliRunner().invoke(main, args)
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def one_line_error(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    assert lines[0].startswith("Error: "), output
    assert "Traceback" not in output
    return lines[0]


@pytest.mark.parametrize(("words", "rest"), READ_COMMANDS, ids=lambda c: " ".join(c))
def test_read_command_on_missing_local_lake(words: list[str], rest: list[str], tmp_path: Path) -> None:
    lake = tmp_path / "typo"
    rest = [a.replace("REPORT", str(tmp_path / "report")) for a in rest]
    code, output = invoke([*words, "--lake", str(lake), *rest])
    assert code == 1
    assert "no lake at" in one_line_error(output)
    assert not lake.exists()
    assert not (tmp_path / "report").exists()


@pytest.mark.s3
@pytest.mark.parametrize(("words", "rest"), READ_COMMANDS[:3], ids=lambda c: " ".join(c))
def test_read_command_on_missing_bucket(words: list[str], rest: list[str], s3_env: str) -> None:
    code, output = invoke([*words, "--lake", "s3://no-such-bucket-lakeflow/run", *rest])
    assert code == 1
    line = one_line_error(output)
    assert "s3://no-such-bucket-lakeflow/run" in line and "does not exist" in line


@pytest.mark.s3
def test_empty_prefix_in_existing_bucket(s3_env: str, s3_url: str) -> None:
    code, output = invoke(["sql", "--lake", s3_url + "-typo", "SELECT 1"])
    assert code == 1
    assert "no lake at" in one_line_error(output)


@pytest.mark.s3
def test_no_credentials(s3_env: str, s3_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    code, output = invoke(["status", "--lake", s3_url])
    assert code == 1
    line = one_line_error(output)
    assert "no S3 credentials" in line and "AWS_ACCESS_KEY_ID" in line


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.s3
def test_unreachable_endpoint_fails_fast_with_one_line() -> None:
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    start = time.monotonic()
    code, output = invoke(["sql", "--lake", "s3://bucket/run", "--endpoint-url", endpoint, "SELECT 1"])
    assert code == 1
    line = one_line_error(output)
    assert "cannot reach" in line and endpoint in line
    # Not a timing assertion on speed: the interactive options allow at most 2 attempts, so a refused
    # connection cannot take botocore's default 8 attempts with back-off (~1 minute).
    assert time.monotonic() - start < 50


def test_access_denied_names_key_and_action() -> None:
    store = open_store("s3://lake/run", S3Options(endpoint_url="http://127.0.0.1:1"))
    denied = ClientError({"Error": {"Code": "AccessDenied", "Message": "Access Denied"}}, "PutObject")
    error = translate(denied, store, "weights/policy/LATEST", "s3:PutObject")
    assert isinstance(error, StorePermissionError)
    assert "s3://lake/run/weights/policy/LATEST" in str(error) and "s3:PutObject" in str(error)
    bad_key = ClientError({"Error": {"Code": "InvalidAccessKeyId", "Message": "bad"}}, "GetObject")
    assert "rejected" in str(translate(bad_key, store, "x", "s3:GetObject"))
    assert type(translate(bad_key, store, "x", "s3:GetObject")) is StoreAccessError


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (bytes(range(256)), "is not a text file"),
        (b"models: [1,\n", "is not valid YAML at line 2"),
        (b"- a list\n", "the top level must be a mapping"),
        (b"no_such_key: 1\n", "no_such_key"),
    ],
    ids=["binary", "malformed", "list", "unknown-key"],
)
@pytest.mark.parametrize("command", ["dataflow", "train", "raas"])
def test_bad_config_file_is_one_line(command: str, content: bytes, message: str, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_bytes(content)
    args = [command, "--lake", str(tmp_path / "lake"), "--config", str(config)]
    if command != "dataflow":
        args += ["--model", "policy"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code in (1, 2), result.output
    assert message in result.output and "Traceback" not in result.output
