"""call-signature end to end (real kernel, real probe, whole predictor): too many positional arguments, an
unexpected keyword and missing arguments are reported only for signatures that are the callable's own, with
CPython's exact message; every crashing case is run for real and must raise that message, every clean case
must give no finding and run clean — including matplotlib functions whose decorators rewrite the signature."""

from __future__ import annotations

import sys

import pytest

from ..library_versions import kernel_library
from .conftest import predict_source, run_target

SETUP = """
import functools, dataclasses
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from sklearn.linear_model import LinearRegression

def area(width, height=1, *, unit):
    return width * height

def pair(a, b):
    return a, b

def only_pos(a, /, b=2):
    return a

class Thing:
    def __init__(self, v):
        self.v = v
    def scale(self, k):
        return self.v * k
    @classmethod
    def make(cls, v):
        return cls(v)

@dataclasses.dataclass
class Point:
    x: float
    y: float = 0.0

def lenient(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(args[0])
    return wrapper

@lenient
def first(a):
    return a

thing = Thing(2)
fig0, ax0 = plt.subplots()
"""


def check(kernel, target, message=None):
    findings = predict_source(kernel, SETUP, target)
    run = run_target(kernel, target)
    if message is None:
        assert findings == [], findings
        assert run.status == "ok", (run.ename, run.evalue)
        return
    assert findings, f"no finding; the cell raised {run.ename}: {run.evalue}"
    if sys.version_info >= (3, 13) and message in SUGGESTED_FROM_3_13:  # the kernel is this interpreter
        message += f". Did you mean '{SUGGESTED_FROM_3_13[message]}'?"
    f = findings[0]
    assert (f.rule, f.ename, f.message) == ("call-signature", "TypeError", message)
    assert (run.status, run.ename, run.evalue) == ("error", "TypeError", message)


CRASHES = [
    ("area(1, 2, 3, unit='m')",
     "area() takes from 1 to 2 positional arguments but 3 positional arguments (and 1 keyword-only argument) "
     "were given"),
    ("pair(1, 2, 3)", "pair() takes 2 positional arguments but 3 were given"),
    ("area(1, unit='m', depth=3)", "area() got an unexpected keyword argument 'depth'"),
    ("only_pos(a=1)", "only_pos() got some positional-only arguments passed as keyword arguments: 'a'"),
    ("pair()", "pair() missing 2 required positional arguments: 'a' and 'b'"),
    ("area(3)", "area() missing 1 required keyword-only argument: 'unit'"),
    ("thing.scale(2, 3)", "Thing.scale() takes 2 positional arguments but 3 were given"),
    ("thing.scale()", "Thing.scale() missing 1 required positional argument: 'k'"),
    ("Thing.make(1, 2)", "Thing.make() takes 2 positional arguments but 3 were given"),
    ("t = Thing()", "Thing.__init__() missing 1 required positional argument: 'v'"),
    ("p = Point(1, 2, 3)", "Point.__init__() takes from 2 to 3 positional arguments but 4 were given"),
    ("model = LinearRegression(False)", "LinearRegression.__init__() takes 1 positional argument but 2 were given"),
    ("model = LinearRegression(fit_intercep=False)",
     "LinearRegression.__init__() got an unexpected keyword argument 'fit_intercep'"),
]


# facecolor passed positionally: matplotlib 3.6-3.7's make_keyword_only takes it with a deprecation warning,
# from 3.8 on it is keyword-only (CLEAN below has it otherwise)
FIGURE = "fig = plt.figure(1, (4, 3), 100, 'white')\nplt.close(fig)"
FIGURE_IS_KEYWORD_ONLY = kernel_library("matplotlib") >= (3, 8)
if FIGURE_IS_KEYWORD_ONLY:
    CRASHES.append((FIGURE, "figure() takes from 0 to 3 positional arguments but 4 were given"))


# Python 3.13 suggests the closest parameter for an unexpected keyword (rulekit/python_versions.py); 'depth' is
# too far from area's parameters for one.
SUGGESTED_FROM_3_13 = {"LinearRegression.__init__() got an unexpected keyword argument 'fit_intercep'": "fit_intercept"}


@pytest.mark.parametrize("target,message", CRASHES, ids=[c[0] for c in CRASHES])
def test_binding_errors_of_own_signatures(kernel, target, message):
    check(kernel, target, message)


CLEAN = [
    "area(1, 2, unit='m')",
    "pair(b=1, a=2)",
    "thing.scale(k=3)",
    "p = Point(1)\nq = Point(x=1, y=2)",
    "model = LinearRegression(fit_intercept=False)",
    # decorated: the wrapper accepts more than the signature inspect reports
    "first(1, 2, 3)",
    # matplotlib's make_keyword_only (3.8-3.9: call_axes_locator; 3.7: a plain parameter)
    "bb = ax0.get_tightbbox(fig0.canvas.get_renderer(), True)",
    *([] if FIGURE_IS_KEYWORD_ONLY else [FIGURE]),
    # the cell redefines the function before calling it
    "def pair(a, b, c):\n    return a\npair(1, 2, 3)",
    # conditional: may not run
    "if False:\n    pair(1, 2, 3)",
]


@pytest.mark.parametrize("target", CLEAN, ids=[c.splitlines()[0] for c in CLEAN])
def test_valid_calls_are_not_flagged(kernel, target):
    check(kernel, target)
