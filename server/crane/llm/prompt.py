"""Prompt building: system prompt, then the executed cells, then runtime facts, rule findings and the target.

The order gives a stable prefix (system prompt, then the history, which only grows as the user runs cells)
so provider prompt caching applies; what changes per question (facts, findings, target) comes last. Token
counts use litellm's bundled tokenizers (offline), computed only when asked for.
"""

from __future__ import annotations

import json
import re

import msgspec

from crane.finding import ROOT_CAUSES, Finding
from crane.llm import history as hist
from crane.llm.facts_text import facts_text
from crane.llm.schema import EXAMPLE_ANSWER
from crane.notebook.model import Cell
from crane.probe.facts import ProbeResult
from crane.text import clean_traceback as _clean_traceback

PROMPT_VERSION = 2  # 2: quoted placeholders and a filled-in example (small models copied v1's spec)
MAX_TARGET_LINES = 200
MAX_TRACEBACK_CHARS = 2500

SYSTEM_PROMPT_SPEC = f"""You are CRANE, a crash detector for Jupyter notebooks. You get:
- Executed cells, in execution order (comments removed; code the target does not depend on is omitted as "...").
- Runtime state: facts read from the live kernel now about the names the target uses. Notation: `name: type shape ...`, \
[lo..hi] value range, {{a,b}} all unique values, NaN=k missing values (only when k>0), @In[n] last set in execution n, \
MISSING/NOT INSTALLED/UNDEFINED are checked facts.
- Findings of CRANE's offline rules (may be empty or wrong).
- The target cell, with line numbers; and its traceback if it already failed.

Decide whether running the target cell now, against this kernel state, raises an exception. Trust the runtime \
facts over assumptions from the code. Reply with ONE JSON object and nothing else, with these keys (each <...> \
describes a value: write your own value there, never the description):
{{"explanation": "<1-3 sentences of your own, grounded in the facts>", "crash": <true or false>, \
"confidence": <a number from 0 to 1: how likely your crash value is right>, \
"exception": "<the exception class name, e.g. KeyError>" or null, "line": <the 1-based target line> or null, \
"root_cause": one of {", ".join(repr(r).replace("'", '"') for r in ROOT_CAUSES)} or null, \
"suggested_fix": "<a short code-level fix>" or null}}"""
# The filled-in example teaches the format where nothing enforces it (small models copied v1's bare spec as
# `"explanation": 1`). Where the server enforces the schema (response_format "schema") it only pulls the answer:
# Qwen2.5-Coder-0.5B sent it back word for word for 3 of 7 verdict requests (a false alarm each), and none of 6
# once it was left out (docs/llm.md, "Local models").
SYSTEM_PROMPT = f"""{SYSTEM_PROMPT_SPEC}
Example of a complete reply (for another notebook):
{json.dumps(EXAMPLE_ANSWER)}"""


def for_response_format(messages: list[dict], fmt: str) -> list[dict]:
    """The messages to send with response_format `fmt`: without the example when the server enforces the schema."""
    if fmt != "schema" or not messages or messages[0].get("content") != SYSTEM_PROMPT:
        return messages
    return [{**messages[0], "content": SYSTEM_PROMPT_SPEC}, *messages[1:]]



class Prompt(msgspec.Struct, kw_only=True):
    messages: list[dict]
    chars: int  # all message contents
    user_chars: int  # the user message alone (comparable to the CRANE-LLM study's prompt inputs)
    sections: dict[str, int]  # chars per section: history, facts, findings, target, traceback
    carried: list[str] = []  # kinds of runtime facts carried (per-column NaN, undefined names, ...)
    target_lines: int = 0
    history_cells: int = 0  # executed cells given
    history_cells_shown: int = 0  # of which with code in the prompt
    history_statements_cut: int = 0  # kept statements dropped to fit the budget
    stable_chars: int = 0  # the user message's first chars that only change when the history does
    version: int = PROMPT_VERSION

    def token_count(self, model: str | None = None) -> int:
        """Prompt tokens by litellm's offline tokenizer for `model` (a GPT-4o tokenizer by default)."""
        from crane.llm.litellm_import import load_litellm

        litellm = load_litellm()
        try:
            return int(litellm.token_counter(model=model or "gpt-4o", messages=self.messages))
        except Exception:
            return int(litellm.token_counter(model="gpt-4o", messages=self.messages))


def clean_traceback(traceback: str | list[str]) -> str:
    """The traceback for the prompt: plain text, its end kept (the raising frame and the message matter most)."""
    return _clean_traceback(traceback, MAX_TRACEBACK_CHARS)


def target_text(target: Cell) -> str:
    lines = hist.strip_comments(target.source, keep_lines=True).splitlines()
    shown = lines[:MAX_TARGET_LINES]
    width = len(str(len(shown)))
    out = [f"{i:>{width}}| {ln}".rstrip() for i, ln in enumerate(shown, start=1)]
    if len(lines) > MAX_TARGET_LINES:
        out.append(f"... ({len(lines) - MAX_TARGET_LINES} more lines)")
    return "\n".join(out)


def findings_text(findings: list[Finding]) -> str:
    out = []
    for f in findings:
        msg = f.message if f.message.startswith(f.ename) else f"{f.ename}: {f.message}"
        line = f"- line {f.line} [{f.rule}, {f.source}, {f.confidence:.2f}]: {msg}"
        out.append(line[:400])
    return "\n".join(out)


def _target_names(target: Cell) -> set[str]:
    from crane.analysis.cell import analyze_cell

    a = analyze_cell(target.source)
    names = set(a.free_names)
    if a.tree is None:  # a syntax error: fall back to every identifier
        names = set(re.findall(r"[A-Za-z_]\w*", target.source))
    return names


def build_prompt(
    history: list[Cell],
    target: Cell,
    probe: ProbeResult | None,
    findings: list[Finding],
    traceback: str | list[str] | None = None,
    *,
    history_errors: dict[int, str] | None = None,
    history_budget: int = hist.HISTORY_BUDGET_CHARS,
) -> Prompt:
    """The messages for one question about `target`. `history` is in execution order; `history_errors` maps
    cell numbers to "Ename: message" for cells that raised when they ran (replays); a traceback is given for
    a cell that already failed ("Diagnose with CRANE")."""
    errors = history_errors or {}
    cells = [hist.parse_cell(c, errors.get(c.number)) for c in history]
    hist.select(cells, _target_names(target))
    cut = hist.fit_budget(cells, history_budget)
    code, omitted = hist.render(cells)

    parts: dict[str, str] = {}
    history_block = "## Executed cells\n" + (code or "(none shown)")
    if omitted:
        history_block += "\nAlso ran (nothing the target uses): " + " ".join(omitted)
    parts["history"] = history_block

    carried: set[str] = set()
    if probe is not None:
        ftext, carried = facts_text(probe, defined_at=hist.last_bound(cells))
        parts["facts"] = "## Runtime state\n" + (ftext or "(no facts about the names the target uses)")
    else:
        parts["facts"] = "## Runtime state\n(no kernel: static analysis only)"
    if findings:
        parts["findings"] = "## Offline rules\n" + findings_text(findings)
    else:
        parts["findings"] = "## Offline rules\n(none fired)"
    parts["target"] = "## Target cell\n" + target_text(target)
    if traceback:
        parts["traceback"] = "## It already failed with\n" + clean_traceback(traceback)

    user = "\n\n".join(parts.values())
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]
    return Prompt(
        messages=messages,
        chars=len(SYSTEM_PROMPT) + len(user),
        user_chars=len(user),
        sections={k: len(v) for k, v in parts.items()},
        carried=sorted(carried),
        target_lines=len(target.source.splitlines()) or 1,
        history_cells=len(history),
        history_cells_shown=sum(1 for hc in cells if hc.error or any(st.depth is not None for st in hc.stmts)),
        history_statements_cut=cut,
        stable_chars=len(parts["history"]) + 2,
    )


def with_cache_markers(messages: list[dict], stable_chars: int) -> list[dict]:
    """Anthropic-style explicit prompt caching: mark the system prompt and the history (the stable prefix)
    with `cache_control` blocks. Providers that cache automatically (OpenAI, Gemini, DeepSeek) need nothing."""
    system, user = messages[0]["content"], messages[1]["content"]
    ephemeral = {"type": "ephemeral"}
    user_blocks = [{"type": "text", "text": user[:stable_chars], "cache_control": ephemeral},
                   {"type": "text", "text": user[stable_chars:]}] if 0 < stable_chars < len(user) else \
        [{"type": "text", "text": user}]
    return [
        {"role": "system", "content": [{"type": "text", "text": system, "cache_control": ephemeral}]},
        {"role": "user", "content": user_blocks},
        *messages[2:],
    ]
