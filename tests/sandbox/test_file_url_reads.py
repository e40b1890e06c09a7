"""A `file:` URL of this machine is a read of a local file, not network (issue 40): `pd.read_csv('file:///...')`,
`urllib.request.urlopen(Path(p).as_uri())` were `blocked` on every path ("a URL request is blocked", "a call to
urllib: urllib.request.urlopen is refused"), so an honest cell got no verdict. Now urllib's request of a local file
URL goes on (its `open` is vetted as any read; `urlretrieve`'s copy as any write) on the six paths, IPython 8 and 9:
the read runs, a missing file is the kernel's `URLError`, and every other URL, a `file:` URL naming a host (urllib
asks the network for it) and a copy written outside stay refused, nothing outside changed."""

from __future__ import annotations

import sys

import pytest

from . import end_paths
from .end_paths import PATHS, path_verdict

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork sandbox runs on Linux")

pk = end_paths.pk  # the module's kernel (each of KERNEL_ENVS), its working folder holds data.csv ("a,b\n1,2\n3,4\n")
DATA = "import os, pathlib, urllib.request\nP = os.path.abspath('data.csv')\n"


def _served(sb) -> None:
    assert sb.run("y = x + 1").verdict == "no-crash"


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("read", [
    "import pandas as pd\nassert pd.read_csv('file://' + P)['b'].sum() == 6",
    "assert urllib.request.urlopen(pathlib.Path(P).as_uri()).read() == b'a,b\\n1,2\\n3,4\\n'",
    "assert urllib.request.urlopen(urllib.request.Request('file:' + P)).read().startswith(b'a,b')",
    "local, _ = urllib.request.urlretrieve('FILE://' + P)\nassert open(local).read().startswith('a,b')",
], ids=["pandas", "urlopen", "request", "urlretrieve"])
def test_a_local_file_url_is_read(pk, path, read):
    v = path_verdict(pk, path, DATA + read, _served)
    assert (v.verdict, v.ename) == ("no-crash", None), v


@pytest.mark.parametrize("path", PATHS)
def test_a_copy_in_the_working_folder_is_a_write(pk, path):
    """`urlretrieve(url, 'copy.csv')` is what `open('copy.csv', 'wb')` is on that path (fork and transplant
    sessions refuse writes; the others write privately)."""
    v = path_verdict(pk, path, DATA + "urllib.request.urlretrieve('file://' + P, 'copy.csv')\n"
                                      "assert open('copy.csv').read().startswith('a,b')", _served)
    write = path_verdict(pk, path, "open('copy.csv', 'wb').write(b'a,b')", _served)
    assert (v.verdict, v.ename) == (write.verdict, write.ename), (v, write)
    assert v.verdict == ("blocked" if path in ("fork session", "transplant session") else "no-crash"), v


@pytest.mark.parametrize("path", PATHS)
def test_a_missing_local_file_is_the_kernels_crash(pk, path):
    v = path_verdict(pk, path, DATA + "urllib.request.urlopen('file://' + P + '.missing')", _served)
    assert (v.verdict, v.ename, v.line) == ("crash", "URLError", 3), v
    if path.split()[0] != "portable":  # (portable: a message naming the folder the run's view stands for is likely)
        assert v.certain, v


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("url", ["'http://127.0.0.1:9/x.csv'", "'file://example.invalid' + P",
                                 "'file://localhost' + P"], ids=["http", "file-host", "file-localhost"])
def test_other_urls_stay_refused(pk, path, url):
    v = path_verdict(pk, path, DATA + f"urllib.request.urlopen({url}, timeout=5)", _served)
    assert v.verdict == "blocked", v


@pytest.mark.parametrize("path", PATHS)
def test_a_copy_written_outside_stays_refused(pk, path):
    target = pk["outside"] / "copied.csv"
    v = path_verdict(pk, path, DATA + f"urllib.request.urlretrieve('file://' + P, {str(target)!r})", _served)
    assert v.verdict == "blocked", v
    assert not target.exists()
