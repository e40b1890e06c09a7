"""Round 16 (F8): native writers the guard did not know wrote through the view's links to the user's REAL files under
the guard alone (`confinement="guard"`: no OS layer), verdict `no-crash`:
- h5py's multi-file drivers: `h5py.File('part%d.h5', 'w', driver='family')` rewrote the real `part0.h5`,
  `driver='split'` the real `store-m.h5`/`store-r.h5` (only the name handed to `h5f.create`/`h5f.open` was vetted,
  not the member files the driver names after it); the multi driver (`-s.h5`, `-b.h5`, ...) and a family with no
  conversion in its name (HDF5's `-000000`) likewise;
- tokenizers' Rust writers (`Tokenizer.save`, `Model.save(folder, prefix)`): the real `tokenizer.json`/`vocab.json`
  overwritten, and a file made outside the run.
The kernel (each environment that has the library: kernel_choice.library_kernels) first writes the real files into
the notebook folder; each honest cell then writes the same files in the run and reads them back: the kernel's verdict
(`no-crash`), the run's private copies written, the notebook folder and the outside folder unchanged (`run5` hashes
both). Writes outside the working folder are `blocked`, naming the library, with nothing changed.
"""

from __future__ import annotations

import sys

import pytest

from crane.kernel.manager import start_kernel

from ..kernel_envs import kernel_python
from .kernel_choice import library_kernels
from .test_portable_round5 import BOTH, GUARD, SETUP, run5

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the worker's run folder view")

PATHS = {  # how a cell names a place outside the run
    "absolute": "'@OUTSIDE@/@NAME@'",
    "dotdot": "'sub/' + '../' * 30 + '@OUTSIDE@'.lstrip('/') + '/@NAME@'",
    "the cell's link": "(os.symlink('@OUTSIDE@', 'o16') or 'o16/@NAME@')",
}


def _fixture(request, workdir, outside, listener, setup: str) -> dict:
    kernel = start_kernel(workdir, python=kernel_python(request.param))
    conn = kernel.connection
    run = conn.run_cell(SETUP + setup, timeout=300)
    assert run.status == "ok", run
    return {"conn": conn, "work": workdir, "outside": outside, "listener": listener, "kpid": conn.evaluate("kpid"),
            "kernel": kernel}


# -- h5py --------------------------------------------------------------------------------------------------------
H5_LOW = ("from h5py import h5f, h5p, h5fd\n"
          "def low(name, driver, data):\n"
          "    p = h5p.create(h5p.FILE_ACCESS)\n"
          "    p.set_driver(driver)\n"
          "    fid = h5f.create(name, h5f.ACC_TRUNC, fapl=p)\n"
          "    with h5py.File(fid) as f:\n"
          "        f['x'] = data\n"
          "def read_low(name, driver):\n"
          "    p = h5p.create(h5p.FILE_ACCESS)\n"
          "    p.set_driver(driver)\n"
          "    with h5py.File(h5f.open(name, h5f.ACC_RDONLY, fapl=p)) as f:\n"
          "        return int(f['x'][-1])\n")
# the user's real files, written by the kernel: part0.h5 (family), store-m.h5/store-r.h5 (split), multi-?.h5 (multi),
# fam-000000.h5 (a family with HDF5's default member names), sub/p0.h5
H5_SETUP = ("import h5py, numpy as np\n" + H5_LOW
            + "with h5py.File('part%d.h5', 'w', driver='family', memb_size=4096) as f:\n    f['x'] = np.zeros(100)\n"
            "with h5py.File('store', 'w', driver='split') as f:\n    f['x'] = np.zeros(10)\n"
            "with h5py.File('sub/p%d.h5', 'w', driver='family', memb_size=4096) as f:\n    f['x'] = np.zeros(10)\n"
            "low(b'multi', h5fd.MULTI, np.zeros(10))\n"
            "low(b'fam.h5', h5fd.FAMILY, np.zeros(10))\n"
            "del f\n")  # (a closed h5py file cannot be copied: the cells' own `f` would need it)
H5_HONEST = {
    "family": ("with h5py.File('part%d.h5', 'w', driver='family', memb_size=4096) as g:\n    g['x'] = np.arange(2000)\n"
               "with h5py.File('part%d.h5', 'r', driver='family', memb_size=4096) as g:\n    print(int(g['x'][-1]))\n"
               "print(sorted(n for n in os.listdir('.') if n.startswith('part')))", "1999",
               "['part0.h5', 'part1.h5', 'part2.h5', 'part3.h5', 'part4.h5']"),
    "family, append": ("with h5py.File('part%d.h5', 'a', driver='family', memb_size=4096) as g:\n"
                       "    g['y'] = np.arange(3000)\n"
                       "with h5py.File('part%d.h5', 'r', driver='family', memb_size=4096) as g:\n"
                       "    print(int(g['y'][-1]))\nprint(len(os.listdir('.')) > 8)", "2999", "True"),
    "family in a folder": ("with h5py.File('sub/p%d.h5', 'w', driver='family', memb_size=4096) as g:\n"
                           "    g['x'] = np.arange(1000)\n"
                           "with h5py.File('sub/p%d.h5', 'r', driver='family', memb_size=4096) as g:\n"
                           "    print(int(g['x'][-1]))\nprint(len(os.listdir('sub')) > 2)", "999", "True"),
    "split": ("with h5py.File('store', 'w', driver='split') as g:\n    g['x'] = np.arange(500)\n"
              "with h5py.File('store', 'r', driver='split') as g:\n    print(int(g['x'][-1]))\n"
              "print(sorted(n for n in os.listdir('.') if n.startswith('store')))", "499",
              "['store-m.h5', 'store-r.h5']"),
    "split, r+": ("with h5py.File('store', 'r+', driver='split') as g:\n    g['x'][0] = 7\n"
                  "with h5py.File('store', 'r', driver='split') as g:\n    print(int(g['x'][0]))\nprint(1)", "7", "1"),
    "multi": (H5_LOW + "low(b'multi', h5fd.MULTI, np.arange(300))\nprint(read_low(b'multi', h5fd.MULTI))\n"
              "print(sorted(n for n in os.listdir('.') if n.startswith('multi-'))[:2])", "299",
              "['multi-b.h5', 'multi-g.h5']"),
    "family, default member names": (H5_LOW + "low(b'fam.h5', h5fd.FAMILY, np.arange(50))\n"
                                     "print(read_low(b'fam.h5', h5fd.FAMILY))\nprint(os.path.exists('fam-000000.h5'))",
                                     "49", "True"),
}
H5_OUTSIDE = {  # a family, split or multi file outside the run (its name: refused before round 16 as well)
    "family": "h5py.File(@P@ + '/p%d.h5', 'w', driver='family', memb_size=4096)",
    "split": "h5py.File(@P@ + '/st', 'w', driver='split')",
    "multi, low level": H5_LOW + "low((@P@ + '/mu').encode(), h5fd.MULTI, np.zeros(3))",
}
# a member's name made a link out of the run by the cell: HDF5 truncated the outside file through it (round 16)
H5_MEMBER_LINK = {
    "family": "os.symlink('@OUTSIDE@/target.txt', 'q0.h5')\n"
              "h5py.File('q%d.h5', 'w', driver='family', memb_size=4096).close()",
    "split": "os.symlink('@OUTSIDE@/target.txt', 'st-r.h5')\nh5py.File('st', 'w', driver='split').close()",
    "multi": H5_LOW + "os.symlink('@OUTSIDE@/target.txt', 'mu-s.h5')\nlow(b'mu', h5fd.MULTI, np.zeros(3))",
    "family, default member names": H5_LOW + "os.symlink('@OUTSIDE@/target.txt', 'fm-000000.h5')\n"
                                    "low(b'fm.h5', h5fd.FAMILY, np.zeros(3))",
}
# names the guard cannot follow: a split extension that is a printf format (HDF5 may put the file's name anywhere in
# the member's), `h5f.open` naming no flags (its default is read-write: it was taken for a read)
H5_REFUSED = {
    "a split extension with a printf conversion": "from h5py import h5p\n"
                                                  "h5p.create(h5p.FILE_ACCESS).set_fapl_split(b'%s.m', None, b'-r', None)",
    "h5f.open naming no flags": "from h5py import h5f\nh5f.open(b'@OUTSIDE@/target.txt')",
}
H5_ENVS = library_kernels("h5py")


@pytest.fixture(scope="module")
def hk(request, workdir, outside, listener):
    """A kernel that has imported h5py and numpy and written the user's real multi-file HDF5 files (`H5_SETUP`)."""
    k = _fixture(request, workdir, outside, listener, H5_SETUP)
    yield k
    k["kernel"].shutdown()


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("case", list(H5_HONEST))
@pytest.mark.parametrize("hk", H5_ENVS, indirect=True, scope="module")
def test_h5py_multi_file_drivers_write_the_runs_copies(hk, case, sandbox):
    cell, *out = H5_HONEST[case]
    assert (hk["work"] / "part0.h5").exists() and (hk["work"] / "store-m.h5").exists()
    v = run5(hk, cell, sandbox)
    assert (v.verdict, v.stdout.strip().splitlines()[-2:]) == ("no-crash", out), v


@pytest.mark.parametrize("how", list(PATHS))
@pytest.mark.parametrize("case", list(H5_OUTSIDE))
@pytest.mark.parametrize("hk", H5_ENVS, indirect=True, scope="module")
def test_h5py_multi_file_drivers_outside_the_run_are_refused(hk, case, how):
    folder = PATHS[how].replace("/@NAME@", "")
    v = run5(hk, H5_OUTSIDE[case].replace("@P@", folder), GUARD)
    assert v.verdict == "blocked" and "h5py" in (v.reason or ""), v
    assert sorted(p.name for p in hk["outside"].iterdir()) == ["target.txt"], v


@pytest.mark.parametrize("case", list(H5_MEMBER_LINK))
@pytest.mark.parametrize("hk", H5_ENVS, indirect=True, scope="module")
def test_h5py_member_files_linked_out_of_the_run_are_refused(hk, case):
    v = run5(hk, H5_MEMBER_LINK[case], GUARD)
    assert v.verdict == "blocked" and "h5py" in (v.reason or ""), v
    assert (hk["outside"] / "target.txt").read_text() == "outside, keep me\n"


@pytest.mark.parametrize("case", list(H5_REFUSED))
@pytest.mark.parametrize("hk", H5_ENVS, indirect=True, scope="module")
def test_h5py_names_the_guard_cannot_follow_are_refused(hk, case):
    v = run5(hk, H5_REFUSED[case], GUARD)
    assert v.verdict == "blocked" and "h5py" in (v.reason or ""), v


# -- tokenizers ----------------------------------------------------------------------------------------------------
TOK = ("from tokenizers import Tokenizer, models\n"
       "tok = Tokenizer(models.WordLevel({'a': 0, 'b': 1}, unk_token='a'))\n"
       "bpe = models.BPE({'a': 0, 'b': 1, 'ab': 2}, [('a', 'b')])\n")
# the user's real files the writers would overwrite
TOK_SETUP = ("import tokenizers\n"
             "for n in ('tokenizer.json', 'vocab.json', 'merges.txt', 'pp-vocab.json', 'pp-merges.txt',"
             " 'sub/tok.json', 'sub/vocab.json'):\n    open(n, 'w').write('OLD')\n")
TOK_HONEST = {
    "Tokenizer.save": (TOK + "tok.save('tokenizer.json')\n"
                       "print(Tokenizer.from_file('tokenizer.json').get_vocab_size())", "2"),
    "Tokenizer.save, pretty=False, in a folder": (TOK + "tok.save(path='sub/tok.json', pretty=False)\n"
                                                  "print(Tokenizer.from_file('sub/tok.json').get_vocab_size())", "2"),
    "Model.save": (TOK + "print(bpe.save('.'), tok.model.save('sub'))\n"
                   "print(open('merges.txt').read().split()[-2:], open('sub/vocab.json').read())",
                   "['./vocab.json', './merges.txt'] ['sub/vocab.json']",
                   "['a', 'b'] {\"a\":0,\"b\":1}"),
    "Model.save with a prefix": (TOK + "print(bpe.save('.', 'pp'), bpe.save(folder='.', prefix='new'))\n"
                                 "print(open('pp-merges.txt').read().split()[-2:])",
                                 "['./pp-vocab.json', './pp-merges.txt'] ['./new-vocab.json', './new-merges.txt']",
                                 "['a', 'b']"),
}
TOK_OUTSIDE = {
    "Tokenizer.save": TOK + "tok.save(@P@)",
    "Model.save": TOK + "bpe.save(@P@)",
}
TOK_ESCAPES = {  # a model's file names reaching out of the run: through its prefix, through a link the cell made
    "a prefix naming another folder": TOK + "bpe.save('sub', '../' * 30 + '@OUTSIDE@'.lstrip('/') + '/pw')",
    "a model file linked out": TOK + "os.symlink('@OUTSIDE@/target.txt', 'sub/merges.txt')\nbpe.save('sub')",
    "a prefixed model file linked out": TOK + "os.symlink('@OUTSIDE@/target.txt', 'zz-vocab.json')\n"
                                         "tok.model.save('.', 'zz')",
    "the tokenizer's file linked out": TOK + "os.symlink('@OUTSIDE@/target.txt', 'tl.json')\ntok.save('tl.json')",
}
TOK_ENVS = library_kernels("tokenizers")


@pytest.fixture(scope="module")
def tk(request, workdir, outside, listener):
    """A kernel that has imported tokenizers and written the user's real files its writers name (`TOK_SETUP`)."""
    k = _fixture(request, workdir, outside, listener, TOK_SETUP)
    yield k
    k["kernel"].shutdown()


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("case", list(TOK_HONEST))
@pytest.mark.parametrize("tk", TOK_ENVS, indirect=True, scope="module")
def test_tokenizers_writers_write_the_runs_copies(tk, case, sandbox):
    cell, *out = TOK_HONEST[case]
    assert (tk["work"] / "tokenizer.json").read_text() == "OLD"
    v = run5(tk, cell, sandbox)
    assert (v.verdict, v.stdout.strip().splitlines()[-len(out):]) == ("no-crash", out), v


@pytest.mark.parametrize("how", list(PATHS))
@pytest.mark.parametrize("case", list(TOK_OUTSIDE))
@pytest.mark.parametrize("tk", TOK_ENVS, indirect=True, scope="module")
def test_tokenizers_writers_outside_the_run_are_refused(tk, case, how):
    where = PATHS[how].replace("@NAME@", "tok.json") if case == "Tokenizer.save" else PATHS[how].replace("/@NAME@", "")
    v = run5(tk, TOK_OUTSIDE[case].replace("@P@", where), GUARD)
    assert v.verdict == "blocked" and "tokenizers" in (v.reason or ""), v
    assert sorted(p.name for p in tk["outside"].iterdir()) == ["target.txt"], v


@pytest.mark.parametrize("case", list(TOK_ESCAPES))
@pytest.mark.parametrize("tk", TOK_ENVS, indirect=True, scope="module")
def test_tokenizers_model_files_reaching_out_are_refused(tk, case):
    v = run5(tk, TOK_ESCAPES[case], GUARD)
    assert v.verdict == "blocked" and "tokenizers" in (v.reason or ""), v
    assert sorted(p.name for p in tk["outside"].iterdir()) == ["target.txt"], v
    assert (tk["outside"] / "target.txt").read_text() == "outside, keep me\n"


# -- safetensors (transformers' `save_pretrained` of a model's weights): `serialize_file` writes in Rust ------------
ST = "import numpy as np, safetensors.numpy as sn\n"
ST_ENVS = library_kernels("safetensors")


@pytest.fixture(scope="module")
def sk(request, workdir, outside, listener):
    k = _fixture(request, workdir, outside, listener, "open('w.safetensors', 'w').write('OLD')\n")
    yield k
    k["kernel"].shutdown()


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("sk", ST_ENVS, indirect=True, scope="module")
def test_safetensors_save_file_writes_the_runs_copy(sk, sandbox):
    v = run5(sk, ST + "sn.save_file({'a': np.arange(3)}, 'w.safetensors')\n"
                      "print(sn.load_file('w.safetensors')['a'].tolist())", sandbox)
    assert (v.verdict, v.stdout.strip().splitlines()[-1:]) == ("no-crash", ["[0, 1, 2]"]), v


@pytest.mark.parametrize("how", list(PATHS))
@pytest.mark.parametrize("sk", ST_ENVS, indirect=True, scope="module")
def test_safetensors_save_file_outside_the_run_is_refused(sk, how):
    v = run5(sk, ST + "sn.save_file({'a': np.arange(3)}, @P@)".replace("@P@", PATHS[how].replace("@NAME@", "w.st")),
             GUARD)
    assert v.verdict == "blocked" and "safetensors" in (v.reason or ""), v
    assert sorted(p.name for p in sk["outside"].iterdir()) == ["target.txt"], v
