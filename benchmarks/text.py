"""What storing decoded text beside the token ids costs: bytes per sample of a shard, with and without
`prompt_text` / `response_text`, written as the shard writer writes (zstd, 128-row row groups).

The text is English documentation (Python's own `pydoc_data.topics`, no download), tokenized with a
byte-level BPE trained on it; behaviour logprobs are drawn as a sampler's are (most tokens near 0).
Run: `python -m benchmarks text` (prints one JSON object per setting).
"""

from __future__ import annotations

import functools
import io
import json
import random
from typing import Any

import click
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lakeflow.lake.schema import SAMPLE_SCHEMA
from lakeflow.lake.synth import SynthSpec, synth_table

TEXT = pa.schema([pa.field("prompt_text", pa.string()), pa.field("response_text", pa.string())])


@functools.cache
def _paragraphs() -> list[str]:
    from pydoc_data.topics import topics

    return [p.strip() for text in topics.values() for p in text.split("\n\n") if len(p.strip()) > 40]


@functools.cache
def _tokenizer(vocab: int) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_paragraphs(), trainer=trainer)
    return tok


def _text_of(rng: random.Random, paragraphs: list[str], tok: Any, tokens: int) -> tuple[str, list[int]]:
    parts: list[str] = []
    ids: list[int] = []
    while len(ids) < tokens:
        parts.append(rng.choice(paragraphs))
        ids = tok.encode("\n\n".join(parts)).ids
    ids = ids[:tokens]
    return tok.decode(ids), ids


def _size(table: pa.Table) -> int:
    buffer = io.BytesIO()
    strings = [f.name for f in table.schema if pa.types.is_string(f.type)]
    pq.write_table(
        table,
        buffer,
        compression="zstd",
        compression_level=3,
        row_group_size=128,
        use_dictionary=strings,
        use_byte_stream_split=["response_logprobs"],
    )
    return len(buffer.getvalue())


def measure(
    samples: int = 1024, group: int = 8, prompt_tokens: int = 200, response_tokens: int = 500
) -> dict[str, Any]:
    """Bytes per sample of one shard of `samples` rows, without and with the two text columns."""
    rng = random.Random(0)
    paragraphs = _paragraphs()
    tok = _tokenizer(32000)  # trained once per process
    spec = SynthSpec(samples=samples, group_size=group, prompt_tokens=8, response_tokens=8)
    base = synth_table(spec, samples, np.random.default_rng(0), "bench")
    prompts: list[str] = []
    responses: list[str] = []
    prompt_ids: list[list[int]] = []
    response_ids: list[list[int]] = []
    logprobs: list[np.ndarray] = []
    masks: list[np.ndarray] = []
    for g in range(0, samples, group):
        text, ids = _text_of(rng, paragraphs, tok, prompt_tokens)
        for _ in range(min(group, samples - g)):
            rtext, rids = _text_of(rng, paragraphs, tok, max(1, int(rng.gauss(response_tokens, response_tokens / 4))))
            prompts.append(text)
            prompt_ids.append(ids)
            responses.append(rtext)
            response_ids.append(rids)
            lp = -np.random.default_rng(len(logprobs)).exponential(0.4, len(rids)).astype(np.float32)
            logprobs.append(lp)
            masks.append(np.ones(len(rids), dtype=np.uint8))
    payload = {
        "prompt_ids": pa.array(prompt_ids, pa.list_(pa.int32())),
        "response_ids": pa.array(response_ids, pa.list_(pa.int32())),
        "response_logprobs": pa.array([x.tolist() for x in logprobs], pa.list_(pa.float32())),
        "loss_mask": pa.array([x.tolist() for x in masks], pa.list_(pa.uint8())),
    }
    for name, column in payload.items():
        base = base.set_column(SAMPLE_SCHEMA.get_field_index(name), SAMPLE_SCHEMA.field(name), column)
    with_text = base.append_column(TEXT.field("prompt_text"), pa.array(prompts, pa.string()))
    with_text = with_text.append_column(TEXT.field("response_text"), pa.array(responses, pa.string()))
    tokens = sum(len(r) for r in response_ids)
    without, both = _size(base), _size(with_text)
    return {
        "samples": samples,
        "group": group,
        "prompt_tokens": prompt_tokens,
        "response_tokens_mean": round(tokens / samples),
        "text_bytes_raw_per_sample": round(
            sum(len(p) + len(r) for p, r in zip(prompts, responses, strict=True)) / samples
        ),
        "bytes_per_sample": round(without / samples),
        "bytes_per_sample_with_text": round(both / samples),
        "text_bytes_per_sample": round((both - without) / samples),
        "ratio": round(both / without, 3),
    }


@click.command("text")
def bench_text() -> None:
    """Bytes per sample with and without the decoded text columns: one JSON object per setting (100 + 100
    tokens, the defaults, 2000-token responses)."""
    for setting in ({"response_tokens": 100, "prompt_tokens": 100}, {}, {"response_tokens": 2000}):
        click.echo(json.dumps(measure(**setting)))
