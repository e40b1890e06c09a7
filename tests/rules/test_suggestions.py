"""'Did you mean ...?' in KeyError and AttributeError findings, on real kernel state (tests/rules/conftest.py):
the closest existing column, key or attribute when one is close — same name up to case first, then by
similarity — and nothing when none is close. Each crashing target is also run for real."""

from __future__ import annotations

import pytest

from crane.rulekit.suggest import CUTOFF, closest, hint

from .conftest import predict_source, run_target

SETUP = (
    "import pandas as pd\n"
    "from sklearn.ensemble import RandomForestClassifier\n"
    "df = pd.DataFrame({'price': [1.0, 2.0], 'Quantity': [3, 4], 'city name': ['a', 'b']})\n"
    "d = {'learning_rate': 0.1, 'epochs': 3}\n"
    "rf = RandomForestClassifier(n_estimators=2).fit([[0], [1]], [0, 1])\n"
    "class Config:\n"
    "    def __init__(self):\n"
    "        self.batch_size = 32\n"
    "cfg = Config()\n"
)


def first(kernel, target, rule, ename):
    findings = predict_source(kernel, SETUP, target)
    assert findings and findings[0].rule == rule, findings
    run = run_target(kernel, target)
    assert run.ename == ename, (run.ename, run.evalue)
    return findings[0].message


@pytest.mark.parametrize(("target", "suggestion"), [
    ("df['pricee']", "price"),  # a typo
    ("df['quantity']", "Quantity"),  # another case
    ("df['city_name']", "city name"),
    ("d['learning_rat']", "learning_rate"),  # dict keys
])
def test_missing_key_names_the_closest_existing_one(kernel, target, suggestion):
    message = first(kernel, target, "missing-key", "KeyError")
    assert message.endswith(f" (did you mean {suggestion!r}?)"), message


def test_missing_key_without_a_close_one_suggests_nothing(kernel):
    assert "did you mean" not in first(kernel, "df['zzz']", "missing-key", "KeyError")
    assert "did you mean" not in first(kernel, "d['batch']", "missing-key", "KeyError")


def test_after_an_in_cell_drop_the_remaining_columns_are_the_candidates(kernel):
    target = "df = df.drop(columns=['price'])\ndf['quantty'].sum()"
    message = first(kernel, target, "missing-key", "KeyError")
    assert message.endswith(" (did you mean 'Quantity'?)"), message


def test_several_missing_columns_each_get_their_closest(kernel):
    message = first(kernel, "df[['pricee', 'Quantity', 'zzz']]", "missing-key", "KeyError")
    assert message.endswith(" (did you mean 'price' for 'pricee'?)"), message


@pytest.mark.parametrize(("target", "suggestion"), [
    ("df.colums", "columns"),
    ("rf.feature_importance", "feature_importances_"),
    ("cfg.batchsize", "batch_size"),  # an instance attribute of a user class
])
def test_missing_attribute_names_the_closest_existing_one(kernel, target, suggestion):
    message = first(kernel, target, "missing-attribute", "AttributeError")
    assert message.endswith(f" (did you mean {suggestion!r}?)"), message


def test_missing_attribute_without_a_close_one_suggests_nothing(kernel):
    message = first(kernel, "cfg.optimizer", "missing-attribute", "AttributeError")
    assert message == "'Config' object has no attribute 'optimizer'"


def test_policy():
    assert closest("Price ", ["price", "prices"]) == "price"  # same up to case and spaces wins
    assert closest("pricee", ["price", "prize"]) == "price"
    assert closest("x", ["y", "z"]) is None and closest("cost", ["coat"]) is None  # 0.75 < CUTOFF
    assert closest("a", []) is None and closest(3, ["3"]) is None and closest("a", [1, None]) is None
    assert closest("abc", ["abc"]) is None  # the word itself is not a suggestion
    assert CUTOFF == 0.8 and hint("colums", ["columns"]) == " (did you mean 'columns'?)" and hint("q", ["z"]) == ""
