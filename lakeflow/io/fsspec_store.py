"""Any fsspec URL as a `Store` that reads: weight sources and regional mirrors.

`https://` (a CDN or any static HTTP server), `s3://` in another region or account, `gs://`,
`az://`, `file://` — configured the fsspec way (storage options passed in, `FSSPEC_<PROTOCOL>_<KEY>`
environment variables, or files in `~/.config/fsspec`). Read-only by default: its write methods
raise `UnsupportedStoreError`; writes and compare-and-swap stay on the lake's own store. A mirror
writer opens it with `writable=True`, which allows plain `put`/`put_file`/`delete` (the mirror is
the only writer of its URL) and still no conditional writes. Listing is best effort: an HTTP
server that cannot list yields nothing, so readers find versions by key (LATEST, manifests).
"""

from __future__ import annotations

import contextlib
import errno
import io
import logging
from collections.abc import Iterator
from typing import Any, BinaryIO, cast

import fsspec

from lakeflow.errors import InputError, UnsupportedStoreError
from lakeflow.io.store import ObjectInfo, S3Access, check_key, content_etag

log = logging.getLogger(__name__)
_READ_ONLY = (
    "{url} is a read-only weights source: publish to the lake (`lakeflow weights publish --lake …`) and copy "
    "to the source with `lakeflow weights mirror --lake HOME --to {url}`"
)


class FsspecStore:
    """Objects under an fsspec URL; see the module docstring for what it allows."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None, writable: bool = False) -> None:
        if not url:
            raise InputError("empty weights URL: pass https://…, s3://bucket/prefix, gs://…, file:///path, …")
        self.url = url.rstrip("/")
        self.writable = writable
        try:
            fs, root = fsspec.core.url_to_fs(self.url, **(storage_options or {}))
        except (ImportError, ValueError) as e:
            raise UnsupportedStoreError(f"cannot open weights URL {url!r}: {e}") from e
        self.fs = fs
        self.root = str(root).rstrip("/")
        protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        self.http = protocol in ("http", "https")
        self.shared_across_processes = protocol != "memory"  # fsspec's memory filesystem is this process's
        self._no_ranges = False

    def _path(self, key: str) -> str:
        return f"{self.root}/{check_key(key)}"

    def _call(self, what: str, key: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run an fsspec call: a missing object is FileNotFoundError, anything else the source could not
        answer is ConnectionError (an OSError, so pulls retry it and services wait it out)."""
        try:
            return fn(*args, **kwargs)
        except FileNotFoundError:
            raise FileNotFoundError(errno.ENOENT, "no such object", key) from None
        except (PermissionError, UnsupportedStoreError):
            raise
        except Exception as e:  # aiohttp, botocore, gcsfs, … each have their own errors
            raise ConnectionError(f"{self.url}: {what} {key!r} failed: {e}") from e

    def get(self, key: str) -> bytes:
        return bytes(self._call("GET", key, self.fs.cat_file, self._path(key)))

    def get_range(self, key: str, start: int, end: int) -> bytes:
        if end <= start:
            return b""
        data = bytes(self._call("GET", key, self.fs.cat_file, self._path(key), start=start, end=end))
        if len(data) == end - start or not self.http:
            return data
        # an HTTP server that ignores Range (python -m http.server) answers 200 with the whole object
        size = len(data) if len(data) > end - start else self.head(key).size
        if len(data) == max(0, min(end, size) - start) or len(data) != size:
            return data  # the range, cut short by the object's end
        if not self._no_ranges:
            log.warning("%s ignores Range requests: every part downloads the whole object", self.url)
            self._no_ranges = True
        return data[start:end]

    def get_with_etag(self, key: str) -> tuple[bytes, str]:
        data = self.get(key)
        return data, content_etag(data)

    def head(self, key: str) -> ObjectInfo:
        path = self._path(key)
        self.fs.invalidate_cache(path)  # a listing cached earlier must not answer for a key that arrived since
        info = self._call("HEAD", key, self.fs.info, path)
        if info.get("type") == "directory":
            raise FileNotFoundError(errno.ENOENT, "no such object", key)
        size = info.get("size")
        return ObjectInfo(key, int(size) if size is not None else len(self.get(key)))

    def put(self, key: str, data: bytes) -> None:
        self._writable()
        self._call("PUT", key, self.fs.pipe_file, self._path(key), bytes(data))

    def put_file(self, key: str, path: str) -> None:
        self._writable()
        self._call("PUT", key, self.fs.put_file, path, self._path(key))

    def put_if_absent(self, key: str, data: bytes) -> None:
        raise UnsupportedStoreError(_READ_ONLY.format(url=self.url) + " (conditional writes stay on the lake)")

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        raise UnsupportedStoreError(_READ_ONLY.format(url=self.url) + " (compare-and-swap stays on the lake)")

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        base = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        top = f"{self.root}/{base}".rstrip("/")
        try:
            found = self.fs.find(top, detail=True)
        except FileNotFoundError:
            return
        except Exception as e:  # an HTTP server or CDN that does not list: readers go by key
            log.debug("%s cannot list %s: %s", self.url, top, e)
            return
        finally:
            self.fs.invalidate_cache()
        skip = len(self.root) + 1
        items = sorted((str(p)[skip:], info) for p, info in found.items() if str(p).startswith(self.root + "/"))
        for key, info in items:
            if info.get("type") == "directory" or not key.startswith(prefix):
                continue
            if start_after is None or key > start_after:  # an HTML listing has no sizes: ask for them
                yield ObjectInfo(key, int(info["size"])) if info.get("size") is not None else self.head(key)

    def delete(self, key: str) -> None:
        self._writable()
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self._path(key))

    def open_read(self, key: str) -> BinaryIO:
        if self.http:
            self.get_range(key, 0, 1)  # finds out whether the server honours Range (and that the key exists)
            if self._no_ranges:  # it does not: fsspec's file could only read from the start
                return io.BytesIO(self.get(key))
        return cast(BinaryIO, self._call("open", key, self.fs.open, self._path(key), "rb"))

    def local_path(self, key: str) -> str | None:
        return None

    def s3_access(self) -> S3Access | None:
        return None

    def _writable(self) -> None:
        if not self.writable:
            raise UnsupportedStoreError(_READ_ONLY.format(url=self.url))
