"""Issue 32's floor, measured: llm mode against the rules over every recorded verdict reply of a real small model
(../shared/llm-replies/replies.jsonl) and the written ones (tests/llm/replies/issue32-constructed.jsonl), each
sent twice through litellm over HTTP to the tests' fake OpenAI-compatible server (the model repeating itself on
the repair request), on six cell situations: clean and crashing cells, the rules silent, verified, guessing or
wrong. Prints right answers, false alarms and the cells where llm mode is wrong while the rules are right.

    PYTHONPATH=server .venv/bin/python benchmarks/llm_floor_replay.py
    # the code before issue 32, for comparison (it has no crane.llm.claims: the old policy is applied)
    git archive 323e613 server | tar -x -C /tmp/old && PYTHONPATH=/tmp/old/server .venv/bin/python \\
        benchmarks/llm_floor_replay.py
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.llm.fake_llm_server
REPLIES = [ROOT.parent / "shared" / "llm-replies" / "replies.jsonl",
           ROOT / "tests" / "llm" / "replies" / "issue32-constructed.jsonl"]


def verdict_replies() -> list[str]:
    out = []
    for path in REPLIES:
        for line in path.read_text().splitlines() if path.exists() else []:
            r = json.loads(line)
            system = (r["request"].get("messages") or [{}])[0].get("content", "")
            if r["status"] == 200 and system.startswith("You are CRANE, a crash detector"):
                out.append(r["response"]["choices"][0]["message"]["content"])
    return out


def main() -> int:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("OPENAI_API_KEY", "sk-crane-floor-replay")
    from tests.llm.fake_llm_server import FakeLLMServer, Reply

    from crane.finding import Finding
    from crane.llm.client import LLMError
    from crane.llm.cost import CostLedger
    from crane.llm.model_finding import verdict_to_finding
    from crane.llm.predictor import predict_with_llm
    from crane.llm.prompt import SYSTEM_PROMPT, Prompt
    from crane.llm.settings import LLMSettings
    from crane.notebook.model import Cell
    from crane.policy import ModelAnswer, decide
    from crane.probe.facts import ColumnFacts, Facts, ProbeResult

    try:
        from crane.llm.claims import model_answer
    except ImportError:  # the code before issue 32
        model_answer = None
    age = Facts(name="df", type="pandas.core.frame.DataFrame", kind="dataframe",
                columns=[ColumnFacts(name="age", dtype="float64"), ColumnFacts(name="name", dtype="object")])
    clean = Cell(number=3, cell_type="code", source="mean_age = df['age'].mean()\nprint(mean_age)")
    crash = Cell(number=3, cell_type="code", source="mean_age = df['Age'].mean()\nprint(mean_age)")

    def rule(c: float) -> Finding:
        return Finding(rule="missing-key", ename="KeyError", message="KeyError: 'Age'", line=1, confidence=c)

    situations = [(clean, [], ProbeResult(facts={"df": age}), False), (clean, [], None, False),
                  (crash, [rule(0.95)], ProbeResult(facts={"df": age}), True), (crash, [rule(0.6)], None, True),
                  (clean, [rule(0.6)], None, False), (crash, [], None, True)]
    replies = verdict_replies()
    server = FakeLLMServer().start()
    settings = LLMSettings(model="openai/qwen2.5-coder-0.5b", api_base=server.api_base, retries=0, cache=False,
                           structured="object")
    prompt = Prompt(messages=[{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "x"}],
                    chars=1, user_chars=1, sections={})
    tot = {"cells": 0, "rules_right": 0, "llm_right": 0, "rules_false_alarms": 0, "llm_false_alarms": 0,
           "llm_worse_cells": 0}
    try:
        for text in replies:
            for target, findings, probe, truth in situations:
                server.reset(Reply(content=text), Reply(content=text))
                try:
                    v = predict_with_llm(prompt, settings, ledger=CostLedger())
                    if model_answer is not None:
                        m = model_answer(v, target, probe)
                    else:
                        f = verdict_to_finding(v, target)
                        m = ModelAnswer(crash=f is not None, finding=f)
                except LLMError:
                    m = None
                llm = decide("llm", findings, None, m).prediction == "crash"
                rules = bool(findings)
                tot["cells"] += 1
                tot["rules_right"] += rules == truth
                tot["llm_right"] += llm == truth
                tot["rules_false_alarms"] += rules and not truth
                tot["llm_false_alarms"] += llm and not truth
                tot["llm_worse_cells"] += rules == truth and llm != truth
    finally:
        server.stop()
    code = "issue 32 (crane.llm.claims)" if model_answer is not None else "before issue 32"
    print(f"{code}: {len(replies)} verdict replies x {len(situations)} situations: {json.dumps(tot)}")
    return 0 if tot["llm_worse_cells"] == 0 and tot["llm_false_alarms"] <= tot["rules_false_alarms"] else 1


if __name__ == "__main__":
    sys.exit(main())
