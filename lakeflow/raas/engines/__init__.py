"""Inference engines behind one small interface: n sampled completions with behaviour logprobs.

`base.py`: the `Engine` interface and what the engines share; `hf.py`: `HFEngine` (transformers);
`vllm.py`: `VLLMEngine` (vLLM's offline API, imported only when chosen); `registry.py`: `ENGINES` and
`build_engine`, which turns an engine config into an engine; `versions.py`: a published version (a full one,
or a LoRA adapter on its base) into an engine.
"""

from lakeflow.models.chat import template_setting_problem
from lakeflow.raas.engines.base import (
    ChatMessage,
    ChoiceScorer,
    Completion,
    Engine,
    FinishReason,
    Prompt,
    TokenizedEngine,
    TokenScorer,
    chat_token_ids,
    check_sampling,
    check_score_rows,
    decode_text,
    is_token_ids,
    read_config,
    set_chat_template,
    tokenizer_fingerprint,
)
from lakeflow.raas.engines.hf import HFEngine
from lakeflow.raas.engines.registry import ENGINES, build_engine, engine_factory
from lakeflow.raas.engines.versions import AdapterEngine, load_version

__all__ = [
    "ENGINES",
    "AdapterEngine",
    "ChatMessage",
    "ChoiceScorer",
    "Completion",
    "Engine",
    "FinishReason",
    "HFEngine",
    "Prompt",
    "TokenScorer",
    "TokenizedEngine",
    "build_engine",
    "chat_token_ids",
    "check_sampling",
    "check_score_rows",
    "decode_text",
    "engine_factory",
    "is_token_ids",
    "load_version",
    "read_config",
    "set_chat_template",
    "template_setting_problem",
    "tokenizer_fingerprint",
]
