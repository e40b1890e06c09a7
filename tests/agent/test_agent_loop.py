"""The agent loop against scripted models over real HTTP (litellm -> 127.0.0.1), executing in a real replay
sandbox kernel: a two-step KeyError fix, a refused try/except, the step limit, edits of earlier cells re-run
in order, budgets, stop, step mode, a no-code-change fix, and the user's kernel left untouched."""

from __future__ import annotations

import threading
import time

import pytest

from crane.agent.loop import AgentBudget, GoAhead, start_fix
from crane.agent.proposal import AgentStep, Proposal
from crane.notebook.model import load_notebook

from ..sacred import settle
from .conftest import (
    KEYERROR_CELLS,
    KEYERROR_FIX,
    PRICED,
    RecordingSandbox,
    code,
    settings_for,
    write_notebook,
)
from .fake_agent_server import tool


def factory(nb):
    return RecordingSandbox(nb)


@pytest.fixture
def keyerror_nb(tmp_path):
    return load_notebook(write_notebook(tmp_path / "ages.ipynb", KEYERROR_CELLS))


def test_keyerror_fixed_in_two_steps_with_streamed_steps_and_stable_prefix(model, keyerror_nb, recording,
                                                                           user_kernel):
    uk = user_kernel
    # the user's live kernel holds the notebook's state (cell 2 ran, cell 3 failed)
    uk.conn.run_cell(keyerror_nb.cell(2).source)
    uk.conn.run_cell(keyerror_nb.cell(3).source)
    before = uk.state()
    settle(uk.watcher, uk.conn)  # the user's runs' messages all in before the watcher is cleared
    uk.watcher.messages.clear()

    model.reset(tool("edit_cell", "the column is lower case", cell=3, source=KEYERROR_FIX),
                tool("finish", "verified", explanation="df has 'age', not 'Age': use the real column name."))
    steps: list[AgentStep] = []
    p = start_fix(keyerror_nb, 3, settings_for(model), on_step=steps.append, sandbox_factory=factory)

    assert p.status == "fixed" and p.fixed and p.stop_reason == "finished"
    assert p.steps == 2 and [s.action for s in steps] == ["edit_cell", "finish"]
    assert [s.phase for s in steps] == ["done", "done"] and all(s.run_id == p.run_id for s in steps)
    assert steps[0].reflection == "the column is lower case" and steps[0].code == KEYERROR_FIX
    assert steps[0].cell == 3 and "edited" in steps[0].result and steps[0].tokens == 1280
    assert "ran clean" in steps[1].result and steps[1].usage.prompt_tokens == 1200
    assert [(e.cell, e.new) for e in p.edits] == [(3, KEYERROR_FIX)] and p.additions == [] and p.run_first == []
    assert p.explanation.startswith("df has 'age'")
    assert p.evidence is not None
    assert p.evidence.status == "ok" and p.evidence.target == 3 and "40.0" in p.evidence.stdout
    assert p.usage.requests == 2 and p.usage.prompt_tokens == 2400 and p.usage.completion_tokens == 160
    assert p.usage.cost_usd is None and p.usage.unpriced_requests == 2  # unpriced model: tokens only
    assert p.log == steps

    # the conversation: tools offered, stable prefix, observations appended
    r0, r1 = model.requests
    assert {t["function"]["name"] for t in r0["tools"]} == {"edit_cell", "add_cell", "execute_cell", "inspect",
                                                            "finish"}
    assert r1["messages"][: len(r0["messages"])] == r0["messages"]
    assert r0["messages"][0]["role"] == "system" and "Cell 3 [2]  <- TARGET" in r0["messages"][1]["content"]
    assert "KeyError: 'Age'" in r0["messages"][1]["content"]
    assert r1["messages"][-1]["role"] == "tool" and "cell 3 edited" in r1["messages"][-1]["content"]

    # all execution happened in the sandbox: the recorded error was used (no speculative first run), then the
    # fix was verified from the replayed state
    (sb,) = recording.instances
    assert sb.ran == [KEYERROR_FIX] and sb.kernel is None  # closed at the end
    # the user's kernel: same namespace (keys and ids), execution count, In/Out, and nothing on its iopub
    time.sleep(0.2)
    assert uk.watcher.messages == []
    assert uk.state() == before


def test_try_except_wrapping_is_refused_and_the_agent_is_told_why(model, keyerror_nb, recording):
    wrapped = 'try:\n    mean_age = df["Age"].mean()\nexcept KeyError:\n    mean_age = None\nprint(mean_age)'
    model.reset(tool("edit_cell", "hide it", cell=3, source=wrapped),
                tool("finish", "done?", explanation="wrapped"),
                tool("edit_cell", "fix the cause", cell=3, source=KEYERROR_FIX),
                tool("finish", "done", explanation="use the real column name"))
    steps: list[AgentStep] = []
    p = start_fix(keyerror_nb, 3, settings_for(model), on_step=steps.append, sandbox_factory=factory)
    # the edit was refused, so finish changed nothing: not a fix either (issue 32)
    assert [s.status for s in steps] == ["refused", "refused", "ok", "ok"]
    assert "refused" in steps[0].result and "try/except" in steps[0].result
    # the refusal reached the model as the tool result, and the refused edit was never applied or run
    assert "try/except" in model.observations(1)[-1]
    assert "you changed nothing" in model.observations(2)[-1]
    assert wrapped not in recording.instances[0].ran
    assert p.fixed and [(e.cell, e.new) for e in p.edits] == [(3, KEYERROR_FIX)]
    assert len(p.guard) == 1 and "try/except" in p.guard[0]


def test_looping_model_stops_at_the_step_limit(model, keyerror_nb, recording):
    model.reset(default=tool("inspect", "look again", expression="df.shape"))
    steps: list[AgentStep] = []
    p = start_fix(keyerror_nb, 3, settings_for(model), on_step=steps.append, sandbox_factory=factory,
                  budget=AgentBudget(max_steps=3))
    assert p.status == "not-fixed" and not p.fixed and p.stop_reason == "step limit (3 steps)"
    assert p.steps == 3 and len(model.requests) == 3
    assert all(s.action == "inspect" and s.result.startswith("tuple len=2 = (3, 2)") for s in steps)
    assert "1 step left" in steps[1].result and "step left" not in steps[0].result
    assert p.edits == [] and p.evidence is None  # nothing changed: nothing to verify
    # every request extends the previous one: the prefix is stable
    for a, b in zip(model.requests, model.requests[1:], strict=False):
        assert b["messages"][: len(a["messages"])] == a["messages"]


TWO_EDIT_CELLS = [
    code('data = {"age": [30, 40]}', 1),
    code('import pandas as pd\ndf = pd.DataFrame(data)\nprint("built", list(df.columns))', 2),
    code("n = len(df)", 3),
    code('print(df["Age"].max() + df["weight"].sum())', 4, ("KeyError", "'Age'", 1)),
]
EDIT2 = 'import pandas as pd\ndf = pd.DataFrame(data).rename(columns={"age": "Age"})\nprint("built", list(df.columns))'
EDIT1 = 'data = {"age": [30, 40], "weight": [70, 80]}'


def test_edits_to_earlier_cells_are_rerun_in_notebook_order(model, tmp_path, recording):
    nb = load_notebook(write_notebook(tmp_path / "two.ipynb", TWO_EDIT_CELLS))
    model.reset(tool("edit_cell", "rename the column where df is built", cell=2, source=EDIT2),
                tool("execute_cell", "check", cell=4),
                tool("edit_cell", "weight is missing from the data", cell=1, source=EDIT1),
                tool("execute_cell", "check again", cell=4),
                tool("finish", "clean", explanation="build df with the columns the target uses"))
    steps: list[AgentStep] = []
    p = start_fix(nb, 4, settings_for(model), on_step=steps.append, sandbox_factory=factory)
    assert p.fixed, p
    assert "first re-ran cells 2 (ok)" in steps[1].result and "raised KeyError" in steps[1].result
    assert "'weight'" in steps[1].result
    assert "first re-ran cells 1 (ok), 2 (ok)" in steps[3].result and "cell 4 ran clean" in steps[3].result
    assert p.run_first == [1, 2] and p.evidence is not None and p.evidence.ran == [1, 2] and "190" in p.evidence.stdout
    assert sorted((e.cell, e.new) for e in p.edits) == [(1, EDIT1), (2, EDIT2)]
    sb = recording.instances[0]
    target = TWO_EDIT_CELLS[3]["source"][0]
    # each execution starts from the replayed history and re-runs the edited cells in notebook order (cell 3,
    # unchanged, is never re-run); finish verifies from a fresh reset
    assert sb.events == ["reset", EDIT2, target, "reset", EDIT1, EDIT2, target, "reset", EDIT1, EDIT2, target]


@pytest.mark.parametrize("kind", ["tokens", "cost", "time"])
def test_a_run_past_its_budget_ends_with_a_clear_report(model, keyerror_nb, recording, kind):
    if kind == "tokens":
        settings, budget = settings_for(model), AgentBudget(max_tokens=250_000)
        turn = tool("inspect", "look", expression="df.columns.tolist()",
                    usage={"prompt_tokens": 100_000, "completion_tokens": 50})
    elif kind == "cost":
        settings, budget = settings_for(model, model=PRICED), AgentBudget(max_cost_usd=0.20, max_tokens=None)
        turn = tool("inspect", "look", expression="df.columns.tolist()",
                    usage={"prompt_tokens": 600_000, "completion_tokens": 50})  # $0.09 per turn
    else:
        settings, budget = settings_for(model), AgentBudget(max_seconds=100.0)
        turn = tool("inspect", "look", expression="df.columns.tolist()")
    model.reset(default=turn)
    # the time budget runs on a virtual clock: 60 s per model turn, whatever the machine's load. (Each request's
    # real deadline is what the budget has left: 100 s, then 40 s, so neither a loaded machine nor litellm's
    # first import, seconds in a fresh process, can end the run before the budget does.)
    clock = (lambda: 60.0 * len(model.requests)) if kind == "time" else time.monotonic
    p = start_fix(keyerror_nb, 3, settings, sandbox_factory=factory, budget=budget, clock=clock)
    assert p.status == "not-fixed" and not p.fixed, p.stop_reason
    assert len(model.requests) == (3 if kind != "time" else 2)
    expected = {"tokens": "token budget (250,000 tokens; used 300,150)",
                "cost": "cost budget ($0.2000; spent $0.2701)", "time": "time budget (100 s)"}[kind]
    assert p.stop_reason == expected
    if kind == "cost":
        assert p.usage.cost_usd == pytest.approx(3 * (600_000 * 0.15e-6 + 50 * 0.6e-6))


def test_a_local_model_server_gets_a_time_budget_that_fits_cpu_inference(model, keyerror_nb, recording):
    """Issue 22, measured: Qwen2.5-Coder-0.5B on llama-cpp-python (one thread, 2 loaded cores) took 396 s for a
    1,640-token prompt. With the hosted default (300 s) a local run ended after its first turn; a local server
    (127.0.0.1 here) gets LOCAL_RUN_SECONDS unless the budget says otherwise."""
    from crane.agent.loop import HOSTED_RUN_SECONDS, LOCAL_RUN_SECONDS

    model.reset(tool("edit_cell", "the column is lower case", cell=3, source=KEYERROR_FIX),
                tool("finish", "verified", explanation="df has 'age', not 'Age'."))
    clock = lambda: 396.0 * len(model.requests)  # noqa: E731 (the virtual clock: 396 s per model turn)
    p = start_fix(keyerror_nb, 3, settings_for(model), sandbox_factory=factory, clock=clock)
    assert p.stop_reason == "finished" and len(model.requests) == 2 and p.fixed
    assert (HOSTED_RUN_SECONDS, LOCAL_RUN_SECONDS) == (300.0, 1200.0)
    model.reset(tool("edit_cell", "the column is lower case", cell=3, source=KEYERROR_FIX),
                tool("finish", "verified", explanation="df has 'age', not 'Age'."))
    p = start_fix(keyerror_nb, 3, settings_for(model), sandbox_factory=factory, clock=clock,
                  budget=AgentBudget(max_seconds=300.0))
    assert p.stop_reason == "time budget (300 s)" and len(model.requests) == 1


def test_stop_event_ends_the_run_between_steps(model, keyerror_nb, recording):
    stop = threading.Event()
    model.reset(default=tool("inspect", "look", expression="1 + 1"))

    def on_step(step):
        stop.set()  # the user presses Stop after the first step

    p = start_fix(keyerror_nb, 3, settings_for(model), on_step=on_step, stop_event=stop, sandbox_factory=factory)
    assert p.status == "stopped" and p.stop_reason == "stopped by the user" and p.steps == 1
    assert len(model.requests) == 1 and p.evidence is None


def test_step_mode_waits_for_the_go_ahead_before_each_action(model, keyerror_nb, recording):
    stop = threading.Event()
    gate = GoAhead(stop)
    model.reset(tool("edit_cell", "fix", cell=3, source=KEYERROR_FIX),
                tool("execute_cell", "run it", cell=3),
                tool("finish", "done", explanation="column name"))
    steps: list[AgentStep] = []
    result: dict[str, Proposal] = {}
    t = threading.Thread(target=lambda: result.setdefault(
        "p", start_fix(keyerror_nb, 3, settings_for(model), on_step=steps.append, step_gate=gate, stop_event=stop,
                       sandbox_factory=factory)))
    t.start()

    def wait_for(phase_count):
        deadline = time.monotonic() + 60
        while len(steps) < phase_count or gate.waiting is None:
            assert time.monotonic() < deadline and t.is_alive()
            time.sleep(0.02)

    wait_for(1)
    assert steps[-1].phase == "proposed" and steps[-1].action == "edit_cell" and steps[-1].code == KEYERROR_FIX
    time.sleep(0.3)
    assert len(model.requests) == 1  # nothing more happens while the user reads the proposed action
    gate.approve()
    wait_for(3)
    assert [s.phase for s in steps] == ["proposed", "done", "proposed"] and steps[1].status == "ok"
    assert steps[2].action == "execute_cell"
    sb = recording.instances[0]
    assert sb.ran == []  # the proposed execution has not run
    gate.stop()
    t.join(60)
    p = result["p"]
    assert p.status == "stopped" and not p.fixed and steps[-1].status == "stopped"
    assert sb.ran == [] and len(model.requests) == 2
    assert [(e.cell, e.new) for e in p.edits] == [(3, KEYERROR_FIX)]  # the approved edit is in the proposal


SKIPPED_CELLS = [
    code("import math", 1),
    code("radius = 2.0\narea = math.pi * radius ** 2", None),  # never run
    code("print(round(area, 2))", 2, ("NameError", "name 'area' is not defined", 1)),
]


def test_running_a_skipped_cell_is_a_fix_without_code_change(model, tmp_path, recording):
    nb = load_notebook(write_notebook(tmp_path / "skip.ipynb", SKIPPED_CELLS))
    model.reset(tool("execute_cell", "cell 2 defines area but never ran", cell=2),
                tool("execute_cell", "now the target", cell=3),
                tool("finish", "clean", explanation="Cell 2 defines `area` and was never run: run it first."))
    p = start_fix(nb, 3, settings_for(model), sandbox_factory=factory)
    assert p.fixed and p.edits == [] and p.additions == [] and p.run_first == [2]
    assert p.summary() == "no code change needed: run cell 2 first"
    assert p.evidence is not None and p.evidence.ran == [2] and "12.57" in p.evidence.stdout


def test_a_cell_that_already_runs_clean_needs_no_fix(model, tmp_path, recording):
    nb = load_notebook(write_notebook(tmp_path / "ok.ipynb", [code("x = 1", 1), code("print(x + 1)")]))
    p = start_fix(nb, 2, settings_for(model), sandbox_factory=factory)
    assert p.status == "clean" and not p.fixed and model.requests == []
    assert recording.instances[0].ran == ["print(x + 1)"]  # observed in the sandbox, not guessed


def test_goal_before_any_error_and_an_added_cell(model, tmp_path, recording):
    nb = load_notebook(write_notebook(tmp_path / "goal.ipynb", [code("xs = [3, 1, 2]", 1), code("print(xs)")]))
    model.reset(tool("add_cell", "sort first", after=1, source="xs = sorted(xs)"),
                tool("execute_cell", "check", cell=2),
                tool("finish", "sorted", explanation="added a cell that sorts xs"))
    p = start_fix(nb, 2, settings_for(model), goal="print the list sorted", sandbox_factory=factory)
    assert "print the list sorted" in model.requests[0]["messages"][1]["content"]
    assert p.fixed and p.additions[0].after == 1 and p.additions[0].cell == 3 and p.run_first == [3]
    assert p.evidence is not None and "[1, 2, 3]" in p.evidence.stdout


def test_text_replies_are_nudged_and_bad_arguments_are_sent_back(model, keyerror_nb, recording):
    from .fake_agent_server import Turn

    model.reset(Turn(text="I think the column name is wrong."),
                Turn(calls=[("edit_cell", {"reflection": "oops", "cell": "three"})]),
                tool("edit_cell", "fix", cell=3, source=KEYERROR_FIX),
                tool("finish", "done", explanation="column name"))
    steps: list[AgentStep] = []
    p = start_fix(keyerror_nb, 3, settings_for(model), on_step=steps.append, sandbox_factory=factory)
    assert p.fixed and [s.action for s in steps] == ["reply", "edit_cell", "edit_cell", "finish"]
    assert steps[0].status == "error" and model.requests[1]["messages"][-1]["content"].startswith("Reply with")
    assert steps[1].status == "error" and "bad arguments for edit_cell" in steps[1].result
    assert "bad arguments for edit_cell" in model.observations(2)[-1]


def test_an_unreachable_model_ends_the_run_with_an_error_proposal(keyerror_nb, recording, monkeypatch):
    import socket

    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    from crane.llm.settings import LLMSettings

    settings = LLMSettings(model="openai/nowhere", api_base=f"http://127.0.0.1:{port}/v1", retries=0, timeout_s=5)
    p = start_fix(keyerror_nb, 3, settings, sandbox_factory=factory)
    assert p.status == "error" and not p.fixed and p.stop_reason.startswith("model error:")
    assert "could not be reached" in p.stop_reason and recording.instances[0].kernel is None
