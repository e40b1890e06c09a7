"""The agent's tools (OpenAI function-calling schemas) and their arguments, decoded and validated at the edge.

Every tool takes a short `reflection`: what the agent learned from the last observation and why it takes
this action. Cell numbers are the notebook's 1-based numbers; a cell the agent adds gets the next free
number (after the notebook's last cell) and is placed after the cell it names.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import msgspec

from crane.agent import lenient
from crane.errors import CraneError

REFLECTION = {"type": "string", "description": "One or two sentences: what you learned and why this action."}


def _tool(name: str, description: str, props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {"reflection": REFLECTION, **props},
                "required": ["reflection", *required],
                "additionalProperties": False,
            },
        },
    }


TOOLS: list[dict[str, Any]] = [
    _tool("edit_cell", "Replace the whole source of a code cell (the edit is re-run in the sandbox, in notebook "
          "order, the next time a later cell executes). Do not wrap failing code in try/except, delete or "
          "comment out failing statements, or empty a cell: such edits are refused.",
          {"cell": {"type": "integer", "description": "cell number"},
           "source": {"type": "string", "description": "the complete new source of the cell"}},
          ["cell", "source"]),
    _tool("add_cell", "Insert a new code cell after cell `after` (0: at the top). It gets a new number, "
          "reported back, and runs before the cells that follow it.",
          {"after": {"type": "integer", "description": "the cell number the new cell follows"},
           "source": {"type": "string", "description": "the new cell's source"}},
          ["after", "source"]),
    _tool("execute_cell", "Run a cell in the sandbox (a copy of the notebook's state, never the user's kernel), "
          "after re-running your edited and added cells that come before it, in order. Returns the "
          "outcome: clean, or the exception and traceback. Running a cell that was never run is a fix "
          "that needs no code change.",
          {"cell": {"type": "integer", "description": "cell number"}}, ["cell"]),
    _tool("inspect", "Evaluate a Python expression in the sandbox's current state (after the last cell you "
          "executed, or the notebook's state before any action) and return its type, shape or length and a "
          "short repr. Use it to read data: columns, dtypes, shapes, values.",
          {"expression": {"type": "string", "description": "e.g. df.columns.tolist() or X.shape"}},
          ["expression"]),
    _tool("finish", "End the run. The target cell is then run in a fresh sandbox after your edits: the fix is "
          "accepted only if it runs clean. Give a short explanation of the cause and the fix.",
          {"explanation": {"type": "string", "description": "cause and fix, 1-3 sentences"}}, ["explanation"]),
]

TOOL_NAMES = tuple(t["function"]["name"] for t in TOOLS)

# The tool parameters that name a cell: those `tools_for` limits to the cells a run can name.
_CELL_PARAMS = {"edit_cell": "cell", "execute_cell": "cell", "add_cell": "after"}


def tools_for(code_cells: Sequence[int], all_cells: int, additions: int) -> list[dict[str, Any]]:
    """TOOLS for one run, each cell parameter an enum of the cells it may name: `code_cells` (the notebook's code
    cells) and the numbers the run's own added cells will get (`all_cells` + 1 .. + `additions`, one per step at
    most); `add_cell`'s `after` also 0 and every cell. A server that turns the schema into a grammar (llama.cpp
    and its Python bindings, vLLM, Ollama) then cannot write a cell the notebook lacks (Qwen2.5-Coder-0.5B
    edited "cell 7" of 6, twice). For local servers only (crane.agent.loop): some providers take string enums
    only."""
    added = list(range(all_cells + 1, all_cells + 1 + max(additions, 0)))
    numbers = {"cell": sorted(set(code_cells)) + added, "after": list(range(0, all_cells + 1)) + added}
    out = []
    for t in TOOLS:
        name = t["function"]["name"]
        param = _CELL_PARAMS.get(name)
        if param is None:
            out.append(t)
            continue
        t = copy.deepcopy(t)
        spec = t["function"]["parameters"]["properties"][param]
        spec["enum"] = numbers["after" if param == "after" else "cell"]
        out.append(t)
    return out


def call_schema(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """One tool call as a JSON object, `{"name": <tool>, "arguments": {...}}`, for `response_format` where a
    server enforces a schema but has no tool calling of its own (llama-cpp-python's chat templates): each
    alternative holds one tool's name and its parameters' schema, so every reply is a call that decodes
    (crane.agent.model_call.parse_text_tool_calls reads it)."""
    return {"anyOf": [
        {"type": "object",
         "properties": {"name": {"const": t["function"]["name"]}, "arguments": t["function"]["parameters"]},
         "required": ["name", "arguments"], "additionalProperties": False}
        for t in tools]}


class ToolArgsError(CraneError, ValueError):
    """The model's tool call is unusable; the message is sent back to it."""


class EditCell(msgspec.Struct, forbid_unknown_fields=False):
    cell: int
    source: str
    reflection: str = ""


class AddCell(msgspec.Struct, forbid_unknown_fields=False):
    after: int
    source: str
    reflection: str = ""


class ExecuteCell(msgspec.Struct, forbid_unknown_fields=False):
    cell: int
    reflection: str = ""


class Inspect(msgspec.Struct, forbid_unknown_fields=False):
    expression: str
    reflection: str = ""


class Finish(msgspec.Struct, forbid_unknown_fields=False):
    explanation: str = ""
    reflection: str = ""


ARG_TYPES: dict[str, type] = {
    "edit_cell": EditCell,
    "add_cell": AddCell,
    "execute_cell": ExecuteCell,
    "inspect": Inspect,
    "finish": Finish,
}


class ToolCall(msgspec.Struct):
    id: str
    name: str
    arguments: str  # raw JSON, as the model sent it


def decode_args(call: ToolCall) -> Any:
    """The typed arguments of a tool call, or ToolArgsError saying what is wrong."""
    typ = ARG_TYPES.get(call.name)
    if typ is None:
        raise ToolArgsError(f"unknown tool {call.name!r}; the tools are {', '.join(TOOL_NAMES)}")
    try:
        raw = lenient.loads(call.arguments or "{}")  # raw newlines in strings, trailing commas, a ```json fence
    except ValueError as exc:
        raise ToolArgsError(f"the arguments of {call.name} are not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise ToolArgsError(f"the arguments of {call.name} must be a JSON object")
    try:
        args: Any = msgspec.convert(raw, typ, strict=False)
    except msgspec.ValidationError as exc:
        raise ToolArgsError(f"bad arguments for {call.name}: {exc}") from None
    if isinstance(args, (EditCell, AddCell)):
        args.source = lenient.source_text(args.source)  # a source escaped twice
    return args


def call_key(call: ToolCall, without: tuple[str, ...] = ()) -> str:
    """What makes two calls the same call: the tool and its arguments (read leniently, keys sorted), those named
    in `without` left out."""
    import json

    try:
        args = lenient.loads(call.arguments or "{}")
    except ValueError:
        return f"{call.name}:{call.arguments}"
    if without and isinstance(args, dict):
        args = {k: v for k, v in args.items() if k not in without}
    return f"{call.name}:{json.dumps(args, sort_keys=True)}"


def action_key(call: ToolCall) -> str:
    """What makes two calls the same action: `call_key` without the reflection (a model that repeats its edit
    words the reflection anew)."""
    return call_key(call, without=("reflection",))


def action_code(args: Any) -> str:
    """The code an action carries (for the streamed steps): a cell's source, an expression, or ''."""
    if isinstance(args, (EditCell, AddCell)):
        return args.source
    if isinstance(args, Inspect):
        return args.expression
    return ""
