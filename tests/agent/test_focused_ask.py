"""Issue 32: the focused ask. When a turn of the agent makes no progress (its calls repeat earlier ones, change
nothing, or are refused), the failing line is put to the model alone — the cell, the line, the error, the runtime
facts, "reply with only code" — and each reply, merged into the cell, runs in the sandbox as a step; a change that
runs clean is accepted only through the same fresh-sandbox verification and guard as the model's own edits. Real
HTTP to the scripted server (a request without tools is a focused ask), real replay sandbox.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crane.agent.focused import ask, changed_lines, plan, variable_lines
from crane.agent.loop import start_fix
from crane.agent.plain_facts import plain_line
from crane.agent.snippet import merge_reply, reply_code
from crane.bench.fix import FixCaseResult, summarize
from crane.notebook.model import load_notebook

from .conftest import KEYERROR_FIX, RecordingSandbox, code, settings_for, write_notebook
from .fake_agent_server import Turn, tool
from .test_agent_replies import keyerror_nb  # noqa: F401 (a fixture)

TARGET = 'mean_age = df["Age"].mean()\nprint(mean_age)'  # cell 3 of keyerror_nb; line 1 raises KeyError: 'Age'

# Qwen2.5-Coder-0.5B's replies to focused asks (2026-11-29, llama-cpp-python), with the cells they were about
BOXPLOTS = """fig, ax = plt.subplots(ncols=7, nrows=2, figsize=(20, 10))
index = 0
ax = ax.flatten()

for col, value in df.items():
    sns.boxplot(y=col, data=df, ax=ax[index])
    index += 1
plt.tight_layout(pad=0.5, w_pad=0.7, h_pad=5.0)"""
CONFUSION = """from sklearn import metrics
confusion_matrix = metrics.confusion_matrix(y_test , y_pred)

cm_display = metrics.ConfusionMatrixDisplay(confusion_matrix = confusion_matrix , display_labels=[False,True])

cm_display.plot()
plt.show()"""
LABELS3 = ("cm_display = metrics.ConfusionMatrixDisplay(confusion_matrix = confusion_matrix , "
           "display_labels=['Iris-setosa', 'Iris-versicolor', 'Iris-virginica'])")


def factory(nb):
    return RecordingSandbox(nb)


# -- reading a reply and merging it into the cell (no server) ------------------------------------------------

def test_a_reply_is_its_code_block_or_the_python_it_starts_with():
    assert reply_code("```python\nx = f(1)\n```\nThis line fixes the call.") == "x = f(1)"
    assert reply_code("x = f(1)\nThis line fixes the call.") == "x = f(1)"
    assert reply_code("I cannot fix it.") == ""  # prose is not code
    assert reply_code("```\nx = (\n```") == "x = ("  # a fenced block is the model's code, even broken
    # a reasoning model's draft and a shell block are not the code
    assert reply_code("<think>```python\ndraft()\n```</think>\n```sh\npip install x\n```\nThen:\n"
                      "```python\nx = 1\n```") == "x = 1"


def test_a_corrected_line_replaces_the_failing_line_at_its_indentation():
    new = merge_reply(BOXPLOTS, "sns.boxplot(y=col, data=df, ax=ax[index % len(ax)])", 6)
    assert new is not None
    assert new.splitlines()[5] == "    sns.boxplot(y=col, data=df, ax=ax[index % len(ax)])"
    assert new.splitlines()[:5] == BOXPLOTS.splitlines()[:5] and new.splitlines()[6:] == BOXPLOTS.splitlines()[6:]


def test_lines_sent_back_unchanged_and_unindented_change_nothing():
    # asked for line 6, the model sent lines 6-8 as they are, their indentation lost
    reply = "sns.boxplot(y=col, data=df, ax=ax[index])\nindex += 1\nplt.tight_layout(pad=0.5, w_pad=0.7, h_pad=5.0)"
    assert merge_reply(BOXPLOTS, reply, 6) == BOXPLOTS


def test_a_corrected_cell_that_leaves_out_lines_keeps_them():
    # the cell written back with three labels, and without the `cm_display.plot()` that raised
    reply = CONFUSION.replace("display_labels=[False,True])", "display_labels=['Iris-setosa', 'Iris-versicolor', "
                                                              "'Iris-virginica'])").replace("cm_display.plot()\n", "")
    new = merge_reply(CONFUSION, reply, 6)
    assert new == CONFUSION.replace(CONFUSION.splitlines()[3], LABELS3)


def test_a_line_like_none_is_inserted_never_written_over_another():
    cell = "from sklearn.metrics import mean_absolute_error\nmae = mean_absolute_error(y_test, y_pred)\nprint(mae)"
    # "define it, then the line" for a NameError: the definition goes in before the line, the import stays
    new = merge_reply(cell, "y_pred = model.predict(X_test)\nmae = mean_absolute_error(y_test, y_pred)", 2)
    assert new == ("from sklearn.metrics import mean_absolute_error\ny_pred = model.predict(X_test)\n"
                   "mae = mean_absolute_error(y_test, y_pred)\nprint(mae)")
    # an anchor that starts with a blank line is an anchor all the same (nothing spliced in twice)
    assert merge_reply("x = f()\n\nplt.show()", "x = g()\n\nplt.show()", 1) == "x = g()\n\nplt.show()"
    # a line unlike the failing one, where the reply has it, replaces it
    assert merge_reply("a = 1\nb = load()\nc = 3", "a = 1\nb = pd.read_csv('x.csv')\nc = 3", 2) == \
        "a = 1\nb = pd.read_csv('x.csv')\nc = 3"


def test_the_reply_keeps_its_own_indentation_shifted_to_the_cell():
    loop = "for i in r:\n    a(i)\n    b(i)\nprint(1)"
    # sent unindented from inside the loop: shifted back in; a new line after the loop stays after it
    assert merge_reply(loop, "a(i)\nc(i)\nb(i)", 2) == "for i in r:\n    a(i)\n    c(i)\n    b(i)\nprint(1)"
    assert merge_reply("def f():\n    return 1\nf()", "def f():\n    return 1\ny = 2\nf()", 3) == \
        "def f():\n    return 1\ny = 2\nf()"


def test_fewer_lines_replace_the_lines_most_like_them():
    new = merge_reply(CONFUSION, "cm_display.plot(cmap=plt.cm.Blues)\nplt.show()", 6)
    assert new == CONFUSION.replace("cm_display.plot()", "cm_display.plot(cmap=plt.cm.Blues)")
    # a reply with no line in common and no known failing line has nowhere to go
    assert merge_reply(CONFUSION, "x = 1", None) is None


def test_the_asks_of_a_round():
    from crane.agent.context import FixContext

    ctx = FixContext(target=3, error="KeyError: 'Age'", failing_line=1)
    assert plan(0, TARGET, 1) == [("line", 0.0), ("cell", 0.0), ("line", 0.7), ("cell", 0.7), ("line", 1.0),
                                  ("cell", 1.0)]
    assert all(t == 1.0 for _, t in plan(1, TARGET, 1))
    assert plan(0, TARGET, None) == [("cell", 0.0), ("cell", 0.7), ("cell", 1.0)]  # no line known: the cell only
    assert plan(0, "x = 1\n" * 50, 3) == [("line", 0.0), ("line", 0.7), ("line", 1.0)]  # too long to write back
    line = ask(ctx, TARGET, "line", 0.0, ["df: DataFrame 3 rows x 2 columns: age (int64), name (object)"],
               [f"`x{i}` -> raised KeyError" for i in range(5)])
    assert line.temperature == 0.0 and line.max_tokens == 200
    assert [m["role"] for m in line.messages] == ["system", "user"]
    assert line.messages[1]["content"] == (
        f"Cell:\n```python\n{TARGET}\n```\nLine 1 (`mean_age = df[\"Age\"].mean()`) raises:\nKeyError: 'Age'\n\n"
        "Variables:\ndf: DataFrame 3 rows x 2 columns: age (int64), name (object)\n\n"
        "Already tried, and still failing:\n- `x2` -> raised KeyError\n- `x3` -> raised KeyError\n"
        "- `x4` -> raised KeyError\n\n"  # the last three
        "Write line 1 corrected so the cell runs without error. Reply with that line only.")
    cell = ask(ctx, TARGET, "cell", 0.7, [])
    assert cell.messages[1]["content"].endswith("raises:\nKeyError: 'Age'\n\nWrite the whole cell corrected so "
                                                "that it runs without error.")
    assert changed_lines(TARGET, KEYERROR_FIX) == '`mean_age = df["age"].mean()`'


# -- in the loop (the scripted server, a replay sandbox) -----------------------------------------------------

def test_a_stuck_model_asked_for_the_line_alone_fixes_the_cell(model, keyerror_nb):  # noqa: F811
    """Its tool turns send the target's own code back; asked for line 1 alone, a wrong column and then the right
    one: the first runs in the sandbox, fails and is undone, the second runs clean and is accepted."""
    model.reset(tool("edit_cell", "same", cell=3, source=TARGET), default=tool("edit_cell", cell=3, source=TARGET),
                plain=[Turn(text="```python\nmean_age = df['AGE'].mean()\n```\nThis uses the right column."),
                       Turn(text='mean_age = df["age"].mean()')])
    p = start_fix(keyerror_nb, 3, settings_for(model), sandbox_factory=factory)
    assert p.fixed and p.status == "fixed" and p.calls.focused_fixed
    assert [(e.cell, e.new) for e in p.edits] == [(3, KEYERROR_FIX)]
    assert p.calls.focused_requests == 2 and p.calls.focused_tried == 2 and p.calls.usable == 1
    assert len(model.requests) == 1  # one tool turn; the rest were focused asks
    for body in model.plain_requests:
        assert "tools" not in body and "response_format" not in body
        assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert [b["temperature"] for b in model.plain_requests] == [0.0, 0.0]
    first, second = (b["messages"][1]["content"] for b in model.plain_requests)
    assert 'Line 1 (`mean_age = df["Age"].mean()`) raises:\nKeyError' in first
    assert "df: DataFrame 3 rows x 2 columns: age (int64), name (object)" in first  # the column that exists
    # the second ask shows the first change and what it raised
    assert "Already tried, and still failing:\n- `mean_age = df['AGE'].mean()` -> raised KeyError at line 1" in second
    steps = [(s.step, s.action, s.status, s.reflection) for s in p.log]
    assert steps[1:] == [(2, "edit_cell", "error", "CRANE asked the model for line 1 alone (temperature 0)"),
                         (3, "edit_cell", "ok", "CRANE asked the model for cell 3 alone (temperature 0)")]
    assert "KeyError" in p.log[1].result and "accepted" in p.log[2].result
    assert p.evidence is not None and p.evidence.status == "ok"


def test_failed_and_refused_changes_are_undone_and_told_to_the_model(model, keyerror_nb, recording):  # noqa: F811
    model.reset(tool("edit_cell", "same", cell=3, source=TARGET), tool("edit_cell", cell=3, source=KEYERROR_FIX),
                tool("finish", explanation="the column is lower case"),
                plain=[Turn(text="pass"), Turn(text="mean_age = df['AGE'].mean()\nprint(mean_age)")])
    p = start_fix(keyerror_nb, 3, settings_for(model), sandbox_factory=factory)
    assert p.fixed and not p.calls.focused_fixed
    assert p.calls.focused_requests == 6 and p.calls.focused_tried == 1  # `pass` never ran
    assert any("deletes the failing statement" in g for g in p.guard)
    messages = model.requests[1]["messages"]
    assert [m["role"] for m in messages][2:] == ["assistant", "tool"]  # no user message after a tool message
    note = messages[-1]["content"].split("\n\n", 1)[1]  # added to the last tool result
    assert messages[-1]["content"].startswith("error: nothing changed")
    assert note.startswith("CRANE put line 1 of cell 3 to you alone; these changes did not fix it:")
    assert "`pass` -> refused: the edit deletes the failing statement" in note
    assert "`mean_age = df['AGE'].mean()` -> raised KeyError at line 1: 'AGE'" in note
    assert "Cell 3 is as it was" in note
    ran = [e for e in recording.instances[0].events if e != "reset"]
    assert "pass\nprint(mean_age)" not in ran
    # the model's own edit then ran from the cell as it was (the failed change undone)
    assert ran[-1] == KEYERROR_FIX and ran.count("mean_age = df['AGE'].mean()\nprint(mean_age)") == 1


def test_edits_run_one_after_the_other_are_progress_not_a_stuck_model(model, keyerror_nb):  # noqa: F811
    """Edit, run, another edit, run again: the second run repeats the first's call on a changed cell, so it is no
    repeat, and no focused ask interrupts the model."""
    model.reset(tool("edit_cell", cell=3, source="mean_age = df['AGE'].mean()\nprint(mean_age)"),
                tool("execute_cell", cell=3),
                tool("edit_cell", cell=3, source="mean_age = df['ages'].mean()\nprint(mean_age)"),
                tool("execute_cell", cell=3), tool("edit_cell", cell=3, source=KEYERROR_FIX),
                tool("finish", explanation="lower case"))
    p = start_fix(keyerror_nb, 3, settings_for(model), sandbox_factory=factory)
    assert p.fixed and p.steps == 6 and model.plain_requests == [] and p.calls.focused_requests == 0


def test_a_change_that_kills_the_sandbox_kernel_is_undone_and_the_run_goes_on(model, keyerror_nb):  # noqa: F811
    deadly = 'mean_age = df["Age"].mean() if __import__("os")._exit(1) else 0'
    model.reset(tool("edit_cell", "same", cell=3, source=TARGET), tool("edit_cell", cell=3, source=KEYERROR_FIX),
                tool("finish", explanation="lower case"), plain=[Turn(text=deadly)])
    p = start_fix(keyerror_nb, 3, settings_for(model), sandbox_factory=factory)
    assert p.fixed and not p.calls.focused_fixed and p.calls.focused_tried == 1
    assert p.log[1].code.startswith(deadly) and p.log[1].status == "error"
    assert [(e.cell, e.new) for e in p.edits] == [(3, KEYERROR_FIX)]  # the deadly change undone
    assert p.evidence is not None and p.evidence.status == "ok"


def test_the_other_variables_let_a_name_error_be_fixed(model, tmp_path):
    """The cell reads `age`, which nothing bound; the notebook's cells bound `ages` (and `df`), which the cell does
    not use: the focused ask shows them, with their types, and the change that uses `ages` is accepted."""
    nb = load_notebook(write_notebook(tmp_path / "names.ipynb", [
        code('import pandas as pd\ndf = pd.DataFrame({"age": [30, 40, 50]})\nages = df["age"]\n_tmp = 1', 1),
        code("def helper(x):\n    return x", 2),
        code("m = age.mean()\nprint(m)", None),
    ]))
    model.reset(tool("edit_cell", "same", cell=3, source="m = age.mean()\nprint(m)"),
                plain=[Turn(text="m = ages.mean()")])
    p = start_fix(nb, 3, settings_for(model), sandbox_factory=factory)
    assert p.fixed and p.calls.focused_fixed and p.edits[0].new == "m = ages.mean()\nprint(m)"
    text = model.plain_requests[0]["messages"][1]["content"]
    shown = text.split("Variables:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    # data first, then callables; no import, no `_tmp`, no columns for variables the cell does not use
    assert shown == ["df: DataFrame 3 rows x 1 columns", "ages: Series (int64) 3 values: 30, 40, 50",
                     "helper: function(x)"]


def test_variables_in_words_cell_names_first_then_models_then_data():
    from crane.probe.facts import ColumnFacts, EstimatorFacts, Facts, ProbeResult

    used = ProbeResult(facts={"y_test": Facts(name="y_test", type="pandas.core.series.Series", kind="series",
                                              dtype="float64", shape=[79]),
                              "np": Facts(name="np", type="module", kind="module")})
    tree = EstimatorFacts(module="sklearn.tree._classes", class_name="DecisionTreeRegressor", is_fitted=True,
                          n_features_in=24)
    others = ProbeResult(facts={
        "X_test": Facts(name="X_test", type="pandas.core.frame.DataFrame", kind="dataframe", shape=[79, 24],
                        columns=[ColumnFacts(name="km", dtype="int64")]),
        "helper": Facts(name="helper", type="function", kind="function"),
        "model": Facts(name="model", type="sklearn.tree._classes.DecisionTreeRegressor", kind="estimator",
                       estimator=tree),
        "n": Facts(name="n", type="builtins.int", kind="scalar", value="5")})
    assert variable_lines(used, others, ["X_test", "helper", "model", "n", "gone"]) == [
        "y_test: Series (float64) 79 values", "model: DecisionTreeRegressor (fitted, 24 features)",
        "X_test: DataFrame 79 rows x 24 columns", "helper: function()", "n: int = 5"]
    assert plain_line("X_test", others.facts["X_test"]) == "X_test: DataFrame 79 rows x 24 columns: km (int64)"
    arr = Facts(name="a", type="numpy.ndarray", kind="ndarray", dtype="object", shape=[200, 12])
    assert plain_line("a", arr) == "a: numpy array (object) shape (200, 12)"


def test_in_step_mode_a_focused_change_waits_for_the_go_ahead(model, keyerror_nb, recording):  # noqa: F811
    seen = []

    def gate(step):
        seen.append(step)
        return not step.reflection.startswith("CRANE asked")  # the user stops at the focused change

    model.reset(tool("edit_cell", "same", cell=3, source=TARGET), plain=[Turn(text='mean_age = df["age"].mean()')])
    p = start_fix(keyerror_nb, 3, settings_for(model), sandbox_factory=factory, step_gate=gate)
    assert p.status == "stopped" and not p.fixed and not p.edits
    assert seen[-1].phase == "proposed" and seen[-1].code == KEYERROR_FIX and seen[-1].cell == 3
    assert KEYERROR_FIX not in recording.instances[0].events  # never ran


def test_the_tool_call_rate_leaves_the_focused_asks_out():
    results = [FixCaseResult(case="a", variant="buggy", target=3, requests=8, focused_requests=6,
                             turns_without_call=0, usable_calls=2),
               FixCaseResult(case="b", variant="buggy", target=2, requests=2, turns_without_call=1, usable_calls=1)]
    s = summarize(results)
    assert s.focused_requests == 6 and s.tool_call_rate == pytest.approx(1 - 1 / 4)


# -- the real exchange (Qwen2.5-Coder-0.5B, llama-cpp-python, 2026-11-29) ------------------------------------

REAL = Path(__file__).resolve().parents[1] / "llm" / "replies" / "qwen2.5-coder-0.5b-focused-2026-11-29.jsonl"
NB18 = Path(__file__).resolve().parents[3] / "shared" / "bench" / "junobench-lite" / "NBspecific_18" / "buggy.ipynb"


def test_the_recorded_focused_reply_fixes_a_cell_the_offline_search_did_not(model):
    """NBspecific_18: `y_pred` was bound in a raw cell that never ran, so the metric cell raises NameError and the
    offline search finds nothing. The model's tool turn sent the cell back unchanged; asked for line 2 alone it
    wrote `model.predict(X_test)` in place of `y_pred`. Replayed: the same question is asked (the cell, the line,
    the variables in words) and the recorded reply, run in a real replay kernel, is a verified fix."""
    if not REAL.exists() or not NB18.exists():
        pytest.skip("the recorded exchange or the bench notebook is not here")
    turn, focused_reply = (json.loads(line) for line in REAL.read_text().splitlines())
    model.reset(Turn(text=turn["response"]["choices"][0]["message"]["content"]),
                plain=[Turn(text=focused_reply["response"]["choices"][0]["message"]["content"])])
    p = start_fix(load_notebook(NB18), 19, settings_for(model))
    assert p.fixed and p.calls.focused_fixed and p.steps == 2
    assert p.edits[0].new.splitlines()[1] == "mae = mean_absolute_error(y_test, model.predict(X_test))"
    assert p.evidence is not None and p.evidence.status == "ok" and p.evidence.sandbox == "replay"
    sent = model.plain_requests[0]["messages"][1]["content"]
    recorded = focused_reply["request"]["messages"][1]["content"]
    assert sent.split("\n\nVariables:")[0] == recorded.split("\n\nVariables:")[0]  # the cell, the line, the error
    names = [line.split(":")[0] for line in sent.split("Variables:\n")[1].split("\n\n")[0].splitlines()]
    assert names == ["y_test", "model", "X_train", "X_test", "X"]  # the cell's name, the model, then the data
