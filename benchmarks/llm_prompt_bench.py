"""Prompt-size benchmark of the LLM layer (`crane bench --mode llm --dry-run` without the CLI).

Replays every variant of a bench set in a fresh kernel, probes the target cell, builds the prompt CRANE would
send, and reports medians: characters of the user message (comparable to the CRANE-LLM study's prompt inputs,
median 5,198 chars for its runtime-augmented prompts), with the system prompt, tokens (litellm's offline
tokenizer), per-section sizes and which runtime facts the prompts carry that the study's extractor lacked.
No model is called.

    .venv/bin/python benchmarks/llm_prompt_bench.py [/work/shared/bench/junobench-lite] [--jobs 2] [--json]
         [--show CASE/VARIANT] [--target-ratio 0.6]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from crane.bench.cases import find_cases
from crane.bench.llm_predictor import LLMBenchPredictor
from crane.bench.runner import run_cases
from crane.llm.predictor import STUDY_MEDIAN_PROMPT_CHARS, dry_run_stats
from crane.llm.settings import LLMSettings

# Facts the CRANE-LLM extractor did not provide (crane-llm-study.md §1.1 "Not covered" and §5).
NEW_FACTS = ("per-column NaN", "undefined names", "module checks", "file checks", "nn.Module summary",
             "keras model summary", "attribute checks", "key checks", "estimator params", "library versions",
             "signatures")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="*", default=["/work/shared/bench/junobench-lite"])
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--show", action="append", default=[], metavar="CASE/VARIANT", help="print that prompt")
    ap.add_argument("--target-ratio", type=float, default=0.6)
    args = ap.parse_args(argv)

    start = time.monotonic()
    cases = find_cases(args.dirs)
    predictor = LLMBenchPredictor(LLMSettings(), dry_run=True)
    results = run_cases(cases, predictor, jobs=max(1, args.jobs))
    errors = [f"{r.case}/{r.variant}: {r.error}" for r in results if r.error]
    stats = dry_run_stats(predictor.prompts)
    stats["new_fact_kinds"] = {k: stats["carried"].get(k, 0) for k in NEW_FACTS}
    stats["errors"] = errors
    stats["elapsed_s"] = round(time.monotonic() - start, 1)
    per_case = sorted(zip(predictor.labels, predictor.prompts, strict=False), key=lambda t: t[0])
    stats["per_prompt_user_chars"] = {label: p.user_chars for label, p in per_case}
    ratio = stats.get("ratio_user_median", 99)
    stats["target_met"] = ratio <= args.target_ratio

    for label, p in per_case:
        if label in args.show:
            print(f"===== {label} =====", file=sys.stderr)
            for m in p.messages:
                print(f"--- {m['role']} ---\n{m['content']}", file=sys.stderr)
    if args.json:
        print(json.dumps(stats, indent=2))
    else:
        u, t, k = stats["user_chars"], stats["total_chars"], stats["tokens"]
        n = stats["prompts"]
        print(f"prompts built: {n} (of {len(results)} variants; {len(errors)} errors) in {stats['elapsed_s']} s")
        print(f"user message chars : median {u['median']:.0f}  p90 {u['p90']}  max {u['max']}")
        print(f"with system prompt : median {t['median']:.0f}  (system prompt {stats['system_prompt_chars']} chars)")
        print(f"tokens (gpt-4o)    : median {k['median']:.0f}  p90 {k['p90']}  max {k['max']}")
        print(f"CRANE-LLM study median runtime-augmented prompt: {STUDY_MEDIAN_PROMPT_CHARS} chars")
        print(f"ratio (user message median / study median): {ratio:.2f}  "
              f"(with system prompt: {stats['ratio_total_median']:.2f}); target <= {args.target_ratio}: "
              f"{'MET' if stats['target_met'] else 'NOT MET'}")
        print("median section chars: " + ", ".join(f"{k} {v:.0f}" for k, v in stats["sections_median_chars"].items()))
        print("prompts carrying facts the study lacked: " + ", ".join(
            f"{k} {v}" for k, v in stats["new_fact_kinds"].items()))
        for e in errors:
            print(f"error: {e}")
        sizes = [p.user_chars for p in predictor.prompts]
        if sizes:
            print(f"mean {statistics.fmean(sizes):.0f} chars; history statements cut to fit: "
                  f"{stats['history_statements_cut']}")
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
