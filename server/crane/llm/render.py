"""How a diagnosis (crane.llm.diagnosis.Diagnosis) reads: the verdict of the rules and the sandbox first, always;
then the model's part, marked as the model's, and only where it agrees or adds. A model's "no crash" over the
rules' findings, a crash claim nothing checked, a claim that was dropped: each is one line saying so, never the
head of the diagnosis. `model_part` is shared by the markdown (daemon, --json) and the CLI's text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from crane.finding import Finding

if TYPE_CHECKING:
    from crane.llm.diagnosis import Diagnosis


def finding_text(f: Finding) -> str:
    """"KeyError: 'Age' is not a column of df" without the class name said twice."""
    msg = f.message[len(f.ename) + 1:].strip() if f.message.startswith(f.ename + ":") else f.message
    return f"{f.ename}: {msg}" if msg else f.ename


def _findings_markdown(findings: list[Finding]) -> list[str]:
    out = []
    for f in findings:
        out.append(f"- line {f.line}: **{f.ename}**: {finding_text(f)[len(f.ename) + 2:]} (`{f.rule}`, "
                   f"{f.confidence:.2f})")
        out.extend(f"  - {e}" for e in f.evidence[:4])
    return out


def model_part(d: Diagnosis) -> list[tuple[str, str]]:
    """The model's part of an llm-mode diagnosis as (label, text) lines: what it says when it agrees with or
    adds to the rules, and one-line notes when it disagrees, guessed or was dropped."""
    a = d.answer
    if d.mode != "llm" or a is None:
        return []
    who = d.model or "the model"
    detail = f"confidence {a.confidence:.2f}" + (f", root cause: {a.root_cause}" if a.root_cause else "")
    out: list[tuple[str, str]] = []
    if d.dropped:
        out.append(("note", f"{who} claimed a crash ({a.exception or 'no exception'}) that does not count: "
                            + "; ".join(d.dropped)))
        return out
    if d.suspicions:
        s = d.suspicions[0]
        out.append(("suspicion", f"{who}'s suspicion, unchecked (no run and no runtime fact confirms it; "
                                 f"shown at confidence {s.confidence:.2f}): line {s.line}: {a.exception}: "
                                 f"{a.explanation.strip()}"))
        if a.suggested_fix:
            out.append(("fix", f"{who}'s suggested fix (for its suspicion): {a.suggested_fix.strip()}"))
        return out
    if not a.crash and d.findings:
        out.append(("note", f"{who} said \"no crash\" ({detail}); that does not clear the rules' findings"))
        return out
    if a.crash:
        how = "checked against the runtime facts" if d.checked else "agrees with the rules"
        out.append(("model", f"{who} ({how}; {detail}): {a.explanation.strip()}"))
    else:
        out.append(("model", f"{who} agrees: no crash ({detail}): {a.explanation.strip()}"))
    if a.suggested_fix:
        out.append(("fix", f"{who}'s suggested fix: {a.suggested_fix.strip()}"))
    return out


def head(d: Diagnosis) -> tuple[str, str]:
    """("will crash", "KeyError at line 2 (missing-key, confidence 0.95)") from the decided findings, or
    ("no crash predicted", "")."""
    shown = d.findings or ([d.verdict] if d.verdict is not None else [])
    if d.prediction != "crash" or not shown:
        return "no crash predicted", ""
    top = max(shown, key=lambda f: f.confidence)
    by = "the model, checked against the runtime facts" if top.source == "llm" else top.rule
    return "will crash", f"{top.ename} at line {top.line} ({by}, confidence {top.confidence:.2f})"


def render_markdown(d: Diagnosis) -> str:
    status, detail = head(d)
    md = [f"**CRANE: cell {d.cell} {status}**" + (f" — `{detail.split(' ', 1)[0]}` {detail.split(' ', 1)[1]}"
                                                   if detail else "") + (" (offline rules)" if d.mode != "llm" else "")]
    if d.findings:
        md += ["", "Offline rules:", *_findings_markdown(d.findings)]
    elif d.mode == "llm" and d.verdict is not None:
        md += ["", *_findings_markdown([d.verdict])]
    for label, text in model_part(d):
        md += ["", f"**Suggested fix** ({d.model}): {text.split(': ', 1)[-1]}" if label == "fix"
               else f"_{text}_" if label in ("note", "suspicion") else f"**Model:** {text}"]
    if d.mode == "llm" and d.usage is not None:
        cost = d.usage.describe() + (" · from cache (not paid again)" if d.cached else "")
        md += ["", f"<sub>{d.model} · {cost}</sub>"]
    elif d.llm_error:
        md += ["", f"<sub>The model failed ({d.llm_error}): this is the offline rules' diagnosis.</sub>"]
    elif d.mode == "offline":
        md += ["", "<sub>No model configured: set `crane.llm.model` (or CRANE_MODEL / --model) for an LLM "
               "diagnosis.</sub>"]
    return "\n".join(md)
