"""Reading lakeflow-delta/1 and /2 objects, written before /3 (pcodec streams, `pcostreams.py`).

Both code their integer streams with constriction's ANS coder (`entropy.StreamReader`) under
categorical models from the header: /1 keeps one ANS stack and one histogram per stream for the
whole object (one segment per dtype group); /2 cuts groups into segments like /3, each with its
own ANS words and raw bits, and shares one model per (stream kind, exponent, flip) between a
group's segments, so a segment header gives only each stream's length.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import zstandard

from lakeflow.errors import WeightsFormatError
from lakeflow.weights.entropy import StreamReader
from lakeflow.weights.groupcode import decode_group
from lakeflow.weights.tensors import State, raw_tensor

FORMAT_V1 = "lakeflow-delta/1"
FORMAT_V2 = "lakeflow-delta/2"

Models = dict[tuple[str, int, int], list[list[int]]]


def decode_v1(old: State, head: dict[str, Any], parts: State) -> State:
    """The new state from a /1 object (`parts`: its tensors; `head`: its parsed header)."""
    reader = StreamReader(parts["ans"].bits, parts["bits"].bits, sum(t.bits.size for t in old.values()))
    cold = zstandard.ZstdDecompressor().decompress(parts["cold"].bits.tobytes())
    new: State = {}
    cold_pos = 0
    for group in head["groups"]:
        names = [n for n, _ in group["tensors"]]
        outs = [np.empty_like(old[n].bits) for n in names]
        cold_pos = decode_group(group, [old[n].bits for n in names], outs, reader, cold, cold_pos)
        for name, bits in zip(names, outs, strict=True):
            new[name] = raw_tensor(group["dtype"], old[name].shape, bits)
    reader.check_done()
    return new


def shared_models(head: dict[str, Any]) -> list[Models]:
    """Per dtype group of a /2 header, its models by (kind, exponent, flip)."""
    try:
        return [{(str(k), int(c), int(f)): [list(p), list(n)] for k, c, f, p, n in g["models"]} for g in head["groups"]]
    except (KeyError, TypeError, ValueError) as e:
        raise WeightsFormatError(f"delta stream models are malformed: {e}") from e


def v2_segment(
    streams: dict[str, np.ndarray], spec: dict[str, Any], models: Models, size: int
) -> tuple[StreamReader, dict[str, Any]]:
    """The reader of a /2 segment's streams (`streams`: its ans words and raw bits; `size`: its
    elements) and its header with each stream's length turned into ([symbols], [counts], length),
    as `decode_group` reads it."""

    def stream(key: tuple[str, int, int], n: Any) -> list[Any]:
        if not isinstance(n, int) or n < 0:
            raise WeightsFormatError("delta segment gives an invalid stream length")
        if n == 0:
            return []
        if key not in models:
            raise WeightsFormatError(f"delta has no model for stream {key}")
        return [*models[key], n]

    contexts = [
        [c, n_c, f, stream(("g", int(c), int(bool(f))), g), stream(("v", int(c), 0), v)]
        for c, n_c, f, g, v in spec["contexts"]
    ]
    reader = StreamReader(streams["ans"], streams["bits"], size)
    return reader, {**spec, "contexts": contexts, "cold": stream(("c", 0, 0), spec["cold"])}
