"""Issue 42 (h6, fixB's leftovers): the export's reads of library dicts a notebook can plant a key in compare no key
of the notebook's (IPython 8 and 9, the OS transplant path).

Beside the shell's own dicts (test_shell_dict_keys.py), the export looks names up in dicts that are not module
namespaces (those are proven by kernel/lookups.odd_key): pandas' option tables (`_deprecated_options` and the option
tree, shared/carry.py's read side), library classes' dicts (`_Lib.method`: `random.Random`'s `getstate`; pandas'
`_accessors`), instance dicts of library objects (`_Lib.attrs`, `stops._unreproducible`), JAX's backend table. A
planted key (a `str` subclass or any object) sharing the hash of the name asked for has its `__eq__` run by `in`,
`dict.get` or `[]`, inside CRANE's frames, in the kernel. Each dict is now proven to hold exact `str` keys before a
name is looked up in it (what it holds is then unread: that library's state is not carried, a crash in it only
"likely"). The planted key's `__eq__` calls `hit` (tests/sandbox/marked_runs.HIT), which records only with CRANE's
kernel-side code on the stack.
"""

from __future__ import annotations

import os

import pytest

from crane.kernel.manager import start_kernel
from crane.sandbox.transplant import transplant

from ..kernel_envs import KERNEL_ENVS, kernel_python
from .marked_runs import HIT

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the sandbox needs Linux")

SETUP = r"""
import sys, types, gc, random
import pandas as pd
try:
    import jax  # (today's environment: the real one)
except ImportError:
    pass
sys.modules.setdefault('jax', types.ModuleType('jax'))  # the kernel refuses to fork: every run is a copy
""" + HIT + r"""
class _CraneH6Key:
    def __init__(self, name):
        self.name = name
    def __hash__(self):
        return hash(self.name)
    def __eq__(self, other):
        hit(self.name)
        return False
def _crane_h6_plant(d, name):
    key = _CraneH6Key(name)
    had = name in d
    v = d.pop(name, None)
    d[key] = None  # (before the name's own entry: a lookup of the name meets it first)
    if had:
        d[name] = v
    return key
def _crane_h6_class_dict(cls):
    return gc.get_referents(cls.__dict__)[0]  # (the dict behind the class's mappingproxy)
"""

# where the key is planted (an expression for the dict, in the kernel), the name whose hash it takes, and whether
# the case needs today's environment (JAX)
PLANTED = {
    "pandas-deprecated-options": ("pd._config.config._deprecated_options", "display.max_rows", False),
    "pandas-option-tree": ("pd._config.config._global_config['display']", "max_rows", False),
    "random-class-dict": ("_crane_h6_class_dict(random.Random)", "getstate", False),
    "pandas-class-dict": ("_crane_h6_class_dict(pd.DataFrame)", "_accessors", False),
    "jax-backends": ("sys.modules['jax._src.xla_bridge']._backends", "cpu", True),
    "jax-config-instance-dict": ("sys.modules['jax._src.config'].config.__dict__", "_value_holders", True),
}


@pytest.fixture(scope="module", params=KERNEL_ENVS)
def conn(request, tmp_path_factory):
    k = start_kernel(tmp_path_factory.mktemp(f"h6-keys-{request.param}"), python=kernel_python(request.param))
    c = k.connection
    assert c.run_cell(SETUP, timeout=300).status == "ok"
    yield c
    k.shutdown()


@pytest.mark.parametrize("where", list(PLANTED))
def test_a_key_planted_in_a_library_dict_is_never_compared(conn, where):
    expr, name, needs_jax = PLANTED[where]
    if needs_jax and conn.evaluate("'jax._src.config' in sys.modules") is not True:
        pytest.skip("JAX is only in today's kernel environment")
    if needs_jax:  # (a backend table is made on first use: the CPU's)
        assert conn.run_cell("import jax.numpy as _crane_h6_jnp; _crane_h6_jnp.zeros(1).block_until_ready(); "
                             "del _crane_h6_jnp").status == "ok"
    assert conn.run_cell(f"_crane_h6_key = _crane_h6_plant({expr}, {name!r}); HITS.clear()").status == "ok"
    try:
        v = transplant(conn, "print(undefined_h6)", 60.0)
        hits = conn.evaluate("list(HITS)")
    finally:
        assert conn.run_cell(f"del ({expr})[_crane_h6_key]; del _crane_h6_key").status == "ok"
    assert hits == [], hits  # (before: the key's __eq__ ran in the export)
    assert (v.verdict, v.ename) == ("crash", "NameError"), (v.reason, v)


def test_a_key_planted_in_a_notebook_class_dict_is_never_compared(conn):
    """A class the notebook made with `type(name, bases, namespace)` keeps a namespace key of any type: the proof's
    lookups of pickling hooks in its dict (`__reduce_ex__`, ...) would compare it. Such a value is refused, naming
    it; the key's `__eq__` never runs."""
    assert conn.run_cell("_crane_h6_cls = type('H6', (), {_CraneH6Key('__reduce_ex__'): None, "
                         "_CraneH6Key('__getstate__'): None, _CraneH6Key('__del__'): None, "
                         "_CraneH6Key('__reduce__'): None}); h6_obj = _crane_h6_cls(); HITS.clear()").status == "ok"
    try:
        v = transplant(conn, "print(h6_obj); print(undefined_h6)", 60.0)
        hits = conn.evaluate("list(HITS)")
    finally:
        assert conn.run_cell("del _crane_h6_cls, h6_obj").status == "ok"
    assert hits == [], hits
    assert v.verdict == "unavailable" and "h6_obj" in (v.reason or ""), (v.reason, v)


def test_a_key_planted_in_a_keras_model_s_dict_is_never_compared(conn):
    """`stops._unreproducible` reads a Keras model's optimizer's instance dict (`built`) before the model is copied
    (the proof checks only the model's own dict's keys): through `str_get` now (before, `dict.get` ran a planted
    key's `__eq__`); the model is then refused, naming why. Today's environment only (Keras)."""
    if conn.evaluate("__import__('importlib').util.find_spec('keras') is not None") is not True:
        pytest.skip("Keras is only in today's kernel environment")
    assert conn.run_cell("import keras\nh6_model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])\n"
                         "h6_model.compile(optimizer='adam', loss='mse')\n"
                         "_crane_h6_key = _crane_h6_plant(h6_model.optimizer.__dict__, 'built'); HITS.clear()",
                         timeout=300).status == "ok"
    try:
        v = transplant(conn, "print(h6_model); print(undefined_h6)", 120.0)
        hits = conn.evaluate("list(HITS)")
    finally:
        assert conn.run_cell("del h6_model.optimizer.__dict__[_crane_h6_key], h6_model, _crane_h6_key").status == "ok"
    assert hits == [], hits
    assert v.verdict == "unavailable" and "h6_model" in (v.reason or ""), (v.reason, v)
