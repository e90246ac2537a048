"""Downloading large objects: parallel ranged parts, retries, resume, sha256 check.

Parts land as files in a staging directory as they complete, so a pull that was killed
fetches only the missing parts next time. A finished object is named by its sha256 and
kept only once its bytes match the manifest.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from tenacity import Retrying, retry_if_not_exception_type, stop_after_attempt, wait_exponential
from tqdm import tqdm

from lakeflow.errors import WeightsIntegrityError
from lakeflow.io import Store
from lakeflow.weights.manifest import ObjectEntry


@dataclass(frozen=True)
class TransferOptions:
    """How pulls download objects."""

    part_size: int = 16 << 20  # bytes per ranged GET
    threads: int = 8  # parallel ranged GETs
    attempts: int = 5  # tries per part before the pull fails (it resumes on the next pull)
    backoff: float = 0.5  # seconds, doubled per retry
    progress: bool | None = None  # tqdm bars; None: only when stderr is a terminal
    workers: int | None = None  # threads (or processes) decoding deltas (None: every CPU)
    processes: bool = False  # decode in forked processes instead of threads (see weights/workers.py)
    bandwidth: float | None = None  # bytes/s to plan routes with (None: as measured by earlier pulls)
    request_s: float | None = None  # seconds per object request to plan with (None: plan.DEFAULT_REQUEST_S)


class Downloader:
    """Fetches manifest objects into `stage` (one directory per destination)."""

    def __init__(self, store: Store, stage: str, options: TransferOptions) -> None:
        self.store, self.stage, self.options = store, stage, options
        self.bytes_fetched = 0
        self.seconds = 0.0  # spent in fetch
        self.requests = 0  # ranged GETs issued
        os.makedirs(os.path.join(stage, "parts"), exist_ok=True)
        os.makedirs(os.path.join(stage, "objects"), exist_ok=True)

    def fetch(self, entries: list[ObjectEntry]) -> dict[str, str]:
        """Local paths of the objects (by key), verified against their sha256."""
        todo = [e for e in entries if not os.path.exists(self._final(e))]
        total = sum(e.size for e in todo)
        show = self.options.progress if self.options.progress is not None else sys.stderr.isatty()
        t0 = time.perf_counter()
        with tqdm(total=total, unit="B", unit_scale=True, desc="pull", disable=not show or total == 0) as bar:
            for e in todo:
                self._fetch_one(e, bar)
        self.seconds += time.perf_counter() - t0
        return {e.key: self._final(e) for e in entries}

    def discard(self, entry: ObjectEntry) -> None:
        """Forget a fetched object (it failed a later check)."""
        if os.path.exists(self._final(entry)):
            os.unlink(self._final(entry))

    def _final(self, e: ObjectEntry) -> str:
        return os.path.join(self.stage, "objects", e.sha256)

    def _part(self, e: ObjectEntry, i: int) -> str:
        return os.path.join(self.stage, "parts", f"{e.sha256}.{i:06d}")

    def _fetch_one(self, e: ObjectEntry, bar: tqdm) -> None:
        size = self.options.part_size
        parts = [(i, i * size, min(e.size, (i + 1) * size)) for i in range(max(1, -(-e.size // size)))]
        missing = []
        for i, start, end in parts:
            if os.path.exists(self._part(e, i)) and os.path.getsize(self._part(e, i)) == end - start:
                bar.update(end - start)
            else:
                missing.append((i, start, end))
        with ThreadPoolExecutor(self.options.threads) as pool:
            for n in pool.map(lambda p: self._fetch_part(e, *p), missing):
                self.bytes_fetched += n
                self.requests += 1
                bar.update(n)
        digest = hashlib.sha256()
        tmp = os.path.join(self.stage, f"assemble-{uuid.uuid4().hex}")
        with open(tmp, "wb") as out:
            for i, _, _ in parts:
                with open(self._part(e, i), "rb") as f:
                    while chunk := f.read(8 << 20):
                        digest.update(chunk)
                        out.write(chunk)
        for i, _, _ in parts:
            os.unlink(self._part(e, i))
        if digest.hexdigest() != e.sha256 or os.path.getsize(tmp) != e.size:
            os.unlink(tmp)
            raise WeightsIntegrityError(f"{e.key}: downloaded bytes do not match the manifest's sha256/size")
        os.replace(tmp, self._final(e))

    def _fetch_part(self, e: ObjectEntry, i: int, start: int, end: int) -> int:
        retrying = Retrying(
            stop=stop_after_attempt(self.options.attempts),
            wait=wait_exponential(multiplier=self.options.backoff, max=30),
            retry=retry_if_not_exception_type((FileNotFoundError, PermissionError, WeightsIntegrityError)),
            reraise=True,
        )
        data = retrying(self.store.get_range, e.key, start, end)
        if len(data) != end - start:
            raise WeightsIntegrityError(f"{e.key}: object is shorter than its manifest says ({e.size} bytes)")
        tmp = self._part(e, i) + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, self._part(e, i))
        return len(data)

    def cleanup(self) -> None:
        shutil.rmtree(self.stage, ignore_errors=True)
