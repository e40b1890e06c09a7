"""Issue 32: the agent's edits arrive. Replies in the shape real small models sent (tests/llm/replies/
issue32-constructed.jsonl, and ../shared/llm-replies/replies.jsonl) go over real HTTP to the agent loop, which
executes in a real replay sandbox: multi-line `edit_cell` sources with raw newlines, trailing commas, a runaway
repetition of one call, the target overwritten with unrelated text, `finish` with no change, lost calls."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crane.agent.loop import AgentBudget, start_fix
from crane.agent.model_call import lost_calls, parse_text_tool_calls
from crane.agent.proposal import AgentStep
from crane.agent.tools import decode_args
from crane.bench.fix import FixCaseResult, summarize
from crane.notebook.model import load_notebook

from .conftest import KEYERROR_CELLS, RecordingSandbox, settings_for, write_notebook
from .fake_agent_server import Turn, tool

WRITTEN = Path(__file__).resolve().parents[1] / "llm" / "replies" / "issue32-constructed.jsonl"
SHARED = Path(__file__).resolve().parents[3] / "shared" / "llm-replies" / "replies.jsonl"
MULTILINE = 'mean_age = df["age"].mean()\nprint(mean_age)'


def text(index: int, path: Path = WRITTEN) -> str:
    if not path.exists():
        pytest.skip(f"the replies are not here: {path}")
    return json.loads(path.read_text().splitlines()[index])["response"]["choices"][0]["message"]["content"]


def factory(nb):
    return RecordingSandbox(nb)


@pytest.fixture
def keyerror_nb(tmp_path):
    return load_notebook(write_notebook(tmp_path / "ages.ipynb", KEYERROR_CELLS))


# -- reading the calls (no kernel) ---------------------------------------------------------------------------

def test_a_multi_line_source_with_raw_newlines_is_read():
    (call,) = parse_text_tool_calls(text(6))
    args = decode_args(call)
    assert call.name == "edit_cell" and args.cell == 3 and args.source == MULTILINE


def test_trailing_commas_are_read():
    (call,) = parse_text_tool_calls(text(11))
    assert decode_args(call).source == "mean_age = df['age'].mean()\nprint(mean_age)"


def test_a_call_that_cannot_be_read_is_reported_with_the_reason():
    assert lost_calls(text(57, SHARED)) == [
        "edit_cell: the reply names it but holds no JSON object with its arguments"]  # Qwen's bare "edit_cell"
    (why,) = lost_calls('```json\n{"name": "edit_cell", "arguments": {"cell": 3, "source": "x = [1, 2"\n```')
    assert why.startswith("edit_cell: the reply names it but holds its JSON is broken")
    assert lost_calls("I think the column name is wrong.") == []  # plain text names no tool: not a lost call


def test_tool_call_rate_counts_usable_calls_only():
    results = [FixCaseResult(case="a", variant="buggy", target=3, requests=4, turns_without_call=3, usable_calls=1,
                             lost_calls=["edit_cell: bad arguments"] * 3)]
    s = summarize(results)
    assert s.tool_call_rate == 0.25 and s.usable_calls == 1 and s.lost_calls == 3


# -- the loop, in a real sandbox -----------------------------------------------------------------------------

def test_the_multi_line_edit_arrives_and_fixes_the_cell(model, keyerror_nb, recording):
    model.reset(Turn(text=text(6)), tool("finish", "done", explanation="the column is lower case"))
    p = start_fix(keyerror_nb, 3, settings_for(model), sandbox_factory=factory)
    assert p.fixed and [(e.cell, e.new) for e in p.edits] == [(3, MULTILINE)]
    assert p.calls.usable == 2 and p.calls.lost == [] and p.calls.usable_turns == 2


def test_a_runaway_repetition_is_one_step(model, keyerror_nb, recording):
    model.reset(Turn(text=text(7)), Turn(text=text(6)), tool("finish", "done", explanation="lower case"))
    steps: list[AgentStep] = []
    p = start_fix(keyerror_nb, 3, settings_for(model), on_step=steps.append, sandbox_factory=factory)
    assert p.fixed and p.steps == 3 and [s.action for s in steps] == ["inspect", "edit_cell", "finish"]
    assert p.calls.repeated == 24 and p.calls.usable == 3
    assert "['age', 'name']" in steps[0].result


def test_the_target_is_never_replaced_by_unrelated_code(model, keyerror_nb, recording):
    model.reset(Turn(text=text(8)), Turn(text=text(9)), Turn(text=text(6)),
                tool("finish", "done", explanation="lower case"))
    steps: list[AgentStep] = []
    p = start_fix(keyerror_nb, 3, settings_for(model), on_step=steps.append, sandbox_factory=factory)
    assert [s.status for s in steps[:2]] == ["refused", "refused"]
    assert "not valid Python" in steps[0].result and "unrelated code" in steps[1].result
    assert p.fixed and [(e.cell, e.new) for e in p.edits] == [(3, MULTILINE)]
    assert len(p.guard) == 2


def test_finish_with_no_change_is_not_a_fix(model, keyerror_nb, recording):
    model.reset(Turn(text=text(10)), Turn(text=text(10)))
    steps: list[AgentStep] = []
    p = start_fix(keyerror_nb, 3, settings_for(model), on_step=steps.append, sandbox_factory=factory,
                  budget=AgentBudget(max_steps=2))
    assert not p.fixed and p.status == "not-fixed" and p.evidence is None
    assert [s.status for s in steps] == ["refused", "refused"] and "you changed nothing" in steps[0].result


def test_lost_calls_are_reported_and_told_to_the_model(model, keyerror_nb, recording):
    broken = '```json\n{"name": "edit_cell", "arguments": {"cell": 3, "source": "x = [1, 2"\n```'
    model.reset(Turn(text=broken), Turn(calls=[("edit_cell", {"reflection": "r", "cell": "three"})]),
                Turn(text=text(6)), tool("finish", "done", explanation="lower case"))
    p = start_fix(keyerror_nb, 3, settings_for(model), sandbox_factory=factory)
    assert p.fixed and len(p.calls.lost) == 2 and p.calls.usable == 2 and p.calls.usable_turns == 2
    assert p.calls.lost[0].startswith("edit_cell: the reply names it but holds its JSON is broken")
    assert p.calls.lost[1].startswith("edit_cell: bad arguments for edit_cell")
    assert "Your tool call could not be read: edit_cell" in model.requests[1]["messages"][-1]["content"]
