"""`crane check --mode llm` reuses the rules' check of the target cell (its findings and facts) for the model's
prompt: one probe request to the kernel per cell, not a second one to build the prompt."""

from __future__ import annotations

from typing import Any

import pytest

from crane.cli import main
from crane.probe.collect import ProbeClient

from .fake_llm_server import Reply
from .test_real_replies_cli import QWEN, write_notebook


@pytest.fixture(autouse=True)
def fresh_session():
    from crane.llm.cost import SESSION

    SESSION.reset()
    yield
    SESSION.reset()


def test_one_probe_request_per_checked_cell_in_llm_mode(tmp_path, llm_server, monkeypatch, capsys):
    nb = write_notebook(tmp_path / "nb.ipynb")
    llm_server.reset(Reply.answer())
    calls: list[int] = []
    real = ProbeClient.run

    def counted_run(self: ProbeClient, *a: Any, **k: Any) -> Any:
        calls.append(1)
        return real(self, *a, **k)

    monkeypatch.setattr(ProbeClient, "run", counted_run)
    main(["check", nb, "--cell", "3", "--mode", "llm", "--model", QWEN, "--api-base", llm_server.api_base,
          "--no-cache"])
    out = capsys.readouterr().out
    assert len(llm_server.requests) == 1, out
    assert len(calls) == 1
    prompt = str(llm_server.requests[0])
    assert "NameError" in prompt  # the rules' finding (X, y never defined) went into the prompt
