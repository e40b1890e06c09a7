"""What decides a cell's diagnostics: the one verdict policy of the CLI, the benchmark and the daemon.

Three sources can speak about "if you run this cell now, against the kernel as it is":

- the rules (`crane.predict`): instant, from static and runtime facts; they speak only when they can decide;
- the sandbox (`crane.sandbox`): the cell really ran in a confined copy-on-write fork of the kernel;
- a model (`crane.llm`): asked only where the other two leave the cell undecided, or always in mode "llm".

`decide()` combines them, always in this order:

1. a conclusive sandbox run wins: `crash` is certain (the real exception and line, the rules' root cause when
   they predicted the same exception) and `no-crash` clears the rules' findings (kept as `cleared`);
2. in mode "llm" the model's answer, when it gave one, is the prediction (the rules' findings are its input),
   except that a model never clears a certain rule finding (`certain()`: an undefined name, a missing key,
   attribute, module or file the probe verified, a syntax error, and any finding a rule made at high
   confidence from the live kernel's facts, e.g. `astype(int)` of text the probe read): those stay, and the
   model may only add its own crash and explanation — so mode "llm" is never less right than the rules about
   what they verified;
3. otherwise the rules' findings stand (sandbox timeout / blocked / unavailable, or no sandbox run);
4. with no rule finding, the model's answer (mode "auto" with a model configured) decides.

Pure functions over msgspec Structs: no I/O, no kernel. `model_wanted()` says when asking a model can change
the outcome (the front-ends decide whether the cost is worth it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import msgspec

from crane.finding import Finding

if TYPE_CHECKING:
    from crane.sandbox.verdict import SandboxVerdict

Mode = Literal["static", "auto", "llm"]
MODES: tuple[Mode, ...] = ("static", "auto", "llm")
Prediction = Literal["crash", "no-crash"]
DecidedBy = Literal["sandbox", "rules", "llm", "none"]


class ModelAnswer(msgspec.Struct, frozen=True):
    """A model's verdict on a cell: `finding` is set when it predicts a crash."""

    crash: bool
    finding: Finding | None = None


class Decision(msgspec.Struct):
    """The cell's diagnostics and how they were reached."""

    prediction: Prediction
    findings: list[Finding]
    decided_by: DecidedBy
    cleared: list[Finding] = []  # rule findings a clean sandbox run disproved


# Rules whose findings, at high confidence, are checked facts (the probe verified the name / key / attribute /
# module / file is missing, or the cell does not parse): no model answer may clear them.
CERTAIN_RULES = frozenset({"undefined-name", "missing-key", "missing-attribute", "missing-module", "missing-file",
                           "syntax-error"})
CERTAIN_CONFIDENCE = 0.9


def _from_kernel_facts(rule_id: str) -> bool:
    """The rule judges only from the live kernel's facts (registered with `needs_probe=True`)."""
    from crane.rulekit.registry import load_rules
    return bool(getattr(load_rules().get(rule_id), "needs_probe", False))


def certain(f: Finding) -> bool:
    """A finding no model may clear: a crash seen in the sandbox, or a verified rule finding (a fact-checked
    kind at high confidence, or any rule that judges from the kernel's facts at high confidence)."""
    if f.source == "sandbox":
        return True
    return f.confidence >= CERTAIN_CONFIDENCE and (f.rule in CERTAIN_RULES or _from_kernel_facts(f.rule))


def with_model(rules: list[Finding], model: ModelAnswer) -> Decision:
    """Mode "llm": the model's verdict, with the certain rule findings kept whatever the model said."""
    kept = [f for f in rules if certain(f)]
    found = [model.finding] if model.crash and model.finding is not None else []
    if found and any(f.ename == found[0].ename and f.line == found[0].line for f in kept):
        found = []  # the model agrees with a certain finding: the verified one (with its evidence) is shown
    if not found and kept:
        return Decision("crash", kept, "rules")
    return Decision("crash" if found or kept else "no-crash", kept + found, "llm")


def sandbox_conclusive(v: SandboxVerdict | None) -> bool:
    """A clean run, or a certain crash (a likely one, `certain=False`, never decides alone)."""
    return v is not None and (v.verdict == "no-crash" or (v.verdict == "crash" and v.certain))


def decide(
    mode: Mode,
    rules: list[Finding],
    sandbox: SandboxVerdict | None = None,
    model: ModelAnswer | None = None,
) -> Decision:
    """The cell's diagnostics from what each source said (see the module docstring for the order)."""
    if sandbox is not None and sandbox.verdict == "crash" and sandbox.certain:
        return Decision("crash", [sandbox_finding(sandbox, rules)], "sandbox")
    if sandbox is not None and sandbox.verdict == "crash" and any(f.ename == sandbox.ename for f in rules):
        # a likely crash (a transplant's failing frame depends on rebuilt state) the rules predicted too
        return Decision("crash", [sandbox_finding(sandbox, rules)], "sandbox")
    if sandbox is not None and sandbox.verdict == "no-crash":
        return Decision("no-crash", [], "sandbox", cleared=list(rules))
    if mode == "llm" and model is not None:
        return with_model(rules, model)
    if rules:
        return Decision("crash", list(rules), "rules")
    if model is not None:
        found = [model.finding] if model.crash and model.finding is not None else []
        return Decision("crash" if found else "no-crash", found, "llm")
    return Decision("no-crash", [], "none")


def model_wanted(mode: Mode, rules: list[Finding], sandbox: SandboxVerdict | None) -> bool:
    """Asking a model can change the outcome: mode "llm" always; otherwise only when neither the sandbox nor
    the rules decided (no rule finding, and the sandbox inconclusive or not run)."""
    if mode == "llm":
        return True
    return mode == "auto" and not rules and not sandbox_conclusive(sandbox)


def sandbox_finding(v: SandboxVerdict, rules: list[Finding]) -> Finding:
    """A certain crash seen in the sandbox, with the rules' root cause when they agree on the exception."""
    agree = next((f for f in rules if f.ename == v.ename), None)
    evalue = (v.evalue or "").strip().splitlines()
    miniature = v.scale == "miniature"
    evidence = [f"{v.how()}: " + ("the cell crashed on the kept rows, in a way the smaller data does not explain"
                                   if miniature else "the crash is certain" if v.certain else
                                   "the crash is likely (its failing frame depends on library state the copy "
                                   "rebuilt)")]
    evidence += _key_frames(v.traceback)
    if agree:
        evidence += [f"the rules predicted it too ({agree.rule}): {agree.message}"]
    return Finding(
        rule="sandbox",
        ename=v.ename or "Exception",
        message=evalue[0][:300] if evalue else "",
        line=v.line or (agree.line if agree else 1),
        root_cause=agree.root_cause if agree else None,
        confidence=(0.95 if miniature else 1.0) if v.certain else 0.7,
        evidence=evidence,
        related=agree.related if agree else [],
        source="sandbox",
    )


def _key_frames(traceback: list[str]) -> list[str]:
    """The cell's own frame and the innermost library frame (the last line repeats the message)."""
    frames = [t for t in traceback[:-1] if t.strip()]
    cell = [t for t in frames if t.startswith("cell")]
    library = [t for t in frames if not t.startswith("cell")]
    return [f"at {t}" for t in cell[-1:] + library[-1:]]
