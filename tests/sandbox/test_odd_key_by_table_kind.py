"""The export's first proof, that the tables it looks names up in hold no key whose comparison runs code
(kernel/lookups.odd_key), reads each module namespace's table kind from its size (issue 45: one C call per namespace
instead of a type test per key; 19 -> 0.4 ms on the bench's pandas/scikit-learn kernel). A size says "only exact
`str` keys" only where no table holding any other key can have it: every dict a notebook can make is classified so
on each interpreter CRANE supports (a subprocess per interpreter runs the kernel-side module as the kernel does), and
in a real kernel a key of the notebook's put in a module's namespace between two exports refuses the second, and the
namespace, once general, is walked key by key from then on (deleting the key does not make it fast again)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from crane import pyast
from crane.kernel.manager import start_kernel
from crane.sandbox.transplant import TRANSPLANT_MODULE, transplant

from ..kernel_envs import KERNEL_ENVS, SUPPORTED_VERSIONS, find_interpreter, kernel_python

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the copy path's OS layer here is Linux's")


# every way to make a dict here; each made with exact `str` keys only, then with one key of another type
CLASSIFY = r'''
import json, sys, types
L = types.ModuleType("_crane_lookups_test")
for filename, text in json.load(open({parts!r})):  # (the parts lookups.py reads, then it, as installed)
    exec(compile(text, filename, "exec"), vars(L))
if not L._LK_FAST:
    print("fast none wrong 0")  # (every namespace walked: slower, never wrong)
    raise SystemExit(0)
class S(str):
    pass
def kinds(n):
    keys = ["k%d" % i for i in range(n)]
    one = {{}}
    for k in keys:
        one[k] = 0
    made = [one, dict.fromkeys(keys), dict(zip(keys, keys)), {{k: 1 for k in keys}}, one.copy(), dict(one),
            {{**one}}, dict(**one)]
    shrunk = dict(one)
    for k in keys[: n // 2]:
        del shrunk[k]
    made.append(shrunk)
    grown = dict(one)
    grown.update({{"x%d" % i: 0 for i in range(n)}})
    made.append(grown)
    cleared = dict(one)
    cleared.clear()
    cleared.update(one)
    made.append(cleared)
    return made
fast = wrong = 0
for n in list(range(1, 300)) + [500, 1000, 3000, 7000, 12000, 20000]:
    for d in kinds(n):
        if L._LK_SIZEOF(d) in L._LK_FAST:
            fast += 1
        for odd in (S("k0"), S("zz"), 0, 1.5, ("t",), None):
            g = dict(d)
            g[odd] = 1
            h = dict(d)
            h[odd] = 1
            del h[odd]  # (the key gone, the table stays general: walked, never proven by its size)
            for x in (g, h, g.copy(), dict(g), {{**g}} if all(type(k) is str for k in g) else g):
                if L._LK_SIZEOF(x) in L._LK_FAST:
                    wrong += 1
                    print("WRONG", n, type(odd).__name__, L._LK_SIZEOF(x))
print("fast", fast, "wrong", wrong)
'''


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
def test_no_table_holding_another_key_has_a_fast_size(version, tmp_path):
    python = find_interpreter(version)
    if python is None:
        pytest.skip(f"no Python {version} interpreter on this machine")
    parts = tmp_path / "parts.json"
    parts.write_text(json.dumps([(f, t) for f, t in TRANSPLANT_MODULE.sources
                                 if f.rsplit("/", 1)[-1] in ("shield.py>", "library.py>", "bound.py>", "lookups.py>")]))
    out = subprocess.run([python, "-c", CLASSIFY.format(parts=str(parts))], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    fast, wrong = out.stdout.split()[-3], out.stdout.split()[-1]
    assert wrong == "0", out.stdout[-3000:]
    # (3.10's tables have one entry size for every key: no sizes there, every namespace walked as before; a
    # free-threaded build's export is refused anyway: kernel/shield.free_threaded)
    if version != "3.10" and not version.endswith("t"):
        assert fast != "none" and int(fast) > 1000, out.stdout[-3000:]  # (most honest tables proven by their size)


def _counts(conn) -> dict:
    r = conn.run_cell("print(dict(__import__('sys').modules['_crane_transplant'].LOOKUP_COUNTS))", timeout=120)
    assert r.status == "ok", r
    return pyast.literal_eval(r.stdout.strip())


@pytest.mark.parametrize("kernel_env", KERNEL_ENVS)
def test_a_key_put_in_a_namespace_between_two_exports_refuses_the_second(tmp_path, kernel_env):
    k = start_kernel(tmp_path, python=kernel_python(kernel_env))
    try:
        conn = k.connection
        assert conn.run_cell("import json\nsmall = [1, 2, 3]\n", timeout=120).status == "ok"
        v = transplant(conn, "print(sum(small))", 120.0, portable="asked for", confinement="portable")
        assert v.verdict == "no-crash", v
        before = _counts(conn)
        assert before["fast"] > 100 and before["walked"] == 0, before  # (an honest kernel: every namespace fast)
        v = transplant(conn, "print(sum(small))", 120.0, portable="asked for", confinement="portable")
        assert v.verdict == "no-crash", v
        # a str subclass whose hash and equality are str's own: nothing runs, but the table is no longer unicode
        assert conn.run_cell("class _K(str):\n    pass\nvars(json)[_K('indent_by')] = 1\n", timeout=120).status == "ok"
        v = transplant(conn, "print(sum(small))", 120.0, portable="asked for", confinement="portable")
        assert v.verdict == "unavailable" and "the namespace of the module `json`" in (v.reason or ""), v
        assert conn.run_cell("del vars(json)['indent_by']\n", timeout=120).status == "ok"
        walked = _counts(conn)["walked"]
        v = transplant(conn, "print(sum(small))", 120.0, portable="asked for", confinement="portable")
        assert v.verdict == "no-crash", v
        assert _counts(conn)["walked"] > walked  # (json's table stays general: its keys walked, all plain now)
    finally:
        k.shutdown()
