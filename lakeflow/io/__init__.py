"""Object-store layer: the only code in lakeflow that talks to boto3 or fsspec.

`open_store(url)` returns a `Store` for a local path or `file://` URL, `memory://name`,
or `s3://bucket/prefix`. Everything above this package uses the `Store` interface.
"""

from __future__ import annotations

from urllib.parse import urlparse

from lakeflow.errors import UnsupportedStoreError
from lakeflow.io.local import LocalStore
from lakeflow.io.memory import MemoryStore
from lakeflow.io.s3 import S3Options, S3Store
from lakeflow.io.store import ObjectInfo, S3Access, Store, content_etag

__all__ = ["ObjectInfo", "S3Access", "S3Options", "Store", "content_etag", "open_store"]


def open_store(url: str, s3: S3Options | None = None) -> Store:
    """A store for `url`: a path, `file:///abs/path`, `memory://name` or `s3://bucket/prefix`."""
    if not url:
        raise ValueError("empty lake URL: pass a directory, memory://name or s3://bucket/prefix")
    scheme = urlparse(url).scheme
    if scheme in ("", "file") or (len(scheme) == 1 and url[1:3] == ":\\"):
        return LocalStore(url.removeprefix("file://"))
    if scheme == "memory":
        return MemoryStore(url)
    if scheme in ("s3", "s3a"):
        return S3Store("s3://" + url.split("://", 1)[1], s3)
    raise UnsupportedStoreError(
        f"unsupported lake URL {url!r}: use a local path, file://, memory:// or s3:// "
        "(GCS and R2 through their S3-compatible endpoints with AWS_ENDPOINT_URL)"
    )
