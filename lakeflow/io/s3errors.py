"""botocore's exceptions as one-line lakeflow errors that name the URL, the key, the S3 action and
what to do. `FileNotFoundError` / `FileExistsError` / `EtagMismatchError` keep their meaning; only
what a caller cannot handle (no bucket, credentials, permissions, network) is translated here."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    HTTPClientError,
    NoCredentialsError,
    PartialCredentialsError,
    ReadTimeoutError,
)
from botocore.exceptions import ConnectionError as BotoConnectionError

from lakeflow.errors import LakeflowError, StoreAccessError, StorePermissionError, StoreUnreachableError

_DENIED = {"AccessDenied", "403", "Forbidden", "AllAccessDisabled", "AccountProblem"}
_BAD_CREDENTIALS = {
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "InvalidToken",
    "TokenRefreshRequired",
}
_TRANSIENT = {"SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "503", "500", "502", "504"}
_CREDENTIALS_HELP = "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, or an instance role)"


class _HasUrl(Protocol):
    url: str
    bucket: str


def translate(e: Exception, store: _HasUrl, key: str, action: str) -> LakeflowError:
    """The lakeflow error for a botocore failure of `action` (e.g. `s3:GetObject`) on `key`."""
    where = f"{store.url}/{key}" if key else store.url
    if isinstance(e, NoCredentialsError | PartialCredentialsError):
        return StoreAccessError(f"{where}: no S3 credentials found: {_CREDENTIALS_HELP}")
    if isinstance(e, EndpointConnectionError | ConnectTimeoutError | ReadTimeoutError):
        endpoint = getattr(e, "kwargs", {}).get("endpoint_url", "the S3 endpoint")
        return StoreUnreachableError(
            f"{where}: cannot reach {endpoint} ({type(e).__name__}): check --endpoint-url / AWS_ENDPOINT_URL "
            "and that the server is running"
        )
    if isinstance(e, ClientError):
        error = e.response.get("Error", {})
        code, message = str(error.get("Code", "")), str(error.get("Message", "")).strip()
        if code == "NoSuchBucket":
            return StoreAccessError(
                f"{where}: bucket {store.bucket!r} does not exist: check the URL, or create the bucket first"
            )
        if code in _BAD_CREDENTIALS:
            return StoreAccessError(f"{where}: the S3 credentials were rejected ({code}): {_CREDENTIALS_HELP}")
        if code in _DENIED:
            return StorePermissionError(
                f"{where}: access denied for {action}: these credentials lack {action} on this key "
                "(use the credentials of the role meant for this process, or widen its policy)"
            )
        status = int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        if status >= 500 or code in _TRANSIENT:
            return StoreUnreachableError(f"{where}: {action} failed: {code} {message}".rstrip())
        return StoreAccessError(f"{where}: {action} failed: {code} {message}".rstrip())
    if isinstance(e, BotoConnectionError | HTTPClientError):  # connection reset or closed mid-request
        return StoreUnreachableError(f"{where}: {action} failed: {type(e).__name__}: {e}")
    return StoreAccessError(f"{where}: {action} failed: {type(e).__name__}: {e}")


P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S", bound=_HasUrl)


def translated(action: str) -> Callable[[Callable[Concatenate[S, str, P], R]], Callable[Concatenate[S, str, P], R]]:
    """Decorate a store method whose first argument is the key: botocore errors become lakeflow errors."""

    def wrap(method: Callable[Concatenate[S, str, P], R]) -> Callable[Concatenate[S, str, P], R]:
        @functools.wraps(method)
        def inner(self: S, key: str, /, *args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return method(self, key, *args, **kwargs)
            except (ClientError, BotoCoreError) as e:
                raise translate(e, self, key, action) from e

        return inner

    return wrap
