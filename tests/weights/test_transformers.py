"""A published full version is an ordinary Hugging Face directory: transformers loads it unchanged."""

from __future__ import annotations

import os

import numpy as np
import pytest

from lakeflow.io import Store
from lakeflow.weights import TransferOptions, publish, pull, read_source

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def _tiny_llama(path: str) -> None:
    config = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(path)


def test_full_and_delta_versions_load_with_from_pretrained(store: Store, tmp_path: str) -> None:
    src = os.path.join(tmp_path, "src")
    _tiny_llama(src)
    state, files = read_source(src)
    publish(store, "llama", state, files=files)
    model = transformers.LlamaForCausalLM.from_pretrained(src)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-6)
    ids = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(0))
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    model.save_pretrained(src)
    state, files = read_source(src)
    assert publish(store, "llama", state, files=files).kind == "delta"
    for version in (0, 1):
        dest = os.path.join(tmp_path, f"v{version}")
        pull(store, "llama", dest, version=version, options=TransferOptions(progress=False))
        loaded = transformers.LlamaForCausalLM.from_pretrained(dest)
        if version == 1:
            for name, p in model.state_dict().items():
                assert torch.equal(loaded.state_dict()[name], p), name
        assert loaded(input_ids=ids).logits.shape == (2, 16, 128)
    assert np.isfinite(loaded(input_ids=ids).logits.detach().float().numpy()).all()
