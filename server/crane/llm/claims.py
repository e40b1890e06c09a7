"""Is a model's crash claim worth anything? Coherence of the reply, and agreement with the runtime facts.

A decoded answer (crane.llm.schema) is well-formed; that does not make it right. Small local models send
claims that are incoherent (`"crash": true` with `"exception": null`, `"exception": "NoneType"`, a line far
outside the cell, an explanation copied from the prompt's answer spec) or that contradict themselves
(`"crash": false` over "the target cell raises an exception because `pipe` is not yet fitted"). And a coherent
claim can contradict what CRANE read from the live kernel (a "missing" column the probe sees, an "unfitted"
estimator the probe shows fitted).

- `reply_problems(answer)`: what is wrong with the reply itself (the client re-asks once, then it is no answer);
- `facts_check(answer, source, probe)`: (contradictions, support) from the probe's facts;
- `model_answer(verdict, target, probe)`: the `crane.policy.ModelAnswer` the policy decides with — the claim
  counts only when coherent and not contradicted; `checked` when the runtime facts corroborate it.
"""

from __future__ import annotations

import builtins
import re
from typing import TYPE_CHECKING

from crane.llm.schema import LLMAnswer, LLMVerdict
from crane.policy import ModelAnswer

if TYPE_CHECKING:
    from crane.notebook.model import Cell
    from crane.probe.facts import ProbeResult

# Built-in exception classes, and the shape of a library's (KeyError, ParserError, NotFittedError, ...).
_BUILTIN_EXCEPTIONS = frozenset(n for n, v in vars(builtins).items()
                                if isinstance(v, type) and issubclass(v, BaseException))
_EXC_SHAPE = re.compile(r"[A-Z][A-Za-z0-9_]*(?:Error|Exception|Exit|Interrupt|Iteration|Warning|Failure|Fault)")
GENERIC = frozenset({"Exception", "BaseException"})  # free text turned into "Exception" names no class

# Answer-spec texts of CRANE's prompts, old and new: an explanation that only repeats one is no explanation.
_SPEC_TEXTS = (
    "1-3 sentences grounded in the facts",
    "1-3 sentences grounded in the runtime facts",
    "1-3 sentences of your own, grounded in the facts",
    "your own explanation",
    "a short code-level fix",
    "the exception class name, e.g. KeyError",
)

_NEGATION = re.compile(r"\b(?:not|no|never|without|nor|cannot|won't|doesn't|don't|didn't|isn't|wouldn't|"
                       r"shouldn't|can't|neither)\b|n't\b", re.I)
_RAISES = re.compile(r"\b(?:raises?|raising|raised|throws?|throwing|crash(?:es|ed)?|fails?|failing|"
                     r"will\s+fail|errors?\s+out)\b", re.I)
_CLEAN = re.compile(r"\b(?:runs?\s+(?:clean|fine|successfully|without)|no\s+(?:exception|error|crash)|"
                    r"(?:does|will|would)\s+not\s+(?:raise|crash|fail|throw)|(?:won't|doesn't)\s+"
                    r"(?:raise|crash|fail|throw)|without\s+(?:an?\s+)?(?:error|exception|crash))\b", re.I)
_CLAUSE = re.compile(r"[.;!?]\s+|,\s+(?:but|so|and|because|since)\s+|\bbut\b", re.I)
_QUOTED = re.compile(r"""['"`]([^'"`\n]{1,80})['"`]""")
_NOT_FITTED = re.compile(r"\b(?:not\s+(?:yet\s+)?(?:been\s+)?fitted|unfitted|NotFittedError|before\s+fit)", re.I)
_ENAME_IN_TEXT = re.compile(r"\b([A-Z]\w*(?:Error|Exception))\b")


def _words(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def real_exception_class(name: str | None) -> bool:
    """A name that is an exception class: built-in, or shaped like one (`ParserError`, `NotFittedError`);
    not None, not "NoneType", not the generic "Exception" that free text was turned into."""
    if not name or name in GENERIC:
        return False
    return name in _BUILTIN_EXCEPTIONS or bool(_EXC_SHAPE.fullmatch(name))


def is_placeholder(explanation: str, system_prompt: str = "") -> bool:
    """The explanation repeats the prompt's answer spec (or says nothing: fewer than two words of three
    letters or more, as SmolLM2's ", In[1] cell 2")."""
    words = _words(explanation)
    if len(re.findall(r"\b[a-z]{3,}\b", words)) < 2:
        return True
    if any(words == _words(t) or (len(words) >= 12 and words in _words(t)) for t in _SPEC_TEXTS):
        return True
    if any(_words(t) in words and len(words) <= len(_words(t)) + 3 for t in _SPEC_TEXTS):
        return True
    return bool(system_prompt) and len(words.split()) >= 4 and f" {words} " in f" {_words(system_prompt)} "


def _asserts(pattern: re.Pattern[str], text: str) -> bool:
    """Some clause of `text` says what `pattern` matches without a negation before it in that clause."""
    for clause in _CLAUSE.split(text):
        for m in pattern.finditer(clause):
            if not _NEGATION.search(clause[: m.start()]):
                return True
    return False


def contradiction(answer: LLMAnswer) -> str | None:
    """The flag and the explanation disagree: "crash": false over an explanation that says the cell raises
    (and names the exception, in `exception` or the text), or "crash": true over "runs without error"."""
    text = answer.explanation
    if not answer.crash:
        names = answer.exception is not None or bool(_ENAME_IN_TEXT.search(text))
        if names and _asserts(_RAISES, text) and not _CLEAN.search(text):
            return ('"crash" is false but the explanation says the cell raises'
                    + (f" {answer.exception}" if answer.exception else ""))
        return None
    if _CLEAN.search(text) and not _asserts(_RAISES, _CLEAN.sub("", text)):
        return '"crash" is true but the explanation says the cell runs without an exception'
    return None


def reply_problems(answer: LLMAnswer, system_prompt: str = "") -> list[str]:
    """What makes the reply itself unusable (sent back to the model in the client's one repair request)."""
    out = []
    if is_placeholder(answer.explanation, system_prompt):
        out.append("the explanation repeats the answer description instead of explaining this cell")
    c = contradiction(answer)
    if c:
        out.append(c + "; make crash, exception and explanation agree")
    if answer.crash and not real_exception_class(answer.exception):
        got = "null" if answer.exception is None else repr(answer.exception)
        out.append(f'"crash" is true but "exception" is {got}, not an exception class such as KeyError')
    return out


def _names_in(source: str) -> set[str]:
    return set(re.findall(r"[A-Za-z_]\w*", source))


def facts_check(answer: LLMAnswer, source: str, probe: ProbeResult | None) -> tuple[list[str], list[str]]:
    """(contradictions, support): what the kernel's facts say against and for the crash claim."""
    if probe is None or not answer.crash:
        return [], []
    against: list[str] = []
    support: list[str] = []
    text = answer.explanation + " " + (answer.suggested_fix or "")
    quoted = set(_QUOTED.findall(answer.explanation))
    ename = answer.exception or ""
    used = _names_in(source)
    if ename == "KeyError":
        for k in probe.keys:
            if str(k.key) in quoted and k.present is True:
                against.append(f"the probe sees key {k.key!r} in {k.expr}")
            elif str(k.key) in quoted and k.present is False:
                support.append(f"the probe verified key {k.key!r} is missing from {k.expr}")
        for name, f in probe.facts.items():
            cols = {c.name for c in f.columns or []}
            if name in used and f.kind == "dataframe" and not f.columns_truncated:
                seen = sorted(quoted & cols)
                if seen and not support:
                    against.append(f"the probe sees column {seen[0]!r} in {name}")
    if ename in ("NameError", "UnboundLocalError"):
        for name in quoted | set(re.findall(r"name (\w+) is not defined", answer.explanation)):
            if name in probe.facts:
                against.append(f"the probe sees {name!r} defined in the kernel")
            elif name in probe.undefined:
                support.append(f"the probe verified {name!r} is not defined")
    if ename == "AttributeError":
        for a in probe.attrs:
            attr = a.expr.rsplit(".", 1)[-1]
            if attr in quoted and a.present is True:
                against.append(f"the probe sees attribute {a.expr}")
            elif attr in quoted and a.present is False:
                support.append(f"the probe verified {a.expr} does not exist")
    if ename in ("ModuleNotFoundError", "ImportError"):
        for mod, found in probe.modules.items():
            if mod in quoted or mod.split(".")[0] in quoted:
                (against if found else support).append(
                    f"the probe {'finds' if found else 'cannot find'} module {mod!r}")
    if ename == "FileNotFoundError":
        for path, exists in probe.paths.items():
            if path in quoted or path in text:
                (against if exists else support).append(f"the probe {'sees' if exists else 'verified no'} file "
                                                        f"{path!r}")
    if ename == "NotFittedError" or _NOT_FITTED.search(text):
        for name, f in probe.facts.items():
            if f.estimator is None or name not in used or name not in text:
                continue
            if f.estimator.is_fitted:
                against.append(f"the probe shows {name} ({f.estimator.class_name}) is fitted")
            else:
                support.append(f"the probe shows {name} ({f.estimator.class_name}) is not fitted")
    return against, support


def line_problem(answer: LLMAnswer, source: str) -> str | None:
    n = len(source.splitlines()) or 1
    if answer.crash and answer.line is not None and answer.line > n:
        return f"line {answer.line} is outside the cell ({n} line{'s' if n > 1 else ''})"
    return None


def model_answer(verdict: LLMVerdict, target: Cell, probe: ProbeResult | None = None,
                 failed_with: str | None = None) -> ModelAnswer:
    """The model's verdict as the policy sees it: a crash claim counts (`finding`) only when coherent and not
    contradicted by the runtime facts; `checked` when the facts corroborate it, or when the cell already failed
    in this state with that exception (`failed_with`: its exception class, "" when only the failure is known,
    e.g. the editor's "it raised when it last ran"; or the cell's recorded error); `dropped` says why not."""
    from crane.llm.model_finding import verdict_to_finding

    a = verdict.answer
    if not a.crash:
        return ModelAnswer(crash=False)
    problems = reply_problems(a)
    lp = line_problem(a, target.source)
    if lp:
        problems.append(lp)
    against, support = facts_check(a, target.source, probe)
    problems += [f"contradicted by the runtime facts: {c}" for c in against]
    if problems:
        return ModelAnswer(crash=False, dropped=problems)
    finding = verdict_to_finding(verdict, target)
    if finding is None:
        return ModelAnswer(crash=False)
    if failed_with is None and target.error is not None:
        failed_with = target.error.ename
    if failed_with == a.exception or failed_with == "":
        support.append(f"the cell already failed{f' with {a.exception}' if failed_with else ''} in this state")
    if support:
        finding.evidence = [*finding.evidence, *(f"checked: {s}" for s in support)]
    return ModelAnswer(crash=True, finding=finding, checked=bool(support))
