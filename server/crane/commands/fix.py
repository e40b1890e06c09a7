"""`crane fix NOTEBOOK --cell N`: repair a cell with the CRANE agent, in a sandbox.

The agent edits, adds and executes cells in a replay sandbox (a fresh kernel CRANE owns, in the notebook's
folder, holding the state the notebook's history leaves) until the cell runs clean, within its step, time,
token and money budgets. Without --apply or --out it prints the proposed diff and changes nothing; with
--out FIXED.ipynb it writes the fixed notebook there; with --apply it edits NOTEBOOK in place. Only the
edited cells' sources change in the file (added cells are inserted); every other byte stays. A proposal
that is not a verified fix is never written.

Exit code 0: fixed (or nothing to fix); 1: no fix found; 2: usage, input, kernel or model error.

`--offline` needs no model: the verified quick fixes (crane.fixes, commands/fix_offline.py). With a model,
the agent starts from them: they are searched first and given to it as verified candidates.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import msgspec

from crane.commands import EXIT_CRASH, EXIT_ERROR, EXIT_OK
from crane.commands.files import write_atomic
from crane.kernel.launch import add_server_arguments
from crane.llm.settings import add_llm_arguments
from crane.sandbox.options import add_sandbox_arguments


class FixReport(msgspec.Struct, rename="camel"):
    schema: str  # "crane.fix/1"
    notebook: str
    proposal: object  # crane.agent.proposal.Proposal
    diff: str
    written: str | None = None  # the file the fix was written to, if any
    offered: list[object] = []  # crane.fixes.model.VerifiedFix: the verified quick fixes, when the agent failed


def offered_text(path: str, fixes: list) -> str:
    """The verified quick fixes offered when the agent did not fix the cell."""
    out = [f"{path}: the agent's model did not fix the cell; CRANE verified these quick fixes in the sandbox:"]
    for i, f in enumerate(fixes, start=1):
        first = f" (runs cell(s) {', '.join(map(str, f.run_first))} first)" if f.run_first else ""
        how = f" [{f.verification}]" if f.verification != "verified" else ""  # (issue 42, h5)
        out.append(f"  {i}. {f.title}{first}{how}")
    out.append("  write one with --offline --apply (the first) or --offline --pick K --apply")
    return "\n".join(out)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_sandbox_arguments(p)
    p.add_argument("notebook", help="path to an .ipynb file")
    p.add_argument("--cell", type=int, required=True, metavar="N", help="1-based number of the cell to fix")
    p.add_argument("--goal", help="what the cell should do (for a cell that has not failed yet)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--apply", action="store_true", help="write the fix into NOTEBOOK")
    out.add_argument("--out", metavar="FIXED.ipynb", help="write the fixed notebook to this file")
    p.add_argument("--json", action="store_true", help="print a JSON report")
    p.add_argument("--max-steps", dest="max_steps", type=int, default=10, metavar="K", help="agent steps (default 10)")
    p.add_argument("--max-seconds", dest="max_seconds", type=float, default=None,
                   help="wall-clock budget (300; the agent with a local model server: 1200)")
    p.add_argument("--token-budget", dest="token_budget", type=int, default=200_000,
                   help="prompt + completion tokens over the run (default 200000; 0: no limit)")
    p.add_argument("--quiet", action="store_true", help="do not print the agent's steps on stderr")
    p.add_argument("--python", help="interpreter for the sandbox kernel (default: this one)")
    p.add_argument("--offline", action="store_true",
                   help="no model: offer the quick fixes that ran clean in a sandbox (crane.fixes)")
    p.add_argument("--pick", type=int, metavar="K", help="--offline: write the K-th verified fix (default: the first)")
    add_server_arguments(p)
    add_llm_arguments(p)


def _print_step(step) -> None:
    if step.phase != "done":
        return
    where = f" cell {step.cell}" if step.cell is not None else ""
    head = f"[{step.step}] {step.action}{where}: {step.reflection}".rstrip(": ")
    result = step.result.strip().splitlines()[0][:160] if step.result.strip() else ""
    print(f"{head}\n     -> {result}", file=sys.stderr)


def render_text(path: str, proposal, diff: str, written: str | None) -> str:
    out = []
    if diff:
        out.append(diff.rstrip("\n"))
    p = proposal
    out.append(f"{path}: cell {p.target}: {p.summary()}")
    if p.explanation:
        out.append(f"  {p.explanation}")
    if p.run_first:
        out.append("  run before the cell: " + ", ".join(f"cell {c}" for c in p.run_first))
    if p.evidence is not None:
        ev = p.evidence
        what = "ran clean" if ev.status == "ok" else f"{ev.ename or ev.status}: {ev.evalue or ''}"
        out.append(f"  sandbox ({ev.sandbox}): cell {ev.target} {what}")
    for g in p.guard:
        out.append(f"  guard: {g}")
    u = p.usage
    cost = f"${u.cost_usd:.5f}" if u.cost_usd is not None else "cost unknown (model not priced)"
    out.append(f"  {p.steps} step(s), {u.requests} request(s), {u.prompt_tokens:,} prompt ({u.cached_tokens:,} cached)"
               f" + {u.completion_tokens:,} completion tokens, {cost}, {p.elapsed_s:.1f}s; stop: {p.stop_reason}")
    if written:
        out.append(f"  written to {written}")
    elif p.fixed and p.changes_code:
        out.append("  (nothing written: use --apply or --out FIXED.ipynb)")
    return "\n".join(out)


def _verified_candidates(args: argparse.Namespace, nb, launcher) -> list:
    """The verified quick fixes the agent starts from (none when the search fails: the agent goes on alone)."""
    if args.goal:
        return []
    from crane.agent.candidates import verified_candidates

    fixes, error = verified_candidates(nb, args.cell, python=args.python, launcher=launcher)
    if error is not None:
        if not (args.quiet or args.json):
            print(f"crane: no verified quick fixes ({error}); the agent starts from scratch", file=sys.stderr)
        return []
    if fixes and not (args.quiet or args.json):
        print(f"verified quick fixes for the agent to start from: {', '.join(f.title for f in fixes)}",
              file=sys.stderr)
    return fixes


def run(args: argparse.Namespace) -> int:
    if args.offline:
        from crane.commands.fix_offline import run_offline

        return run_offline(args)
    if args.pick is not None:
        print("crane: --pick goes with --offline", file=sys.stderr)
        return EXIT_ERROR
    from crane.agent.loop import AgentBudget, start_fix
    from crane.agent.nbwrite import apply_proposal
    from crane.agent.proposal import unified_diff
    from crane.agent.sandboxes import replay_sandbox_factory
    from crane.kernel.errors import KernelError
    from crane.kernel.launch import launcher_from_args, server_session
    from crane.llm.client import LLMError
    from crane.llm.cost import SESSION
    from crane.llm.settings import SettingsError, settings_from_args
    from crane.notebook.history import check_target
    from crane.notebook.model import NotebookError, load_notebook

    if args.max_steps < 1:
        print("crane: --max-steps must be at least 1", file=sys.stderr)
        return EXIT_ERROR
    try:
        settings = settings_from_args(args)
        nb = load_notebook(args.notebook)
        check_target(nb, args.cell)
        original = Path(args.notebook).read_bytes()
        launcher = launcher_from_args(args)
    except (NotebookError, SettingsError, KernelError, ValueError, OSError) as exc:
        print(f"crane: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if not settings.enabled:
        print("crane: the agent needs a model: --model M (or CRANE_MODEL), e.g. openai/gpt-4o-mini; "
              "or --offline for the verified quick fixes", file=sys.stderr)
        return EXIT_ERROR
    budget = AgentBudget(max_steps=args.max_steps, max_seconds=args.max_seconds,
                         max_tokens=args.token_budget or None)
    try:
        with server_session(launcher):
            candidates = _verified_candidates(args, nb, launcher)
            proposal = start_fix(nb, args.cell, settings, goal=args.goal, budget=budget, ledger=SESSION,
                                 candidates=candidates,
                                 on_step=None if args.quiet or args.json else _print_step,
                                 sandbox_factory=replay_sandbox_factory(python=args.python, launcher=launcher))
    except (KernelError, LLMError, NotebookError) as exc:
        print(f"crane: {exc}", file=sys.stderr)
        return EXIT_ERROR
    diff = unified_diff(proposal, Path(args.notebook).name)
    written = None
    target = Path(args.notebook) if args.apply else Path(args.out) if args.out else None
    if target is not None and proposal.fixed and proposal.changes_code:
        try:
            write_atomic(target, apply_proposal(original, proposal))
            written = str(target)
        except (NotebookError, OSError) as exc:
            print(f"crane: could not write the fix: {exc}", file=sys.stderr)
            return EXIT_ERROR
    elif target is not None and args.out and proposal.fixed:  # no code change: --out still gets the notebook
        write_atomic(target, original)
        written = str(target)
    # The model failed (or its budget ended) but CRANE verified quick fixes: offer them rather than nothing.
    offered = list(candidates or []) if not proposal.fixed and proposal.status != "clean" else []
    if args.json:
        from crane.commands.output import encode

        print(encode(FixReport(schema="crane.fix/1", notebook=args.notebook, proposal=proposal, diff=diff,
                               written=written, offered=offered)))
    else:
        print(render_text(args.notebook, proposal, diff, written))
        if offered:
            print(offered_text(args.notebook, offered))
    if target is not None and not proposal.fixed and proposal.status != "clean":
        if offered:
            print(f"crane: the agent found no fix, but {len(offered)} verified quick fix(es) exist: "
                  f"crane fix {args.notebook} --cell {args.cell} --offline --apply (or --pick K)", file=sys.stderr)
        else:
            print("crane: no verified fix: nothing written", file=sys.stderr)
    return EXIT_OK if proposal.fixed or proposal.status == "clean" else EXIT_CRASH
