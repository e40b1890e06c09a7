"""`crane fix` end to end (scripted model over HTTP, replay sandbox kernel) and the fix bench on a tiny
synthetic bench set."""

from __future__ import annotations

import json

import msgspec

from crane.cli import main
from crane.notebook.model import load_notebook

from .conftest import KEYERROR_CELLS, KEYERROR_FIX, MODEL, code, settings_for, write_notebook
from .fake_agent_server import tool


def script_keyerror_fix(server):
    server.reset(tool("inspect", "which columns?", expression="df.columns.tolist()"),
                 tool("edit_cell", "lower-case column", cell=3, source=KEYERROR_FIX),
                 tool("finish", "clean", explanation="The column is 'age'."))


def cli(server, *args):
    return main(["fix", *map(str, args), "--model", MODEL, "--api-base", server.api_base])


def test_without_apply_or_out_the_diff_is_printed_and_nothing_changes(model, tmp_path, capsys):
    path = write_notebook(tmp_path / "ages.ipynb", KEYERROR_CELLS)
    before = path.read_bytes()
    listing = sorted(p.name for p in tmp_path.iterdir())
    script_keyerror_fix(model)
    assert cli(model, path, "--cell", 3) == 0
    out, err = capsys.readouterr()
    assert '-mean_age = df["Age"].mean()\n+mean_age = df["age"].mean()' in out
    assert "cell 3: fixed: 1 cell edit(s)" in out and "nothing written" in out
    assert "[1] inspect: which columns?" in err and "[2] edit_cell cell 3" in err
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == listing


def test_out_writes_the_fixed_notebook_and_json_reports_it(model, tmp_path, capsys):
    path = write_notebook(tmp_path / "ages.ipynb", KEYERROR_CELLS)
    before = path.read_bytes()
    fixed = tmp_path / "fixed.ipynb"
    script_keyerror_fix(model)
    assert cli(model, path, "--cell", 3, "--out", fixed, "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["schema"] == "crane.fix/1" and report["written"] == str(fixed)
    assert report["proposal"]["fixed"] is True and report["proposal"]["steps"] == 3
    assert report["proposal"]["usage"]["promptTokens"] == 3600
    assert path.read_bytes() == before
    out = fixed.read_bytes()
    assert load_notebook(fixed).cell(3).source == KEYERROR_FIX
    assert out.replace(b'\\"age\\"].mean', b'\\"Age\\"].mean') == before  # nothing else differs


def test_apply_edits_in_place_and_a_failed_run_writes_nothing(model, tmp_path, capsys):
    path = write_notebook(tmp_path / "ages.ipynb", KEYERROR_CELLS)
    before = path.read_bytes()
    model.reset(default=tool("inspect", "hmm", expression="1"))
    assert cli(model, path, "--cell", 3, "--apply", "--max-steps", 2) == 1
    out, err = capsys.readouterr()
    # issue 22 (defect 6): the model found nothing, but the verified quick fixes are offered, not "nothing"
    assert "the agent found no fix, but 1 verified quick fix(es) exist" in err and path.read_bytes() == before
    assert "CRANE verified these quick fixes in the sandbox:\n  1. " in out and "--offline --pick K" in out
    script_keyerror_fix(model)
    assert cli(model, path, "--cell", 3, "--apply") == 0
    assert load_notebook(path).cell(3).source == KEYERROR_FIX


def test_cli_input_errors(model, tmp_path, capsys):
    path = write_notebook(tmp_path / "ages.ipynb", KEYERROR_CELLS)
    assert cli(model, path, "--cell", 9) == 2
    assert "cell 9 does not exist" in capsys.readouterr().err
    assert cli(model, path, "--cell", 1) == 2  # markdown
    assert main(["fix", str(path), "--cell", "3"]) == 2
    assert "needs a model" in capsys.readouterr().err
    assert model.requests == []


def _synthetic_fix_bench(tmp_path):
    bench = tmp_path / "bench"
    for case_id, cells, target in [("ages", KEYERROR_CELLS, 3),
                                   ("never_fixed", [code("y = [1]", 1), code("print(y[3])", None)], 2)]:
        d = bench / case_id
        d.mkdir(parents=True)
        write_notebook(d / "buggy.ipynb", cells)
        write_notebook(d / "fixed.ipynb", cells)
        (d / "case.json").write_text(json.dumps({
            "id": case_id, "library": "pandas", "root_cause": "data confusion",
            "variants": {"buggy": {"notebook": "buggy.ipynb", "target_cell": target,
                                   "expect": {"crash": True, "ename": "KeyError"}},
                         "fixed": {"notebook": "fixed.ipynb", "target_cell": target, "expect": {"crash": False}}}}))
    return bench


def _script_fix_bench(model):
    def by_case(body):
        text = body["messages"][1]["content"]
        n = sum(1 for m in body["messages"] if m["role"] == "tool")
        if "mean_age" in text:
            return [tool("edit_cell", "fix", cell=3, source=KEYERROR_FIX), tool("finish", "ok", explanation="x")][n]
        # the other case: an edit the guard refuses, then a give-up
        return [tool("edit_cell", "hide", cell=2, source="try:\n    print(y[3])\nexcept IndexError:\n    pass"),
                tool("finish", "done?", explanation="?")][min(n, 1)]

    model.reset(default=by_case)


def test_fix_bench_scores_a_synthetic_bench_set(model, tmp_path):
    from crane.bench.cases import find_cases
    from crane.bench.fix import render_text, run_fix_bench

    bench = _synthetic_fix_bench(tmp_path)
    _script_fix_bench(model)
    from crane.agent.loop import AgentBudget

    report = run_fix_bench(find_cases([str(bench)]), settings_for(model), budget=AgentBudget(max_steps=3))
    assert [r.case for r in report.results] == ["ages", "never_fixed"]  # buggy variants only
    ages, never = report.results
    assert ages.fixed and ages.replay_status == "ok" and ages.guard_ok and ages.steps == 2 and ages.edits == 1
    assert ages.prompt_tokens == 2400 and ages.seconds > 0
    assert not never.fixed and never.agent_status == "not-fixed" and never.edits == 0 and never.steps == 3
    s = report.summary
    assert (s.cases, s.fixed, s.fix_rate) == (2, 1, 0.5) and s.input_tokens_per_fixed == s.prompt_tokens / 1
    assert s.cost_usd is None  # unpriced model
    text = render_text(report)
    assert "fixed 1/2 (fix rate 0.500)" in text and "ages/buggy" in text
    # issue 32: the offline search ran first and its verified fixes were offered to the agent
    assert ages.offline_fixes is not None and never.offline_fixes is not None
    assert s.fixed_without_offline == (1 if ages.offline_fixes == 0 else 0)
    assert "fixed where the offline search found no verified fix:" in text
    # the stuck case got focused asks (code wanted, no tool call): they are not tool-call turns without a call
    assert never.focused_requests > 0 and ages.focused_requests == 0
    assert s.focused_requests == never.focused_requests and s.tool_call_rate == 1.0
    assert f"focused asks (the failing line put to the model alone): {never.focused_requests}" in text
    msgspec.json.encode(report)  # JSON-ready


def test_crane_bench_fix_command(model, tmp_path, capsys):
    bench = _synthetic_fix_bench(tmp_path)
    _script_fix_bench(model)
    rc = main(["bench", str(bench), "--fix", "--model", MODEL, "--api-base", model.api_base,
               "--max-steps", "3", "--json", "--quiet", "--no-offline-first"])
    assert rc == 0
    rep = json.loads(capsys.readouterr().out)
    assert [r["case"] for r in rep["results"]] == ["ages", "never_fixed"]
    assert rep["summary"]["fixed"] == 1 and rep["summary"]["cases"] == 2
    assert all("offlineFixes" not in r for r in rep["results"])  # --no-offline-first: not searched
    assert main(["bench", str(bench), "--fix"]) == 2  # no model: a clear usage error


def test_with_a_model_the_agent_starts_from_the_verified_quick_fixes(model, tmp_path, capsys):
    """The verified quick fixes are searched first and given to the model: it applies one and finishes (two
    steps, where exploring took three)."""
    path = write_notebook(tmp_path / "ages.ipynb", KEYERROR_CELLS)
    model.reset(tool("edit_cell", "apply the verified candidate 1", cell=3, source=KEYERROR_FIX.replace('"', "'")),
                tool("finish", "clean", explanation="Use column 'age' (verified)."))
    assert cli(model, path, "--cell", 3, "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["proposal"]["fixed"] is True and report["proposal"]["steps"] == 2
    context = model.requests[0]["messages"][1]["content"]
    assert "## Verified candidate fixes" in context
    assert "1. Use column 'age'" in context and "mean_age = df[\"age\"].mean()" in context
