"""The two ends of the throttled-link test, each run inside its own network namespace.

`python -m tests.weights.throttled_peer publish ENDPOINT URL` (beside the S3 server) waits for
the server, makes the bucket and publishes a full version and a delta; `... pull ENDPOINT URL
OUT` (across the shaped link) pulls both and prints their timings and byte counts as JSON.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import time
from urllib.parse import urlparse

import boto3

from lakeflow.io import S3Options, Store, open_store
from lakeflow.weights import TransferOptions, publish, pull
from lakeflow.weights.tensors import State
from tests.weights.weight_states import adam_step, make_state

MODEL = "m"
SCALE = 800  # make_state(scale=800): about 12 MB of bf16, a few seconds at 100 Mbit/s
OPTIONS = TransferOptions(part_size=1 << 20, threads=4, attempts=2, backoff=0.0, progress=False, request_s=0.0)


def throttled_states() -> list[State]:
    """Version 0 (full) and version 1 (one Adam-like step: a delta) of the test model."""
    first = make_state(seed=0, scale=SCALE)
    return [first, adam_step(first, 0)]


def _store(endpoint: str, url: str) -> Store:
    # the endpoint and keys are explicit: nothing here may fall back to AWS's real endpoints
    return open_store(
        url,
        S3Options(endpoint_url=endpoint, region="us-east-1", access_key_id="testing", secret_access_key="testing"),
    )


def _wait_for(endpoint: str, timeout_s: float = 30.0) -> None:
    parsed = urlparse(endpoint)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((parsed.hostname, parsed.port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def publish_versions(endpoint: str, url: str) -> dict[str, int]:
    """Bucket, version 0 and version 1; their sizes as the manifests state them."""
    _wait_for(endpoint)
    bucket = urlparse(url).netloc
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    client.create_bucket(Bucket=bucket)
    store = _store(endpoint, url)
    states = throttled_states()
    full = publish(store, MODEL, states[0])
    delta = publish(store, MODEL, states[1], base=states[0])
    if full.kind != "full" or delta.kind != "delta" or delta.delta is None:
        raise RuntimeError(f"expected a full then a delta version, got {full.kind} then {delta.kind}")
    return {"full_bytes": full.full_bytes(), "delta_bytes": delta.delta.size, "state_bytes": full.state_bytes}


def pull_versions(endpoint: str, url: str, out: str) -> dict[str, dict[str, object]]:
    """Pull version 0 into OUT/model (kept as OUT/v0), then version 1 onto it; time each pull."""
    store = _store(endpoint, url)
    dest = os.path.join(out, "model")
    result: dict[str, dict[str, object]] = {}
    for name, version in (("full", 0), ("delta", 1)):
        t0 = time.perf_counter()
        r = pull(store, MODEL, dest, version=version, options=OPTIONS)
        seconds = time.perf_counter() - t0
        result[name] = {"seconds": seconds, "bytes_fetched": r.bytes_fetched, "route": r.route, "chain": r.chain}
        shutil.copytree(dest, os.path.join(out, f"v{version}"))
    return result


def main(argv: list[str]) -> None:
    if len(argv) == 3 and argv[0] == "publish":
        print(json.dumps(publish_versions(argv[1], argv[2])))
    elif len(argv) == 4 and argv[0] == "pull":
        print(json.dumps(pull_versions(argv[1], argv[2], argv[3])))
    else:
        raise SystemExit("usage: throttled_peer publish ENDPOINT URL | pull ENDPOINT URL OUT")


if __name__ == "__main__":
    main(sys.argv[1:])
