"""The weight store: versioned full + sparse-delta weights in the lake, pulled and verified bit for bit.

`publish` writes version N (delta against N-1, full every K); `pull` brings a local Hugging
Face directory to any version, from the lake or a read-only source; `mirror` copies the weights to
such a source (LATEST last); `retention.collect` drops versions no chain needs. Layer
rule: imports lakeflow.io, lakeflow.lake.layout, numpy, numba, safetensors, zstandard, pcodec
(and constriction, to read /1 and /2 deltas); never torch.
"""

from __future__ import annotations

from lakeflow.weights.codec import decode_delta, decode_delta_sha256, encode_delta
from lakeflow.weights.manifest import (
    AdapterInfo,
    Latest,
    Manifest,
    ObjectEntry,
    latest_version,
    read_latest,
    read_manifest,
)
from lakeflow.weights.mirror import MirrorResult, mirror
from lakeflow.weights.publish import publish, read_source, repair_latest
from lakeflow.weights.pull import PullResult, local_version, pull, rebuild_state
from lakeflow.weights.retention import collect, list_versions
from lakeflow.weights.tensors import RawTensor, State, load_state, raw_tensor, state_sha256
from lakeflow.weights.transfer import TransferOptions

__all__ = [
    "AdapterInfo",
    "Latest",
    "Manifest",
    "MirrorResult",
    "ObjectEntry",
    "PullResult",
    "RawTensor",
    "State",
    "TransferOptions",
    "collect",
    "decode_delta",
    "decode_delta_sha256",
    "encode_delta",
    "latest_version",
    "list_versions",
    "load_state",
    "local_version",
    "mirror",
    "publish",
    "pull",
    "raw_tensor",
    "read_latest",
    "read_manifest",
    "read_source",
    "rebuild_state",
    "repair_latest",
    "state_sha256",
]
