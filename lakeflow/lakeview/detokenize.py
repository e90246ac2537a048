"""Text beside tokens: the SQL function `detokenize(model_id, ids)`, decoding token ids with the model's
own tokenizer (the `tokenizer.json` its trainer published with weight version 0).

Samples store token ids only: measured with `python -m benchmarks text`, storing the decoded
prompt and response as well made shards 14-35% larger, for text that the ids and the tokenizer give
back exactly. The `trajectories` view's `prompt_text` and `response_text` columns call it; DuckDB
computes them only for queries that read them. Each model's tokenizer is read through the store on
first use (the `tokenizers` package, imported then); where there is none the text is NULL.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
from duckdb.func import FunctionNullHandling, PythonUDFType

from lakeflow.errors import LakeflowError
from lakeflow.io import Store
from lakeflow.lake import layout

log = logging.getLogger("lakeflow.lakeview")

FUNCTION = "detokenize"
TOKENIZER_FILE = "tokenizer.json"
# The view's text columns: what `SELECT response_text FROM trajectories` reads.
TEXT_COLUMNS = {"prompt_text": "prompt_ids", "response_text": "response_ids"}


class Detokenizer:
    """Each model's tokenizer, loaded once from the lake, and batch decoding with it."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._tokenizers: dict[str, Any] = {}
        self._lock = threading.Lock()
        self.problems: dict[str, str] = {}  # model id -> why it has no text

    def tokenizer(self, model_id: str) -> Any | None:
        with self._lock:
            if model_id not in self._tokenizers:
                self._tokenizers[model_id] = self._load(model_id)
            return self._tokenizers[model_id]

    def _load(self, model_id: str) -> Any | None:
        try:
            key = layout.weights_object_key(model_id, 0, TOKENIZER_FILE)
        except ValueError:
            return None  # not a model id lakeflow could have published weights for
        try:
            data = self.store.get(key)
        except FileNotFoundError:
            self.problems[model_id] = f"no {key} in the lake"
            return None
        try:
            from tokenizers import Tokenizer
        except ImportError as e:
            raise LakeflowError("detokenize needs the tokenizers package: pip install tokenizers") from e
        try:
            return Tokenizer.from_str(data.decode())
        except Exception as e:  # the tokenizers library raises plain Exceptions; recorded, the text is NULL
            self.problems[model_id] = f"{key} is not a tokenizer: {str(e).splitlines()[0][:200]}"
            log.warning("cannot load the tokenizer of %s: %s", model_id, self.problems[model_id])
            return None

    def decode(self, model_ids: pa.Array, ids: pa.Array) -> pa.Array:
        """One string per row (NULL where the ids or the model's tokenizer are missing)."""
        models = model_ids.to_pylist()
        lists = ids.to_pylist()
        out: list[str | None] = [None] * len(models)
        rows: dict[str, list[int]] = {}
        for row, (model, tokens) in enumerate(zip(models, lists, strict=True)):
            if model is not None and tokens is not None:
                rows.setdefault(model, []).append(row)
        for model, where in rows.items():
            tok = self.tokenizer(model)
            if tok is None:
                continue
            texts = tok.decode_batch(
                [[int(t) for t in lists[r] if t is not None] for r in where], skip_special_tokens=False
            )
            for r, text in zip(where, texts, strict=True):
                out[r] = text
        return pa.array(out, pa.string())


def register_detokenize(con: duckdb.DuckDBPyConnection, store: Store) -> Detokenizer:
    """Create `detokenize(model_id VARCHAR, ids INTEGER[]) -> VARCHAR` on `con` (before it is locked)."""
    detok = Detokenizer(store)

    def detokenize(model_ids: pa.Array, ids: pa.Array) -> pa.Array:
        if isinstance(model_ids, pa.ChunkedArray):
            model_ids = model_ids.combine_chunks()
        if isinstance(ids, pa.ChunkedArray):
            ids = ids.combine_chunks()
        return detok.decode(model_ids, pc.cast(ids, pa.list_(pa.int64())))

    con.create_function(
        FUNCTION,
        detokenize,
        ["VARCHAR", "INTEGER[]"],
        "VARCHAR",
        type=PythonUDFType.ARROW,  # whole Arrow vectors in and out, not a Python call per row
        null_handling=FunctionNullHandling.SPECIAL,  # NULL ids give NULL text, decided in `decode`
        side_effects=False,
    )
    return detok


def text_columns(alias: str = "") -> str:
    """The view's text columns as SQL, e.g. `detokenize(model_id, response_ids) AS response_text`."""
    prefix = f"{alias}." if alias else ""
    return ", ".join(f"{FUNCTION}({prefix}model_id, {prefix}{ids}) AS {name}" for name, ids in TEXT_COLUMNS.items())
