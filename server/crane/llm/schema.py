"""The model's answer and the usage of a request: msgspec Structs, decoded and validated at the edge.

`decode_answer` accepts what real models send (a bare JSON object, or one wrapped in a ```json fence or a
sentence) but validates strictly: a missing field, a wrong type, or a confidence outside [0, 1] is an
`AnswerError`, which triggers the client's one repair retry. It is tolerant where a value is usable: a root
cause outside the JunoBench taxonomy becomes "unknown" (the verdict is kept), free text in `exception`
("KeyError: 'Age' — df has no column ...") becomes the exception class name, and an `exception` the answer's own
explanation contradicts becomes the class the explanation names.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any

import msgspec

from crane.errors import CraneError
from crane.finding import ROOT_CAUSES


class AnswerError(CraneError, ValueError):
    """The model's reply is not a valid answer; the message says what is wrong (it is shown to the model)."""


class LLMAnswer(msgspec.Struct, kw_only=True, forbid_unknown_fields=False):
    # `explanation` comes first so that a model that writes fields in schema order reasons before deciding.
    explanation: str
    crash: bool
    confidence: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
    exception: str | None = None  # e.g. "KeyError"
    line: Annotated[int, msgspec.Meta(ge=1)] | None = None  # 1-based line in the target cell
    root_cause: str | None = None  # one of ROOT_CAUSES
    suggested_fix: str | None = None


class Usage(msgspec.Struct, kw_only=True, rename="camel"):
    """Tokens and cost of one request (or of a request and its repair retry). Every field is always sent."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens the provider served from its prompt cache
    cost_usd: float | None = None  # None: the model is not in litellm's price table (tokens only)
    model: str = ""

    def __add__(self, other: Usage) -> Usage:
        cost = None if self.cost_usd is None or other.cost_usd is None else self.cost_usd + other.cost_usd
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            cost_usd=cost,
            model=self.model or other.model,
        )

    def describe(self) -> str:
        parts = [f"{self.prompt_tokens:,} prompt + {self.completion_tokens:,} completion tokens"]
        if self.cached_tokens:
            parts.append(f"({self.cached_tokens:,} cached)")
        parts.append(f"${self.cost_usd:.5f}" if self.cost_usd is not None else "cost unknown (model not priced)")
        return " ".join(parts)


class LLMVerdict(msgspec.Struct, kw_only=True, omit_defaults=True, rename="camel"):
    """A decoded answer with what it cost; `cached` when it came from the on-disk cache (cost not paid again)."""

    answer: LLMAnswer
    usage: Usage
    cached: bool = False
    repaired: bool = False  # the first reply was invalid and the repair retry fixed it
    elapsed_ms: float = 0.0


# The JSON schema sent as response_format (OpenAI strict-mode compatible: every property required,
# optional ones nullable, no additional properties).
ANSWER_JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "explanation": {"type": "string", "description": "1-3 sentences grounded in the runtime facts"},
        "crash": {"type": "boolean"},
        "confidence": {"type": "number", "description": "probability of a crash-verdict being right, 0..1"},
        "exception": {"type": ["string", "null"], "description": "exception class name, e.g. KeyError"},
        "line": {"type": ["integer", "null"], "description": "1-based line in the target cell"},
        "root_cause": {"type": ["string", "null"], "enum": [*ROOT_CAUSES, None]},
        "suggested_fix": {"type": ["string", "null"]},
    },
    "required": ["explanation", "crash", "confidence", "exception", "line", "root_cause", "suggested_fix"],
    "additionalProperties": False,
}

# The filled-in example of the system prompt (crane.llm.prompt). A reply that repeats its explanation is no answer
# about the target cell: Qwen2.5-Coder-0.5B returned it word for word for a clean cell (a false alarm).
EXAMPLE_ANSWER: dict[str, Any] = {
    "explanation": "df has no column 'Age' (its columns are 'age' and 'name'), so df['Age'] raises KeyError.",
    "crash": True, "confidence": 0.9, "exception": "KeyError", "line": 2, "root_cause": "data confusion",
    "suggested_fix": "use df['age']",
}

RESPONSE_FORMAT_SCHEMA = {
    "type": "json_schema",
    "json_schema": {"name": "crane_verdict", "schema": ANSWER_JSON_SCHEMA, "strict": True},
}
RESPONSE_FORMAT_OBJECT = {"type": "json_object"}

_FENCE = re.compile(r"```(?:json)?\s*(\{.*\})\s*```", re.S)
_ROOT_CAUSE_KEYS = {re.sub(r"[\s_\-]+", " ", rc.lower()): rc for rc in ROOT_CAUSES}
_answer_decoder = msgspec.json.Decoder(LLMAnswer)


def _extract_object(text: str) -> str:
    text = text.strip()
    if text.startswith("{"):
        return text
    m = _FENCE.search(text)
    if m:
        return m.group(1)
    start, end = text.find("{"), text.rfind("}")
    if start != -1 and end > start:
        return text[start : end + 1]
    raise AnswerError("the reply contains no JSON object")


UNKNOWN_ROOT_CAUSE = "unknown"  # a root cause the model named outside the JunoBench taxonomy
_EXC_CLASS = re.compile(r"\b((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Warning|Iteration))\b")
_IDENT = re.compile(r"(?:[A-Za-z_]\w*\.)*([A-Za-z_]\w*)")


def exception_name(text: str) -> str | None:
    """The exception class name in what a model wrote there: "KeyError: 'Age' — df has no column" -> "KeyError",
    "pandas.errors.ParserError" -> "ParserError"; free text naming no exception class -> "Exception"."""
    t = text.strip().strip("`'\"")
    if t.lower() in ("", "none", "null", "n/a"):
        return None
    m = _IDENT.fullmatch(t)
    if m:
        return m.group(1)
    m = _EXC_CLASS.search(t)
    if m:
        return m.group(1).rsplit(".", 1)[-1]
    return "Exception"


def decode_answer(text: str | None) -> LLMAnswer:
    """Decode and validate the model's reply; raise AnswerError saying what is wrong."""
    if not text or not text.strip():
        raise AnswerError("the reply is empty")
    try:
        raw = json.loads(_extract_object(text))
    except json.JSONDecodeError as exc:
        raise AnswerError(f"the reply is not valid JSON ({exc.msg} at position {exc.pos})") from None
    if not isinstance(raw, dict):
        raise AnswerError("the reply is not a JSON object")
    rc = raw.get("root_cause")
    if isinstance(rc, str):
        key = re.sub(r"[\s_\-]+", " ", rc.strip().lower())
        if key in ("", "none", "null", "n/a"):
            raw["root_cause"] = None
        elif key in _ROOT_CAUSE_KEYS:
            raw["root_cause"] = _ROOT_CAUSE_KEYS[key]
        else:  # outside the taxonomy: the verdict is still usable, its root cause is not
            raw["root_cause"] = UNKNOWN_ROOT_CAUSE
    if isinstance(raw.get("exception"), str):
        raw["exception"] = exception_name(raw["exception"])
    try:
        answer = msgspec.convert(raw, LLMAnswer)
    except msgspec.ValidationError as exc:
        raise AnswerError(f"the JSON does not match the schema: {exc}") from None
    if not answer.explanation.strip():
        raise AnswerError("explanation is empty")
    if _words(answer.explanation) == _words(EXAMPLE_ANSWER["explanation"]):
        raise AnswerError("the reply repeats the example of the system message (another notebook's df['Age']); "
                          "answer about this target cell, from its runtime facts")
    return with_explained_exception(answer)


def _words(text: str) -> str:
    return " ".join(text.lower().split())


def with_explained_exception(answer: LLMAnswer) -> LLMAnswer:
    """A crash whose `exception` is a class its own explanation never names, while the explanation names others,
    gets the first class the explanation names. Small models copy the prompt's example into that field
    (Qwen2.5-Coder-0.5B: `"explanation": "NameError: name 'X' is not defined ...", "exception": "KeyError"`);
    the explanation, written first, is what the model reasoned."""
    if not answer.crash:
        return answer
    named = [m.group(1).rsplit(".", 1)[-1] for m in _EXC_CLASS.finditer(answer.explanation)]
    if named and answer.exception not in named:
        return msgspec.structs.replace(answer, exception=named[0])
    return answer
