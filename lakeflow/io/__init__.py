"""Object-store layer: the only code in lakeflow that talks to boto3 or fsspec.

`open_store(url)` returns a `Store` for a local path or `file://` URL, `memory://name`,
or `s3://bucket/prefix`; `open_weights_source(url)` a read-only one for any fsspec URL (a weights
mirror, a CDN), and `open_mirror(url)` the store a mirror writer fills. Everything above this
package uses the `Store` interface.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlparse

from lakeflow.errors import InputError, UnsupportedStoreError
from lakeflow.io.fsspec_store import FsspecStore
from lakeflow.io.local import LocalStore
from lakeflow.io.memory import MemoryStore
from lakeflow.io.s3 import S3Options, S3Store
from lakeflow.io.store import ObjectInfo, S3Access, Store, content_etag

__all__ = [
    "FsspecStore",
    "ObjectInfo",
    "S3Access",
    "S3Options",
    "Store",
    "content_etag",
    "open_mirror",
    "open_store",
    "open_weights_source",
]


def open_store(url: str, s3: S3Options | None = None) -> Store:
    """A store for `url`: a path, `file:///abs/path`, `memory://name` or `s3://bucket/prefix`."""
    if not url:
        raise InputError("empty lake URL: pass a directory, memory://name or s3://bucket/prefix")
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


def open_weights_source(url: str, storage_options: dict[str, Any] | None = None) -> Store:
    """A read-only store for weights at any fsspec URL (`https://`, `s3://`, `gs://`, `az://`, `file://`,
    a path), configured the fsspec way; `storage_options` go to the filesystem."""
    return FsspecStore(_fsspec_url(url), storage_options)


def open_mirror(url: str, storage_options: dict[str, Any] | None = None) -> Store:
    """The store a weights mirror writes: a local directory (atomic renames, so a static HTTP server
    serving it never shows half a file) or any writable fsspec URL (single writer, no conditional writes)."""
    scheme = urlparse(url).scheme
    if scheme in ("", "file") and not storage_options:
        return LocalStore(url.removeprefix("file://"))
    if scheme in ("http", "https"):
        raise UnsupportedStoreError(
            f"cannot write a mirror at {url!r}: mirror into the directory or bucket the HTTP server or CDN serves"
        )
    return FsspecStore(_fsspec_url(url), storage_options, writable=True)


def _fsspec_url(url: str) -> str:
    if not url:
        raise InputError("empty weights URL: pass https://…, s3://bucket/prefix, gs://…, file:///path or a directory")
    if urlparse(url).scheme == "":
        return "file://" + os.path.abspath(url)
    return url
