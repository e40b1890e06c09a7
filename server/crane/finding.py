"""A predicted crash: what every rule, the sandbox and the LLM layer report, and what the CLI/LSP show."""

from __future__ import annotations

from typing import Literal

import msgspec

FindingSource = Literal["rules", "sandbox", "llm"]

# JunoBench root-cause taxonomy (../shared/bench/README.md).
ROOT_CAUSES = (
    "API misuse",
    "data confusion",
    "NB specific",
    "implementation error",
    "ML model confusion",
    "library cause",
)


class Related(msgspec.Struct, omit_defaults=True, rename="camel"):
    """Where the state behind a finding came from (e.g. the cell that last defined a name)."""

    message: str
    cell: int | None = None  # 1-based cell number in the notebook
    line: int | None = None  # 1-based line in that cell
    execution_count: int | None = None


class Finding(msgspec.Struct, omit_defaults=True, rename="camel"):
    """'If you run this cell now, against the kernel as it is, it will crash' — and why.

    Lines and columns are 1-based lines / 0-based character (code point) columns within the target cell's
    original source; editors that count UTF-16 code units convert (crane.lsp.notebook_map.utf16_col).
    """

    rule: str  # rule id, e.g. "undefined-name"
    ename: str  # predicted exception, e.g. "NameError"
    message: str  # one line, for a squiggle
    line: int
    col: int = 0
    end_line: int | None = None
    end_col: int | None = None
    root_cause: str | None = None  # one of ROOT_CAUSES
    confidence: float = 0.8
    evidence: list[str] = []  # the runtime/static facts the rule used, human-readable
    related: list[Related] = []
    source: FindingSource = "rules"
