"""LoRA adapter versions for the engine tests: the tiny model published as version 0, then adapters on it
(random B, so the adapter changes what the model computes), published the way a LoRA trainer publishes them."""

from __future__ import annotations

from typing import Any

from lakeflow.io import Store
from lakeflow.trainer import lora
from lakeflow.trainer.config import LoraConfig
from lakeflow.trainer.model import load_model, to_state
from lakeflow.weights import publish
from tests.raas.conftest import publish_dir

LORA = LoraConfig(rank=4, alpha=8.0, targets=["q_proj", "v_proj", "down_proj"])


def publish_adapters(store: Store, model_id: str, tiny_dir: str, versions: int = 2) -> None:
    """Version 0: the tiny model; versions 1..`versions`: adapters on it, each coded against the one before."""
    import torch

    publish_dir(store, model_id, tiny_dir)
    torch.manual_seed(0)
    wrapped: Any = lora.attach(load_model(tiny_dir, "float32"), LORA)
    base = None
    for _ in range(versions):
        with torch.no_grad():
            for name, p in wrapped.named_parameters():
                if "lora_" in name:
                    p.add_(torch.randn_like(p) * 0.3)
        state = to_state(lora.adapter_tensors(wrapped))
        files = lora.adapter_files(LORA)
        publish(store, model_id, state, files=files, base=base, adapter=lora.adapter_info(LORA), publisher="test")
        base = state
