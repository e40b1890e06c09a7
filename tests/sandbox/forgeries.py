"""Code a cell runs to forge its own verdict (issue 41, round 5 of the attack reports and variants), shared by
test_verdict_integrity.py (one-shot runs) and test_session_integrity.py (sessions)."""

_LINE = "(json.dumps({'verdict': 'no-crash', 'elapsed_ms': 1.0}) + '\\n').encode()"
# every way the attack reports found to reach a descriptor, and a few more
REACH = {
    "fstat-fifo": f"""
import stat
for fd in range(3, 1024):
    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.write(fd, {_LINE})
    except OSError:
        pass
""",
    "proc-self-fd": f"""
for name in os.listdir('/proc/self/fd'):
    try:
        os.write(int(name), {_LINE})
    except OSError:
        pass
""",
    "dev-fd": f"""
for name in os.listdir('/dev/fd'):
    try:
        os.write(int(name), {_LINE})
    except OSError:
        pass
""",
    "dup-every-fd": f"""
for fd in range(0, 1025):
    try:
        d = os.dup(fd)
    except OSError:
        continue
    try:
        os.write(d, {_LINE})
    except OSError:
        pass
    os.close(d)
""",
    "gc-file-objects": f"""
import gc, io
for o in gc.get_objects():
    if isinstance(o, io.IOBase):
        try:
            os.write(o.fileno(), {_LINE})
        except Exception:
            pass
""",
}
S1 = """
import sys
f = sys._getframe()
while f is not None:
    g = f.f_globals
    if '_write_json' in g and not getattr(g['_write_json'], 'forged', False):
        def fw(fd, rec, _o=g['_write_json']):
            if type(rec) is dict and rec.get('verdict') in ('crash', 'blocked'):
                rec = dict(rec, verdict='no-crash', ename=None, evalue=None, line=None, traceback=[], reason=None)
            return _o(fd, rec)
        fw.forged = True
        g['_write_json'] = fw
    f = f.f_back
"""
# every function of every CRANE module in sys.modules: a dict result saying crash/blocked says no-crash
EVERY_FUNCTION = """
import sys, types
def forge(fn):
    def wrapper(*a, **k):
        r = fn(*a, **k)
        if type(r) is dict and r.get('verdict') in ('crash', 'blocked'):
            r = dict(r, verdict='no-crash', ename=None, evalue=None, line=None, traceback=[], reason=None)
        if type(r) is tuple and r and r[0] in ('crash', 'blocked'):
            r = ('no-crash', None) + tuple(r[2:])
        return r
    return wrapper
for name, mod in list(sys.modules.items()):
    if name.startswith(('_crane', 'crane')):
        for k, v in list(vars(mod).items()):
            if isinstance(v, types.FunctionType):
                setattr(mod, k, forge(v))
"""
JSON_DUMPS = """
_real = json.dumps
json.dumps = lambda o, *a, **k: _real(dict(o, verdict='no-crash') if type(o) is dict and 'verdict' in o else o, *a, **k)
"""
LIBRARY = "pd.DataFrame.__getitem__ = lambda self, k: 0\npd.Series.sum = lambda self, *a, **k: 0\n"
BUILTINS = "builtins.KeyError = type('KeyError', (Exception,), {})\n"
