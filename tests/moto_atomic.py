"""moto's S3 server with its conditional writes made atomic, as S3's and MinIO's are.

moto checks a PUT's `If-Match` / `If-None-Match` precondition and then writes, with nothing between the
two held: two writers racing on one key can both pass the check and both "win" (seen on this 2-core
machine under load, in test_racing_conditional_writes_have_one_winner[s3-match]). lakeflow relies on the
atomic conditional writes of S3 and MinIO, so the tests' server runs moto's PUT, copy and DELETE handlers
one at a time. Run as a script: `python tests/moto_atomic.py -H HOST -p PORT` (moto.server's arguments).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from moto.s3.responses import S3Response
from moto.server import main

_WRITES = threading.Lock()


def _one_at_a_time(handler: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(handler)
    def locked(self: S3Response, *args: Any, **kwargs: Any) -> Any:
        with _WRITES:
            return handler(self, *args, **kwargs)

    return locked


for _name in ("put_object", "copy_object", "delete_object"):
    setattr(S3Response, _name, _one_at_a_time(getattr(S3Response, _name)))

if __name__ == "__main__":
    main()
