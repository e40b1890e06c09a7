"""Issue 32: a local model server is held to one usable tool call per reply. Where the server turns a schema into
a grammar, the agent asks it to: llama-cpp-python gets `response_format` with the call schema (one
`{"name", "arguments"}` object whose cell numbers are the notebook's), llama.cpp's llama-server, vLLM and LM Studio
get `tool_choice: "required"`, Ollama the schema once its model wrote a call as text. A server that rejects it is
asked again without it. A model that repeats itself is told that nothing changed, and sampled until it sends
something new. Real HTTP to the scripted server (tests/agent/fake_agent_server.py), real replay sandbox.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from crane.agent.loop import STUCK_TEMPERATURE, start_fix
from crane.agent.model_call import parse_text_tool_calls
from crane.agent.tools import TOOLS, call_schema, tools_for
from crane.llm import local_server

from .conftest import RecordingSandbox, settings_for
from .fake_agent_server import Turn, tool
from .test_agent_replies import MULTILINE, keyerror_nb  # noqa: F401 (a fixture)

RECORDED = Path(__file__).resolve().parents[1] / "llm" / "replies" / "qwen2.5-coder-0.5b-agent-2026-11-28.jsonl"
LLAMA_CPP_PYTHON = {"/openapi.json": {"openapi": "3.1.0", "info": {"title": "🦙 llama.cpp Python API"}}}
LLAMA_SERVER = {"/props": {"default_generation_settings": {"n_ctx": 8192}}}
OLLAMA = {"/api/version": {"version": "0.12.0"}}


@pytest.fixture(autouse=True)
def fresh_detection():
    """What was detected about the session's one test server (its api_base) must not leak between tests."""
    local_server.forget()
    yield
    local_server.forget()


def factory(nb):
    return RecordingSandbox(nb)


def as_text_call(name: str, **args) -> Turn:
    """A reply as a grammar-held llama-cpp-python model writes it: the call object as the message text."""
    return Turn(text=json.dumps({"name": name, "arguments": {"reflection": "r", **args}}))


def call_object(text: str) -> dict:
    [call] = parse_text_tool_calls(text)
    return {"name": call.name, "arguments": json.loads(call.arguments)}


# -- the schema (no server) ----------------------------------------------------------------------------------

def test_the_cell_parameters_name_only_cells_the_run_can_have():
    tools = {t["function"]["name"]: t["function"]["parameters"]["properties"] for t in tools_for([2, 3, 5], 6, 2)}
    assert tools["edit_cell"]["cell"]["enum"] == [2, 3, 5, 7, 8]  # code cells, then the two additions' numbers
    assert tools["execute_cell"]["cell"]["enum"] == [2, 3, 5, 7, 8]
    assert tools["add_cell"]["after"]["enum"] == [0, 1, 2, 3, 4, 5, 6, 7, 8]
    assert "enum" not in TOOLS[0]["function"]["parameters"]["properties"]["cell"]  # the shared list is untouched


def test_the_recorded_unusable_calls_are_outside_the_schema_and_a_right_call_inside():
    """Qwen2.5-Coder-0.5B's recorded calls (2026-11-28, llama-cpp-python, no constraint): `add_cell` with `cell`
    for the required `after`, and `edit_cell` of cell 7 in a notebook of 6 cells. Under the call schema (which the
    server enforces as a grammar) neither can be written; a usable call can."""
    if not RECORDED.exists():
        pytest.skip(f"the replies are not here: {RECORDED}")
    replies = [json.loads(line) for line in RECORDED.read_text().splitlines()]
    texts = [r["response"]["choices"][0]["message"]["content"] for r in replies]
    schema = call_schema(tools_for([1, 2, 3, 4, 5, 6], 6, 0))  # the cells that exist (the per-turn schema)
    for text in texts:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(call_object(text), schema)
    jsonschema.validate({"name": "add_cell", "arguments": {"reflection": "r", "after": 2, "source": "x = 1"}},
                        schema)
    jsonschema.validate({"name": "edit_cell", "arguments": {"reflection": "r", "cell": 6, "source": "x = 1"}},
                        schema)
    jsonschema.validate({"name": "finish", "arguments": {"reflection": "r", "explanation": "done"}}, schema)


# -- through the server --------------------------------------------------------------------------------------

def test_llama_cpp_python_is_held_to_the_call_schema_and_its_text_calls_are_used(model, keyerror_nb):  # noqa: F811
    model.reset(as_text_call("edit_cell", cell=3, source=MULTILINE), as_text_call("finish", explanation="case"))
    model.get_routes.update(LLAMA_CPP_PYTHON)
    p = start_fix(keyerror_nb, 3, settings_for(model), sandbox_factory=factory)
    assert p.fixed and p.calls.usable == 2 and not p.calls.lost
    names = [[alt["properties"]["name"]["const"] for alt in b["response_format"]["schema"]["anyOf"]]
             for b in model.requests]
    # finish only once something changed (before, it is always refused)
    assert names == [["edit_cell", "add_cell", "execute_cell", "inspect"], [t["function"]["name"] for t in TOOLS]]
    for body in model.requests:
        fmt = body["response_format"]
        assert fmt["type"] == "json_object"  # llama-cpp-python's dialect (json_schema is an HTTP 500 there)
        edit = fmt["schema"]["anyOf"][0]["properties"]["arguments"]["properties"]["cell"]
        assert edit["enum"] == [2, 3]  # the notebook's code cells now (cell 1 is markdown; nothing added yet)
        assert body.get("tool_choice", "auto") == "auto"
    # the earlier call goes back as the text the model wrote, not as `tool_calls` whose string `arguments` Qwen2.5's
    # template would encode a second time (llama-cpp-python refuses them as objects: HTTP 500)
    [earlier] = [m for m in model.requests[1]["messages"] if m.get("role") == "assistant"]
    assert "tool_calls" not in earlier
    assert json.loads(earlier["content"]) == {"name": "edit_cell",
                                              "arguments": {"reflection": "r", "cell": 3, "source": MULTILINE}}


def test_llama_server_is_asked_for_a_required_tool_call(model, keyerror_nb):  # noqa: F811
    model.reset(tool("edit_cell", cell=3, source=MULTILINE), tool("finish", explanation="case"))
    model.get_routes.update(LLAMA_SERVER)
    p = start_fix(keyerror_nb, 3, settings_for(model), sandbox_factory=factory)
    assert p.fixed and p.calls.usable == 2
    assert [b.get("tool_choice") for b in model.requests] == ["required", "required"]
    assert all("response_format" not in b for b in model.requests)


def test_a_server_that_rejects_the_constraint_is_asked_again_without_it(model, keyerror_nb):  # noqa: F811
    rejected = Turn(error=(400, {"error": {"message": "tool_choice 'required' is not supported", "code": 400}}))
    model.reset(rejected, tool("edit_cell", cell=3, source=MULTILINE), tool("finish", explanation="case"))
    model.get_routes.update(LLAMA_SERVER)
    p = start_fix(keyerror_nb, 3, settings_for(model), sandbox_factory=factory)
    assert p.fixed and p.steps == 2 and not p.calls.lost
    assert [b.get("tool_choice") for b in model.requests] == ["required", "auto", "auto"]  # remembered


def test_ollama_gets_the_schema_once_its_model_wrote_a_call_as_text(model, keyerror_nb):  # noqa: F811
    model.reset(as_text_call("edit_cell", cell=3, source=MULTILINE), as_text_call("finish", explanation="case"))
    model.get_routes.update(OLLAMA)
    p = start_fix(keyerror_nb, 3, settings_for(model), sandbox_factory=factory)
    assert p.fixed
    first, second = model.requests
    assert "response_format" not in first and first.get("tool_choice") == "auto"
    assert second["response_format"]["type"] == "json_schema"
    assert second["response_format"]["json_schema"]["schema"]["anyOf"][0]["properties"]["name"] == {
        "const": "edit_cell"}


def test_an_unknown_server_and_structured_none_are_not_constrained(model, keyerror_nb):  # noqa: F811
    model.reset(tool("edit_cell", cell=3, source=MULTILINE), tool("finish", explanation="case"))
    assert start_fix(keyerror_nb, 3, settings_for(model), sandbox_factory=factory).fixed
    sent = list(model.requests)
    model.reset(tool("edit_cell", cell=3, source=MULTILINE), tool("finish", explanation="case"))
    model.get_routes.update(LLAMA_CPP_PYTHON)
    local_server.forget()
    assert start_fix(keyerror_nb, 3, settings_for(model, structured="none"), sandbox_factory=factory).fixed
    for body in sent + model.requests:
        assert body.get("tool_choice") == "auto" and "response_format" not in body
        assert body["tools"][0]["function"]["parameters"]["properties"]["cell"]["enum"] == [2, 3, 4, 5, 6, 7, 8,
                                                                                           9, 10, 11, 12, 13]


# -- a model that repeats itself -----------------------------------------------------------------------------

def test_an_edit_that_changes_nothing_says_so_and_names_the_line_that_raises(model, keyerror_nb):  # noqa: F811
    same = 'mean_age = df["Age"].mean()\nprint(mean_age)'  # the target's own source (Qwen2.5-Coder-0.5B, seaborn_6)
    relaid = 'mean_age = df[ "Age" ].mean()  # the mean\n\nprint( mean_age )'  # the same code (sklearn_5)
    model.reset(tool("edit_cell", "first", cell=3, source=same), tool("edit_cell", "again", cell=3, source=same),
                tool("edit_cell", cell=3, source=relaid), tool("add_cell", after=3, source="  \n"),
                tool("edit_cell", cell=3, source=MULTILINE), tool("finish", explanation="case"))
    p = start_fix(keyerror_nb, 3, settings_for(model), sandbox_factory=factory)
    assert p.fixed
    first = model.observations(1)[-1]
    assert first.startswith("error: nothing changed: cell 3 already has this code.")
    assert 'Line 1 (`mean_age = df["Age"].mean()`) is the one that raises' in first
    assert model.observations(3)[-1].startswith("error: nothing changed: cell 3 already has this code.")
    assert model.observations(4)[-1].startswith("error: nothing added: the new cell's `source` is empty.")
    assert not p.additions
    temperatures = [b.get("temperature") for b in model.requests]
    # the second turn repeated the first's action (its reflection reworded): the third request is sampled
    assert temperatures == [0.0, 0.0, STUCK_TEMPERATURE, 0.0, 0.0, 0.0]


# Qwen2.5-Coder-0.5B's second edit of sklearn_5 (2026-11-29, llama-cpp-python, its history shown with the
# arguments encoded twice): the source with `\\n` for line breaks and the call's JSON tail inside the string
ESCAPED_TWICE = ('from sklearn import metrics\\nconfusion_matrix = metrics.confusion_matrix(y_test , y_pred)\\n'
                 'cm_display = metrics.ConfusionMatrixDisplay(confusion_matrix = confusion_matrix , '
                 'display_labels=[False,True])\\ncm_display.plot()\\nplt.show()"}}\n{')


def test_a_source_escaped_twice_is_read_as_the_code_it_escapes():
    from crane.agent.lenient import source_text

    code = source_text(ESCAPED_TWICE)
    assert code.splitlines() == [
        "from sklearn import metrics", "confusion_matrix = metrics.confusion_matrix(y_test , y_pred)",
        "cm_display = metrics.ConfusionMatrixDisplay(confusion_matrix = confusion_matrix , "
        "display_labels=[False,True])", "cm_display.plot()", "plt.show()"]
    # Python stays as it is: an escape inside a string literal, or text that is not code either way
    assert source_text('print("a\\nb")') == 'print("a\\nb")'
    assert source_text("a\\nb c") == "a\\nb c"
    assert source_text("df = df.dropna()\\n%time df.describe()") == "df = df.dropna()\n%time df.describe()"


def test_an_edit_escaped_twice_arrives_as_code(model, keyerror_nb):  # noqa: F811
    escaped = MULTILINE.replace("\n", "\\n") + '"}}'
    model.reset(tool("edit_cell", cell=3, source=escaped), tool("finish", explanation="case"))
    p = start_fix(keyerror_nb, 3, settings_for(model), sandbox_factory=factory)
    assert p.fixed and p.edits[0].new == MULTILINE


def test_hosted_models_get_the_plain_tools(keyerror_nb):  # noqa: F811
    """Cell enums only where a local server's grammar holds the reply to them: Gemini takes string enums only."""
    from crane.agent.loop import AgentRun
    from crane.llm.settings import LLMSettings

    hosted = AgentRun(keyerror_nb, 3, LLMSettings(model="gemini/gemini-2.0-flash"), sandbox=None)  # type: ignore[arg-type]
    assert hosted.tools == TOOLS
    local = AgentRun(keyerror_nb, 3, LLMSettings(model="openai/m", api_base="http://127.0.0.1:1/v1"),
                     sandbox=None)  # type: ignore[arg-type]
    assert local.tools[0]["function"]["parameters"]["properties"]["cell"]["enum"][:2] == [2, 3]


# Qwen2.5-Coder-0.5B held to the call schema by llama-cpp-python (2026-11-29, `llm_local_bench.py --fix`): seaborn_6's
# first turn, and seaborn_4's, whose reflection quotes code in ```python and ```json fences (all 6 of its turns
# were lost: the fences inside the string were taken for the call)
RECORDED_HELD = RECORDED.with_name("qwen2.5-coder-0.5b-agent-2026-11-29.jsonl")


def test_a_grammar_held_reply_is_read_whole_though_its_strings_hold_fences():
    if not RECORDED_HELD.exists():
        pytest.skip(f"the replies are not here: {RECORDED_HELD}")
    replies = [json.loads(line) for line in RECORDED_HELD.read_text().splitlines()]
    assert all(r["request"]["response_format"]["type"] == "json_object" for r in replies)
    first, fenced = (r["response"]["choices"][0]["message"]["content"] for r in replies)
    assert call_object(first)["arguments"]["cell"] == 5
    assert "```python" in fenced and "```json" in fenced
    [call] = parse_text_tool_calls(fenced)
    args = json.loads(call.arguments)
    assert call.name == "edit_cell" and args["cell"] == 3 and args["source"].startswith("df = df.drop(columns=[")


def test_a_rejection_is_remembered_for_a_server_without_an_api_base():
    """An Ollama model with no api_base is local and may be held to the schema; its rejection must stick too."""
    assert local_server.takes_constraint(None)
    local_server.mark_no_constraint(None)
    assert not local_server.takes_constraint(None) and not local_server.takes_constraint("")
