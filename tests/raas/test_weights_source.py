"""A rollout service whose weights come from a source other than its lake: a mirror served over
HTTP and a mirror in a second S3 endpoint. Verified pulls; a corrupt mirror is never loaded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import pytest

from lakeflow.io import open_mirror, open_store
from lakeflow.lake import layout
from lakeflow.raas.config import RaasConfig
from lakeflow.raas.engines import versions
from lakeflow.raas.service import RolloutService
from lakeflow.weights import codec, load_state, publish
from lakeflow.weights.mirror import mirror
from lakeflow.weights.tensors import State
from tests.weights.sources import http_server
from tests.weights.weight_states import adam_step, assert_same_state, make_state


class LoadOnly:
    """An engine that only records what it loads (these tests never generate)."""

    max_model_len = 64

    def __init__(self) -> None:
        self.loaded: list[State] = []

    def load(self, model_dir: str) -> None:
        self.loaded.append(load_state(model_dir))


def _service(tmp_path: Path, weights_url: str, **options: Any) -> tuple[RolloutService, LoadOnly]:
    lake = open_store(str(tmp_path / "lake"))
    config = RaasConfig(
        cache_dir=str(tmp_path / "cache"), region="eu-west-1", weights_url=weights_url, weights_options=options
    )
    engine = LoadOnly()
    return RolloutService(lake, "policy", config, engine=engine), engine  # type: ignore[arg-type]


def test_service_pulls_from_an_http_mirror_and_refuses_a_corrupt_one(tmp_path: Path) -> None:
    home = open_store(str(tmp_path / "lake"))
    states = [make_state(seed=3, scale=4)]
    states.append(adam_step(states[0], 0))
    states.append(adam_step(states[1], 1))
    publish(home, "policy", states[0])
    target = open_mirror(str(tmp_path / "mirror"))
    mirror(home, target, "policy")
    with http_server(str(tmp_path / "mirror"), listing=False) as url:
        service, engine = _service(tmp_path, url)
        assert service.refresh_weights() and service.version == 0
        assert_same_state(engine.loaded[-1], states[0])

        publish(home, "policy", states[1], base=states[0])
        assert not service.refresh_weights()  # not mirrored yet: the lake's new version is not seen
        mirror(home, target, "policy")
        assert service.refresh_weights() and service.version == 1
        assert_same_state(engine.loaded[-1], states[1])

        publish(home, "policy", states[2], base=states[1])
        mirror(home, target, "policy")
        for key in (layout.weights_delta_key("policy", 2), layout.weights_object_key("policy", 0, "model.safetensors")):
            path = tmp_path / "mirror" / key
            data = bytearray(path.read_bytes())
            data[-1] ^= 0x01
            path.write_bytes(bytes(data))
        assert not service.refresh_weights()  # verification fails on both routes: keep version 1
        assert service.version == 1 and len(engine.loaded) == 2
    service.close()


def test_service_decodes_with_its_configured_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codec, "SEGMENT", 1000)  # several segments: work for two forked children
    lake = open_store(str(tmp_path / "lake"))
    states = [make_state(seed=3, scale=4)]
    states.append(adam_step(states[0], 0))
    publish(lake, "policy", states[0])
    seen = []
    real = versions.pull  # every engine's version goes through engines.load_version

    def spy(*args: Any) -> Any:
        seen.append(args[4])
        return real(*args)

    monkeypatch.setattr(versions, "pull", spy)
    config = RaasConfig(cache_dir=str(tmp_path / "cache"), decode_workers=2, decode_processes=True)
    engine = LoadOnly()
    service = RolloutService(lake, "policy", config, engine=engine)  # type: ignore[arg-type]
    assert service.refresh_weights() and service.version == 0
    publish(lake, "policy", states[1], base=states[0])
    assert service.refresh_weights() and service.version == 1
    assert_same_state(engine.loaded[-1], states[1])
    assert [(o.workers, o.processes) for o in seen] == [(2, True), (2, True)]
    service.close()
    with pytest.raises(ValueError):
        RaasConfig(decode_workers=0)


@pytest.mark.s3
def test_service_pulls_from_a_second_s3_endpoint(tmp_path: Path, second_s3_endpoint: str) -> None:
    endpoint = second_s3_endpoint
    boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    ).create_bucket(Bucket="region-two")
    options = {"endpoint_url": endpoint, "key": "x", "secret": "x"}
    home = open_store(str(tmp_path / "lake"))
    state = make_state(seed=4, scale=4)
    publish(home, "policy", state)
    mirror(home, open_mirror("s3://region-two/w", options), "policy")
    service, engine = _service(tmp_path, "s3://region-two/w", **options)
    assert service.refresh_weights() and service.version == 0
    assert_same_state(engine.loaded[-1], state)
    service.close()
