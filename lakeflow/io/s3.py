"""`s3://bucket/prefix` as a `Store`, on boto3: AWS, MinIO, R2, GCS interop, moto.

Configured the way AWS users expect: `AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID` /
`AWS_SECRET_ACCESS_KEY`, `AWS_PROFILE`, `AWS_REGION`, or explicit `S3Options`.
botocore's "standard" retry mode retries throttling, 5xx and timeouts with backoff;
409 ConditionalRequestConflict (a concurrent conditional write in flight) is retried here.
"""

from __future__ import annotations

import errno
import io
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any, BinaryIO
from urllib.parse import urlparse

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from tenacity import retry, retry_if_exception, stop_after_attempt, wait_exponential_jitter

from lakeflow.errors import EtagMismatchError, InputError
from lakeflow.io.ranged import open_ranged
from lakeflow.io.s3errors import translate, translated
from lakeflow.io.store import ObjectInfo, S3Access, check_key

_MISSING = {"NoSuchKey", "404", "NotFound"}
_TRANSFER = TransferConfig(multipart_threshold=64 << 20, multipart_chunksize=16 << 20, max_concurrency=8)


@dataclass(frozen=True)
class S3Options:
    """Overrides for what boto3 would find in the environment; None means "ask boto3"."""

    endpoint_url: str | None = None
    region: str | None = None
    profile: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    max_attempts: int = 8  # botocore's standard retries (throttling, 5xx, timeouts)
    connect_timeout: float = 10.0  # seconds; interactive commands use less (see `interactive`)
    read_timeout: float = 60.0

    def interactive(self) -> S3Options:
        """The same options for a command a person waits on: fail in seconds, not a minute."""
        return replace(self, max_attempts=min(self.max_attempts, 2), connect_timeout=min(self.connect_timeout, 3.0))


def _code(e: ClientError) -> str:
    return str(e.response.get("Error", {}).get("Code", ""))


def _is_conflict(e: BaseException) -> bool:
    return isinstance(e, ClientError) and _code(e) == "ConditionalRequestConflict"


_retry_conflict = retry(
    retry=retry_if_exception(_is_conflict),
    stop=stop_after_attempt(8),
    wait=wait_exponential_jitter(multiplier=0.05, max=2.0),
    reraise=True,
)


class S3Store:
    """Objects under `s3://bucket/prefix`."""

    shared_across_processes = True

    def __init__(self, url: str, options: S3Options | None = None) -> None:
        parsed = urlparse(url)
        if parsed.scheme != "s3" or not parsed.netloc:
            raise InputError(f"not an S3 URL: {url!r} (expected s3://bucket/prefix)")
        opts = options or S3Options()
        self.options = opts
        self.bucket = parsed.netloc
        self.prefix = parsed.path.strip("/")
        self.url = f"s3://{self.bucket}/{self.prefix}".rstrip("/")
        self._session = boto3.session.Session(
            profile_name=opts.profile,
            aws_access_key_id=opts.access_key_id,
            aws_secret_access_key=opts.secret_access_key,
            region_name=opts.region,
        )
        self.client: Any = self._client(opts, "auto")
        if not _is_aws(self.client.meta.endpoint_url):
            # MinIO, moto and most S3-compatible servers only route path-style requests.
            self.client = self._client(opts, "path")

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its URL and options (another process, e.g. the trainer's writer, opens its own client)."""
        return (S3Store, (self.url, self.options))

    def _client(self, opts: S3Options, addressing: str) -> Any:
        config = Config(
            retries={"mode": "standard", "max_attempts": opts.max_attempts},
            connect_timeout=opts.connect_timeout,
            read_timeout=opts.read_timeout,
            max_pool_connections=32,
            s3={"addressing_style": addressing},
        )
        return self._session.client("s3", endpoint_url=opts.endpoint_url, config=config)

    def _key(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    @translated("s3:GetObject")
    def get(self, key: str) -> bytes:
        return self._get(key)["Body"].read()  # type: ignore[no-any-return]

    def _get(self, key: str, **kwargs: Any) -> dict[str, Any]:
        try:
            return self.client.get_object(Bucket=self.bucket, Key=self._key(key), **kwargs)  # type: ignore[no-any-return]
        except ClientError as e:
            if _code(e) in _MISSING:
                raise FileNotFoundError(errno.ENOENT, "no such object", key) from e
            if _code(e) == "InvalidRange":
                return {"Body": io.BytesIO(b""), "ETag": ""}
            raise

    @translated("s3:GetObject")
    def get_range(self, key: str, start: int, end: int) -> bytes:
        if end <= start:
            return b""
        return self._get(key, Range=f"bytes={start}-{end - 1}")["Body"].read()  # type: ignore[no-any-return]

    @translated("s3:GetObject")
    def get_with_etag(self, key: str) -> tuple[bytes, str]:
        response = self._get(key)
        return response["Body"].read(), str(response["ETag"]).strip('"')

    @translated("s3:GetObject")
    def head(self, key: str) -> ObjectInfo:
        try:
            response = self.client.head_object(Bucket=self.bucket, Key=self._key(key))
        except ClientError as e:
            if _code(e) in _MISSING:
                raise FileNotFoundError(errno.ENOENT, "no such object", key) from e
            raise
        return ObjectInfo(key, int(response["ContentLength"]))

    @translated("s3:PutObject")
    def put(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)

    @translated("s3:PutObject")
    def put_file(self, key: str, path: str) -> None:
        self.client.upload_file(path, self.bucket, self._key(key), Config=_TRANSFER)

    @translated("s3:PutObject")
    @_retry_conflict
    def put_if_absent(self, key: str, data: bytes) -> None:
        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data, IfNoneMatch="*")
        except ClientError as e:
            if _code(e) != "PreconditionFailed":
                raise
            if self._holds(key, data):
                return
            raise FileExistsError(errno.EEXIST, "object already exists", key) from e

    @translated("s3:PutObject")
    @_retry_conflict
    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        try:
            response = self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data, IfMatch=f'"{etag}"')
        except ClientError as e:
            if _code(e) in _MISSING:
                raise FileNotFoundError(errno.ENOENT, "cannot swap a missing object", key) from e
            if _code(e) != "PreconditionFailed":
                raise
            current, current_etag = self.get_with_etag(key)
            if current == data:  # a retry whose first attempt landed
                return current_etag
            raise EtagMismatchError(f"{key} changed since etag {etag} was read") from e
        return str(response["ETag"]).strip('"')

    def _holds(self, key: str, data: bytes) -> bool:
        try:
            return self.get(key) == data
        except FileNotFoundError:
            return False

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        root = f"{self.prefix}/" if self.prefix else ""
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": root + prefix}
        if start_after:
            kwargs["StartAfter"] = root + start_after
        pages = iter(self.client.get_paginator("list_objects_v2").paginate(**kwargs))
        while True:
            try:
                page = next(pages)
            except StopIteration:
                return
            except (ClientError, BotoCoreError) as e:
                raise translate(e, self, prefix, "s3:ListBucket") from e
            for item in page.get("Contents", []):
                yield ObjectInfo(item["Key"][len(root) :], int(item["Size"]))

    @translated("s3:DeleteObject")
    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self._key(key))

    def open_read(self, key: str) -> BinaryIO:
        return open_ranged(self, key)

    def local_path(self, key: str) -> str | None:
        return None

    def s3_access(self) -> S3Access:
        creds = self._session.get_credentials()
        frozen = creds.get_frozen_credentials() if creds else None
        endpoint = urlparse(self.client.meta.endpoint_url)
        return S3Access(
            bucket=self.bucket,
            prefix=self.prefix,
            endpoint=None if _is_aws(self.client.meta.endpoint_url) else endpoint.netloc,
            use_ssl=endpoint.scheme == "https",
            region=self.client.meta.region_name or "us-east-1",
            key_id=frozen.access_key if frozen else None,
            secret=frozen.secret_key if frozen else None,
            session_token=frozen.token if frozen else None,
        )


def _is_aws(endpoint_url: str) -> bool:
    return (urlparse(endpoint_url).hostname or "").endswith(".amazonaws.com")


def s3fs_filesystem(store: S3Store) -> Any:
    """An s3fs filesystem with the store's credentials (for DuckDB's fsspec path, in benchmarks)."""
    try:
        import s3fs
    except ImportError as e:
        from lakeflow.errors import MissingExtraError

        raise MissingExtraError("s3fs", "bench") from e
    access = store.s3_access()
    return s3fs.S3FileSystem(
        key=access.key_id,
        secret=access.secret,
        token=access.session_token,
        endpoint_url=store.client.meta.endpoint_url,
        client_kwargs={"region_name": access.region},
    )
