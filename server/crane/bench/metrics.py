"""Scores for crash prediction: crash is the positive class."""

from __future__ import annotations

import statistics
from collections import defaultdict

import msgspec

from crane.policy import DecidedBy
from crane.sandbox.verdict import SandboxVerdict


class VariantResult(msgspec.Struct, omit_defaults=True, rename="camel"):
    case: str
    variant: str
    library: str
    root_cause: str
    expect_crash: bool
    predicted_crash: bool
    seconds: float
    expect_ename: str | None = None
    predicted_ename: str | None = None
    verdict: str | None = None  # mode-specific verdict (e.g. sandbox: crash/no-crash/timeout/blocked/unavailable)
    decided_by: DecidedBy | None = None  # sandbox | rules | llm | none (crane.policy)
    sandbox: SandboxVerdict | None = None  # auto mode: the sandbox's record of the run, as `speculate` returned it
    rule: str | None = None
    line: int | None = None
    message: str | None = None
    rules_predicted_crash: bool | None = None  # auto mode: what the rules alone predicted
    rules_predicted_ename: str | None = None
    kernel_unchanged: bool | None = None  # auto mode: the kernel's state and outputs untouched by the sandbox
    unexpected_history_errors: list[str] = []
    error: str | None = None  # the variant could not be run

    @property
    def correct(self) -> bool:
        return self.predicted_crash == self.expect_crash

    @property
    def sandbox_ran(self) -> SandboxVerdict | None:
        """The sandbox's record when the cell ran in it (in some mode, at some scale), else None."""
        return self.sandbox if self.sandbox is not None and self.sandbox.ran else None


class Scores(msgspec.Struct, rename="camel"):
    n: int
    tp: int
    fp: int
    tn: int
    fn: int
    accuracy: float
    precision: float
    recall: float
    f1: float
    false_alarm_rate: float  # FP / non-crashing variants
    ename_match: float | None  # among predicted crashes that are real crashes: right exception name
    ename_match_all: float | None  # among all real crashes: predicted, with the right exception name


def _div(a: float, b: float) -> float:
    return a / b if b else 0.0


def score(results: list[VariantResult]) -> Scores:
    tp = sum(r.expect_crash and r.predicted_crash for r in results)
    fp = sum(not r.expect_crash and r.predicted_crash for r in results)
    tn = sum(not r.expect_crash and not r.predicted_crash for r in results)
    fn = sum(r.expect_crash and not r.predicted_crash for r in results)
    p, rc = _div(tp, tp + fp), _div(tp, tp + fn)
    hits = [r for r in results if r.expect_crash and r.predicted_crash]
    crashes = [r for r in results if r.expect_crash]
    right = sum(r.predicted_ename == r.expect_ename for r in hits)
    return Scores(
        n=len(results), tp=tp, fp=fp, tn=tn, fn=fn,
        accuracy=round(_div(tp + tn, len(results)), 4),
        precision=round(p, 4), recall=round(rc, 4), f1=round(_div(2 * p * rc, p + rc), 4),
        false_alarm_rate=round(_div(fp, fp + tn), 4),
        ename_match=round(_div(right, len(hits)), 4) if hits else None,
        ename_match_all=round(_div(right, len(crashes)), 4) if crashes else None,
    )


def grouped(results: list[VariantResult], key) -> dict[str, Scores]:
    groups: dict[str, list[VariantResult]] = defaultdict(list)
    for r in results:
        groups[key(r)].append(r)
    return {k: score(v) for k, v in sorted(groups.items())}


class Timing(msgspec.Struct, rename="camel"):
    median_s: float
    mean_s: float
    max_s: float
    total_s: float


def timing(results: list[VariantResult]) -> Timing:
    secs = [r.seconds for r in results] or [0.0]
    return Timing(
        median_s=round(statistics.median(secs), 3), mean_s=round(statistics.mean(secs), 3),
        max_s=round(max(secs), 3), total_s=round(sum(secs), 3),
    )
