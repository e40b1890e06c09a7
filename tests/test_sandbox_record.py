"""The sandbox's verdict is one record, `crane.sandbox.verdict.SandboxVerdict`, nested as it is in every message
that carries it: `crane check --json` (`CellResult.sandbox`, crane.check/3), `crane bench --json` (each variant's
`sandbox`, crane.bench/2), the LSP diagnostics' `data.sandbox` and the `crane.runSpeculatively` result. Each
boundary's JSON is decoded back here, strictly, into the one record, equal to what went in, with no flat copy
beside it. The MCP tools keep their own stable shape for agents (`SandboxRun`), made from the record by
`SandboxRun.of` alone: every one of its fields comes from the record.

(The same decodes on real runs: tests/cli/test_check_sandbox.py, tests/lsp/test_auto.py, test_background.py.)
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from crane.bench.metrics import VariantResult
from crane.commands.bench import BenchReport, build_report
from crane.commands.check_text import render_text
from crane.commands.output import CHECK_SCHEMA, CheckReport, NotebookReport, encode
from crane.engine import CellResult
from crane.finding import Finding
from crane.lsp.diagnostics import to_diagnostic
from crane.lsp.messages import DiagnosticData, SpeculativeResult, decode_params, to_wire
from crane.lsp.notebook_map import CellSnapshot, NotebookSnapshot
from crane.mcp.schemas import STDOUT_LIMIT, SandboxRun
from crane.mcp.tools import encode_result
from crane.sandbox.verdict import DisplayOutput, Integrity, KeptObject, Refusal, SandboxVerdict, TransplantInfo


class StrictVerdict(SandboxVerdict, forbid_unknown_fields=True):
    """The record, refusing any key it does not declare (a copy's extra field would fail here)."""


# every field of the record away from its default, so that a field any boundary drops or renames shows
RECORD = SandboxVerdict(
    verdict="crash", ename="KeyError", evalue="'nope'", line=3, traceback=["cell, line 3", "KeyError: 'nope'"],
    stdout="x" * (STDOUT_LIMIT + 10), stderr="warned\n", displays=[DisplayOutput("display_data", "<Figure>", ["image/png"])],
    elapsed_ms=12.5, overhead_ms=40.25, reason="seen in the run", denied=["open('/etc/x', 'w')"],
    absorbed=["os.remove('out.csv')"], landlock_abi=4, pid=4242, mode="portable", mode_reason="not forkable here",
    scale="miniature", kept=[KeptObject(name="df", kind="DataFrame", rows=1333, of=40000)], setup_ms=3.5,
    setup_steps={"layer": 1.5, "cpu": 0.75}, fork_ms=2.0, fork_cpu_ms=1.0, channel="remote",
    transplant=TransplantInfo(copied=["df (DataFrame)"], bytes=1 << 20, warm=True, confinement="blocking",
                              export_ms=5.5, devices_mapped=True, not_imported=["torch"], shrunk="over 64 MiB",
                              raw_bytes=1 << 26, layers=["call guard", "audit hook"],
                              export_watch="the kernel's shell queue"),
    unforkable=True, certain=False, transient=True,
    integrity=Integrity(writer="session-head", channel_checked=True, fresh_state=True),
    refusal=Refusal(layer="landlock", call="open('/etc/x', 'w')", path="/etc/x"),
)


def test_the_record_under_test_sets_every_field():
    defaults = SandboxVerdict(verdict="no-crash")
    same = [f for f in RECORD.__struct_fields__ if getattr(RECORD, f) == getattr(defaults, f)]
    assert same == [], same
    assert all(getattr(RECORD.transplant, f) != getattr(TransplantInfo(), f) for f in TransplantInfo.__struct_fields__)


def nested(obj: dict[str, Any]) -> SandboxVerdict:
    """`obj["sandbox"]` decoded strictly into the one record; no other key of `obj` copies part of it."""
    copies = [k for k in obj if k.startswith("sandbox") and k != "sandbox"]
    assert copies == [], copies
    v = msgspec.convert(obj["sandbox"], StrictVerdict)
    return msgspec.convert(msgspec.to_builtins(v), SandboxVerdict)


def test_crane_check_json_nests_the_record():
    cell = CellResult(cell=2, prediction="crash", decided_by="sandbox", sandbox=RECORD)
    report = CheckReport(schema=CHECK_SCHEMA, mode="auto", notebooks=[NotebookReport(notebook="a.ipynb", cells=[cell])],
                         predicted_crashes=1, errors=0, elapsed_s=0.5)
    text = encode(report)
    assert json.loads(text)["schema"] == "crane.check/3"
    assert nested(json.loads(text)["notebooks"][0]["cells"][0]) == RECORD
    assert msgspec.json.decode(text, type=CheckReport).notebooks[0].cells[0].sandbox == RECORD
    # the text report reads the same record: how it ran (miniature, portable, shrunk)
    assert "(sandbox: crash, miniature run: kept 1,333 of 40,000 rows of df, in the portable sandbox (call guard, " \
           "audit hook; no OS confinement), shrunk first: over 64 MiB)" in render_text(report).replace("\n", " ")


def _variant(sandbox: SandboxVerdict | None) -> VariantResult:
    return VariantResult(case="c", variant="buggy", library="pandas", root_cause="NB specific", expect_crash=True,
                         predicted_crash=True, seconds=1.0, verdict=sandbox.verdict if sandbox else "crash",
                         decided_by="sandbox" if sandbox and sandbox.conclusive else "rules", sandbox=sandbox)


def test_crane_bench_json_nests_the_record_and_counts_only_runs():
    not_run = SandboxVerdict(verdict="unavailable", reason="no fork here", mode="transplant")
    report = build_report("auto", [_variant(RECORD), _variant(not_run)])
    text = msgspec.json.encode(report).decode()
    data = json.loads(text)
    assert data["schema"] == "crane.bench/2"
    assert nested(data["results"][0]) == RECORD and nested(data["results"][1]) == not_run
    assert msgspec.json.decode(text, type=BenchReport).results[0].sandbox == RECORD
    # the aggregates read the record; a run that did not happen has no mode or scale (as before the nesting)
    assert report.sandbox_modes == {"portable": 1} and report.sandbox_scales == {"miniature": 1}
    assert report.sandbox_by_mode == {"not run": {"unavailable": 1}, "portable": {"crash": 1}}


def test_lsp_diagnostic_data_nests_the_record():
    cell = CellSnapshot(number=1, uri="vscode-notebook-cell:/a.ipynb#W0", is_code=True, source="x = 1\n\ndf['nope']\n",
                        version=1)
    snap = NotebookSnapshot(uri="file:///a.ipynb", path="/a.ipynb", version=1, cells=(cell,))
    finding = Finding(rule="sandbox", ename="KeyError", message="'nope'", line=3, confidence=1.0, source="sandbox")
    diagnostic = to_diagnostic(finding, cell, snap, "live", RECORD, fixes=2)
    data = json.loads(json.dumps(diagnostic.data))  # as it crosses the wire
    assert nested(data) == RECORD
    back = decode_params(data, DiagnosticData)
    assert back.sandbox == RECORD and back.fixes == 2 and back.facts == "live"


def test_run_speculatively_result_nests_the_record():
    wire = json.loads(json.dumps(to_wire(SpeculativeResult(cell_uri="c", cell=1, sandbox=RECORD, markdown="m"))))
    assert set(wire) == {"cellUri", "cell", "sandbox", "markdown"}
    assert nested(wire) == RECORD and decode_params(wire, SpeculativeResult).sandbox == RECORD


def test_mcp_sandbox_run_is_made_from_the_record_alone():
    run = SandboxRun.of(RECORD)
    defaults = SandboxRun(outcome="no-crash")
    unset = [f for f in SandboxRun.__struct_fields__ if getattr(run, f) == getattr(defaults, f)]
    assert unset == [], unset  # every field of the agents' shape comes from the record
    assert (run.outcome, run.ename, run.evalue, run.line, run.reason) == ("crash", "KeyError", "'nope'", 3, RECORD.reason)
    assert run.exception == "KeyError: 'nope'" and run.how == RECORD.how() and run.confinement == "portable"
    assert run.blocked == RECORD.denied and run.absorbed == RECORD.absorbed and run.layers == ["call guard", "audit hook"]
    assert run.stdout_truncated and run.stdout == "x" * STDOUT_LIMIT + "\n... (10 more characters)"
    assert run.stderr == RECORD.stderr and run.traceback == RECORD.traceback and run.elapsed_ms == RECORD.elapsed_ms
    assert run.certain is False  # a likely crash says so to an agent (issue 42, h9), as the record does
    assert msgspec.convert(encode_result(run), SandboxRun, strict=True) == run  # what an agent receives


@pytest.mark.parametrize(("record", "confinement"), [
    (SandboxVerdict(verdict="unavailable", reason="no kernel"), None),
    (SandboxVerdict(verdict="no-crash", mode="layered"), "os"),
    (SandboxVerdict(verdict="timeout", mode="transplant", transplant=TransplantInfo(layers=[])), "os"),
])
def test_mcp_confinement_follows_the_records_mode(record, confinement):
    assert SandboxRun.of(record).confinement == confinement
