"""Real kernels for the probe tests: one session kernel holding every kind of value the probe summarises
(plus "trap" objects that record any user code the probe would run), and a second client on the same kernel
that watches iopub like another frontend would."""

from __future__ import annotations

import queue
import textwrap
from pathlib import Path

import pytest

from crane.kernel.manager import start_kernel
from crane.probe.collect import ProbeClient

from ..library_versions import HAS_TORCH

# The kernels run this interpreter (start_kernel's default): torch is there unless the bench extra leaves it out
# (Python 3.12+, pyproject.toml). Its values (TORCH_SETUP) are made only where it is; every other value and trap
# is made everywhere, so only the tests of torch's values skip without it (needs_torch).

SETUP = textwrap.dedent(
    """
    import numpy as np, pandas as pd, os
    from collections import defaultdict, OrderedDict
    from sklearn.linear_model import LogisticRegression
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.datasets import load_iris
    import matplotlib.pyplot as plt

    df = pd.DataFrame({
        "age": [22.0, 38.0, np.nan, 35.0, np.nan, 54.0],
        "sex": ["m", "f", "f", "m", "m", "f"],
        "price": ["1", "2.5", "3,000", None, "4", "5"],
        "survived": [0, 1, 1, 0, 0, 1],
        "when": pd.date_range("2021-01-01", periods=6),
        "cat": pd.Categorical(["a", "b", "a", "c", "a", "b"]),
    })
    df_idx = pd.DataFrame({"v": [1.5, 2.5, 3.5]}, index=["x", "y", "z"])
    wide = pd.DataFrame(np.zeros((3, 400)), columns=[f"feature_{i:03d}_with_a_long_name" for i in range(400)])
    s = pd.Series([1.0, None, 3.0], name="s", index=[10, 20, 30])
    s_str = pd.Series(["10", "20", "abc"])
    X = np.random.RandomState(0).rand(40, 3)
    y = np.array([0, 1] * 20)
    obj_arr = np.array(["1", "2", "x"], dtype=object)
    arr_nan = np.array([[1.0, np.nan], [3.0, 4.0]])
    big_vec = np.arange(3_000_000, dtype=np.float64)
    big_vec[2_999_999] = np.nan
    clf = LogisticRegression().fit(X, y)
    rf = RandomForestClassifier()
    pipe = Pipeline([("sc", StandardScaler()), ("lr", LogisticRegression())]).fit(
        pd.DataFrame(X, columns=["a", "b", "c"]), y)
    iris = load_iris()
    cfg = {"lr": 0.1, "layers": [64, 32], 3: "three"}
    counts = defaultdict(int)
    lst = [3, 1, 2, 3]
    tup = (1, "a", None)
    st = {1, 2}
    n_int = 42
    f_val = 3.5
    name_s = "hello world"
    def helper(a, b=2, *args, key=None, **kw):
        return a
    class Thing:
        '''a user class'''
        def __init__(self, v):
            self.v = v
        def method(self, x, y=1):
            return x
    thing = Thing(5)

    trap_calls = []
    class Trap:
        def __getattr__(self, n):
            trap_calls.append(("getattr", n)); raise AttributeError(n)
        def __repr__(self):
            trap_calls.append("repr"); return "Trap()"
        def __str__(self):
            trap_calls.append("str"); return "Trap"
        def __len__(self):
            trap_calls.append("len"); return 3
        def __iter__(self):
            trap_calls.append("iter"); return iter([])
        def __eq__(self, o):
            trap_calls.append("eq"); return False
        def __hash__(self):
            trap_calls.append("hash"); return 1
        def __bool__(self):
            trap_calls.append("bool"); return True
        def __float__(self):
            trap_calls.append("float"); return 1.0
        def __call__(self, *a):
            trap_calls.append("call")
        @property
        def prop(self):
            trap_calls.append("prop"); return 1
        @property
        def __class__(self):
            trap_calls.append("__class__"); return int
    class TrapGetattribute:
        def __getattribute__(self, n):
            trap_calls.append(("getattribute", n)); return object.__getattribute__(self, n)
    class TrapDict(dict):
        def __getitem__(self, k):
            trap_calls.append("getitem"); return 1
        def __contains__(self, k):
            trap_calls.append("contains"); return True
        def __len__(self):
            trap_calls.append("dictlen"); return 0
    class TrapMeta(type):
        def __getattr__(cls, n):
            trap_calls.append(("meta_getattr", n)); raise AttributeError(n)
    class TrapClass(metaclass=TrapMeta):
        pass
    trap = Trap()
    trap_ga = TrapGetattribute()
    trap_dict = TrapDict(a=1)
    trap_list = [Trap(), Trap()]
    trap_obj_arr = np.array([Trap(), Trap(), "x"], dtype=object)
    trap_df = pd.DataFrame({"o": [Trap(), Trap(), "x"]})
    """
)

# torch's values, and its traps (after SETUP: they record into trap_calls)
TORCH_SETUP = textwrap.dedent(
    """
    import torch
    from torch.utils.data import DataLoader, TensorDataset, Dataset
    t = torch.tensor([[1.0, float("nan")], [2.0, 3.0]], requires_grad=True)
    labels_t = torch.tensor([0, 1, 2, 1])
    net = torch.nn.Sequential(torch.nn.Dropout(0.1), torch.nn.Conv2d(1, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                              torch.nn.Linear(8 * 26 * 26, 10))
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(20, 16)
            self.out = torch.nn.Linear(16, 2)
        def forward(self, x):
            return self.out(self.fc1(x))
    mlp = Net()
    ds = TensorDataset(torch.randn(50, 1, 28, 28), torch.randint(0, 10, (50,)))
    loader = DataLoader(ds, batch_size=16, shuffle=True)
    class TrapDataset(Dataset):
        def __len__(self):
            trap_calls.append("dataset_len"); return 10
        def __getitem__(self, i):
            trap_calls.append("dataset_getitem"); return torch.zeros(2)
    class TrapModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(2, 2)
        def forward(self, x):
            trap_calls.append("forward"); return x
    trap_loader = DataLoader(TrapDataset(), batch_size=2)
    trap_model = TrapModel()
    """
)


def torch_only(*items):
    """`items` where torch is installed (its values exist in the kernel), else nothing: for probe requests that
    name torch's values beside others."""
    return list(items) if HAS_TORCH else []


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("probe-kernel")
    (d / "data").mkdir()
    (d / "data" / "train.csv").write_text("a,b\n1,2\n")
    return d


@pytest.fixture(scope="session")
def start():
    """The kernel starter, for tests that need a kernel of their own (to kill, or to keep busy)."""
    return start_kernel


@pytest.fixture(scope="session")
def kernel(data_dir):
    k = start_kernel(data_dir)
    # building the arrays asked the traps about themselves: cleared after
    run = k.connection.run_cell(SETUP + (TORCH_SETUP if HAS_TORCH else "") + "trap_calls.clear()\n", timeout=120)
    assert run.status == "ok", (run.ename, run.evalue, run.traceback)
    yield k
    k.shutdown()


@pytest.fixture(scope="session")
def probe(kernel) -> ProbeClient:
    return ProbeClient(kernel.connection)


class Watcher:
    """A second client of the same kernel: it sees every iopub message, as another frontend would."""

    def __init__(self, kernel):
        self.client = kernel.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=30)
        self.drain()

    def drain(self) -> list[dict]:
        msgs = []
        while True:
            try:
                msgs.append(self.client.get_iopub_msg(timeout=0.3))
            except queue.Empty:
                return msgs

    def evaluate(self, expr: str, timeout: float = 10.0):
        """Evaluate privately from this client (a user_expressions request), returning the text/plain repr."""
        msg_id = self.client.execute("", silent=True, store_history=False, user_expressions={"v": expr})
        while True:
            reply = self.client.get_shell_msg(timeout=timeout)
            if reply["parent_header"].get("msg_id") == msg_id:
                break
        v = reply["content"]["user_expressions"]["v"]
        assert v["status"] == "ok", v
        return v["data"]["text/plain"]

    def close(self):
        self.client.stop_channels()


@pytest.fixture(scope="session")
def watcher(kernel):
    w = Watcher(kernel)
    yield w
    w.close()


def own_kernel(tmp_path_factory, name: str, setup: str):
    """A kernel of a test module's own, with `setup` run in it, shut down after the module (for a module-scoped
    fixture: `yield from own_kernel(...)`)."""
    k = start_kernel(tmp_path_factory.mktemp(name))
    run = k.connection.run_cell(setup, timeout=120)
    assert run.status == "ok", (run.ename, run.evalue)
    yield k
    k.shutdown()
