"""Round 5's portable-path reproducers through the CLI (`crane check NB --sandbox portable|guard`, a notebook
whose first cell ran and whose four reproducer cells did not): honest `..` paths after a mirrored folder write the
run's copies only (the real `important.csv` survives `os.remove('data/../important.csv')`), a walk finds what the
kernel finds, attacks are `blocked` with a structured refusal, and the report names the layers that ran (Landlock
only with `portable`)."""

from __future__ import annotations

import hashlib

from crane.sandbox.worker.linux import linux_layer_available

from .conftest import make_notebook
from .test_check_sandbox import check

SETUP = ("import os, pandas as pd\nDATA_DIR = 'data'\ndf = pd.read_csv(os.path.join(DATA_DIR, 'train.csv'))", 1)
CELLS = {
    "honest": ("os.remove('data/../important.csv')\ndf.to_csv(os.path.join(DATA_DIR, '..', 'results.csv'))\n"
               "paths = sorted(os.path.join(r, f) for r, _, fs in os.walk('.') for f in fs if f == 'train.csv')\n"
               "tr = pd.read_csv(paths[0])\nassert not os.path.exists('important.csv')\nprint(len(tr))", None),
    "escape": ("import pathlib\npathlib.Path('data/' + '../' * 40 + '@OUT@'.lstrip('/') + '/pwn.txt').write_text('x')",
               None),
    "sqlite": ("import sqlite3\nsqlite3.connect(':memory:').execute(\"ATTACH '@OUT@/att.db' AS x\")", None),
    "crash": ("df['missing']", None),
}


def _tree(d) -> dict:
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.rglob("*"))
            if p.is_file()}


def test_round5_reproducers_through_the_cli(nb_dir, tmp_path_factory):
    """The four cells in one notebook, checked once per sandbox (each unrun cell is judged on its own from the
    replayed state, in its own run; the files are compared after the command, so a write by any cell fails it)."""
    work, out = nb_dir / "work", tmp_path_factory.mktemp("outside")
    (work / "data").mkdir(parents=True)
    (work / "data" / "train.csv").write_text("a,b\n1,2\n3,4\n")
    (work / "important.csv").write_text("keep me\n")
    before = (_tree(work), _tree(out))
    landlock = linux_layer_available() is None
    sources = [(src.replace("@OUT@", str(out)), count) for src, count in CELLS.values()]
    for sandbox in ("portable", "guard"):
        nb = make_notebook(work / "r5.ipynb", [SETUP, *sources])
        cells = check(nb, "--budget", "30", "--sandbox", sandbox)
        (work / "r5.ipynb").unlink()
        assert len(cells) == len(CELLS), cells
        assert (_tree(work), _tree(out)) == before, (sandbox, cells)
        for name, cell in zip(CELLS, cells, strict=True):
            v = cell.sandbox
            assert v is not None and v.mode == "portable", (sandbox, name, cell)
            assert v.transplant is not None and ("landlock" in v.transplant.layers) == (
                sandbox == "portable" and landlock), (sandbox, name, v.transplant)
            if name == "honest":
                assert (v.verdict, v.stdout.strip()) == ("no-crash", "2"), (sandbox, v)
            elif name == "crash":
                assert (v.verdict, v.ename, v.certain) == ("crash", "KeyError", True), (sandbox, v)
            else:
                assert v.verdict == "blocked" and v.refusal is not None, (sandbox, name, v)
                assert cell.prediction != "crash" or cell.decided_by != "sandbox", cell
