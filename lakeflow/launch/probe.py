"""A rollout service's liveness check, run by Kubernetes inside its pod (an exec probe).

Exit 0 when `stats/raas/<id>.json` in the lake was written less than `--max-age-s` ago, else 1 with the
reason. The service's keeper thread writes it every `heartbeat_s`, also while a group is generated.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime

from lakeflow.io import S3Options, open_store
from lakeflow.lake import layout


def heartbeat_age_s(lake: str, raas_id: str, endpoint_url: str | None = None, now: datetime | None = None) -> float:
    """Seconds since the service's last heartbeat; FileNotFoundError when it never wrote one."""
    store = open_store(lake, S3Options(endpoint_url=endpoint_url))
    record = json.loads(store.get(layout.raas_stats_key(raas_id)))
    return ((now or datetime.now(UTC)) - datetime.fromisoformat(record["at"])).total_seconds()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lakeflow.launch.probe", description=__doc__)
    parser.add_argument("--lake", required=True)
    parser.add_argument("--endpoint-url", default=None)
    parser.add_argument("--raas-id", required=True)
    parser.add_argument("--max-age-s", type=float, default=120.0)
    args = parser.parse_args(argv)
    try:
        age = heartbeat_age_s(args.lake, args.raas_id, args.endpoint_url)
    except FileNotFoundError:
        print(f"{args.raas_id}: no heartbeat yet", file=sys.stderr)
        return 1
    except (ValueError, KeyError) as e:
        print(f"{args.raas_id}: unreadable heartbeat: {e}", file=sys.stderr)
        return 1
    if age > args.max_age_s:
        print(f"{args.raas_id}: last heartbeat {age:.0f} s ago (limit {args.max_age_s:.0f} s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
