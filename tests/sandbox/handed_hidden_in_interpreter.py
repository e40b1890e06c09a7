"""Run by test_guard_alone_round10.py in each interpreter (3.11's profile hook, 3.12+'s sys.monitoring): the guard
compiled as the worker compiles it, set up as a run with no OS layer sets it up; cells that hide a function refused to
user code alone (`importlib.import_module`, `ctypes.CDLL`, `inspect.stack`) inside an object they hand to
library code that later calls it — an object of the cell's class whose `__call__` is that function, a decoder
subclass's attribute, a partial inside a list a hook reads, a bound method of the cell's object — each refused where
the library calls it (worker/guard.py `_vet_handed_within`); honest cells handing objects of their own classes to the
same library code: not. Exit 1 if one was not so."""
import sys

from guard_script import load_guard, run_cells

mod = load_guard(sys.argv[1])  # server/crane/sandbox
PRE = "import json, re, functools, importlib, ctypes, inspect\n"
CELLS = {
    "a class whose __call__ is import_module": "class C:\n    __call__ = staticmethod(importlib.import_module)\n"
                                               "json.loads('1', parse_int=C())",
    "a class whose __call__ is ctypes.CDLL": "class C:\n    __call__ = staticmethod(ctypes.CDLL)\n"
                                             "json.loads('1.5', parse_float=C())",
    "a decoder subclass's hook": "class D(json.JSONDecoder):\n    def __init__(self, **kw):\n"
                                 "        super().__init__(**kw)\n        self.parse_int = importlib.import_module\n"
                                 "        self.scan_once = json.scanner.py_make_scanner(self)\n"
                                 "json.loads('1', cls=D)",
    "an object's attribute called by re.sub": "class R:\n    pass\nr = R()\nr.f = importlib.import_module\n"
                                              "class Call:\n    __call__ = staticmethod(ctypes.CDLL)\n"
                                              "re.sub('j', Call(), 'j', count=1)",
    "a partial in a list an instance holds": "class H:\n    def __init__(self):\n"
                                             "        self.hooks = [functools.partial(importlib.import_module)]\n"
                                             "    __call__ = None\nh = H()\n"
                                             "H.__call__ = staticmethod(h.hooks[0])\njson.loads('1', parse_int=h)",
    "inspect.stack behind a class": "class F:\n    __call__ = staticmethod(inspect.stack)\n"
                                           "json.loads('[1]', object_hook=None, parse_int=F())",
    "a class that names a library's module": "class C:\n    __module__ = 'json.decoder'\n"
                                              "    __qualname__ = 'JSONDecoder'\n"
                                              "    __call__ = staticmethod(importlib.import_module)\n"
                                              "json.loads('1', parse_int=C())",
    "honest": "class Num:\n    def __init__(self):\n        self.seen = [int, functools.partial(int, base=10)]\n"
              "    def __call__(self, s):\n        return self.seen[1](s)\n"
              "assert json.loads('[7]', parse_int=Num()) == [7]\n"
              "class Up:\n    __call__ = staticmethod(str.upper)\nassert re.sub('a', lambda m: Up()(m.group(0)), 'ab') == 'Ab'\n"
              "import pkgutil\nassert pkgutil.resolve_name('json:dumps') is json.dumps",
}

refused: list = []
g = mod.CallGuard(refused.append)
mod.guard_combinators(g)
getattr(mod, "vet_c_methods", lambda g: [])(g)
sys.exit(run_cells(g, refused, PRE, CELLS))
