"""Chat templates: the shipped ones, the `chat_template:` setting, and rendering without a tokenizer.

`SHIPPED_TEMPLATES` maps a setting's name to a template that ships in `lakeflow/models/templates/`:
`chatml-tools` is ChatML that renders `tools=` the Hermes way (for models such as SmolLM2 whose own
template ignores them). `chat_template_text(setting)` is the Jinja text of a setting (a shipped name or
a file path); `template_setting_problem` says why a setting cannot be used. `render_chat` renders a
conversation as transformers' `apply_chat_template` does (the same sandboxed Jinja environment with
`tojson`, `raise_exception` and `strftime_now`), importing only jinja2 (neither transformers nor torch),
so the check before a run can render the model's template cheaply; `drops_tools` asks whether a template
ignores the tools it is given.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any

from lakeflow.errors import ConfigError
from lakeflow.models.info import ChatTemplates

SHIPPED_TEMPLATES = {"chatml-tools": "chatml_tools.jinja"}  # setting name -> file in lakeflow/models/templates/
PROBE = [{"role": "user", "content": "Hello."}]  # the conversation a template is tried on


def shipped_template(name: str) -> str:
    """The text of shipped template `name` (a key of SHIPPED_TEMPLATES)."""
    return resources.files("lakeflow.models").joinpath("templates", SHIPPED_TEMPLATES[name]).read_text("utf-8")


def chat_template_text(setting: str) -> str:
    """The Jinja text a `chat_template:` setting names: a shipped template's name, else a file's path.
    ConfigError when it is neither."""
    if setting in SHIPPED_TEMPLATES:
        return shipped_template(setting)
    path = Path(setting).expanduser()
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = "no such file" if isinstance(e, FileNotFoundError) else str(e)
        raise ConfigError(
            f"{setting!r} is neither a shipped template ({', '.join(SHIPPED_TEMPLATES)}) nor a readable file "
            f"({reason}): give one, or a path to a Jinja chat template"
        ) from e


def template_setting_problem(setting: str) -> str | None:
    """Why `chat_template: setting` cannot be used (None: it can): no such template, or Jinja that does not
    compile (checked where jinja2 is installed)."""
    try:
        text = chat_template_text(setting)
    except ConfigError as e:
        return str(e)
    try:
        _compiled(text)
    except ImportError:
        return None  # no jinja2 here: the engine's transformers compiles it when it loads
    except Exception as e:  # jinja2.TemplateSyntaxError and its kin
        return f"{setting!r} is not a Jinja template that compiles ({type(e).__name__}: {e})"
    return None


@functools.lru_cache(maxsize=32)
def _compiled(template: str) -> Any:
    """`template` compiled in the environment transformers renders chat templates in (its AssistantTracker's
    `{% generation %}` blocks render their body)."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(jinja2.ext.Extension):
        tags = {"generation"}  # noqa: RUF012 - jinja2 reads it off the class

        def parse(self, parser: Any) -> Any:
            next(parser.stream)
            return parser.parse_statements(("name:endgeneration",), drop_needle=True)

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(
        x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None, sort_keys: bool = False
    ) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt: str) -> str:
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(template)


def render_chat(
    template: str,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    add_generation_prompt: bool = True,
    tokens: Mapping[str, str] | None = None,
) -> str:
    """The text of `messages` (and `tools`' schemas) under `template`, as transformers renders it; `tokens`:
    the special tokens a tokenizer passes (bos_token, eos_token, ...). ImportError without jinja2; the
    template's own errors (jinja2.TemplateError, and whatever its code raises) pass through."""
    return str(
        _compiled(template).render(
            messages=[dict(m) for m in messages],
            tools=[dict(t) for t in tools] if tools else None,
            documents=None,
            add_generation_prompt=add_generation_prompt,
            **(tokens or {}),
        )
    )


def drops_tools(templates: ChatTemplates, tools: Sequence[Mapping[str, Any]]) -> bool | None:
    """Whether the template renders a one-message conversation the same with `tools` as without them (it
    ignores `tools=`, so a model never sees them); None when that cannot be told here (no template, no
    jinja2, a template that fails on the conversation)."""
    with_tools, without = templates.template(tools=True), templates.template(tools=False)
    if with_tools is None or without is None:
        return None
    try:
        return render_chat(with_tools, PROBE, tools, True, templates.tokens) == render_chat(
            without, PROBE, None, True, templates.tokens
        )
    except Exception:  # a template that cannot render this probe (or no jinja2): nothing to tell
        return None
