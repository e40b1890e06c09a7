"""`crane check --format sarif`: the report as one SARIF 2.1.0 run, for GitHub code scanning and other viewers.

Mapping (docs/cli.md, "SARIF"):
- one `result` per cell predicted to crash: its first finding (the predicted crash), `ruleId` = the CRANE rule
  id (`sandbox` for a crash seen in the speculative run, `llm` for the model's), `level` "error" when the crash
  is certain (sandbox) or a rule is confident (confidence >= CONFIDENT), else "warning" (the model's verdicts
  are never errors, as in the editor);
- the location is the notebook file (`artifactLocation.uri` relative to the current directory, the repository
  root in CI, with `uriBaseId` %SRCROOT%) and a `region` in the file's own text: the line and UTF-16 column of
  the cell's source line inside the .ipynb JSON (`crane.notebook.json_positions`), because code scanning reads
  regions as lines of the stored file; the cell number and the line within the cell are in the message and in
  `properties` (`cell`, `cellLine`, `cellColumn`);
- `tool.driver.rules`: one reportingDescriptor per rule id that appears, with a short description;
- notebooks that could not be checked are `invocations[0].toolExecutionNotifications` (level "error", and
  `executionSuccessful` false); a cell that could only be checked partly (a failed probe, a model error) is a
  "warning" notification.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

import msgspec

from crane import __version__
from crane.commands.check_text import located
from crane.commands.output import CheckReport
from crane.finding import Finding, FindingSource
from crane.notebook.json_positions import NotebookTextMap
from crane.sandbox.verdict import Verdict

if TYPE_CHECKING:
    from crane.engine import CellResult

SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
SRCROOT = "%SRCROOT%"
CONFIDENT = 0.9  # a rule finding at least this confident is an "error" result

RULE_DESCRIPTIONS = {
    "syntax-error": "The cell does not compile (SyntaxError).",
    "undefined-name": "A name is used before any executed cell or earlier line defines it (NameError).",
    "missing-module": "An imported module is not installed in the kernel's environment (ModuleNotFoundError).",
    "missing-file": "A file read by a literal path does not exist (FileNotFoundError).",
    "missing-key": "A literal key, column or label is not in its container (KeyError).",
    "missing-attribute": "The kernel's object has no such attribute (AttributeError).",
    "sklearn-not-fitted": "A scikit-learn estimator is used before it is fitted (NotFittedError).",
    "sklearn-input": "Data a scikit-learn estimator rejects: text, NaN, wrong rank or sample counts (ValueError).",
    "sklearn-params": "Parameter values a scikit-learn estimator rejects when it is fitted (ValueError).",
    "sklearn-split": "train_test_split with inconsistent sample counts or sizes leaving an empty set (ValueError).",
    "sklearn-metrics": "Metric inputs of different lengths or incompatible target types (ValueError).",
    "sklearn-display": "A confusion matrix display given display_labels of another length than its classes.",
    "pandas-astype-numeric": "astype to a number type of data holding text or NaN it cannot convert (ValueError).",
    "pandas-to-numeric": "pd.to_numeric of text that does not parse as a number (ValueError).",
    "pandas-string-dtype": "A pandas string column (pandas 3's str) where numpy expects an array or a dtype.",
    "pandas-merge-join": "merge/join on a key a side lacks, or overlapping columns without suffixes.",
    "numpy-shapes": "Array or tensor shapes that do not broadcast, align, reshape or index.",
    "loop-index": "A loop's index that runs past the end of the array or list it indexes (IndexError).",
    "plot-args": "Plot arguments of different lengths, or naming a column the data lacks.",
    "call-signature": "A call that does not match the callable's signature (TypeError).",
    "statsmodels-options": "A statsmodels option outside the accepted values (ValueError).",
    "torch-shapes": "A torch layer or loss given input of the wrong size, rank or dtype.",
    "keras-model": "A Keras model given inputs or labels its layers and loss reject, used before compile, or a "
                   "removed API.",
    "jax-traced-control-flow": "Python control flow on a traced argument of a jitted function.",
    "jax-grad-output": "jax.grad of a function that visibly returns a non-scalar array (TypeError).",
    "polars-columns": "A polars column the frame's schema lacks, or a namespace (.dt, .str) on the wrong dtype.",
    "polars-join-keys": "A polars join on keys whose dtypes differ.",
    "polars-concat": "pl.concat of polars frames whose widths, column names or dtypes differ.",
    "boosting-input": "An xgboost/LightGBM model given text columns without categorical support, or unfitted.",
    "sandbox": "The cell crashed when run speculatively in a confined copy of the kernel: the crash is certain.",
    "llm": "The configured language model predicts that the cell crashes.",
}


# -- SARIF 2.1.0 objects (only what CRANE emits) ------------------------------------------------------------
class Message(msgspec.Struct):
    text: str


class ArtifactLocation(msgspec.Struct, omit_defaults=True, rename="camel"):
    uri: str
    uri_base_id: str | None = None


class Region(msgspec.Struct, omit_defaults=True, rename="camel"):
    start_line: int
    start_column: int | None = None
    end_line: int | None = None
    end_column: int | None = None


class PhysicalLocation(msgspec.Struct, omit_defaults=True, rename="camel"):
    artifact_location: ArtifactLocation
    region: Region | None = None


class Location(msgspec.Struct, omit_defaults=True, rename="camel"):
    physical_location: PhysicalLocation
    id: int | None = None
    message: Message | None = None


class ReportingConfiguration(msgspec.Struct):
    level: str


class RuleProperties(msgspec.Struct):
    tags: list[str]


class ReportingDescriptor(msgspec.Struct, rename="camel"):
    id: str
    name: str
    short_description: Message
    default_configuration: ReportingConfiguration
    properties: RuleProperties


class ToolComponent(msgspec.Struct, rename="camel"):
    name: str
    version: str
    semantic_version: str
    rules: list[ReportingDescriptor]


class Tool(msgspec.Struct):
    driver: ToolComponent


class ResultProperties(msgspec.Struct, omit_defaults=True, rename="camel"):
    cell: int  # 1-based cell number in the notebook
    cell_line: int  # 1-based line within the cell
    cell_column: int  # 1-based column within the cell
    ename: str
    confidence: float
    source: FindingSource
    root_cause: str | None = None
    sandbox: Verdict | None = None  # auto mode: the speculative run's verdict (its record is in crane check --json)
    evidence: list[str] = []
    other_findings: list[str] = []  # later findings of the same cell ("line N: Ename: message")


class Result(msgspec.Struct, omit_defaults=True, rename="camel"):
    rule_id: str
    rule_index: int
    level: str
    message: Message
    locations: list[Location]
    properties: ResultProperties
    related_locations: list[Location] = []


class Notification(msgspec.Struct, omit_defaults=True):
    level: str
    message: Message
    locations: list[Location] = []


class Invocation(msgspec.Struct, rename="camel"):
    execution_successful: bool
    tool_execution_notifications: list[Notification]


class Run(msgspec.Struct, rename="camel"):
    tool: Tool
    original_uri_base_ids: dict[str, ArtifactLocation]
    column_kind: str
    results: list[Result]
    invocations: list[Invocation]


class SarifLog(msgspec.Struct):
    schema: str = msgspec.field(name="$schema")
    version: str = "2.1.0"
    runs: list[Run] = []


# -- building -------------------------------------------------------------------------------------------
def level(f: Finding) -> str:
    if f.source == "sandbox" or (f.source == "rules" and f.confidence >= CONFIDENT):
        return "error"
    return "warning"


def artifact_uri(path: str, root: Path) -> ArtifactLocation:
    """Relative to `root` (with uriBaseId %SRCROOT%) when the file is under it, else an absolute file URI."""
    resolved = Path(os.path.abspath(path))
    try:
        rel = resolved.relative_to(root)
    except ValueError:
        return ArtifactLocation(uri=resolved.as_uri())
    return ArtifactLocation(uri=quote(rel.as_posix(), safe="/"), uri_base_id=SRCROOT)


def _region(text_map: NotebookTextMap | None, cell: int, line: int, col: int = 0,
            end_line: int | None = None, end_col: int | None = None) -> Region:
    """The finding's span in the file's text; without an end column, to the end of the start line."""
    if text_map is None:
        return Region(start_line=1)
    col = col or 0
    start = text_map.locate(cell, line, col)
    if start is None:
        first = text_map.locate(cell, 1, 0)  # at least the cell
        return Region(start_line=first[0], start_column=first[1]) if first else Region(start_line=1)
    last = max(end_line or line, line)
    if end_col is None or (last == line and end_col <= col):
        end_col = 1 << 30  # clamped to the end of the line
    end = text_map.locate(cell, last, end_col, end=True) or start
    if end < start:
        end = start
    return Region(start_line=start[0], start_column=start[1], end_line=end[0], end_column=end[1])


def _result(cell_result: CellResult, location_uri: ArtifactLocation,
            text_map: NotebookTextMap | None, rule_index: dict[str, int]) -> Result:
    f: Finding = cell_result.findings[0]
    cell = cell_result.cell
    certain = " (certain: seen in a sandboxed run)" if f.source == "sandbox" else ""
    message = f"{f.ename}: {f.message} — cell {cell}, line {f.line}{certain}"
    related: list[Location] = []
    for r in f.related:
        if r.cell is None:
            continue
        related.append(Location(
            id=len(related) + 1, message=Message(r.message),
            physical_location=PhysicalLocation(artifact_location=location_uri,
                                               region=_region(text_map, r.cell, r.line or 1)),
        ))
    return Result(
        rule_id=f.rule, rule_index=rule_index[f.rule], level=level(f), message=Message(message),
        locations=[Location(physical_location=PhysicalLocation(
            artifact_location=location_uri,
            region=_region(text_map, cell, f.line, f.col, f.end_line, f.end_col),
        ))],
        related_locations=related,
        properties=ResultProperties(
            cell=cell, cell_line=f.line, cell_column=(f.col or 0) + 1, ename=f.ename, confidence=f.confidence,
            source=f.source, root_cause=f.root_cause, evidence=f.evidence,
            other_findings=[f"line {o.line}: {o.ename}: {o.message}" for o in cell_result.findings[1:]],
            sandbox=cell_result.sandbox.verdict if cell_result.sandbox is not None else None,
        ),
    )


def _descriptor(rule_id: str, levels: set[str]) -> ReportingDescriptor:
    name = "".join(part.capitalize() for part in rule_id.split("-"))
    text = RULE_DESCRIPTIONS.get(rule_id, f"CRANE rule {rule_id}: a predicted crash.")
    default = "error" if "error" in levels else "warning"
    return ReportingDescriptor(
        id=rule_id, name=name, short_description=Message(text),
        default_configuration=ReportingConfiguration(default),
        properties=RuleProperties(tags=["jupyter", "crash-prediction"]),
    )


def sarif_log(report: CheckReport, texts: dict[str, str], root: Path | None = None) -> SarifLog:
    """The SARIF document for a check report; `texts` maps a notebook path to its file text (as checked)."""
    root = Path(os.path.abspath(root or Path.cwd()))
    crashing = [(nb, r) for nb in report.notebooks for r in nb.cells if r.findings]
    levels: dict[str, set[str]] = {}
    for _, r in crashing:
        levels.setdefault(r.findings[0].rule, set()).add(level(r.findings[0]))
    rule_ids = sorted(levels)
    rule_index = {rid: i for i, rid in enumerate(rule_ids)}
    results: list[Result] = []
    notes: list[Notification] = []
    maps: dict[str, NotebookTextMap | None] = {}
    for nb in report.notebooks:
        uri = artifact_uri(nb.notebook, root)
        where = [Location(physical_location=PhysicalLocation(artifact_location=uri))]
        if nb.error:
            notes.append(Notification(level="error", message=Message(located(nb.notebook, nb.error)), locations=where))
            continue
        if nb.notebook not in maps:
            text = texts.get(nb.notebook)
            maps[nb.notebook] = NotebookTextMap.build(text) if text is not None else None
        text_map = maps[nb.notebook]
        for r in nb.cells:
            if r.error:
                notes.append(Notification(
                    level="warning", message=Message(f"{nb.notebook}: cell {r.cell}: {r.error}"),
                    locations=[Location(physical_location=PhysicalLocation(
                        artifact_location=uri, region=_region(text_map, r.cell, 1)))],
                ))
            if r.findings:
                results.append(_result(r, uri, text_map, rule_index))
    driver = ToolComponent(
        name="CRANE", version=__version__, semantic_version=__version__,
        rules=[_descriptor(rid, levels[rid]) for rid in rule_ids],
    )
    run = Run(
        tool=Tool(driver=driver),
        original_uri_base_ids={SRCROOT: ArtifactLocation(uri=root.as_uri().rstrip("/") + "/")},
        column_kind="utf16CodeUnits",
        results=results,
        invocations=[Invocation(execution_successful=report.errors == 0, tool_execution_notifications=notes)],
    )
    return SarifLog(schema=SARIF_SCHEMA, runs=[run])
