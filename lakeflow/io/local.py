"""A local directory as a `Store`: atomic writes by temp file + link/rename.

Create-only is `link(tmp, key)` (fails if the key exists, never shows half a file);
compare-and-swap holds an exclusive `flock` on the key's directory while it compares
and renames, so it is safe across processes on one machine (not across NFS clients).
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import fcntl
import os
import shutil
import uuid
from collections.abc import Iterator
from typing import BinaryIO

from lakeflow.errors import EtagMismatchError, StoreAccessError
from lakeflow.io.store import ObjectInfo, S3Access, check_key, content_etag

TMP_PREFIX = ".~lakeflow-"


class LocalStore:
    """Objects as files under `root`."""

    shared_across_processes = True

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self.url = "file://" + self.root  # the directory is created by the first write, not here

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *check_key(key).split("/"))

    def _open(self, key: str) -> BinaryIO:
        """The object's file for reading. A symbolic link inside the lake (to a file or through a
        directory) is not an object of the lake: reading one raises FileNotFoundError, as if absent."""
        path = self._path(key)
        real = os.path.realpath(path)
        if real != os.path.join(os.path.realpath(self.root), *key.split("/")):
            raise FileNotFoundError(errno.ENOENT, "a symbolic link, not an object of this lake", key)
        return open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb")

    def get(self, key: str) -> bytes:
        with self._open(key) as f:
            return f.read()

    def get_range(self, key: str, start: int, end: int) -> bytes:
        with self._open(key) as f:
            f.seek(start)
            return f.read(max(0, end - start))

    def get_with_etag(self, key: str) -> tuple[bytes, str]:
        data = self.get(key)
        return data, content_etag(data)

    def head(self, key: str) -> ObjectInfo:
        with self._open(key) as f:
            return ObjectInfo(key, os.fstat(f.fileno()).st_size)

    def _write_tmp(self, path: str, data: bytes | None = None, src: str | None = None) -> str:
        """A temp file beside `path` holding the bytes; a full disk removes it and raises StoreAccessError."""
        directory = os.path.dirname(path)
        tmp = os.path.join(directory, f"{TMP_PREFIX}{uuid.uuid4().hex}")
        try:
            os.makedirs(directory, exist_ok=True)
            if src is not None:
                shutil.copyfile(src, tmp)
            else:
                with open(tmp, "wb") as f:
                    f.write(data or b"")
                    f.flush()
                    os.fsync(f.fileno())
        except OSError as e:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
                raise StoreAccessError(
                    f"cannot write {path}: {os.strerror(e.errno)} on the lake's disk ({self.root}); "
                    "free space there (or move the lake) and start again: nothing written was lost"
                ) from e
            raise
        return tmp

    def _move(self, tmp: str, path: str) -> None:
        try:
            os.replace(tmp, path)
        except OSError:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        self._move(self._write_tmp(path, data), path)

    def put_file(self, key: str, path: str) -> None:
        dest = self._path(key)
        self._move(self._write_tmp(dest, src=path), dest)

    def put_if_absent(self, key: str, data: bytes) -> None:
        path = self._path(key)
        tmp = self._write_tmp(path, data)
        try:
            os.link(tmp, path)
        except FileExistsError:
            if self._same_bytes(path, data):
                return
            raise FileExistsError(errno.EEXIST, "object already exists", key) from None
        finally:
            os.unlink(tmp)

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        path = self._path(key)
        with _locked(os.path.dirname(path)):
            try:
                current = self.get(key)
            except FileNotFoundError:
                raise FileNotFoundError(errno.ENOENT, "cannot swap a missing object", key) from None
            if content_etag(current) != etag:
                if current == data:  # a retry whose first attempt landed
                    return content_etag(data)
                raise EtagMismatchError(f"{key} changed since etag {etag} was read")
            self._move(self._write_tmp(path, data), path)
        return content_etag(data)

    def _same_bytes(self, path: str, data: bytes) -> bool:
        try:
            with open(path, "rb") as f:
                return f.read() == data
        except FileNotFoundError:
            return False

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        # Walk only the directory that can hold `prefix`, pruning subtrees that sort
        # entirely at or before `start_after`; sort at the end for exact key order.
        base = prefix.rsplit("/", 1)[0] + "/" if "/" in prefix else ""
        found: builtins.list[ObjectInfo] = []
        self._walk(base, prefix, start_after, found)
        found.sort(key=lambda o: o.key)
        return iter(found)

    def _walk(self, rel: str, prefix: str, start_after: str | None, out: builtins.list[ObjectInfo]) -> None:
        directory = os.path.join(self.root, *rel.split("/")) if rel else self.root
        try:
            entries = list(os.scandir(directory))
        except (FileNotFoundError, NotADirectoryError):
            return
        for entry in entries:
            if entry.name.startswith(TMP_PREFIX) or entry.is_symlink():
                continue  # temporary files and symbolic links are not objects of the lake
            key = rel + entry.name
            if entry.is_dir(follow_symlinks=False):
                sub = key + "/"
                if not (sub.startswith(prefix) or prefix.startswith(sub)):
                    continue
                if start_after and sub < start_after and not start_after.startswith(sub):
                    continue
                self._walk(sub, prefix, start_after, out)
            elif key.startswith(prefix) and (start_after is None or key > start_after):
                try:
                    size = entry.stat().st_size
                except FileNotFoundError:
                    continue  # deleted while we listed: it is gone, as a later listing would say
                out.append(ObjectInfo(key, size))

    def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path(key))

    def open_read(self, key: str) -> BinaryIO:
        return self._open(key)

    def local_path(self, key: str) -> str | None:
        return self._path(key)

    def s3_access(self) -> S3Access | None:
        return None


@contextlib.contextmanager
def _locked(directory: str) -> Iterator[None]:
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
