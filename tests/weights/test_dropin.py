"""A published full version's folder, copied out of the lake as it is, is a model directory that
transformers loads; its top level holds only the model's files (vLLM loads every `*.safetensors`)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from lakeflow.io import open_store
from lakeflow.lake import layout
from lakeflow.models import resolve_model
from lakeflow.weights import publish, read_source
from lakeflow.weights.tensors import State, raw_tensor

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def _nudged(state: State) -> State:
    """Flip the lowest bit of every 50th element of each float tensor: a sparse, real-looking update."""
    out = {}
    for name, t in state.items():
        bits = t.bits.copy()
        if t.dtype in ("F32", "BF16", "F16"):
            flat = bits.reshape(-1)
            flat[::50] ^= 1
        out[name] = raw_tensor(t.dtype, t.shape, bits)
    return out


def test_full_version_folder_loads_as_it_is(tmp_path: Path) -> None:
    model_dir = resolve_model("tiny:dropin", tmp_path / "models")
    lake = open_store(str(tmp_path / "lake"))
    state, files = read_source(model_dir)
    publish(lake, "policy", state, files=files, full_every=1)
    manifest = publish(lake, "policy", _nudged(state), files=files, full_every=1)
    assert manifest.kind == "full" and manifest.delta is not None  # a full copy that also stores its delta

    copy = tmp_path / "copied"  # what `aws s3 cp --recursive` of the version's prefix gives
    prefix = layout.weights_dir("policy", 1)
    for info in lake.list(prefix):
        dest = copy / info.key[len(prefix) :]
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(lake.get(info.key))
    top_safetensors = sorted(p.name for p in copy.glob("*.safetensors"))
    assert top_safetensors == sorted(e.name for e in manifest.weights)
    assert (copy / "delta").is_dir()  # the delta lives beside, outside the model's file set

    model = transformers.AutoModelForCausalLM.from_pretrained(str(copy))
    loaded = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    expected = transformers.AutoModelForCausalLM.from_pretrained(model_dir).state_dict()
    changed = [k for k, v in expected.items() if not np.array_equal(v.float().numpy(), loaded[k])]
    assert changed, "the copied version should hold the nudged weights"
    assert os.path.exists(copy / "config.json") and os.path.exists(copy / "tokenizer.json")
