"""`crane diagnose` end to end: a real notebook, a real replay kernel, litellm over HTTP to the fake server."""

from __future__ import annotations

import json

import pytest

from crane.cli import main

from .fake_llm_server import Reply

CODE = ["import pandas as pd", "df = pd.DataFrame({'age': [31.0, None, 40.0], 'name': ['a', 'b', 'c']})",
        "unrelated = [1, 2, 3]\nprint(unrelated)", "# the target\nmean_age = df['Age'].mean()\nprint(mean_age)"]


def write_notebook(path, counts, error=None):
    cells = []
    for src, count in zip(CODE, counts, strict=False):
        outputs = []
        if error and count == counts[-1]:
            outputs = [{"output_type": "error", "ename": "KeyError", "evalue": "'Age'",
                        "traceback": ["\x1b[31mKeyError\x1b[0m Traceback (most recent call last)", "KeyError: 'Age'"]}]
        cells.append({"cell_type": "code", "source": src, "execution_count": count, "metadata": {},
                      "outputs": outputs})
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {"language_info": {"name": "python"}}, "cells": cells}
    path.write_text(json.dumps(nb))
    return str(path)


@pytest.fixture
def notebook(tmp_path):
    return write_notebook(tmp_path / "nb.ipynb", [1, 2, 3, None])


def test_with_a_model_over_http(notebook, llm_server, capsys):
    code = main(["diagnose", notebook, "--cell", "4", "--model", "openai/gpt-4o-mini", "--api-base",
                 llm_server.api_base])
    out = capsys.readouterr().out
    assert code == 1
    assert "cell 4: will crash: KeyError at line 2 (missing-key, confidence" in out.splitlines()[0]
    assert "rules: line 2: KeyError" in out
    # the model agrees (and the probe verified the key missing): its part is shown, marked as the model's
    flat = " ".join(out.split())
    assert "openai/gpt-4o-mini (checked against the runtime facts; confidence 0.90, root cause: data confusion)" in flat
    assert "openai/gpt-4o-mini's suggested fix: use df['age']" in flat
    assert "model openai/gpt-4o-mini: 1,000 prompt + 100 completion tokens $0.00021" in out
    (req,) = llm_server.requests
    user = req["body"]["messages"][1]["content"]
    # runtime facts from the replayed kernel, compact, with the missing column checked
    assert "df: DataFrame 3x2, NaN in 1 cols @In[2]" in user
    assert "age:float64{31,40} NaN=1 name:object{a,b,c}" in user
    assert "keys: df['Age'] MISSING" in user
    # history trimmed to what defines df; the target numbered with its original lines
    assert "df = pd.DataFrame(" in user and "unrelated" not in user
    assert "2| mean_age = df['Age'].mean()" in user and "# the target" not in user
    # a second identical run is served from the cache
    code = main(["diagnose", notebook, "--cell", "4", "--model", "openai/gpt-4o-mini", "--api-base",
                 llm_server.api_base, "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1 and len(llm_server.requests) == 1
    d = report["diagnosis"]
    assert report["schema"] == "crane.diagnose/1" and d["mode"] == "llm" and d["cached"] is True
    assert d["verdict"]["source"] == "llm" and d["verdict"]["ename"] == "KeyError" and d["verdict"]["line"] == 2
    assert d["usage"] == {"promptTokens": 1000, "completionTokens": 100, "cachedTokens": 0,
                          "costUsd": pytest.approx(0.00021), "model": "openai/gpt-4o-mini"}
    assert "**CRANE: cell 4 will crash**" in d["markdown"]


def test_a_cell_that_already_failed_sends_its_traceback(tmp_path, llm_server, capsys, monkeypatch):
    nb = write_notebook(tmp_path / "failed.ipynb", [1, 2, 5, 3], error=True)  # cell 3 ran after the target
    monkeypatch.setenv("CRANE_MODEL", "openai/crane-local-test-model")
    monkeypatch.setenv("CRANE_API_BASE", llm_server.api_base)
    code = main(["diagnose", nb, "--cell", "4", "--no-kernel", "--json"])
    report = json.loads(capsys.readouterr().out)  # stdout holds the JSON report and nothing else
    assert code == 1 and report["diagnosis"]["usage"]["costUsd"] is None
    assert report["diagnosis"]["usage"]["promptTokens"] == 1000 and report["diagnosis"]["cached"] is False
    assert "cost unknown (model not priced)" in report["diagnosis"]["markdown"]
    user = llm_server.requests[0]["body"]["messages"][1]["content"]
    assert "## It already failed with" in user and user.rstrip().endswith("KeyError: 'Age'")
    assert "\x1b" not in user
    assert "In[5]" not in user  # history: only the cells that ran before it (counts 1, 2)


def test_offline_without_a_model(notebook, llm_server, capsys):
    code = main(["diagnose", notebook, "--cell", "4", "--no-kernel"])
    out = capsys.readouterr().out
    assert "no model configured" in out
    assert code in (0, 1) and llm_server.requests == []


def test_model_errors_exit_2_with_a_clear_message(notebook, llm_server, capsys):
    llm_server.reset(Reply.error(401, "bad key"))
    code = main(["diagnose", notebook, "--cell", "4", "--no-kernel", "--model", "openai/gpt-4o-mini",
                 "--api-base", llm_server.api_base, "--no-cache"])
    captured = capsys.readouterr()
    err, out = captured.err, captured.out
    assert "crane: LLM error:" in err and "refused the credentials" in err
    # issue 32: the failed call is a note; the rules' diagnosis is the result (and its exit code)
    assert code == (1 if "will crash" in out.splitlines()[0] else 0)
    assert "(offline rules)" in out.splitlines()[0] and "note: the model failed" in out


def test_bad_input_exit_2(notebook, capsys):
    assert main(["diagnose", notebook, "--cell", "9"]) == 2
    assert "cell 9 does not exist" in capsys.readouterr().err
    assert main(["diagnose", notebook, "--cell", "1", "--api-base", "localhost:1"]) == 2
    assert "api base must be an http" in capsys.readouterr().err
