"""A throw-away S3 server (moto on 127.0.0.1): `lakeflow bench lake`'s S3 backend when no S3 lake is given."""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from collections.abc import Iterator

from lakeflow.errors import MissingExtraError


@contextlib.contextmanager
def local_s3_bucket() -> Iterator[tuple[str, str]]:
    """Yield (endpoint_url, s3://bucket/prefix) on a moto server that lives for the block."""
    try:
        import boto3
        from moto.server import ThreadedMotoServer
    except ImportError as e:
        raise MissingExtraError("moto[server]", "test") from e
    for name, value in (("AWS_ACCESS_KEY_ID", "bench"), ("AWS_SECRET_ACCESS_KEY", "bench")):
        os.environ.setdefault(name, value)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        bucket = f"lakeflow-bench-{uuid.uuid4().hex[:8]}"
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
        yield endpoint, f"s3://{bucket}/bench"
    finally:
        server.stop()
