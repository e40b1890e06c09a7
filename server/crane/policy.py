"""What decides a cell's diagnostics: the one verdict policy of the CLI, the benchmark and the daemon.

Three sources can speak about "if you run this cell now, against the kernel as it is":

- the rules (`crane.predict`): instant, from static and runtime facts; they speak only when they can decide;
- the sandbox (`crane.sandbox`): the cell really ran in a confined copy-on-write fork of the kernel;
- a model (`crane.llm`): asked only where the other two leave the cell undecided, or always in mode "llm".

`decide()` combines them, always in this order:

1. a conclusive sandbox run wins: `crash` is certain (the real exception and line, the rules' root cause when
   they predicted the same exception) and `no-crash` clears the rules' findings (kept as `cleared`);
2. in mode "llm" the model only adds: the rules' findings stay whatever the model said (a model's "no crash"
   clears none of them), and a crash claim of the model (already checked for coherence and against the runtime
   facts by `crane.llm.claims`) is a predicted crash only when the runtime facts corroborate it (`checked`);
   otherwise it is the model's *suspicion*, shown apart (`Decision.suspicions`, confidence capped at
   `SUSPICION_CONFIDENCE`) and predicting nothing. So with any model, however weak, mode "llm" predicts a crash
   wherever the rules do and adds only checked crashes: never less accurate than the rules, no more false
   alarms;
3. otherwise the rules' findings stand (sandbox timeout / blocked / unavailable, or no sandbox run);
4. with no rule finding, the model's answer (mode "auto" with a model configured, the sandbox inconclusive)
   decides in the same way: a checked claim is a crash, an unchecked one a suspicion.

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
    """A model's verdict on a cell: `finding` is set when it claims a crash that is coherent and that no runtime
    fact contradicts (crane.llm.claims.model_answer); `checked` when the runtime facts corroborate it;
    `dropped`: why a crash claim of the model does not count (incoherent, or contradicted)."""

    crash: bool
    finding: Finding | None = None
    checked: bool = False
    dropped: list[str] = []


class Decision(msgspec.Struct):
    """The cell's diagnostics and how they were reached."""

    prediction: Prediction
    findings: list[Finding]
    decided_by: DecidedBy
    cleared: list[Finding] = []  # rule findings a clean sandbox run disproved
    suspicions: list[Finding] = []  # the model's unchecked crash claims: shown apart, predicting nothing


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


SUSPICION_CONFIDENCE = 0.3  # the most a suspicion (an unchecked crash claim of a model) is shown with
SUSPICION_NOTE = "the model's suspicion: no run and no runtime fact checked it"


def as_suspicion(f: Finding) -> Finding:
    """A model's unchecked crash claim, marked as such: its confidence capped, the first evidence says so."""
    return msgspec.structs.replace(f, rule="llm-suspicion", confidence=min(f.confidence, SUSPICION_CONFIDENCE),
                                   evidence=[SUSPICION_NOTE, *f.evidence])


def _model_part(model: ModelAnswer, shown: list[Finding]) -> tuple[list[Finding], list[Finding]]:
    """(checked crash findings, suspicions) of the model, less what a shown finding already says."""
    f = model.finding if model.crash else None
    if f is None or any(s.ename == f.ename for s in shown):
        return [], []  # no claim, or the same exception as a rule's: the rule's finding (with its facts) is shown
    return ([f], []) if model.checked else ([], [as_suspicion(f)])


def with_model(rules: list[Finding], model: ModelAnswer) -> Decision:
    """Mode "llm": the rules' findings, and the model's checked crash; an unchecked claim is a suspicion."""
    found, suspicions = _model_part(model, rules)
    if rules:
        return Decision("crash", list(rules) + found, "rules", suspicions=suspicions)
    return Decision("crash" if found else "no-crash", found, "llm", suspicions=suspicions)


def sandbox_conclusive(v: SandboxVerdict | None) -> bool:
    """A clean run, or a certain crash (a likely one, `certain=False`, never decides alone; nor does a likely clean
    run: a copy that could not run a finalizer the cell's `del` runs in the kernel, worker/finalizers.py)."""
    return v is not None and v.verdict in ("no-crash", "crash") and v.certain


def decide(
    mode: Mode,
    rules: list[Finding],
    sandbox: SandboxVerdict | None = None,
    model: ModelAnswer | None = None,
) -> Decision:
    """The cell's diagnostics from what each source said (see the module docstring for the order). A likely
    sandbox crash (`certain=False`) the rules did not predict decides nothing: it is shown apart, with the
    suspicions, at its lower confidence."""
    d = _decide(mode, rules, sandbox, model)
    if sandbox is not None and sandbox.verdict == "crash" and not sandbox.certain and d.decided_by != "sandbox":
        likely = sandbox_finding(sandbox, rules)
        if not any(f.ename == likely.ename and f.line == likely.line for f in d.findings):
            d.suspicions = [likely, *d.suspicions]
    return d


def _decide(mode: Mode, rules: list[Finding], sandbox: SandboxVerdict | None, model: ModelAnswer | None) -> Decision:
    if sandbox is not None and sandbox.verdict == "crash" and sandbox.certain:
        return Decision("crash", [sandbox_finding(sandbox, rules)], "sandbox")
    if sandbox is not None and sandbox.verdict == "crash" and any(f.ename == sandbox.ename for f in rules):
        # a likely crash (a transplant's failing frame depends on rebuilt state) the rules predicted too
        return Decision("crash", [sandbox_finding(sandbox, rules)], "sandbox")
    if sandbox is not None and sandbox.verdict == "no-crash" and sandbox.certain:
        return Decision("no-crash", [], "sandbox", cleared=list(rules))
    if mode == "llm" and model is not None:
        return with_model(rules, model)
    if rules:
        return Decision("crash", list(rules), "rules")
    if model is not None:
        return with_model([], model)
    return Decision("no-crash", [], "none")


Outcome = Literal["crash", "no-crash", "unknown"]


def outcome(decision: Decision, sandbox_ran: bool, facts_read: bool) -> Outcome:
    """What a front-end tells an agent (`crane check --json`, MCP, the editor's language-model tools): the
    decision's prediction when something decided it (a conclusive run, a rule finding, a model's claim) or when
    the rules judged the live kernel's facts and no run was asked for; "unknown" when nothing could decide (a
    run that timed out, was blocked or could not start; facts that could not be read), so an agent reading the
    prediction never takes "nobody knows" for "no crash"."""
    if decision.findings or decision.decided_by != "none":
        return decision.prediction
    if sandbox_ran or not facts_read:
        return "unknown"
    return decision.prediction


def model_wanted(mode: Mode, rules: list[Finding], sandbox: SandboxVerdict | None) -> bool:
    """Asking a model can change the outcome: mode "llm" always; otherwise only when neither the sandbox nor
    the rules decided (no rule finding, and the sandbox inconclusive or not run)."""
    if mode == "llm":
        return True
    return mode == "auto" and not rules and not sandbox_conclusive(sandbox)


LIKELY_CONFIDENCE = 0.7  # a copied run's crash whose failing frames rest on state the copy rebuilt


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
        confidence=(0.95 if miniature else 1.0) if v.certain else LIKELY_CONFIDENCE,
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
