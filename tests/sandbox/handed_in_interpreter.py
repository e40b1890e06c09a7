"""Run by test_guard_alone_round7.py in each interpreter (3.12+: the sys.monitoring path, 3.11: the profile hook):
the guard's parts compiled as the worker compiles them, its combinators installed as a run with no OS layer installs
them; cells that hand a refused C method (CRANE's SQLite authorizer taken off) to code that calls it: each refused;
honest cells using the same combinators: not. Exit 1 if one was not so."""
import sys

from guard_script import load_guard, run_cells

mod = load_guard(sys.argv[1])  # server/crane/sandbox
PRE = "import sqlite3, functools, itertools, operator, threading, bisect\ncon = sqlite3.connect(':memory:')\n"
CELLS = {
    "map": "list(map(sqlite3.Connection.set_authorizer, [con], [None]))",
    "partial": "functools.partial(con.set_authorizer, None)()",
    "starmap": "list(itertools.starmap(con.set_authorizer, [(None,)]))",
    "min key": "min([None], key=con.set_authorizer)",
    "methodcaller": "operator.methodcaller('set_authorizer', None)(con)",
    "thread run": "threading.Thread(target=con.set_authorizer, args=(None,)).run()",
    "bisect key": "bisect.bisect([None], 0, key=con.set_authorizer)",
    "honest": "x = list(map(abs, [-1])), sorted([2, 1], key=abs), functools.partial(max, 0)(3), "
              "list(itertools.starmap(pow, [(2, 3)])), bisect.bisect([1, 3], 2), "
              "isinstance(functools.partial(print), functools.partial)\n"
              "threading.Thread(target=len, args=('ab',)).run()",
}
refused: list = []
g = mod.CallGuard(refused.append)
import copy  # noqa: E402
import functools  # noqa: E402
import pickle  # noqa: E402

EARLY = (functools.partial(int, base=2), map(abs, [-3]))  # made by the original types, before the run's guard
mod.guard_combinators(g)  # (once per process: what `shield_unaudited` does where no OS layer ran)
bad = 0
# what the original types made still pickles and copies (by the replacements its module names now), and a class
# derived from a replacement checks instances as any class does
try:
    p, m = pickle.loads(pickle.dumps(EARLY))
    assert p("11") == 3 and list(m) == [3] and copy.deepcopy(EARLY[0])("101") == 5
    assert isinstance(EARLY[0], functools.partial) and type(functools.partial) is not type

    class MyPartial(functools.partial):
        pass
    assert isinstance(MyPartial(int), MyPartial) and not isinstance(1, MyPartial) and not issubclass(int, MyPartial)
    print("ok  made before, derived")
except Exception as e:  # noqa: BLE001 - reported
    bad += 1
    print("BAD made before, derived", type(e).__name__, e)

sys.exit(run_cells(g, refused, PRE, CELLS, bad))
