"""A WAL-mode SQLite database the kernel holds open is read, written privately and its errors are the kernel's
(round 16 F11, issue 40): SQLite opens its write-ahead log and shared-memory index for writing even to read, and
the portable run's view held them as links to the real files, so `sqlite3.connect('app.db').execute('select ...')`
was `blocked` ("the sandbox refused a database write: unable to open database file"). Now the database's private
copy is made with its `-wal`, `-shm` and `-journal` (worker/portable.py `db_ok`). Six paths, IPython 8 and 9; the
real files unchanged (path_verdict hashes the working folder around each run)."""

from __future__ import annotations

import sys

import pytest

from . import end_paths
from .end_paths import PATHS, path_verdict

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork sandbox runs on Linux")

pk = end_paths.pk  # the module's kernel (each of KERNEL_ENVS)
HOLD = ("import sqlite3\ntry:\n    held.close()\nexcept NameError:\n    pass\n"
        "held = sqlite3.connect('wal.db')\nassert held.execute('pragma journal_mode=wal').fetchone() == ('wal',)\n"
        "held.execute('create table if not exists t(a)')\nheld.execute('delete from t')\n"
        "held.execute('insert into t values (1)')\nheld.commit()\n")
OPEN = "import os, sqlite3\nassert os.path.exists('wal.db-wal')\nc = sqlite3.connect('wal.db')\n"


def _served(sb) -> None:
    assert sb.run("y = x + 1").verdict == "no-crash"


@pytest.mark.parametrize("path", PATHS)
def test_a_wal_database_the_kernel_holds_is_read(pk, path):
    assert pk["conn"].run_cell(HOLD, timeout=60).status == "ok"
    v = path_verdict(pk, path, OPEN + "assert c.execute('select count(*) from t').fetchone() == (1,)", _served)
    assert (v.verdict, v.ename) == ("no-crash", None), v


@pytest.mark.parametrize("path", PATHS)
def test_its_errors_are_the_kernels(pk, path):
    assert pk["conn"].run_cell(HOLD, timeout=60).status == "ok"
    v = path_verdict(pk, path, OPEN + "c.execute('select * from missing')", _served)
    assert (v.verdict, v.ename, v.line) == ("crash", "OperationalError", 4), v


@pytest.mark.parametrize("path", PATHS)
def test_a_write_is_the_runs_own(pk, path):
    """As any write in the working folder on that path: private (the real database unchanged), or refused on
    the session paths that refuse writes."""
    assert pk["conn"].run_cell(HOLD, timeout=60).status == "ok"
    v = path_verdict(pk, path, OPEN + "c.execute('insert into t values (2)')\nc.commit()\n"
                                      "assert c.execute('select count(*) from t').fetchone() == (2,)", _served)
    assert v.verdict == ("blocked" if path in ("fork session", "transplant session") else "no-crash"), v
    assert pk["conn"].evaluate("held.execute('select count(*) from t').fetchone()[0]") == 1
