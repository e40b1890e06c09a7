"""What a warm head prepares between runs (worker/head.py), checked on the real file system and the real guard:
- the next run's view made from the last run's (worker/portable.stage_view with `used`): whatever that run changed
  is undone (a private copy, a file, folder or link of its own, an unfolded folder, a folder on the way replaced by
  a link to a real folder, whose files stay untouched), and the result is the view a fresh staging makes;
- a staging stopped because a request came (`stop`) is taken by the run, which makes the links still missing;
- the lean guard's trampolines prepared in the head (worker/guard.prepare_trampolines) arm each run's own guard
  as before: the same functions, the same signatures and code names, refusals by the run's guard; a function whose
  defaults changed since is armed from its code as it is now."""

from __future__ import annotations

import inspect
import os
import shutil
import sys
import types
from typing import Any

import pytest

from crane.sandbox.worker import guard as guard_mod
from crane.sandbox.worker.guard import CallGuard, GuardRefusal, prepare_trampolines
from crane.sandbox.worker.portable import _STAGED_FOR, RunFolder, stage_view

pytestmark = pytest.mark.skipif(os.name != "posix", reason="a head stages views on Linux only")


def _tree(root: str, stable: str | None = None) -> dict:
    """Every entry under `root` (links not followed): relative path -> link target, or 'dir' / 'file'. With `stable`
    (a view's root and the test's own folder in it), the levels between the top and that folder are left out:
    other processes make and remove entries in /tmp meanwhile (the view's own levels are compared whole)."""
    out = {}
    mine = None if stable is None else stable + os.sep
    for here, dirs, files in os.walk(root):
        rel_here = os.path.relpath(here, root)
        on_way = mine is not None and rel_here != os.curdir and mine.startswith(rel_here + os.sep)
        if mine is not None and rel_here != os.curdir and not (rel_here + os.sep).startswith(mine) and not on_way:
            continue
        volatile = on_way and rel_here != stable
        for name in dirs + files:
            p = os.path.join(here, name)
            rel = os.path.relpath(p, root)
            if volatile and mine is not None and not mine.startswith(rel + os.sep):
                continue
            out[rel] = ("link", os.readlink(p)) if os.path.islink(p) else ("dir" if os.path.isdir(p) else "file")
    return out


@pytest.fixture
def work(tmp_path):
    real = tmp_path / "project" / "nb"
    (real / "data").mkdir(parents=True)
    (real / "data" / "train.csv").write_text("a,b\n1,2\n")
    (real / "notes.txt").write_text("notes")
    (tmp_path / "project" / "sibling.txt").write_text("beside")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep me")
    home = tmp_path / "head"
    home.mkdir()
    return str(real), str(outside), str(home)


def _a_run_changed_its_view(view: str, real: str, outside: str) -> None:
    """What a cell can do to its view (all inside its run folder): as the run's RunFolder would leave it."""
    folder = RunFolder(real, view, view)
    root = folder.root
    os.unlink(os.path.join(root, "notes.txt"))  # a private copy in place of the link
    with open(os.path.join(root, "notes.txt"), "w") as f:
        f.write("changed by the run")
    with open(os.path.join(root, "made.txt"), "w") as f:
        f.write("the run's own file")
    os.makedirs(os.path.join(root, "out", "deep"))
    os.symlink(outside, os.path.join(root, "elsewhere"))  # a link of its own, to a real folder outside
    folder.unfold(root)  # its linked folders made real ones of links (a walk)
    assert os.path.isdir(os.path.join(root, "data")) and not os.path.islink(os.path.join(root, "data"))
    up = os.path.dirname(root)  # the folder on the way ("project") replaced by a link to a real folder outside
    shutil.rmtree(up)
    os.symlink(outside, up)


def test_the_last_runs_view_is_made_clean_and_equals_a_fresh_one(work, tmp_path):
    real, outside, home = work
    used = os.path.join(str(tmp_path), "run", "view")
    os.makedirs(os.path.dirname(used))
    _a_run_changed_its_view(used, real, outside)
    before_outside = _tree(outside)
    assert stage_view(real, os.path.join(home, "view-next"), used=used)
    assert not os.path.lexists(used)  # taken (renamed), not copied
    fresh = os.path.join(home, "fresh")
    assert stage_view(real, fresh)
    mine = os.path.relpath(os.path.realpath(str(tmp_path)), os.sep)
    assert _tree(os.path.join(home, "view-next"), mine) == _tree(fresh, mine)
    assert _tree(outside) == before_outside and open(os.path.join(outside, "precious.txt")).read() == "keep me"
    with open(os.path.join(real, "notes.txt")) as f:
        assert f.read() == "notes"
    # the run takes it (one rename) and brings it up to date: a file made in the real folder since is there
    with open(os.path.join(real, "later.txt"), "w") as f:
        f.write("later")
    mirror = os.path.join(str(tmp_path), "run2", "view")
    os.makedirs(os.path.dirname(mirror))
    folder = RunFolder(real, mirror, str(tmp_path), os.path.join(home, "view-next"))
    assert folder.staged and folder.linked
    assert sorted(os.listdir(folder.root)) == ["data", "later.txt", "notes.txt"]
    assert os.readlink(os.path.join(folder.root, "notes.txt")) == os.path.join(os.path.realpath(real), "notes.txt")


def test_a_view_of_another_folder_is_not_reused(work, tmp_path):
    real, outside, home = work
    used = os.path.join(str(tmp_path), "run", "view")
    os.makedirs(os.path.dirname(used))
    RunFolder(outside, used, used)  # the last run worked in another folder
    staged = os.path.join(home, "view-next")
    assert stage_view(real, staged, used=used)
    assert not os.path.lexists(used)
    fresh = os.path.join(home, "fresh")
    assert stage_view(real, fresh)
    mine = os.path.relpath(os.path.realpath(str(tmp_path)), os.sep)
    assert _tree(staged, mine) == _tree(fresh, mine)
    with open(staged + _STAGED_FOR) as f:
        assert f.read() == os.path.realpath(real)


def test_a_staging_stopped_by_a_request_is_completed_by_the_run(work, tmp_path):
    real, _, home = work
    asked = []

    def stop() -> bool:  # a request comes after the first look
        asked.append(1)
        return len(asked) > 1

    mirror = os.path.join(str(tmp_path), "run", "view")
    os.makedirs(os.path.dirname(mirror))
    staged = os.path.join(home, "view-next")
    assert stage_view(real, staged, stop=stop)
    assert len(asked) > 1
    fresh = os.path.join(home, "fresh")
    assert stage_view(real, fresh)
    mine = os.path.relpath(os.path.realpath(str(tmp_path)), os.sep)
    assert _tree(staged) != _tree(fresh)  # (stopped before every link was made)
    folder = RunFolder(real, mirror, str(tmp_path), staged)
    assert folder.staged and folder.linked
    assert _tree(mirror, mine) == _tree(fresh, mine)


def _fresh_interpreter_state() -> None:
    """Undo what an earlier test's guard armed in this process (none in these tests' own functions)."""
    guard_mod._PREPARED.clear()


def test_prepared_trampolines_arm_the_runs_own_guard(tmp_path):
    _fresh_interpreter_state()
    import shutil as sh

    def _own(dst: str, *, flag: bool = True) -> str:  # a table function defined here, armed from the prepared state
        return dst

    own: Any = _own
    late: Any = types.FunctionType(own.__code__, own.__globals__, "late", own.__defaults__, own.__closure__)
    late.__kwdefaults__ = {"flag": True}
    mod: Any = types.ModuleType("crane_h1_prepared")
    mod.own, mod.late = own, late
    sys.modules[mod.__name__] = mod
    table = {"test": [(mod.__name__, "own", None, guard_mod.GUARD_ANY), (mod.__name__, "late", None, guard_mod.GUARD_ANY)]}
    try:
        real_sig = inspect.signature(own)
        prepared = prepare_trampolines()
        assert prepared > 0 and guard_mod._TRAMPOLINES  # (the table's library functions, compiled once)
        assert sh.copy in guard_mod._PREPARED
        # `prepare_trampolines` resolves the default table: prepare this one's too, as a head would for its table
        for fn in (own, late):
            made = guard_mod._make_own(fn)
            assert made is not None
            guard_mod._PREPARED[fn] = (fn.__code__, fn.__defaults__, fn.__kwdefaults__) + made
        late.__kwdefaults__ = {"flag": False}  # changed after the head prepared it: made again from what it is now
        refused: list[str] = []
        g = CallGuard(refused.append, table=table, lean=True)
        g._arm_functions()  # (the table's functions: `arm` also replaces C functions process-wide)
        try:
            g.active = True
            assert own.__code__ is not g.code_of(own) and own.__code__.co_name == "_own"
            assert own.__code__.co_filename == g.code_of(own).co_filename
            assert inspect.signature(own) == real_sig
            assert inspect.signature(late).parameters["flag"].default is False
            with pytest.raises(GuardRefusal):
                own("x")
            with pytest.raises(GuardRefusal):
                late("y")
            assert refused == ["a call to test: crane_h1_prepared.own", "a call to test: crane_h1_prepared.late"]
            g.active = False
            assert own("z") == "z" and late("z") == "z"
        finally:
            g.active = False
            for fn in (own, late):
                fn.__code__ = g.code_of(fn)
    finally:
        del sys.modules[mod.__name__]
        _fresh_interpreter_state()
