"""CRANE's LLM paths against a real local model: `crane bench --mode static`, `--mode llm` and `--fix` on the same
variants, through an OpenAI-compatible server on this machine (llama.cpp's llama-server, llama-cpp-python,
Ollama, vLLM, LM Studio). Not part of `make test`: it needs a model server and takes minutes to hours on CPU.

    # a server (docs/llm.md, "Local models"), e.g. Qwen2.5-Coder-0.5B with one thread:
    OMP_WAIT_POLICY=PASSIVE llama-server -m qwen2.5-coder-0.5b-instruct-q4_k_m.gguf --jinja -np 1 -t 1 --port 8080
    .venv/bin/python benchmarks/llm_local_bench.py --model openai/qwen2.5-coder-0.5b \\
        --api-base http://127.0.0.1:8080/v1 [DIR ...] [--fix] [--fix-dirs DIR ...] [--max-steps 4] \\
        [--record replies.jsonl] [--json]

CRANE talks to the server through a recording proxy (benchmarks/llm_record_proxy.py) started here, so every
request is measured as the server answered it. Reports, against the targets of issues 22 and 32:
- valid verdicts: verdict requests (repair requests included) whose reply decodes to a verdict
  (crane.llm.schema.decode_answer) / verdict requests (target >= 80 %); and per variant, after the repair request;
- bench accuracy in llm mode >= the static mode's on the same variants, with no more false alarms (errored
  variants are not scored by `crane bench`; here they are also counted with the rules' prediction, which is
  what `check --mode llm` shows when the model fails);
- with --fix: the agent's replies with a usable tool call (`toolCallRate` of `crane bench --fix`: a call read
  and run, native or written as text; a lost call does not count) (target >= 90 %), the lost calls with their
  reasons, the fix rate, and the fixes where the offline search found no verified fix (target >= 1); the focused
  asks (crane.agent.focused: requests without tools, not agent turns) apart, with the fixes that came from them;
- requests, tokens and latency per request (median, p90, max) for verdicts and agent turns.

Exit code 0: the targets met; 1: a target missed; 2: no model server at --api-base (nothing measured), or a
bench run failed. The model files of ../shared/llm-replies/README.md come from PyPI packages (no model hub).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from http.server import ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from llm_record_proxy import make_handler  # noqa: E402 (a sibling script, not a package)

DEFAULT_DIRS = ["/work/shared/bench/junobench-lite"]


def server_up(api_base: str) -> str | None:
    """The models the server lists (GET /models), or None when nothing answers."""
    try:
        with urllib.request.urlopen(api_base.rstrip("/") + "/models", timeout=5) as resp:  # noqa: S310
            body = json.loads(resp.read() or b"{}")
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return ", ".join(str(m.get("id")) for m in body.get("data", []) if isinstance(m, dict)) or "(unnamed)"


def start_proxy(api_base: str, out: str) -> tuple[ThreadingHTTPServer, str]:
    """A recording proxy on a free loopback port; returns (server, the api_base to give CRANE)."""
    parts = urlsplit(api_base)
    upstream = urlunsplit((parts.scheme, parts.netloc, "", "", ""))
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(upstream, out, threading.Lock(), 3600.0))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    return server, urlunsplit(("http", f"127.0.0.1:{port}", parts.path, "", ""))


def crane_bench(args: argparse.Namespace, dirs: list[str], *extra: str) -> tuple[dict | None, float, str]:
    cmd = [sys.executable, "-m", "crane", "bench", *dirs, "--json", "--quiet", *extra]
    env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.limit_s)
    elapsed = time.monotonic() - start
    try:
        return json.loads(proc.stdout), elapsed, proc.stderr[-2000:]
    except ValueError:
        return None, elapsed, proc.stderr[-2000:]


def _dist(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    s = sorted(values)
    return {"n": len(s), "median": round(statistics.median(s), 1), "p90": s[min(len(s) - 1, int(0.9 * len(s)))],
            "max": s[-1]}


def _reply(rec: dict) -> dict:
    try:
        return rec["response"]["choices"][0]["message"] or {}
    except (KeyError, IndexError, TypeError):
        return {}


def exchanges(path: str, first: int = 0, last: int | None = None) -> list[dict]:
    lines = Path(path).read_text(encoding="utf-8").splitlines() if Path(path).exists() else []
    return [json.loads(x) for x in lines[first:last]]


def verdict_stats(recs: list[dict]) -> dict:
    """Verdict requests (no tools): how many replies decode to a verdict, first requests and repairs apart."""
    from crane.llm.client import REPAIR_PROMPT
    from crane.llm.schema import AnswerError, decode_answer

    repair_head = REPAIR_PROMPT.split("{")[0]
    out: dict = {"requests": 0, "valid": 0, "repairs": 0, "repairs_valid": 0, "http_errors": 0}
    secs = []
    for r in recs:
        req = r.get("request") if isinstance(r.get("request"), dict) else {}
        if "tools" in req or not r.get("path", "/v1/chat/completions").endswith("chat/completions"):
            continue
        msgs = req.get("messages") or [{}]
        is_repair = str(msgs[-1].get("content") or "").startswith(repair_head)
        out["requests"] += 1
        out["repairs"] += is_repair
        secs.append(float(r.get("seconds") or 0))
        if r.get("status") != 200:
            out["http_errors"] += 1
            continue
        try:
            decode_answer(_reply(r).get("content") or "")
        except AnswerError:
            continue
        out["valid"] += 1
        out["repairs_valid"] += is_repair
    out["valid_rate"] = round(out["valid"] / out["requests"], 3) if out["requests"] else None
    out["seconds"] = _dist(secs)
    out["first_token_seconds"] = _first_tokens([r for r in recs if "tools" not in (r.get("request") or {})])
    return out


def _first_tokens(recs: list[dict]) -> dict[str, float]:
    """Seconds to the first token of the streamed replies (the recording proxy measures them)."""
    return _dist([float(r["first_token_seconds"]) for r in recs if r.get("first_token_seconds") is not None])


def agent_stats(recs: list[dict]) -> dict:
    """Agent turns (requests with tools): how many replies carry a usable tool call, native or as text."""
    from crane.agent.model_call import parse_text_tool_calls

    out: dict = {"turns": 0, "parsed": 0, "native": 0, "text": 0, "http_errors": 0}
    secs = []
    first_turn, later = [], []
    for r in recs:
        req = r.get("request") if isinstance(r.get("request"), dict) else {}
        if "tools" not in req:
            continue
        out["turns"] += 1
        sec = float(r.get("seconds") or 0)
        secs.append(sec)
        (first_turn if sum(m.get("role") == "assistant" for m in req.get("messages", [])) == 0 else later).append(sec)
        if r.get("status") != 200:
            out["http_errors"] += 1
            continue
        msg = _reply(r)
        if msg.get("tool_calls"):
            out["native"] += 1
        elif parse_text_tool_calls(msg.get("content") or ""):
            out["text"] += 1
        else:
            continue
        out["parsed"] += 1
    out["parsed_rate"] = round(out["parsed"] / out["turns"], 3) if out["turns"] else None
    out["seconds"] = _dist(secs)
    out["first_turn_seconds"] = _dist(first_turn)
    out["first_token_seconds"] = _first_tokens([r for r in recs if "tools" in (r.get("request") or {})])
    out["later_turn_seconds"] = _dist(later)
    return out


def focused_stats(recs: list[dict]) -> dict:
    """The agent's focused asks (requests without tools: crane.agent.focused): how many, and their latency."""
    asks = [r for r in recs if isinstance(r.get("request"), dict) and "tools" not in r["request"]]
    return {"requests": len(asks), "seconds": _dist([float(r.get("seconds") or 0) for r in asks])}


def tokens(recs: list[dict]) -> dict[str, int]:
    p = c = 0
    for r in recs:
        u = (r.get("response") or {}).get("usage") if isinstance(r.get("response"), dict) else None
        if isinstance(u, dict):
            p += int(u.get("prompt_tokens") or 0)
            c += int(u.get("completion_tokens") or 0)
    return {"prompt": p, "completion": c}


def same_variant_accuracy(static: dict, rep: dict) -> dict:
    """Static and llm accuracy on the variants the model answered; and llm with errored variants counted as the
    rules predicted (what `check --mode llm` shows when the model fails)."""
    st = {(r["case"], r["variant"]): r for r in static["results"] if not r.get("error")}
    both, llm_ok, st_ok, fallback_ok, n_all = 0, 0, 0, 0, 0
    llm_alarms = static_alarms = 0  # false alarms over all the variants (errored: the rules' prediction)
    for r in rep["results"]:
        key = (r["case"], r["variant"])
        if key not in st:
            continue
        truth = r["expectCrash"]
        static_right = st[key]["predictedCrash"] == truth
        static_alarms += st[key]["predictedCrash"] and not truth
        n_all += 1
        if r.get("error"):
            fallback_ok += static_right
            llm_alarms += st[key]["predictedCrash"] and not truth
            continue
        llm_alarms += r["predictedCrash"] and not truth
        both += 1
        llm_ok += r["predictedCrash"] == truth
        st_ok += static_right
        fallback_ok += r["predictedCrash"] == truth
    return {"n": both, "llm": round(llm_ok / both, 3) if both else None,
            "false_alarms_llm": llm_alarms, "false_alarms_static": static_alarms,
            "static": round(st_ok / both, 3) if both else None,
            "n_all": n_all, "llm_with_fallback": round(fallback_ok / n_all, 3) if n_all else None,
            "static_all": round(sum(st[(r["case"], r["variant"])]["predictedCrash"] == r["expectCrash"]
                                    for r in rep["results"] if (r["case"], r["variant"]) in st) / n_all, 3)
            if n_all else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="*", default=DEFAULT_DIRS, help="bench sets or single case folders")
    ap.add_argument("--model", default="openai/qwen2.5-coder-0.5b")
    ap.add_argument("--api-base", default="http://127.0.0.1:8080/v1")
    ap.add_argument("--llm-timeout", type=float, default=None, help="seconds per request (default: CRANE's, 300 local)")
    ap.add_argument("--llm-first-token-timeout", type=float, default=None,
                    help="seconds a streamed reply may take to start (default: CRANE's, 120)")
    ap.add_argument("--fix", action="store_true", help="also run `crane bench --fix` (the repair agent)")
    ap.add_argument("--fix-dirs", nargs="*", default=None, help="case folders for --fix (default: the same)")
    ap.add_argument("--no-llm", action="store_true", help="skip `--mode llm` (e.g. only --fix)")
    ap.add_argument("--max-steps", type=int, default=4)
    ap.add_argument("--limit-s", type=float, default=6 * 3600, help="wall-clock limit per crane bench run")
    ap.add_argument("--record", default=None, help="keep the recorded exchanges here (JSON lines)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    models = server_up(args.api_base)
    if models is None:
        print(f"no model server answers at {args.api_base}: nothing measured (docs/llm.md, 'Local models')",
              file=sys.stderr)
        return 2
    record = args.record or tempfile.mkstemp(prefix="crane-llm-", suffix=".jsonl")[1]
    proxy, via = start_proxy(args.api_base, record)
    llm = ["--model", args.model, "--api-base", via, "--no-cache"]
    if args.llm_timeout:
        llm += ["--llm-timeout", str(args.llm_timeout)]
    if args.llm_first_token_timeout:
        llm += ["--llm-first-token-timeout", str(args.llm_first_token_timeout)]
    out: dict = {"model": args.model, "server_models": models, "dirs": args.dirs, "record": record}
    ok = True
    try:
        if not args.no_llm:
            static, t_static, err = crane_bench(args, args.dirs, "--mode", "static")
            if static is None:
                print(f"crane bench --mode static failed:\n{err}", file=sys.stderr)
                return 2
            first = len(exchanges(record))
            rep, t_llm, err = crane_bench(args, args.dirs, "--mode", "llm", *llm)
            if rep is None:
                print(f"crane bench --mode llm failed:\n{err}", file=sys.stderr)
                return 2
            recs = exchanges(record, first)
            n = len(rep["results"])
            asked = sum(1 for r in rep["results"] if not r.get("error") or r["error"].startswith("LLM"))
            valid = sum(1 for r in rep["results"] if not r.get("error"))
            out["static"] = {"accuracy": static["overall"]["accuracy"], "n": static["overall"]["n"],
                             "seconds": round(t_static)}
            out["llm"] = {"accuracy": rep["overall"]["accuracy"], "n_scored": rep["overall"]["n"], "variants": n,
                          "errored": rep["errored"], "variants_with_verdict": valid, "variants_asked": asked,
                          "verdicts": verdict_stats(recs), "tokens": tokens(recs), "usage": rep.get("usage"),
                          "seconds": round(t_llm), "decided_by": rep.get("decidedBy"),
                          "same_variants": same_variant_accuracy(static, rep)}
            sv = out["llm"]["same_variants"]
            ok = ((out["llm"]["verdicts"]["valid_rate"] or 0) >= 0.8
                  and sv["llm_with_fallback"] is not None and sv["llm_with_fallback"] >= sv["static_all"]
                  and sv["false_alarms_llm"] <= sv["false_alarms_static"])
        if args.fix:
            first = len(exchanges(record))
            fix, t_fix, err = crane_bench(args, args.fix_dirs or args.dirs, "--fix", "--max-steps",
                                          str(args.max_steps), *llm)
            if fix is None:
                print(f"crane bench --fix failed:\n{err}", file=sys.stderr)
                return 2
            recs = exchanges(record, first)
            s = fix["summary"]
            out["fix"] = {"fixed": s["fixed"], "cases": s["cases"], "fix_rate": s["fixRate"],
                          "requests": s.get("requests"), "tool_call_rate": s.get("toolCallRate"),
                          "usable_calls": s.get("usableCalls"), "lost_calls": s.get("lostCalls"),
                          "fixed_without_offline": s.get("fixedWithoutOffline"),
                          "focused_requests": s.get("focusedRequests"), "focused": focused_stats(recs),
                          "lost": [x for r in fix["results"] for x in r.get("lostCalls", [])],
                          "agent": agent_stats(recs), "tokens": tokens(recs), "seconds": round(t_fix),
                          "results": [{k: r.get(k) for k in ("case", "variant", "fixed", "agentStatus", "stopReason",
                                                             "steps", "seconds", "error", "offlineFixes",
                                                             "focusedRequests", "focusedFix")}
                                      for r in fix["results"]]}
            ok = (ok and (out["fix"]["tool_call_rate"] or 0) >= 0.9
                  and (out["fix"]["fixed_without_offline"] or 0) >= 1)
    finally:
        proxy.shutdown()
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"model {args.model} at {args.api_base} ({models}); exchanges recorded in {record}")
        if "llm" in out:
            st, lm = out["static"], out["llm"]
            v, sv = lm["verdicts"], lm["same_variants"]
            print(f"static: accuracy {st['accuracy']:.3f} on {st['n']} variants ({st['seconds']} s)")
            print(f"llm:    accuracy {lm['accuracy']:.3f} on {lm['n_scored']} scored variants, {lm['errored']} "
                  f"errored; on the same {sv['n']} variants static {sv['static']}; all {sv['n_all']} variants "
                  f"(errored: the rules' prediction) llm {sv['llm_with_fallback']} vs static {sv['static_all']}; "
                  f"false alarms llm {sv['false_alarms_llm']} vs static {sv['false_alarms_static']}")
            print(f"        valid verdicts: {v['valid']}/{v['requests']} requests ({v['valid_rate']}), of which "
                  f"{v['repairs_valid']}/{v['repairs']} repair requests; variants with a verdict "
                  f"{lm['variants_with_verdict']}/{lm['variants_asked']}; {lm['seconds']} s")
            print(f"        latency per verdict request (s): {v['seconds']}, to the first token "
                  f"{v['first_token_seconds']}; tokens {lm['tokens']}")
        if "fix" in out:
            f, a = out["fix"], out["fix"]["agent"]
            print(f"fix:    fixed {f['fixed']}/{f['cases']} ({f['fix_rate']:.3f}); turns with a usable tool call "
                  f"{a['parsed']}/{a['turns']} ({a['parsed_rate']}: {a['native']} native, {a['text']} as text); "
                  f"{f['seconds']} s")
            print(f"        usable tool calls: toolCallRate {f['tool_call_rate']} ({f['usable_calls']} usable, "
                  f"{f['lost_calls']} lost); fixed where the offline search found none: "
                  f"{f['fixed_without_offline']}")
            fo = f["focused"]
            print(f"        focused asks (the failing line put to the model alone): {fo['requests']}, latency (s) "
                  f"{fo['seconds']}; fixes from them: {sum(bool(r.get('focusedFix') and r.get('fixed')) for r in f['results'])}")
            for why in f["lost"][:10]:
                print(f"        lost: {why}")
            print(f"        latency per agent turn (s): first {a['first_turn_seconds']}, later "
                  f"{a['later_turn_seconds']}, to the first token {a['first_token_seconds']}; tokens {f['tokens']}")
        print("targets " + ("met" if ok else "MISSED") + " (valid verdicts >= 80 %, llm accuracy >= static with no "
              "more false alarms" + (", usable tool calls >= 90 %, >= 1 fix the offline search did not find)"
                                     if args.fix else ")"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
