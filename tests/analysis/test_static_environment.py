"""Without a kernel, CRANE's own environment is one more source of facts: the rules run once, and the two that can
judge from it (missing-module, missing-file) do so with lower confidence and say where they looked."""

from __future__ import annotations

import crane.pipeline as pipeline
from crane.analysis.cell import analyze_cell
from crane.pipeline import ModuleLookup, StaticEnvironment, check_cell

CELL = "import json\nimport crane_no_such_module_xyz\nwith open('present.csv') as f:\n    f.read()\nopen('absent.csv').read()\n"


def test_no_kernel_findings_come_from_the_environment_in_one_rules_pass(tmp_path, monkeypatch):
    (tmp_path / "present.csv").write_text("a\n1\n")
    passes: list[int] = []
    real = pipeline.predict

    def counted(*a, **k):
        passes.append(1)
        return real(*a, **k)

    monkeypatch.setattr(pipeline, "predict", counted)
    check = check_cell(analyze_cell(CELL), None, None, 1, StaticEnvironment(str(tmp_path), ModuleLookup()))
    assert len(passes) == 1
    assert check.mode == "static"
    by_rule = {f.rule: f for f in check.findings}
    assert set(by_rule) == {"missing-module", "missing-file"}, check.findings
    module = by_rule["missing-module"]
    assert module.message == ("No module named 'crane_no_such_module_xyz' (looked up in CRANE's environment: no "
                              "kernel attached)")
    assert module.confidence == 0.7 and module.line == 2
    file = by_rule["missing-file"]
    assert "'absent.csv'" in file.message and str(tmp_path) in file.message and file.line == 5
    assert file.confidence == 0.8
    assert file.evidence[0].endswith("(relative to the notebook's folder; no kernel attached)")


def test_without_an_environment_nothing_is_judged_from_it():
    check = check_cell(analyze_cell(CELL), None, None, 1)
    assert [f for f in check.findings if f.rule in ("missing-module", "missing-file")] == []


def test_kernel_facts_are_not_mixed_with_the_environment(tmp_path):
    """A kernel's answer (even an empty one) is what the rules judge from; the environment is not asked."""
    from crane.pipeline import FactsAnswer
    from crane.probe.facts import ProbeResult

    asked = []

    class Env(StaticEnvironment):
        def facts(self, request):
            asked.append(request)
            return super().facts(request)

    live = lambda request: FactsAnswer(ProbeResult(modules={"crane_no_such_module_xyz": True}), "live")  # noqa: E731
    check = check_cell(analyze_cell(CELL), live, None, 1, Env(str(tmp_path), ModuleLookup()))
    assert asked == [] and not [f for f in check.findings if f.rule == "missing-module"]
