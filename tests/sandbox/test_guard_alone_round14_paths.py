"""Round 14 (issue 40 part 2, h3): the `..` and link forms of honest writers under the guard alone
(`confinement="guard"`) and in the portable sandbox: a path through the view's mirrored folder and `..`, relative to
a folder the cell changed to, through a link the cell made itself, and through the user's own link in the working
folder to a folder elsewhere. Honest code keeps the kernel's verdict and writes the run's private copies (nothing of
the user's real folder or of the outside folder changes: `run5`).

The user's own link to an outside folder (`shared -> /elsewhere`) is a link of the view like any other entry: a
write through it makes the run's private copy (docs/sandbox.md, "Paths are decided where the OS resolves them").
Before the fix a folder reached through it was mirrored from where it resolves, so its entries were taken for links
of the cell's own: a new file through it was private while appending to an existing one was refused (`blocked`).
"""

from __future__ import annotations

import sys

import pytest

from crane.kernel.manager import start_kernel

from ..kernel_envs import kernel_python
from .kernel_choice import kernels, library_kernels
from .test_portable_round5 import BOTH, GUARD, SETUP, run5

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the worker's run folder view")

USER_LINK = """
print(open('shared/target.txt').read().strip())
open('shared/new.txt', 'w').write('n')
open('shared/target.txt', 'a').write('more\\n')
os.makedirs('shared/deeper/../made', exist_ok=True)
open('shared/made/x.txt', 'w').write('x')
os.remove('shared/new.txt')
print(sorted(os.listdir('shared')), open('shared/target.txt').read().splitlines())
"""
USER_LINK_OUT = "['deeper', 'made', 'target.txt'] ['outside, keep me', 'more']"


@pytest.fixture(scope="module")
def k14(request, workdir, outside, listener):
    """Round 5's kernel keys (`run5`) over a working folder that also holds the user's own link to the outside
    folder (`shared`)."""
    if not (workdir / "shared").is_symlink():
        (workdir / "shared").symlink_to(outside, target_is_directory=True)
    kernel = start_kernel(workdir, python=kernel_python(request.param))
    conn = kernel.connection
    run = conn.run_cell(SETUP, timeout=120)
    assert run.status == "ok", run
    yield {"conn": conn, "work": workdir, "outside": outside, "listener": listener, "kpid": conn.evaluate("kpid")}
    kernel.shutdown()


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("k14", kernels(USER_LINK), indirect=True, scope="module")
def test_a_write_through_the_users_own_link_to_an_outside_folder_is_private(k14, sandbox):
    v = run5(k14, USER_LINK, sandbox)
    assert (v.verdict, v.stdout.strip().splitlines()) == ("no-crash", ["outside, keep me", USER_LINK_OUT]), v


# h5py's import asks `platform.processor()`, which runs `uname -p`: under the guard alone (no OS layer for the
# program to meet) the guard refused it, so a cell importing h5py came back `blocked` (subprocess.check_output)
# before it wrote anything; the worker now asks platform before the guard is up (worker/imports.py)
H5PY = ("import h5py\nwith h5py.File('sub/../w.h5', 'w') as f:\n    f['a'] = [1, 2]\n"
        "with h5py.File('w.h5', 'r') as f:\n    print(f['a'][()].tolist())")


@pytest.fixture(scope="module")
def k_numpy(request, workdir, outside, listener):
    """Round 5's kernel keys with numpy imported and h5py not (the cell's import of h5py runs in the worker)."""
    kernel = start_kernel(workdir, python=kernel_python(request.param))
    conn = kernel.connection
    run = conn.run_cell(SETUP + "import numpy\nimport sys\nassert 'h5py' not in sys.modules", timeout=120)
    assert run.status == "ok", run
    yield {"conn": conn, "work": workdir, "outside": outside, "listener": listener, "kpid": conn.evaluate("kpid")}
    kernel.shutdown()


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("k_numpy", library_kernels("h5py"), indirect=True, scope="module")
def test_a_cell_importing_h5py_writes_through_dotdot(k_numpy, sandbox):
    v = run5(k_numpy, H5PY, sandbox)
    assert (v.verdict, v.stdout.strip().splitlines()[-1:]) == ("no-crash", ["[1, 2]"]), v


# a file of the user's moved in the run and then written: the view's link was moved as it was (no longer naming its
# counterpart, it read as a link of the cell's own: the write came back `blocked`); the move's source is now made
# private first, so the moved file is the run's copy
MOVES = """
import shutil
os.rename('data.csv', 'sub/../moved.csv')
open('moved.csv', 'a').write('5,6\\n')
os.replace('sub/inner.txt', 'sub/../inner2.txt')
open('inner2.txt', 'w').write('replaced')
shutil.move('log.txt', 'sub/log2.txt')
open('sub/../sub/log2.txt', 'a').write('more\\n')
print(open('moved.csv').read().split(), open('inner2.txt').read(), open('sub/log2.txt').read().split())
print(sorted(os.listdir('.')), sorted(os.listdir('sub')))
"""
MOVES_OUT = ["['a,b', '1,2', '3,4', '5,6'] replaced ['log', 'more']",
             "['inner2.txt', 'moved.csv', 'outside_link', 'shared', 'sub'] ['log2.txt']"]


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("k14", kernels(MOVES), indirect=True, scope="module")
def test_a_users_file_moved_in_the_run_is_written_as_the_runs_copy(k14, sandbox):
    v = run5(k14, MOVES, sandbox)
    assert (v.verdict, v.stdout.strip().splitlines()) == ("no-crash", MOVES_OUT), v


# TensorFlow's and Keras' writers, honest, through `..` after a mirrored folder, relative to a folder the cell changed
# to, and through a link the cell made to a folder of the run: each writes the run's copy and reads it back (round
# 13 tried these with absolute paths only; they held here before and after round 14: a regression test)
TF_HONEST = """
import numpy as np
os.symlink('sub', 'lnk')
m = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
m.compile('sgd', 'mse')
cbs = [keras.callbacks.ModelCheckpoint('sub/../cb.keras'), keras.callbacks.CSVLogger('lnk/../log.csv'),
       keras.callbacks.BackupAndRestore('sub/../bk', delete_checkpoint=False)]
m.fit(np.zeros((4, 2)), np.zeros((4, 1)), epochs=1, verbose=0, callbacks=cbs)
m.save('lnk/../m.keras')
m.save_weights('sub/../w.weights.h5')
keras.models.load_model('sub/../m.keras')
ck = tf.train.Checkpoint(v=tf.Variable(1.0))
ck.write('sub/../ck/a')
tf.train.CheckpointManager(ck, 'lnk/../mgr', 2).save()
mod = tf.Module()
mod.v = tf.Variable(2.0)
tf.saved_model.save(mod, 'sub/../sm')
ds = tf.data.Dataset.range(3)
ds.save('sub/../ds')
list(ds.snapshot('lnk/../snap'))
list(ds.cache('sub/../cache'))
os.chdir('sub')
tf.io.write_file('../wf.txt', 'x')
with tf.io.gfile.GFile('../gf.txt', 'w') as f:
    f.write('g')
tf.io.gfile.makedirs('../made/deeper')
tf.io.gfile.copy('inner.txt', '../copied.txt')
os.chdir('..')
tf.io.gfile.rename('sub/../copied.txt', 'lnk/../renamed.txt')
tf.io.gfile.remove('sub/../log.txt')
print(float(tf.saved_model.load('sub/../sm').v), [int(x) for x in tf.data.Dataset.load('sub/../ds')],
      tf.io.read_file('sub/../wf.txt').numpy(), tf.io.gfile.GFile('lnk/../gf.txt').read(),
      open('renamed.txt').read().strip(), os.path.exists('log.txt'),
      sorted(n for n in os.listdir('.') if n in ('cb.keras', 'log.csv', 'bk', 'm.keras', 'w.weights.h5', 'ck', 'mgr')))
"""
TF_HONEST_OUT = ("2.0 [0, 1, 2] b'x' g keep me False "
                 "['bk', 'cb.keras', 'ck', 'log.csv', 'm.keras', 'mgr', 'w.weights.h5']")


@pytest.fixture(scope="module")
def k_tf(request, workdir, outside, listener):
    """Round 5's kernel keys with TensorFlow and Keras imported (the worker has them before the run)."""
    kernel = start_kernel(workdir, python=kernel_python(request.param))
    conn = kernel.connection
    run = conn.run_cell(SETUP + "import tensorflow as tf, keras", timeout=300)
    assert run.status == "ok", run
    yield {"conn": conn, "work": workdir, "outside": outside, "listener": listener, "kpid": conn.evaluate("kpid")}
    kernel.shutdown()


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("k_tf", library_kernels("tensorflow"), indirect=True, scope="module")
def test_tensorflows_and_keras_writers_through_dotdot_cd_and_the_cells_link(k_tf, sandbox):
    v = run5(k_tf, TF_HONEST, sandbox)
    assert (v.verdict, v.stdout.strip().splitlines()[-1:]) == ("no-crash", [TF_HONEST_OUT]), v


# a writer that fills a folder (pyarrow's `write_dataset`: its files inside the folder are opened in C++, not vetted
# one by one) wrote through a link the folder held: the cell's own link to the user's real file (its path read from
# the view's link) or to a file outside (also in a user's folder moved in the run, whose entries then no longer name
# their counterparts): under the guard alone the user's real `data.csv` was overwritten with a parquet file,
# verdict `no-crash`. Now every link in the folder is made private along what it resolves to, and one that leads out
# of the run makes the run `blocked` (RunFolder.materialize_tree)
FILLED = ("import pyarrow as pa, pyarrow.dataset as ds\n@PRE@\n"
          "ds.write_dataset(pa.table({'a': [1]}), 'out', format='parquet', existing_data_behavior='overwrite_or_ignore')")
FILLED_ATTACKS = {
    "the cell's link to the user's file": "os.mkdir('out')\nos.symlink(os.readlink('data.csv'), 'out/part-0.parquet')",
    "the cell's link to a file outside": "os.mkdir('out')\nos.symlink('@OUTSIDE@/target.txt', 'out/part-0.parquet')",
    "the cell's link in a folder of the user's moved": "import shutil\nshutil.move('sub', 'out')\n"
                                                       "os.symlink(os.readlink('out/inner.txt'), 'out/part-0.parquet')",
}
FILLED_HONEST = "os.mkdir('out')\nos.symlink('../data.csv', 'out/part-0.parquet')"


@pytest.fixture(scope="module")
def k_arrow(request, workdir, outside, listener):
    """Round 5's kernel keys with pyarrow's dataset module imported."""
    kernel = start_kernel(workdir, python=kernel_python(request.param))
    conn = kernel.connection
    run = conn.run_cell(SETUP + "import pyarrow.dataset", timeout=300)
    assert run.status == "ok", run
    yield {"conn": conn, "work": workdir, "outside": outside, "listener": listener, "kpid": conn.evaluate("kpid")}
    kernel.shutdown()


@pytest.mark.parametrize("k_arrow,attack", [pytest.param(env, a, id=f"{env}-{a}") for env in library_kernels("pyarrow")
                                            for a in FILLED_ATTACKS], indirect=["k_arrow"], scope="module")
def test_a_writer_filling_a_folder_never_writes_through_a_link_out_of_the_run(k_arrow, attack):
    v = run5(k_arrow, FILLED.replace("@PRE@", FILLED_ATTACKS[attack]), GUARD)
    assert v.verdict == "blocked" and v.refusal is not None and "link out of the run" in (v.reason or ""), v


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("k_arrow", library_kernels("pyarrow"), indirect=True, scope="module")
def test_a_writer_filling_a_folder_writes_through_a_link_into_the_run_privately(k_arrow, sandbox):
    v = run5(k_arrow, FILLED.replace("@PRE@", FILLED_HONEST) + "\nprint(open('data.csv', 'rb').read(4))", sandbox)
    assert (v.verdict, v.stdout.strip().splitlines()[-1:]) == ("no-crash", ["b'PAR1'"]), v
