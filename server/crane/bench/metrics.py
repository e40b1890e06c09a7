"""Scores for crash prediction (crash is the positive class), and whether a predicted message is the kernel's (runs in
the daemon: the CLI's `crane bench`).

A prediction names the exception and the message the kernel will show. With `--real-run` the bench runs each
target cell for real in its replay kernel once the prediction is made (its own kernel, never a user's) and keeps
what it raised; `message_match` is then the share of the predicted crashes that really crashed whose predicted
exception name and message are the kernel's (`same_message`: compared after `normalise_message`; CRANE's own
explanation may follow the kernel's text)."""

from __future__ import annotations

import re
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
    # --real-run: what the target cell raised when run for real in the replay kernel after the prediction
    # (`real_ran` False: it could not run, `real_error` says why); the rules' own message in auto/llm modes
    real_ran: bool | None = None
    real_ename: str | None = None
    real_message: str | None = None
    real_error: str | None = None
    rules_predicted_message: str | None = None

    @property
    def correct(self) -> bool:
        return self.predicted_crash == self.expect_crash

    @property
    def message_compared(self) -> bool:
        """A predicted crash whose target cell, run for real, raised: its message can be compared."""
        return self.predicted_crash and self.real_ename is not None

    @property
    def message_matches(self) -> bool:
        """The predicted exception name and message are what the kernel raised (`same_message`)."""
        return (self.message_compared and self.predicted_ename == self.real_ename
                and same_message(self.message, self.real_message))

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
    # --real-run: among predicted crashes whose target really raised, the right exception name and message
    message_match: float | None = None
    messages_compared: int = 0


_ARRAY_VALUES = re.compile(r"array=\[.*?\]\.?(?=\s|$)", re.S)
# what may join CRANE's own explanation to the kernel's text in a finding's message: "'Amount' — df has no
# column 'Amount'", "name 'plt' is not defined: 'plt' is defined in cell 1 ...", "... (did you mean 'price'?)"
EXPLANATION_JOINS = (" — ", ": ", " (")


def normalise_message(text: str | None) -> str:
    """A message as compared: whitespace runs (newlines included) as one space, the ends stripped, and an array's
    printed values (scikit-learn's `array=[...]`, which a prediction cannot know) left out."""
    return " ".join(_ARRAY_VALUES.sub("", text or "").split())


def same_message(predicted: str | None, real: str | None) -> bool:
    """The predicted message is the kernel's (both normalised), alone or followed by CRANE's explanation after one
    of `EXPLANATION_JOINS`. A kernel text that continues otherwise — 3.13's ". Did you mean 'x'?" — must be
    predicted whole."""
    p, r = normalise_message(predicted), normalise_message(real)
    return p == r or (bool(r) and any(p.startswith(r + join) for join in EXPLANATION_JOINS))


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
    compared = [r for r in results if r.message_compared]
    return Scores(
        n=len(results), tp=tp, fp=fp, tn=tn, fn=fn,
        accuracy=round(_div(tp + tn, len(results)), 4),
        precision=round(p, 4), recall=round(rc, 4), f1=round(_div(2 * p * rc, p + rc), 4),
        false_alarm_rate=round(_div(fp, fp + tn), 4),
        ename_match=round(_div(right, len(hits)), 4) if hits else None,
        ename_match_all=round(_div(right, len(crashes)), 4) if crashes else None,
        message_match=round(_div(sum(r.message_matches for r in compared), len(compared)), 4) if compared else None,
        messages_compared=len(compared),
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
