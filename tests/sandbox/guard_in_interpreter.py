"""Run by test_portable_guard_interpreters.py in another interpreter (3.12+: the sys.monitoring path): the guard's
parts compiled as the worker compiles them, a few cells per way of reaching a refused callee; exit 1 if one was
not refused (or an honest one was)."""
import os
import sys
import tempfile

from guard_script import load_guard, run_cell

mod = load_guard(sys.argv[1])  # server/crane/sandbox
tmp = tempfile.mkdtemp()
marker = os.path.join(tmp, "marker")
CELLS = {
    "getattr": f"import os\ngetattr(os, 'sys' + 'tem')('touch {marker}')",
    "exec": f"exec('import os; os.system(\"touch {marker}\")')",
    "__del__": f"import os\nclass C:\n    def __del__(self):\n        os.system('touch {marker}')\nc = C()\ndel c",
    "property": f"import os\nclass C:\n    @property\n    def p(self):\n        return os.system('touch {marker}')\nC().p",
    "callback": f"import os, logging\nlg = logging.getLogger('x')\nlg.addFilter(lambda r: os.system('touch {marker}'))\nlg.warning('w')",
    "subprocess": f"import subprocess\nsubprocess.run(['touch', '{marker}'])",
    "writer outside": f"import shutil\nshutil.copy(__file__ if False else '/etc/hostname', '{marker}')",
    "socket method": "import socket\ns = socket.socket.__new__(socket.socket)\ns.connect(('127.0.0.1', 9))",
    "honest": "import os, json\nx = sorted(os.listdir('.'))\ny = json.dumps({'a': 1})\nclass A:\n    def __add__(self, o):\n        return 1\nA() + 1\n",
}
bad = 0


def run(src):
    refused: list = []  # a fresh guard for each cell
    return run_cell(mod.CallGuard(refused.append), refused, src)


for name, src in CELLS.items():
    how, refused = run(src)
    want = name != "honest"
    ok = bool(refused) == want and not os.path.exists(marker)
    bad += not ok
    print("ok " if ok else "BAD", name, how, refused[:1])
print(sys.version.split()[0], "bad", bad)
sys.exit(1 if bad else 0)
