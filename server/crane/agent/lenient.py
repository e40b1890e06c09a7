"""Reading a tool call's JSON leniently, where the intent is unambiguous.

Small local models write tool calls that strict JSON rejects although nothing about them is unclear:
- raw newlines (and tabs) inside a string: a multi-line `source` written as it reads (Qwen2.5-Coder-0.5B sent all
  three `edit_cell` calls of a run this way); `json.loads(strict=False)` reads them as the characters they are;
- a trailing comma before `}` or `]`;
- the object fenced in ```json ... ``` or preceded by a sentence.

And a cell's `source` written escaped twice (`"x = 1\\ny = 2"`, the string holding a backslash and an `n`) that is
not Python, but is once its escapes are read (and the JSON tail the model wrote into it is cut): a model imitates
the calls it sees in its own history, which some chat templates show JSON-encoded twice (Qwen2.5's renders a
string `arguments` with `tojson`). `source_text` reads it; Python stays as it was.

Nothing is guessed: text that is still not JSON after these repairs is an error whose message says why.
"""

from __future__ import annotations

import json
import re
from typing import Any

_FENCE = re.compile(r"^\s*```(?:json|tool_call|tool)?\s*(.*?)\s*```\s*$", re.S)
LENIENT = json.JSONDecoder(strict=False)


def strip_trailing_commas(text: str) -> str:
    """`text` without the commas that directly precede a `}` or `]` (outside strings)."""
    out: list[str] = []
    in_string = escaped = False
    i = 0
    while i < len(text):
        ch = text[i]
        if in_string:
            out.append(ch)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
            out.append(ch)
        elif ch == ",":
            j = i + 1
            while j < len(text) and text[j] in " \t\r\n":
                j += 1
            if j < len(text) and text[j] in "}]":
                i += 1
                continue
            out.append(ch)
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def loads(text: str) -> Any:
    """The JSON value of `text`, read leniently (see the module docstring); ValueError says what is wrong."""
    m = _FENCE.match(text)
    if m:
        text = m.group(1)
    text = text.strip()
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return LENIENT.decode(strip_trailing_commas(text))
    except ValueError as exc:
        raise ValueError(str(exc)) from None


def raw_decode(text: str, start: int) -> tuple[Any, int]:
    """`json.JSONDecoder.raw_decode` at `start`, with raw control characters allowed inside strings and a
    trailing comma tolerated (the returned end is then an index into `text` all the same)."""
    try:
        return LENIENT.raw_decode(text, start)
    except ValueError:
        pass
    # find the end of the value with trailing commas removed, then map it back by re-scanning
    tail = text[start:]
    cleaned = strip_trailing_commas(tail)
    value, end = LENIENT.raw_decode(cleaned, 0)
    # the cleaned prefix of length `end` came from a prefix of `tail` that differs only by dropped commas
    k = 0
    for i, ch in enumerate(tail):
        if k == end:
            return value, start + i
        if k < len(cleaned) and cleaned[k] == ch:
            k += 1
    return value, len(text)


_ESCAPE = re.compile(r'\\(["\\/nrt])')
_ESCAPED = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "/": "/"}
_JSON_TAIL = re.compile(r'"\s*\}+\s*(?:\{.*)?$', re.S)  # `"}}` and what the model began after it


def source_text(source: str) -> str:
    """`source` as the cell's code: itself when it parses; else, when it holds escaped line breaks (`\\n`), the
    text with its escapes read (and a trailing JSON tail cut) if that parses."""
    from crane.agent.guard import parse_cell

    if "\\n" not in source or parse_cell(source) is not None:
        return source
    text = _ESCAPE.sub(lambda m: _ESCAPED[m.group(1)], source)
    for candidate in (text, _JSON_TAIL.sub("", text)):
        if candidate.strip() and parse_cell(candidate) is not None:
            return candidate
    return source
