"""Issue 45, kernel/witness.py: the compiled witness check (one row per owner, C-level reads and identity tests)
answers as the one-lookup-at-a-time check does, and finds every change the witness covers.

Runs the kernel-side module in the test's own interpreter (it is stdlib-only): real classes, module dicts,
functions and closures, recorded by a `_Witness` as the proof's walk records them, then changed one way each. Each
case asserts that the compiled check (`holds`) and the one-by-one check (`_holds_one_by_one`, the check before
this change and the fallback without `_operator.is_`) both say held before the change and not held after it.
"""

from __future__ import annotations

import types

import pytest

from crane.sandbox.kernel import witness as W


def _judge(f):
    return (f.__module__ == "lib", False)


def _library(c):
    return True


def _state():
    mod = types.ModuleType("lib")
    ns = vars(mod)

    class Base:
        def __reduce__(self):
            return (Base, ())

    class Thing(Base):
        attr = None
        value = 1

    def make():
        n = 3

        def inner():
            return n
        return inner

    fn = make()
    ns.update(Thing=Thing, helper=len, flag=None, fn=fn)
    w = W._Witness()
    for owner, name in ((Thing, "__reduce__"), (Thing, "__getstate__"), (Thing, "attr"), (Thing, "value"),
                        (Base, "__reduce__"), (ns, "helper"), (ns, "flag"), (ns, "missing"), (ns, "fn")):
        w.get(owner, name)
    w.mro(Thing)
    w.lib(Thing, True)
    w.fn(fn, _judge(fn))
    w.fn(Base.__reduce__, _judge(Base.__reduce__))
    return w, {"ns": ns, "Thing": Thing, "Base": Base, "fn": fn}


def _set_value(s):
    s["Thing"].value = 2


def _other_inner():
    m = 5

    def other():
        return m + 1
    return other


def _value_class_changed(s):
    class A:
        pass

    class B:
        pass
    a = A()
    s["Thing"].value = a
    return a, B


CHANGES = {
    "absent-name-added-to-class": lambda s: setattr(s["Thing"], "__getstate__", lambda self: {}),
    "absent-module-name-added": lambda s: s["ns"].__setitem__("missing", 1),
    "none-value-removed": lambda s: s["ns"].pop("flag"),
    "none-class-attr-removed": lambda s: delattr(s["Thing"], "attr"),
    "value-replaced": _set_value,
    "module-function-replaced": lambda s: s["ns"].__setitem__("helper", abs),
    "base-method-replaced": lambda s: setattr(s["Base"], "__reduce__", lambda self: (s["Base"], ())),
    "code-swapped": lambda s: setattr(s["fn"], "__code__", _other_inner().__code__),
    "closure-cell-changed": lambda s: setattr(s["fn"].__closure__[0], "cell_contents", 4),
    "bases-changed": lambda s: setattr(s["Thing"], "__bases__", (type("Base2", (), {}),)),
}


def _both(w):
    w.rows = None  # compiled anew
    return w.holds(_judge, _library), w._holds_one_by_one(_judge, _library)


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_every_change_is_found_by_both_checks(change):
    w, s = _state()
    assert W._IS is not None  # the interpreter's own `_operator.is_` was found: the compiled check runs
    assert _both(w) == (True, True)
    w.holds(_judge, _library)  # compiled before the change, as a kept witness is
    CHANGES[change](s)
    assert w.holds(_judge, _library) is False
    assert w._holds_one_by_one(_judge, _library) is False


def test_a_found_values_class_changed_in_place_is_found():
    _w, s = _state()
    a, b = _value_class_changed(s)
    w = W._Witness()
    w.get(s["Thing"], "value")
    assert w.holds(_judge, _library) and w._holds_one_by_one(_judge, _library)
    a.__class__ = b  # the same object, another class
    assert w.holds(_judge, _library) is False
    assert w._holds_one_by_one(_judge, _library) is False


def test_unchanged_state_holds_many_times():
    w, _s = _state()
    assert all(w.holds(_judge, _library) for _ in range(3))


class _Planted:
    """A key with a string's hash whose comparison records that it ran (round 16, F1)."""

    def __init__(self, name, ran):
        self.name, self.ran = name, ran

    def __hash__(self):
        return hash(self.name)

    def __eq__(self, other):
        self.ran.append(self.name)
        return False


class _PlantedStr(str):
    __hash__ = str.__hash__
    ran: list = []

    def __eq__(self, other):
        _PlantedStr.ran.append(str(self))
        return str.__eq__(self, other)



def _plant_colliding(s, ran):
    import gc
    d = gc.get_referents(s["Thing"].__dict__)[0]  # (the class's own dict, under its proxy)
    d[_Planted("__reduce__", ran)] = None


def _plant_str_subclass(s, ran):
    import gc
    d = gc.get_referents(s["Thing"].__dict__)[0]
    v = d.pop("value")
    d[_PlantedStr("value")] = v  # (the class works as before: the same text and hash)
    _PlantedStr.ran = ran


@pytest.mark.parametrize("plant", [
    _plant_colliding, _plant_str_subclass,
    lambda s, ran: s["ns"].__setitem__(_Planted("helper", ran), 1),
], ids=["class-colliding-key", "class-str-subclass-key", "module-colliding-key"])
def test_a_key_planted_after_the_answer_was_kept_is_never_compared(plant):
    """The check reads an owner only while every key of it is an exact `str`: a planted key is never compared
    (its `__eq__` never runs), and the answer is not reused."""
    w, s = _state()
    w.holds(_judge, _library)  # compiled, as a kept witness is
    ran: list = []
    plant(s, ran)
    ran.clear()  # (planting compares the key with the one it collides with: the notebook's own code)
    assert w.holds(_judge, _library) is False
    assert w._holds_one_by_one(_judge, _library) is False
    assert ran == []
