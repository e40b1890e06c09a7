"""A Keras model the kernel traced (red team round 17h, F6; kernel/environment._traced_models): after `model.fit`
in the kernel, `model.fit(X[:, :3], y)` fails there inside its traced graph (`InvalidArgumentError`), while the
copy's model, rebuilt with no traced function, fails Keras' input check first (`ValueError`): a certain crash with
another exception than the kernel's. Now a crash on a line that reads a copied model the kernel traced is only
likely, saying why; a model the kernel never fit, evaluated or predicted with keeps its certain crash with the
kernel's own exception. A kernel of today's environment (TF / Keras 3); one-shot (transplant, portable) and a
transplant session; the kernel unchanged."""

from __future__ import annotations

import os

import pytest

from crane.kernel.manager import start_kernel
from crane.kernel.untouched import Untouched
from crane.sandbox import speculate
from crane.sandbox.options import SandboxOptions
from crane.sandbox.session import open_session

from ..kernel_envs import require_today_python
from .copy_sessions import SESSIONS

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the sandbox needs Linux")

SETUP = """
import numpy as np, keras
from keras import layers
np.random.seed(1)
Xk = np.random.rand(32, 4).astype('float32'); yk = (Xk[:, 0] > 0.5).astype('float32')
def build():
    m = keras.Sequential([keras.Input((4,)), layers.Dense(8, activation='relu'), layers.Dense(1, activation='sigmoid')])
    m.compile(optimizer='adam', loss='binary_crossentropy')
    return m
model = build()
model.fit(Xk, yk, epochs=1, batch_size=8, verbose=0)
fresh = build()
def train_more(m, X):
    return m.fit(X, yk, epochs=1, verbose=0)
def guess(X):
    return fresh.predict(X, verbose=0)
"""
PATHS = ["transplant", "portable", "transplant session"]


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    k = start_kernel(tmp_path_factory.mktemp("keras-traced"), python=require_today_python())
    run = k.connection.run_cell(SETUP, timeout=300)
    assert run.status == "ok", run
    yield k.connection
    k.shutdown()


def _verdict(conn, path: str, source: str):
    with Untouched(conn) as watch:
        if path == "transplant session":
            with open_session(conn, budget_s=120.0, sandbox=SESSIONS["transplant"]) as sb:
                v = sb.run(source)
        else:
            v = speculate(conn, source, 120.0,
                          sandbox=SandboxOptions(confinement="portable") if path == "portable" else None)
    assert watch.unchanged, (watch.changes(), v)
    return v


@pytest.mark.parametrize("path", PATHS)
def test_a_crash_of_a_model_the_kernel_traced_is_likely(kernel, path):
    v = _verdict(kernel, path, "model.fit(Xk[:, :3], yk, epochs=1, verbose=0)")
    assert v.verdict == "crash" and not v.certain, v
    assert "'model' has traced" in (v.reason or ""), v


@pytest.mark.parametrize("path", PATHS)
def test_a_function_the_kernel_never_traced_stays_certain(kernel, path):
    """`model` was fit, never asked to predict: its predict function is built anew in the kernel too."""
    v = _verdict(kernel, path, "model.predict(Xk[:, :3], verbose=0)")
    assert (v.verdict, v.ename, v.certain) == ("crash", "ValueError", True), v


@pytest.mark.parametrize("path", PATHS)
def test_a_missing_method_of_a_traced_model_stays_certain(kernel, path):
    """An AttributeError (Keras 3 removed `predict_classes`) is raised before any traced function runs."""
    v = _verdict(kernel, path, "model.predict_classes(Xk)")
    assert (v.verdict, v.ename, v.certain) == ("crash", "AttributeError", True), v


@pytest.mark.parametrize("path", PATHS)
def test_a_crash_of_an_untraced_model_stays_certain(kernel, path):
    v = _verdict(kernel, path, "fresh.predict(Xk[:, :3], verbose=0)")
    assert (v.verdict, v.certain) == ("crash", True), v
    assert v.ename == "ValueError", v  # (the kernel's own, below: its first call checks the input spec too)


@pytest.mark.parametrize("path", PATHS)
def test_a_traced_model_a_notebook_function_trains_is_likely(kernel, path):
    """The call that runs the traced function is in a notebook function the cell calls (`reach`)."""
    v = _verdict(kernel, path, "train_more(model, Xk[:, :3])")
    assert v.verdict == "crash" and not v.certain, v
    assert "'model' has traced" in (v.reason or ""), v


@pytest.mark.parametrize("path", PATHS)
def test_an_untraced_model_a_notebook_function_uses_stays_certain(kernel, path):
    v = _verdict(kernel, path, "guess(Xk[:, :3])")
    assert (v.verdict, v.ename, v.certain) == ("crash", "ValueError", True), v


def test_the_kernels_own_exceptions(kernel):
    """What the kernel itself raises (run last: it traces `fresh`)."""
    traced = kernel.run_cell("model.fit(Xk[:, :3], yk, epochs=1, verbose=0)", timeout=300)
    first = kernel.run_cell("fresh.predict(Xk[:, :3], verbose=0)", timeout=300)
    predict = kernel.run_cell("model.predict(Xk[:, :3], verbose=0)", timeout=300)
    helper = kernel.run_cell("train_more(model, Xk[:, :3])", timeout=300)
    assert helper.status == "error" and helper.ename != "ValueError", helper
    assert traced.status == "error" and traced.ename != "ValueError", traced
    assert (first.status, first.ename) == ("error", "ValueError"), first
    assert (predict.status, predict.ename) == ("error", "ValueError"), predict
