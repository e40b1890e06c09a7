"""Run by test_guard_alone_round8.py in each interpreter (3.12+: the sys.monitoring path, which scans no
arguments; 3.11: the profile hook): the guard compiled as the worker compiles it and set up as a run with no OS layer
sets it up (`vet_c_methods`, the combinators); cells that hand a refused C method (CRANE's SQLite authorizer taken
off) to C callers and library code that are on no list — `list.sort(key=)`, a `property`, `functools.lru_cache`,
`operator.call`, `__init_subclass__`, a `weakref` callback, the method taken from the type's dict or `__mro__`,
a library function — each refused; honest cells doing the same with honest callables: not. Exit 1 if one was not so."""
import sys

from guard_script import load_guard, run_cells

mod = load_guard(sys.argv[1])  # server/crane/sandbox
PRE = ("import sqlite3, functools, operator, weakref, collections, json\ncon = sqlite3.connect(':memory:')\n"
       "class Yes:\n    def __call__(self, *a):\n        return 0\n")
CELLS = {
    "list.sort key": "[None].sort(key=con.set_authorizer)",
    "a property": "class P(Yes):\n    a = property(con.set_authorizer)\nP().a",
    "lru_cache": "functools.lru_cache(con.set_authorizer)(None)",
    "operator.call": "getattr(operator, 'call', lambda f, *a: f(*a))(con.set_authorizer, None)",
    "__init_subclass__": "class B:\n    __init_subclass__ = classmethod(lambda c: None)\n"
                         "B.__init_subclass__ = con.set_authorizer\nclass C(B, authorizer_callback=None): pass",
    "the type's dict": "[con].sort(key=lambda c: sqlite3.Connection.__dict__['set_authorizer'].__get__(c, sqlite3.Connection)(None))",
    "the mro": "[None].sort(key=type(con).__mro__[0].set_authorizer.__get__(con, type(con)))",
    "a library function": "json.loads('[1]', object_pairs_hook=None, parse_int=lambda s: con.set_authorizer(None))",
    "a library's hook": "json.loads('{}', object_hook=con.set_authorizer)",
    "defaultdict factory": "class F(collections.defaultdict):\n    pass\nd = collections.defaultdict(functools.partial("
                           "operator.call, con.set_authorizer, None))\nd['x']"
                           if sys.version_info >= (3, 11) else "con.set_authorizer(None)",
    "reduce (a CRANE wrapper calls it)": "functools.reduce(sqlite3.Connection.set_authorizer, [None], con)",
    "ctypes.CDLL through map": "import ctypes\nlist(map(ctypes.CDLL, [None]))",
    "a CDLL's __getattr__ as a sort key": "import ctypes\n['getpid'].sort(key=ctypes.pythonapi.__class__.__getattr__"
                                          ".__get__(ctypes.pythonapi))",
    "importlib.import_module through map": "import importlib\nlist(map(importlib.import_module, ['json']))",
    "ctypes.CDLL handed to library code": "import ctypes\njson.loads('[1]', parse_int=ctypes.CDLL)",
    # round 9: judged by the function where it starts (3.12+ scans no arguments): the cell handed it to the
    # library code that calls it, directly or through that library's C code
    "import_module handed to re.sub": "import re, importlib\nre.sub('j', importlib.import_module, 'j')",
    "import_module handed to a json hook": "import importlib\njson.loads('1', parse_int=importlib.import_module)",
    "ctypes.CDLL as a float parser": "import ctypes\njson.loads('1.5', parse_float=ctypes.CDLL)",
    "honest": "x = [3, 1]; x.sort(key=abs); functools.lru_cache(abs)(-1); collections.defaultdict(list)['a']\n"
              "class P:\n    a = property(len)\n    def __len__(self):\n        return 2\n"
              "assert P().a == 2 and json.loads('{\"a\": 1}', object_hook=dict) == {'a': 1}\n"
              "con.execute('select 1').fetchall()\nlist(map(json.dumps, [1])), sorted(['b', 'a'], key=str.upper)\n"
              "import pkgutil\nassert pkgutil.resolve_name('json:dumps') is json.dumps",  # (import_module its own)
}
import sqlite3  # noqa: E402,F401 (loaded before the run, as the worker loads it to wrap `connect`)

refused: list = []
g = mod.CallGuard(refused.append)
mod.guard_combinators(g)
got_types: list = getattr(mod, "vet_c_methods", lambda g: [])(g)  # (none before round 8)
bad = 0 if "sqlite3.Connection.set_authorizer" in got_types else 1
print("vetted in their types:", got_types)

# (before round 9, 3.12+ let library code call a function refused to user code alone that the cell handed it)
sys.exit(run_cells(g, refused, PRE, CELLS, bad))
