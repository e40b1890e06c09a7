"""The LLM mode of the benchmark: a Predictor for crane.bench.runner (replayed state -> prompt -> model).

    predictor = LLMBenchPredictor(settings)                 # `crane bench --mode llm --model M`
    predictor = LLMBenchPredictor(settings, dry_run=True)   # `--dry-run`: build every prompt, call nothing
    run_cases(cases, predictor, ...); dry_run_stats(predictor.prompts)
"""

from __future__ import annotations

import threading

from crane.llm.claims import model_answer
from crane.llm.client import LLMError
from crane.llm.cost import SESSION, CostLedger
from crane.llm.predictor import predict_with_llm
from crane.llm.prompt import Prompt
from crane.llm.settings import LLMSettings
from crane.modes import replayed_prompt
from crane.policy import with_model


class LLMBenchPredictor:
    """Fills a crane.bench.metrics.VariantResult from the model's verdict (thread-safe for --jobs)."""

    def __init__(self, settings: LLMSettings, dry_run: bool = False, include_findings: bool = True,
                 ledger: CostLedger | None = None):
        self.settings = settings
        self.dry_run = dry_run
        self.include_findings = include_findings
        self.ledger = SESSION if ledger is None else ledger
        self.prompts: list[Prompt] = []
        self.labels: list[str] = []  # "case/variant" of each prompt, same order
        self._lock = threading.Lock()

    def __call__(self, replayed, target: int, result) -> None:
        cell_result, probe = replayed.predict(target)
        rules = cell_result.findings
        result.rules_predicted_crash = bool(rules)
        result.rules_predicted_ename = rules[0].ename if rules else None
        prompt = replayed_prompt(replayed, target, self.include_findings, predicted=(cell_result, probe))
        with self._lock:
            self.prompts.append(prompt)
            self.labels.append(f"{result.case}/{result.variant}")
        if self.dry_run:
            result.verdict = "dry-run"
            result.message = f"prompt {prompt.user_chars} chars (+{prompt.chars - prompt.user_chars} system)"
            return
        try:
            verdict = predict_with_llm(prompt, self.settings, ledger=self.ledger)
        except LLMError as exc:
            result.error = f"LLM: {exc}"
            return
        result.verdict = "crash" if verdict.answer.crash else "no-crash"
        # crane.policy: the model only adds (the same decision as `check --mode llm`): its crash claim checked
        # against the runtime facts (crane.llm.claims), the rules' findings kept whatever it said
        decision = with_model(rules, model_answer(verdict, replayed.nb.cell(target), probe))
        result.decided_by = decision.decided_by
        if decision.findings:
            top = decision.findings[0]
            result.predicted_crash = True
            result.predicted_ename, result.rule, result.line, result.message = (
                top.ename, top.rule, top.line, top.message)
