"""One tool-calling request to the model through litellm (lazily imported by crane.llm.client.load_litellm),
with the LLM layer's retries, error classes and accounting (crane.llm.cost).

The conversation is append-only: the system prompt and the notebook context come first and never change,
each observation is appended, so providers that cache prompt prefixes (OpenAI, Gemini, DeepSeek: automatic;
Anthropic: the `cache_control` markers added here) bill the repeated prefix at the cached rate.
"""

from __future__ import annotations

import json
import logging
import os
import re
from typing import Any

import msgspec

from crane.agent import lenient
from crane.agent.tools import TOOLS, ToolCall, call_schema
from crane.llm.client import LLMError, LLMTimeout, completion_with_retries
from crane.llm.cost import CostLedger
from crane.llm.schema import Usage
from crane.llm.settings import LLMSettings

log = logging.getLogger(__name__)


class ModelTurn(msgspec.Struct):
    """The model's reply: optional text and tool calls, and what the request cost."""

    content: str
    tool_calls: list[ToolCall]
    usage: Usage
    text_calls: bool = False  # the tool calls were written in the message text (no native tool calling)
    lost: list[str] = []  # tool calls the reply attempted that could not be read, each with the reason

    def as_message(self) -> dict[str, Any]:
        """The assistant message to append to the conversation (OpenAI shape). Tool calls read from the text
        are sent back as structured calls, so the tool results that follow have calls to answer."""
        # null content only beside tool calls (the OpenAI form); an empty reply is "" (llama-cpp-python drops a
        # null and its chat template then fails on every later request of the run)
        msg: dict[str, Any] = {"role": "assistant", "content": self.content or (None if self.tool_calls else "")}
        if self.tool_calls:
            msg["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls
            ]
        return msg


def _is_anthropic(model: str) -> bool:
    m = model.lower()
    return m.startswith(("anthropic/", "claude", "bedrock/anthropic", "vertex_ai/claude"))


def with_cache_markers(messages: list[dict]) -> list[dict]:
    """Anthropic needs explicit markers: the system prompt and the context message are the cached prefix."""
    out = []
    for i, m in enumerate(messages):
        if i < 2 and isinstance(m.get("content"), str):
            m = {**m, "content": [{"type": "text", "text": m["content"], "cache_control": {"type": "ephemeral"}}]}
        out.append(m)
    return out


# How a local server is held to one tool call per reply (`constrain`), by the server `detect_server` found:
# - "required": `tool_choice: "required"`: llama.cpp's llama-server (--jinja), vLLM and LM Studio turn the tools'
#   schemas into a grammar and the reply into native tool calls;
# - "schema": `response_format` with `call_schema` (one `{"name", "arguments"}` object, enforced as a grammar),
#   read by `parse_text_tool_calls`: llama-cpp-python (its chat templates write calls as text, or not at all:
#   Qwen2.5-Coder-0.5B named `add_cell` with `"cell"` for the required `"after"`) and Ollama (no tool_choice), the
#   latter only once the model answered a turn without native calls.
REQUIRED_SERVERS = ("llama.cpp", "vllm", "lm-studio")
SCHEMA_SERVERS = ("llama-cpp-python",)
SCHEMA_AFTER_TEXT_SERVERS = ("ollama",)
TEMPLATE_SERVERS = ("llama-cpp-python",)  # messages go to the chat template as sent: `calls_as_text`


def constraint(settings: LLMSettings, text_before: bool = False) -> str | None:
    """"required", "schema" or None (tool_choice "auto", nothing enforced): see REQUIRED_SERVERS. Never for hosted
    models (their tool calling is native) nor with `structured` set to "none" or "object" (no schema wanted)."""
    if not settings.local or settings.structured in ("none", "object"):
        return None
    from crane.llm.local_server import detect_server

    model = settings.require_model()
    server = detect_server(settings.api_base) if settings.api_base else None
    if server is None and model.startswith(("ollama/", "ollama_chat/")):
        server = "ollama"
    if server is None and model.startswith(("hosted_vllm/", "lm_studio/")):
        server = "vllm"
    if server in REQUIRED_SERVERS:
        return "required"
    if server in SCHEMA_SERVERS or (server in SCHEMA_AFTER_TEXT_SERVERS and text_before):
        return "schema"
    return None


def calls_as_text(messages: list[dict]) -> list[dict]:
    """`messages` with each earlier assistant turn's tool calls as the text the model reads: its own reply when
    it wrote one, else each call as `{"name": ..., "arguments": {...}}` on a line. For servers that hand the
    messages to the model's chat template as they are (llama-cpp-python, which also insists on `arguments` being
    a string): templates written for Hugging Face's objects (Qwen2.5's `tool_call.arguments | tojson`) encode the
    string a second time, and the model, imitating its history, then writes its sources with `\\n` for line
    breaks (Qwen2.5-Coder-0.5B on sklearn_5, every edit after the first)."""
    out = []
    for m in messages:
        calls = m.get("tool_calls")
        if m.get("role") == "assistant" and calls:
            text = m.get("content") or ""
            if not text.strip():
                lines = []
                for c in calls:
                    fn = c.get("function") or {}
                    try:
                        args = json.loads(fn.get("arguments") or "{}")
                    except ValueError:
                        args = fn.get("arguments")
                    lines.append(json.dumps({"name": fn.get("name"), "arguments": args}))
                text = "\n".join(lines)
            m = {k: v for k, v in m.items() if k != "tool_calls"} | {"content": text}
        out.append(m)
    return out


def _kwargs(litellm, settings: LLMSettings, messages: list[dict], max_tokens: int,
            tools: list[dict[str, Any]] | None = None, constrain: str | None = None,
            schema_tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    tools = tools or TOOLS
    if settings.local and settings.api_base:
        from crane.llm.local_server import detect_server

        if detect_server(settings.api_base) in TEMPLATE_SERVERS:
            messages = calls_as_text(messages)
    kwargs: dict[str, Any] = {
        "model": settings.model,
        "messages": with_cache_markers(messages) if _is_anthropic(settings.require_model()) else messages,
        "tools": tools,
        "tool_choice": "required" if constrain == "required" else "auto",
        "timeout": settings.request_timeout_s,
        "max_tokens": max_tokens,
        "max_retries": 0,
        "drop_params": True,
    }
    if constrain == "schema":
        from crane.llm.local_server import schema_format

        schema = call_schema(schema_tools or tools)
        kwargs["response_format"] = schema_format(
            settings.api_base, {"type": "json_schema", "json_schema": {"name": "tool_call", "schema": schema}}, schema)
    if settings.temperature is not None:
        kwargs["temperature"] = settings.temperature
    if settings.api_base:
        kwargs["api_base"] = settings.api_base
        try:
            provider = litellm.get_llm_provider(settings.model)[1]
        except Exception:
            provider = None
        if provider == "openai" and not os.environ.get("OPENAI_API_KEY"):
            kwargs["api_key"] = "no-key-required"  # local OpenAI-compatible servers need none
    return kwargs


def _tool_calls(message) -> list[ToolCall]:
    calls = []
    for i, c in enumerate(getattr(message, "tool_calls", None) or []):
        fn = getattr(c, "function", None)
        name = getattr(fn, "name", None) or ""
        args = getattr(fn, "arguments", None)
        if not isinstance(args, str):
            import json

            args = json.dumps(args or {})
        calls.append(ToolCall(id=getattr(c, "id", None) or f"call_{i}", name=name, arguments=args))
    return calls


_TOOL_NAMES = frozenset(t["function"]["name"] for t in TOOLS)
_TAGGED = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)  # Qwen / Hermes chat templates
_FENCED = re.compile(r"```(?:json|tool_call|tool)?\s*(.*?)```", re.S)


def _json_objects(text: str) -> list[Any]:
    """Every top-level JSON value that starts at a `{` or `[` of `text`, in order (raw_decode, no regex; read
    leniently: crane.agent.lenient)."""
    out: list[Any] = []
    i = 0
    while i < len(text):
        j = min((k for k in (text.find("{", i), text.find("[", i)) if k != -1), default=-1)
        if j == -1:
            break
        try:
            value, end = lenient.raw_decode(text, j)  # raw newlines in strings, trailing commas
        except ValueError:
            i = j + 1
            continue
        out.append(value)
        i = end
    return out


def _as_call(value: Any) -> tuple[str, str] | None:
    """(name, arguments JSON) from {"name": ..., "arguments": {...}} (also "parameters" / "args", the arguments
    flat beside the name, or the OpenAI shape {"function": {...}}), when the name is one of the tools."""
    if not isinstance(value, dict):
        return None
    if isinstance(value.get("function"), dict):
        value = value["function"]
    name = value.get("name") or value.get("tool")
    if not isinstance(name, str) or name.strip() not in _TOOL_NAMES:
        return None
    # the arguments under their own key, or flat beside the name (`{"name": "finish", "explanation": "..."}`,
    # as Qwen2.5-Coder-0.5B wrote its finish call)
    args: Any = next((value[k] for k in ("arguments", "parameters", "args", "input") if k in value),
                     {k: v for k, v in value.items() if k not in ("name", "tool", "id", "type")})
    if isinstance(args, str):
        try:
            args = lenient.loads(args)
        except ValueError:
            return None
    if not isinstance(args, dict):
        return None
    return name.strip(), json.dumps(args)


_LINE_FIELD = re.compile(r'^\s*"(\w+)"\s*:\s*(.*?)\s*,?\s*$')


def _lenient_call(chunk: str) -> tuple[str, str] | None:
    """A pretty-printed call whose JSON is broken by unescaped quotes inside a string (small models write
    `"source": "df[df['a']!="x"]"`): one `"key": value` per line, each string value running to the line's
    last quote."""
    fields: dict[str, Any] = {}
    for line in chunk.splitlines():
        m = _LINE_FIELD.match(line)
        if not m or m.group(1) in fields:
            continue
        key, raw = m.group(1), m.group(2)
        if raw.startswith('"') and raw.endswith('"') and len(raw) >= 2:
            try:
                fields[key] = json.loads(raw)
            except ValueError:
                fields[key] = raw[1:-1].replace("\\n", "\n").replace('\\"', '"')
        elif re.fullmatch(r"-?\d+", raw):
            fields[key] = int(raw)
    name = fields.pop("name", None)
    if not isinstance(name, str) or name not in _TOOL_NAMES:
        return None
    return name, json.dumps(fields)


def parse_text_tool_calls(content: str) -> list[ToolCall]:
    """Tool calls a model without native tool calling wrote in its message: Qwen / Hermes `<tool_call>` tags,
    or a JSON object (or list of them) with `name` and `arguments`, fenced in ```json or bare."""
    if not content or "{" not in content:
        return []
    whole = content.strip()
    if whole.startswith(("{", "[")):  # the reply is the call (a grammar-held reply always is): fences inside its
        try:                           # strings (a reflection quoting code) are not the call
            value = lenient.loads(whole)
        except ValueError:
            value = None
        found = [c for c in map(_as_call, value if isinstance(value, list) else [value]) if c is not None]
        if found:
            return [ToolCall(id=f"text_call_{i}", name=n, arguments=a) for i, (n, a) in enumerate(found)]
    chunks = _TAGGED.findall(content) or _FENCED.findall(content) or [content]
    calls: list[ToolCall] = []
    for chunk in chunks:
        found_here = [c for value in _json_objects(chunk)
                      for c in map(_as_call, value if isinstance(value, list) else [value]) if c is not None]
        if not found_here:
            line_call = _lenient_call(chunk)
            found_here = [line_call] if line_call is not None else []
        calls += [ToolCall(id=f"text_call_{len(calls) + i}", name=n, arguments=a) for i, (n, a) in enumerate(found_here)]
    return calls


def lost_calls(content: str) -> list[str]:
    """Why a reply that names a tool held no readable call: one reason per tool named (empty when it names
    none: a plain text reply is not a lost call)."""
    named = [n for n in sorted(_TOOL_NAMES) if re.search(rf"\b{n}\b", content or "")]
    if not named:
        return []
    why = "no JSON object with its arguments"
    start = content.find("{")
    if start != -1:
        try:
            lenient.raw_decode(content, start)
            why = "its JSON object is not a call of the form {\"name\": ..., \"arguments\": {...}}"
        except ValueError as exc:
            why = f"its JSON is broken ({exc})"
    return [f"{n}: the reply names it but holds {why}" for n in named]


def request_turn(settings: LLMSettings, messages: list[dict], ledger: CostLedger, max_tokens: int | None = None,
                 deadline: float | None = None, tools: list[dict[str, Any]] | None = None,
                 constrain: str | None = None, schema_tools: list[dict[str, Any]] | None = None) -> ModelTurn:
    """One model turn with tools; retries 429 / 5xx / timeouts / dropped connections (settings.retries).
    `deadline` (time.monotonic()): the request is abandoned when it passes (crane.llm.client.DeadlinePassed).
    `tools`: the run's tools (crane.agent.tools.tools_for; default TOOLS); `constrain`: how a local server is held
    to one call (`constraint`); `schema_tools`: the tools whose call schema a "schema" constraint enforces (the
    cells that exist now; default `tools`). A reply without native tool calls is read for tool calls written as text
    (`parse_text_tool_calls`); `ModelTurn.text_calls` says so."""
    tokens = max_tokens or max(settings.max_tokens, 1500)
    from crane.llm import local_server

    state = {"constrain": constrain if local_server.takes_constraint(settings.api_base) else None}

    def unconstrain(exc: BaseException, err_cls: type[LLMError]) -> bool:
        """A server that rejects the constraint (an error naming tool_choice or response_format) is asked again
        without it, and not held to it again in this process."""
        text = str(exc).lower()
        if state["constrain"] and err_cls is not LLMTimeout and any(
                k in text for k in ("tool_choice", "response_format", "json_schema", "grammar")):
            log.info("%s rejected the tool-call constraint (%s): %s", settings.model, state["constrain"], exc)
            local_server.mark_no_constraint(settings.api_base)  # (its warning says so)
            state["constrain"] = None
            return True
        return False

    response, usage, where = completion_with_retries(
        settings, ledger, lambda litellm: _kwargs(litellm, settings, messages, tokens, tools, state["constrain"],
                                         schema_tools),
        label="agent", deadline=deadline, on_error=unconstrain)
    try:
        message = response.choices[0].message
    except (AttributeError, IndexError):
        raise LLMError(f"{where} sent a reply without a message", usage=usage) from None
    content = getattr(message, "content", None) or ""
    calls = _tool_calls(message)
    if calls:
        return ModelTurn(content=content, tool_calls=calls, usage=usage)
    text_calls = parse_text_tool_calls(content)
    return ModelTurn(content=content, tool_calls=text_calls, usage=usage, text_calls=bool(text_calls),
                     lost=[] if text_calls else lost_calls(content))
