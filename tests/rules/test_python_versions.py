"""The rules' version-dependent wording against the real interpreters (every supported Python this machine has):
an unexpected keyword's TypeError (3.13's "Did you mean", CPython's suggestion distance reproduced in
crane.rulekit.python_versions) and the incomplete-input exception IPython's compile raises. The kernels' own
messages through the whole predictor: tests/kernel/test_kernel_pythons.py."""

from __future__ import annotations

import json
import random
import subprocess

import pytest

from crane.probe.facts import ParamFacts
from crane.rulekit.python_versions import cpython_suggestion, parse_version
from crane.rules.calls import bind
from crane.rules.syntax import incomplete_input_line

from ..kernel_envs import supported_interpreters

WORDS = ["fit_intercept", "sample_weight", "X", "y", "n_jobs", "copy_X", "alpha", "max_iter", "learning_rate",
         "random_state", "größe", "Größe", "n_estimators", "verbose", "tol", "a", "ab", "abc", "data", "Data"]


def _mutations(rng: random.Random, word: str) -> str:
    ops = [
        lambda w: w[:-1],  # a letter dropped
        lambda w: w + rng.choice("sxe_"),  # one added
        lambda w: w.swapcase(),  # case
        lambda w: w[::-1],  # far
        lambda w: w[:1] + w[2:3] + w[1:2] + w[3:] if len(w) > 3 else w + "z",  # two swapped
        lambda w: w.replace("_", ""),
        lambda w: "".join(rng.choice("abcdefgh") for _ in range(rng.randint(1, 12))),  # random
    ]
    out = rng.choice(ops)(word)
    return out if out.isidentifier() else word + "_"


def _cases(n: int = 400) -> list[tuple[list[str], list[str], str]]:
    """(positional-or-keyword params, keyword-only params, the unexpected keyword)."""
    rng = random.Random(44)
    cases: list[tuple[list[str], list[str], str]] = []
    while len(cases) < n:
        names = rng.sample(WORDS, rng.randint(1, 6))
        split = rng.randint(0, len(names))
        keyword = _mutations(rng, rng.choice(names))
        if keyword not in names:
            cases.append((names[:split], names[split:], keyword))
    return cases


RUN = """
import json, sys
out = []
for pos, kwonly, keyword in json.loads(sys.stdin.read()):
    params = ", ".join(pos + (["*"] + kwonly if kwonly else []))
    ns = {}
    exec(f"def f({params}):\\n    pass", ns)
    try:
        ns["f"](**{keyword: 1})
    except TypeError as exc:
        out.append(str(exc))
print(json.dumps(["%d.%d" % sys.version_info[:2], out]))
"""


@pytest.mark.parametrize("exe", supported_interpreters())
def test_an_unexpected_keyword_is_worded_as_each_python_words_it(exe):
    cases = _cases()
    out = subprocess.run([exe, "-I", "-c", RUN], input=json.dumps(cases), capture_output=True, text=True,
                         timeout=120, check=True).stdout
    version, messages = json.loads(out)
    python = parse_version(version)
    assert python is not None and len(messages) == len(cases)
    suggested = 0
    for (pos, kwonly, keyword), real in zip(cases, messages, strict=True):
        params = [ParamFacts(name=n, kind="POSITIONAL_OR_KEYWORD") for n in pos] + [
            ParamFacts(name=n, kind="KEYWORD_ONLY") for n in kwonly]
        v = bind("f", params, 0, [keyword], exact=True, python=python)
        assert v is not None and v.message == real, (pos, kwonly, keyword)
        suggested += "Did you mean" in real
    assert (suggested > 50) == (python >= (3, 13)), suggested  # the cases do exercise the suggestion


def test_the_suggestion_distance():
    assert cpython_suggestion("fit_intercep", ["self", "fit_intercept", "copy_X"]) == "fit_intercept"
    assert cpython_suggestion("x", ["X", "y"]) == "X"  # case alone costs least
    assert cpython_suggestion("slef", ["self", "fit_intercept"]) is None  # two moves in four letters: too far
    assert cpython_suggestion("a", ["a"]) is None  # itself is never a suggestion
    assert cpython_suggestion("abc", ["abd", "abe"]) == "abd"  # ties: the first


INCOMPLETE = {
    "x = f(1,\n": 1, "rows = [1, 2": 1, "def f():\n": 1, 'text = """abc\n': 1, "x = (1 +\n  2\n": 2,
    "x = (1,\ny = 2\n": None, "x = 1 +\n": None, "s = 'abc\n": None, "for i in x\n    pass\n": None, "x = 1\n": None,
}

COMPILE = """
import ast, codeop, json, sys
out = {}
for src in json.loads(sys.stdin.read()):
    try:
        compile(src, "<cell>", "exec", codeop.Compile().flags | ast.PyCF_ONLY_AST, 1)
        out[src] = None
    except SyntaxError as exc:
        out[src] = [type(exc).__name__, exc.msg, exc.lineno]
print(json.dumps(["%d.%d" % sys.version_info[:2], out]))
"""


@pytest.mark.parametrize("exe", supported_interpreters())
def test_incomplete_input_as_each_python_compiles_a_cell(exe):
    """What IPython's compile (codeop's flags) raises on each interpreter is what the rule predicts (the daemon's
    compiler finds the incomplete cells; the exception's name follows the kernel's version)."""
    from crane.rulekit.python_versions import incomplete_input_ename

    out = subprocess.run([exe, "-I", "-c", COMPILE], input=json.dumps(list(INCOMPLETE)), capture_output=True,
                         text=True, timeout=120, check=True).stdout
    version, found = json.loads(out)
    python = parse_version(version)
    assert python is not None
    if python < (3, 11):
        pytest.skip("Python 3.10's codeop has no incomplete-input flag (IPython 8.23+ needs 3.10; 9 needs 3.11)")
    for src, line in INCOMPLETE.items():
        assert incomplete_input_line(src) == line, src
        real = found[src]
        if line is None:
            assert real is None or real[1] != "incomplete input", (src, real)
        else:
            assert real == [incomplete_input_ename(python), "incomplete input", line], (src, real)
