"""The OS transplant session's load vet (worker/load_vet.py) decides what is a session command's code against what
existed before the command ran, never from strings the command controls (review M2). In this process: a snapshot,
then what a command could do to a library class or module, then the vet's answer. Each case was taken for library
code before (a library function in a class's place, library code given the command's globals, a replaced module
attribute, a key whose `__eq__` would run in the vet's lookup, a forged filename). And (fixC's open point, h7) code an
unchanged library function reaches through state a command changed since the start: a keyword default, a default, a
closure cell's contents, a module global its code names, or the same one library function deeper: each was taken for
library code before (the vet looked at the function's code and globals dict alone)."""

from __future__ import annotations

import heapq
import importlib.resources._common as resources_common
import json
import shutil
import sys
import types

import pytest

from crane.sandbox.worker import load_vet

Library = json.JSONEncoder  # (a library class: the standard library's, its methods restored after each test)


@pytest.fixture
def snapshot():
    mod = types.ModuleType("crane_lv_library")
    mod.Library = Library  # type: ignore[attr-defined]
    mod.helper = json.dumps  # type: ignore[attr-defined]
    sys.modules[mod.__name__] = mod
    kept = Library.__dict__["default"]
    load_vet._LV_START.clear()
    load_vet.snapshot_library({})
    try:
        yield mod
    finally:
        Library.default = kept  # type: ignore[method-assign]
        load_vet._LV_START.clear()
        del sys.modules[mod.__name__]


def test_an_unchanged_library_class_and_module_are_not_the_session_s(snapshot):
    assert not load_vet._lv_class(Library, {})
    assert not load_vet._lv_module(snapshot, {})
    assert not load_vet._lv_replaced(snapshot, "helper", json.dumps, {})


def test_a_library_function_set_in_a_library_class_s_place_is_the_session_s(snapshot):
    Library.default = shutil.rmtree  # type: ignore[method-assign,assignment]
    assert load_vet._lv_class(Library, {})


def test_library_code_with_the_command_s_globals_is_the_session_s(snapshot):
    own = types.FunctionType(json.dumps.__code__, {"JSONEncoder": object}, "dumps")
    assert load_vet._lv_value(own, {})
    assert not load_vet._lv_value(json.dumps, {})


def test_new_code_with_a_library_s_filename_is_the_session_s(snapshot):
    def own(self, state):
        return None
    forged = types.FunctionType(own.__code__.replace(co_filename=json.__file__), json.__dict__, "own")
    assert load_vet._lv_value(forged, {})


def test_a_replaced_module_attribute_is_the_session_s(snapshot):
    def own(*args):
        return None
    snapshot.helper = shutil.rmtree
    assert load_vet._lv_replaced(snapshot, "helper", shutil.rmtree, {})
    snapshot.Library = type("Library", (Library,), {})
    assert load_vet._lv_replaced(snapshot, "Library", snapshot.Library, {})


def test_a_key_that_is_not_a_str_is_the_session_s_and_its_eq_never_runs(snapshot):
    ran = []

    class Key(str):
        def __hash__(self):
            return hash("__getattr__")

        def __eq__(self, other):
            ran.append(other)
            return False

    snapshot.__dict__[Key("__getattr__")] = 1
    assert load_vet._lv_module(snapshot, {})
    assert ran == []


def own(*args, **kwargs):  # (the command's code: a test file is no library's)
    return None


def test_unchanged_library_functions_reach_no_code_of_the_session_s(snapshot):
    for fn in (json.dumps, heapq.nsmallest, resources_common.as_file, shutil.copy):
        assert not load_vet._lv_value(fn, {}), fn


def test_a_keyword_default_the_command_rebound_is_the_session_s(snapshot):
    kw = json.dumps.__kwdefaults__
    assert kw is not None
    kw["default"] = own  # (json.dumps calls it for what it cannot encode)
    try:
        assert load_vet._lv_value(json.dumps, {})
    finally:
        kw["default"] = None


def test_a_default_the_command_rebound_is_the_session_s(snapshot):
    kept = heapq.nsmallest.__defaults__
    heapq.nsmallest.__defaults__ = (own,)  # (its `key`)
    try:
        assert load_vet._lv_value(heapq.nsmallest, {})
    finally:
        heapq.nsmallest.__defaults__ = kept


def test_a_closure_cell_the_command_refilled_is_the_session_s(snapshot):
    fn = resources_common.as_file  # (a singledispatch function: its `dispatch` cell picks what it calls)
    assert fn.__closure__ is not None
    cell = fn.__closure__[fn.__code__.co_freevars.index("dispatch")]
    kept = cell.cell_contents
    cell.cell_contents = own
    try:
        assert load_vet._lv_value(fn, {})
    finally:
        cell.cell_contents = kept


def test_a_module_global_the_command_rebound_is_the_session_s(snapshot):
    class Own(json.JSONEncoder):
        pass

    json.JSONEncoder = Own  # type: ignore[misc]  # (json.dumps builds one with other arguments)
    try:
        assert load_vet._lv_value(json.dumps, {})
    finally:
        json.JSONEncoder = Library  # type: ignore[misc]


def test_a_global_a_library_function_deeper_reads_is_the_session_s(snapshot):
    kept = shutil.copyfileobj
    shutil.copyfileobj = own  # (shutil.copy -> copyfile -> copyfileobj)
    try:
        assert load_vet._lv_value(shutil.copy, {})
    finally:
        shutil.copyfileobj = kept
