"""CRANE's LLM paths against a real local model: `crane bench --mode static`, `--mode llm` and `--fix` on the same
variants, through an OpenAI-compatible server on this machine (llama.cpp's llama-server, llama-cpp-python,
Ollama, vLLM, LM Studio). Not part of `make test`: it needs a model server and takes minutes to hours on CPU.

    # a server (docs/llm.md, "Local models"), e.g. Qwen2.5-Coder-0.5B on llama.cpp with one thread:
    OMP_WAIT_POLICY=PASSIVE llama-server -m qwen2.5-coder-0.5b-instruct-q4_k_m.gguf --jinja -np 1 -t 1 --port 8080
    .venv/bin/python benchmarks/llm_local_bench.py --model openai/qwen2.5-coder-0.5b \\
        --api-base http://127.0.0.1:8080/v1 [DIR ...] [--fix] [--max-steps 4] [--json]

Reports, against the targets of issue 22:
- valid verdicts: llm-mode variants that got a verdict (not an error) / variants asked (target >= 80 %);
- bench accuracy in llm mode (errored variants not scored) >= the static mode's on the same variants;
- with --fix: model replies with a usable tool call (native or written as text) / replies (target >= 80 %),
  and the fix rate;
- requests, failed requests, tokens, latency.

Exit code 0: the targets met; 1: a target missed; 2: no model server at --api-base (nothing measured), or a
bench run failed. The model files of ../shared/llm-replies/README.md come from PyPI packages (no model hub).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

DEFAULT_DIRS = ["/work/shared/bench/junobench-lite"]


def server_up(api_base: str) -> str | None:
    """The models the server lists (GET /models), or None when nothing answers."""
    try:
        with urllib.request.urlopen(api_base.rstrip("/") + "/models", timeout=5) as resp:  # noqa: S310
            body = json.loads(resp.read() or b"{}")
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return ", ".join(str(m.get("id")) for m in body.get("data", []) if isinstance(m, dict)) or "(unnamed)"


def crane_bench(args: argparse.Namespace, *extra: str) -> tuple[dict | None, float, str]:
    cmd = [sys.executable, "-m", "crane", "bench", *args.dirs, "--json", "--quiet", *extra]
    env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.limit_s)
    elapsed = time.monotonic() - start
    try:
        return json.loads(proc.stdout), elapsed, proc.stderr[-2000:]
    except ValueError:
        return None, elapsed, proc.stderr[-2000:]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="*", default=DEFAULT_DIRS)
    ap.add_argument("--model", default="openai/qwen2.5-coder-0.5b")
    ap.add_argument("--api-base", default="http://127.0.0.1:8080/v1")
    ap.add_argument("--llm-timeout", type=float, default=None, help="seconds per request (default: CRANE's, 300 local)")
    ap.add_argument("--fix", action="store_true", help="also run `crane bench --fix` (the repair agent)")
    ap.add_argument("--max-steps", type=int, default=4)
    ap.add_argument("--limit-s", type=float, default=6 * 3600, help="wall-clock limit per crane bench run")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    models = server_up(args.api_base)
    if models is None:
        print(f"no model server answers at {args.api_base}: nothing measured (docs/llm.md, 'Local models')",
              file=sys.stderr)
        return 2
    llm = ["--model", args.model, "--api-base", args.api_base, "--no-cache"]
    if args.llm_timeout:
        llm += ["--llm-timeout", str(args.llm_timeout)]
    out: dict = {"model": args.model, "server_models": models, "dirs": args.dirs}

    static, t_static, err = crane_bench(args, "--mode", "static")
    if static is None:
        print(f"crane bench --mode static failed:\n{err}", file=sys.stderr)
        return 2
    rep, t_llm, err = crane_bench(args, "--mode", "llm", *llm)
    if rep is None:
        print(f"crane bench --mode llm failed:\n{err}", file=sys.stderr)
        return 2
    n = len(rep["results"])
    asked = n - sum(1 for r in rep["results"] if (r.get("error") or "").startswith(("Kernel", "Bench")))
    valid = sum(1 for r in rep["results"] if not r.get("error"))
    out["static"] = {"accuracy": static["overall"]["accuracy"], "n": static["overall"]["n"], "seconds": round(t_static)}
    out["llm"] = {"accuracy": rep["overall"]["accuracy"], "n_scored": rep["overall"]["n"], "errored": rep["errored"],
                  "valid_verdicts": valid, "asked": asked, "valid_verdict_rate": round(valid / asked, 3) if asked else 0,
                  "usage": rep.get("usage"), "seconds": round(t_llm),
                  "decided_by": rep.get("decidedBy")}
    ok = out["llm"]["valid_verdict_rate"] >= 0.8 and rep["overall"]["accuracy"] >= static["overall"]["accuracy"]
    if args.fix:
        fix, t_fix, err = crane_bench(args, "--fix", "--max-steps", str(args.max_steps), *llm)
        if fix is None:
            print(f"crane bench --fix failed:\n{err}", file=sys.stderr)
            return 2
        s = fix["summary"]
        out["fix"] = {"fixed": s["fixed"], "cases": s["cases"], "fix_rate": s["fixRate"], "requests": s.get("requests"),
                      "tool_call_rate": s.get("toolCallRate"), "seconds": round(t_fix)}
        ok = ok and (s.get("toolCallRate") or 0) >= 0.8
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        st, lm = out["static"], out["llm"]
        print(f"model {args.model} at {args.api_base} ({models})")
        print(f"static: accuracy {st['accuracy']:.3f} on {st['n']} variants ({st['seconds']} s)")
        print(f"llm:    accuracy {lm['accuracy']:.3f} on {lm['n_scored']} scored variants, {lm['errored']} errored; "
              f"valid verdicts {lm['valid_verdicts']}/{lm['asked']} ({lm['valid_verdict_rate']:.0%}); {lm['seconds']} s")
        if lm["usage"]:
            u = lm["usage"]
            print(f"        {u.get('requests', 0)} requests ({u.get('failedRequests', 0)} failed), "
                  f"{u.get('promptTokens', 0):,} prompt + {u.get('completionTokens', 0):,} completion tokens")
        if "fix" in out:
            f = out["fix"]
            rate = "-" if f["tool_call_rate"] is None else f"{f['tool_call_rate']:.0%}"
            print(f"fix:    fixed {f['fixed']}/{f['cases']} ({f['fix_rate']:.3f}); replies with a usable tool call "
                  f"{rate} of {f['requests']}; {f['seconds']} s")
        print("targets " + ("met" if ok else "MISSED") + " (valid verdicts >= 80 %, llm accuracy >= static"
              + (", tool calls >= 80 %)" if args.fix else ")"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
