"""The engine registry: `ENGINES` maps a config `type` to a factory, `build_engine` builds the engine a config
describes (a shipped `type`, or a user's `type: factory`). vLLM is imported only when chosen
(`pip install 'lakeflow[vllm]'`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lakeflow.errors import PluginError
from lakeflow.plugins import call_problem, resolve
from lakeflow.raas.config import EngineConfig, FactoryEngineConfig, HFEngineConfig, VLLMEngineConfig
from lakeflow.raas.engines.base import Engine, set_chat_template
from lakeflow.raas.engines.hf import HFEngine


def _vllm_engine(config: VLLMEngineConfig, seed: int | None) -> Engine:
    from lakeflow.raas.engines.vllm import VLLMEngine  # imports vllm lazily; MissingExtraError without it

    return VLLMEngine(config, seed)


def _hf_engine(config: HFEngineConfig, seed: int | None) -> Engine:
    return HFEngine(config, seed)


ENGINES: dict[str, Callable[[Any, int | None], Engine]] = {"hf": _hf_engine, "vllm": _vllm_engine}


def engine_factory(config: FactoryEngineConfig, key: str = "engine.factory") -> Callable[..., Engine]:
    """The factory a `type: factory` engine names, checked to take `seed` and the options; PluginError naming `key`."""
    if config.factory in ENGINES:
        raise PluginError(f"{key}: engine {config.factory!r} is shipped: give it as `type: {config.factory}`")
    options = dict(config.options)
    what = f"factory(seed, {', '.join(options)})" if options else "factory(seed)"
    return resolve(
        "engine", config.factory, {}, key=key, check=lambda f: call_problem(f, seed=None, what=what, **options)
    )


def build_engine(config: EngineConfig, seed: int | None = None, chat_template: str | None = None) -> Engine:
    """The engine `config` describes (a shipped `type`, or a user's factory), without weights (call `load`),
    rendering chat with the template `chat_template` names (a shipped name or a Jinja file; None: the model's
    own template)."""
    engine = _build_engine(config, seed)
    set_chat_template(engine, chat_template)
    return engine


def _build_engine(config: EngineConfig, seed: int | None) -> Engine:
    if isinstance(config, FactoryEngineConfig):
        engine = engine_factory(config)(seed=seed, **config.options)
        missing = [m for m in ("load", "encode_chat", "decode", "generate") if not callable(getattr(engine, m, None))]
        if not isinstance(getattr(engine, "max_model_len", None), int):
            missing.append("an int max_model_len")
        if missing:
            what = type(engine).__name__
            raise PluginError(
                f"engine.factory: {config.factory!r} built a {what}, not an Engine: it lacks {', '.join(missing)}"
            )
        return engine
    try:
        factory = ENGINES[config.type]
    except KeyError as e:
        raise ValueError(f"unknown engine {config.type!r}; known: {', '.join(sorted(ENGINES))}") from e
    return factory(config, seed)
