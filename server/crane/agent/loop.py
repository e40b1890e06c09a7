"""The agent loop: ask the model for one action, run it in the sandbox, append the observation, repeat —
within budgets (steps, time, tokens, money), stoppable at any time, optionally waiting for the user's
go-ahead before each action (step mode). `start_fix` is the entry point of the CLI, the daemon and the bench.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable

import msgspec

from crane.agent import focused
from crane.agent.context import FixContext, initial_messages
from crane.agent.focused_round import focused_round
from crane.agent.model_call import constraint, request_turn
from crane.agent.proposal import AgentStep, AgentUsage, CallStats, Evidence, Proposal, ProposalStatus, StepUsage
from crane.agent.runner import FixRunner, GuardRefusal, RunnerError, describe_run
from crane.agent.sandboxes import ExecutionSandbox, replay_sandbox_factory
from crane.agent.tools import (
    TOOLS,
    AddCell,
    EditCell,
    ExecuteCell,
    Finish,
    Inspect,
    ToolArgsError,
    action_code,
    action_key,
    call_key,
    decode_args,
    tools_for,
)
from crane.fixes.model import verification_words
from crane.llm.client import DeadlinePassed, LLMError
from crane.llm.cost import CostLedger
from crane.llm.settings import LLMSettings
from crane.notebook.history import check_target
from crane.notebook.model import Notebook
from crane.text import cell_line, clean_traceback

log = logging.getLogger(__name__)

NUDGE = ("Reply with exactly one tool call: edit_cell, add_cell, execute_cell, inspect or finish. If you cannot "
         "call tools, reply with only this JSON object, filled in: "
         '{"name": "edit_cell", "arguments": {"reflection": "why", "cell": 3, "source": "the new code of the cell"}}'
         " (arguments as the tool's parameters).")

StepGate = Callable[[AgentStep], bool]  # True: go ahead; False: stop the run


# A model that sends again a call it made in an earlier turn (at temperature 0 a small model repeats its failed edit
# word for word until the step limit) is sampled at this temperature, at least, until it sends something new.
STUCK_TEMPERATURE = 0.8

HOSTED_RUN_SECONDS = 300.0
LOCAL_RUN_SECONDS = 1200.0


class AgentBudget(msgspec.Struct, kw_only=True):
    max_steps: int = 10
    # wall clock for the whole run (model and sandbox); None: HOSTED_RUN_SECONDS, or LOCAL_RUN_SECONDS when the
    # model server is local (CPU inference: one turn took 22-137 s on 2 idle cores, up to 400 s on loaded ones)
    max_seconds: float | None = None
    max_tokens: int | None = 200_000  # prompt + completion tokens over the run
    max_cost_usd: float | None = None  # None: settings.budget_usd (if any)
    cell_timeout: float = 120.0  # per cell run in the sandbox


class GoAhead:
    """A step gate for step mode: `gate(step)` blocks until `approve()` (go ahead) or `stop()`/the run's stop
    event. The daemon calls `approve()` from its `crane.agentContinue`-style command; tests call it directly."""

    def __init__(self, stop_event: threading.Event | None = None):
        self._cond = threading.Condition()
        self._approvals = 0
        self._stopped = False
        self.stop_event = stop_event
        self.waiting: AgentStep | None = None

    def approve(self) -> None:
        with self._cond:
            self._approvals += 1
            self._cond.notify_all()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def __call__(self, step: AgentStep) -> bool:
        with self._cond:
            self.waiting = step
            try:
                while not self._approvals and not self._stopped:
                    if self.stop_event is not None and self.stop_event.is_set():
                        return False
                    self._cond.wait(0.05)
                if self._stopped:
                    return False
                self._approvals -= 1
                return True
            finally:
                self.waiting = None


def build_context(nb: Notebook, target: int, goal: str | None, runner: FixRunner,
                  candidates: list | None = None) -> FixContext:
    """The error (recorded, or observed by running the target in the sandbox), CRANE's findings and facts, and
    the verified quick fixes found without a model (if any)."""
    cell = nb.cell(target)
    ctx = FixContext(target=target, goal=goal, candidates=list(candidates or []))
    if cell.error is not None:
        ctx.error = f"{cell.error.ename}: {cell.error.evalue}"
        ctx.traceback = clean_traceback(cell.error.traceback) if cell.error.traceback else ""
        ctx.failing_line = cell_line(ctx.traceback) if ctx.traceback else None
    try:
        from crane.engine import predict_cell, scope_of

        probe_client = runner.sandbox.probe_client()
        result, probe = predict_cell(nb, target, probe_client, scope_of(nb))
        ctx.findings, ctx.probe = list(result.findings), probe
    except Exception as exc:  # the context degrades, the run goes on
        log.warning("agent: no runtime facts for cell %d: %s", target, exc)
    if ctx.error is None:  # no recorded error: observe the real outcome in the sandbox
        _, res = runner.execute(target)
        if res.status == "error":
            ctx.error = f"{res.ename}: {res.evalue}"
            ctx.traceback, ctx.failing_line = res.traceback, res.line
            # a crash seen only on a copy of the state may be the copy's: the run goes on and says so (issue 42, h5)
            ctx.crash_certain, ctx.crash_doubt = res.certain, res.doubt
        elif res.status != "ok":
            ctx.error = f"{res.status}: {res.evalue or ''}"
    if ctx.failing_line is None and ctx.findings:
        ctx.failing_line = ctx.findings[0].line
    runner.cells[target].failing_line = ctx.failing_line
    return ctx


class AgentRun:
    """One repair run. Not reusable."""

    def __init__(self, nb: Notebook, target: int, settings: LLMSettings, sandbox: ExecutionSandbox, *,
                 goal: str | None = None, budget: AgentBudget | None = None,
                 on_step: Callable[[AgentStep], None] | None = None, step_gate: StepGate | None = None,
                 stop_event: threading.Event | None = None, ledger: CostLedger | None = None,
                 run_id: str | None = None, clock: Callable[[], float] = time.monotonic,
                 candidates: list | None = None):
        self.nb, self.target, self.settings, self.goal = nb, target, settings, goal
        self.clock = clock  # the time budget's clock (seconds)
        self.candidates = list(candidates or [])
        self.budget = budget or AgentBudget()
        if self.budget.max_seconds is None:
            self.budget = msgspec.structs.replace(
                self.budget, max_seconds=LOCAL_RUN_SECONDS if settings.local else HOSTED_RUN_SECONDS)
        self.max_seconds: float = self.budget.max_seconds or HOSTED_RUN_SECONDS
        self.on_step = on_step
        self.step_gate = step_gate
        self.stop_event = stop_event or threading.Event()
        self.session_ledger = ledger
        self.ledger = CostLedger()
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.runner = FixRunner(nb, target, sandbox, cell_timeout=self.budget.cell_timeout)
        self.messages: list[dict] = []
        self.log: list[AgentStep] = []
        self.steps = 0
        self.start = clock()
        self.explanation = ""
        self.evidence: Evidence | None = None  # the final verification, once run
        self.requests_sent: list[list[dict]] = []  # message lists as sent (tests check the stable prefix)
        self.calls = CallStats()  # usable, lost (with the reason) and repeated tool calls
        # the run's tools; for a local server (whose grammar can hold a reply to them), cell parameters limited to
        # the cells that exist or the run's additions can create. Hosted models get the plain tools: some providers
        # take enums of strings only (Gemini).
        self.tools = tools_for([c.number for c in nb.cells if c.is_code],
                               max((c.number for c in nb.cells), default=0),
                               self.budget.max_steps) if settings.local else list(TOOLS)
        self.text_turns = False  # the model answered a turn without native tool calls
        self.made: set[str] = set()  # the actions of earlier turns (crane.agent.tools.action_key)
        self.stuck = False  # the last turn only repeated earlier calls: the next one is sampled (STUCK_TEMPERATURE)
        # the last turn made no progress (its calls repeated earlier ones, changed nothing or were refused): the
        # failing line is put to the model alone (crane.agent.focused) before its next turn
        self.no_progress = False
        self.progress = False  # a call of the current turn made progress
        self.focus_rounds = 0
        self.focus_tried: set[str] = set()  # target sources the focused asks produced (normalized)
        self.ctx: FixContext | None = None
        self.variables: list[str] | None = None  # the variables the focused asks show, once probed
        self.focus_failed: list[str] = []  # the focused changes that failed: "`code` -> what happened"

    # -- budgets ---------------------------------------------------------------------------------------------
    def _limit_reached(self) -> str | None:
        b = self.budget
        if self.stop_event.is_set():
            return "stopped by the user"
        if self.steps >= b.max_steps:
            return f"step limit ({b.max_steps} steps)"
        if self.clock() - self.start >= self.max_seconds:
            return f"time budget ({self.max_seconds:g} s)"
        t = self.ledger.totals()
        if b.max_tokens is not None and t.prompt_tokens + t.completion_tokens >= b.max_tokens:
            return f"token budget ({b.max_tokens:,} tokens; used {t.prompt_tokens + t.completion_tokens:,})"
        cap = b.max_cost_usd if b.max_cost_usd is not None else self.settings.budget_usd
        if cap is not None and t.cost_usd >= cap:
            return f"cost budget (${cap:.4f}; spent ${t.cost_usd:.4f})"
        return None

    def _tools_now(self) -> list[dict]:
        """The actions that can be taken now: the schema a grammar-held reply follows. The cells that exist (the
        notebook's and those the run added); `finish` only once something changed (before, it is always refused:
        Qwen2.5-Coder-0.5B called it six times in a row on NBspecific_18). Not the tools sent in the prompt, which
        stay the same all run (a prompt prefix that changes is evaluated again from its start on a local server)."""
        cells = self.runner.cells
        tools = tools_for([n for n, c in cells.items() if c.is_code], max(cells, default=0), 0)
        if not self._changed():
            tools = [t for t in tools if t["function"]["name"] != "finish"]
        return tools

    def _emit(self, step: AgentStep) -> None:
        if step.phase == "done":
            self.log.append(step)
        if self.on_step is not None:
            try:
                self.on_step(step)
            except Exception:  # a broken listener must not break the run
                log.exception("agent: on_step listener failed")

    # -- actions ---------------------------------------------------------------------------------------------
    def _act(self, args) -> tuple[str, str, bool]:
        """(observation, status, finished)."""
        r = self.runner
        try:
            if isinstance(args, EditCell):
                return r.edit(args.cell, args.source), "ok", False
            if isinstance(args, AddCell):
                n = r.add(args.after, args.source)
                return (f"added cell {n} after cell {args.after}. Execute it (or a later cell) to run it.",
                        "ok", False)
            if isinstance(args, ExecuteCell):
                plan_results, result = r.execute(args.cell)
                return describe_run(plan_results, args.cell, result), "ok" if result.clean else "error", False
            if isinstance(args, Inspect):
                return r.inspect(args.expression)[:2000], "ok", False
            if isinstance(args, Finish):
                return self._finish(args)
        except GuardRefusal as exc:
            return str(exc), "refused", False
        except RunnerError as exc:
            return f"error: {exc}", "error", False
        return "error: unknown action", "error", False

    def _state(self) -> str:
        """The working copy (every cell's source, the cells the agent ran), as a short key."""
        import hashlib

        r = self.runner
        text = repr((sorted((n, c.source) for n, c in r.cells.items()), r.order, r.agent_ran))
        return "@" + hashlib.sha1(text.encode()).hexdigest()[:12]

    def _changed(self) -> bool:
        """The run changed something: an edit, a new cell, or a cell never run before that now runs first."""
        r = self.runner
        return bool(r.edits() or r.additions()
                    or any(not r.cells[c].ran_before for c in r.plan(self.target) if c in r.cells))

    def _finish(self, args: Finish) -> tuple[str, str, bool]:
        if not self._changed():
            return (f"not accepted: you changed nothing (no edit, no new cell, no never-run cell to run first), so "
                    f"cell {self.target} still fails. Edit the code that raises, then finish.", "refused", False)
        violations = self.runner.final_guard()
        if violations:
            self.runner.refusals += violations
            return "not accepted: " + "; ".join(violations), "refused", False
        ev = self.runner.verify()
        self.evidence = ev
        if ev.status == "ok":
            self.explanation = args.explanation or args.reflection
            ctx = self.ctx  # (issue 42, h5: a crash or clean run that is only likely is said, to the model too)
            how = verification_words(ctx.crash_certain if ctx is not None else None, ev.certain)
            why = "; ".join(d for d in (ctx.crash_doubt if ctx is not None else "", ev.doubt) if d)
            note = "" if how == "verified" else f" ({how}" + (f": {why})" if why else ")")
            return f"accepted: cell {self.target} ran clean in a fresh sandbox after your changes{note}.", "ok", True
        what = f"{ev.ename}: {ev.evalue}" if ev.ename else ev.status
        return (f"not accepted: in a fresh sandbox, cell {self.target} still fails with {what}. Keep fixing.",
                "error", False)

    def _gate(self, step: AgentStep) -> bool:
        """Step mode: show the proposed step and wait for the user's go-ahead. False: the user stopped the run."""
        if self.step_gate is None:
            return True
        self._emit(step)
        if not self.step_gate(step) or self.stop_event.is_set():
            self.stop_event.set()
            return False
        return True

    def _step(self, call, usage: StepUsage, tokens: int) -> bool:
        """Run one tool call; append its tool message. True when the run is finished."""
        self.steps += 1
        t0 = time.monotonic()
        try:
            args = decode_args(call)
        except ToolArgsError as exc:
            obs = f"error: {exc}"
            self.calls.lost.append(f"{call.name}: {exc}")
            self.messages.append({"role": "tool", "tool_call_id": call.id, "content": obs})
            self._emit(AgentStep(run_id=self.run_id, step=self.steps, phase="done", reflection="", action=call.name,
                                 result=obs, status="error", tokens=tokens, usage=usage))
            return False
        self.calls.usable += 1
        cell = getattr(args, "cell", None) if not isinstance(args, AddCell) else args.after
        step = AgentStep(run_id=self.run_id, step=self.steps, phase="proposed", reflection=args.reflection,
                         action=call.name, cell=cell, code=action_code(args), tokens=tokens, usage=usage)
        if not self._gate(step):
            obs = "not run: the user stopped the run"
            self.messages.append({"role": "tool", "tool_call_id": call.id, "content": obs})
            self._emit(msgspec.structs.replace(step, phase="done", result=obs, status="stopped"))
            return False
        obs, status, finished = self._act(args)
        if status != "refused" and not obs.startswith(("error: nothing changed", "error: nothing added")):
            self.progress = True
        left = self.budget.max_steps - self.steps
        if not finished and left == 1:
            obs += "\n(1 step left: finish now if the target cell runs clean.)"
        self.messages.append({"role": "tool", "tool_call_id": call.id, "content": obs})
        self._emit(msgspec.structs.replace(step, phase="done", result=obs, status=status,
                                           elapsed_s=round(time.monotonic() - t0, 3)))
        return finished

    # -- the loop --------------------------------------------------------------------------------------------
    def run(self) -> Proposal:
        self.evidence = None
        check_target(self.nb, self.target)
        ctx = self.ctx = build_context(self.nb, self.target, self.goal, self.runner, self.candidates)
        if ctx.error is None and not self.goal:
            return self._proposal("clean", "the target cell already runs clean in the sandbox: nothing to fix")
        self.messages = initial_messages(self.nb, ctx)
        finished = False
        stop_reason = None
        error = None
        while not finished:
            stop_reason = self._limit_reached()
            if stop_reason:
                break
            if self.no_progress and self.focus_rounds < focused.MAX_ROUNDS:
                self.no_progress = False
                finished = self.calls.focused_fixed = focused_round(self)
                continue
            left_s = self.max_seconds - (self.clock() - self.start)
            try:
                settings = self.settings
                if self.stuck and (settings.temperature or 0.0) < STUCK_TEMPERATURE:
                    settings = msgspec.structs.replace(settings, temperature=STUCK_TEMPERATURE)
                turn = request_turn(settings, self.messages, self.ledger, deadline=time.monotonic() + left_s,
                                    tools=self.tools, constrain=constraint(self.settings, self.text_turns),
                                    schema_tools=self._tools_now())
            except DeadlinePassed as exc:
                log.info("agent: %s", exc)  # the request in flight was abandoned at the budget's end
                stop_reason = f"time budget ({self.max_seconds:g} s)"
                break
            except LLMError as exc:
                error = f"model error: {exc}"
                break
            self.requests_sent.append(list(self.messages))
            if self.session_ledger is not None:
                self.session_ledger.add(turn.usage)
            self.messages.append(turn.as_message())
            self.text_turns = self.text_turns or turn.text_calls or not turn.tool_calls
            usage = StepUsage.of(turn.usage)
            tokens = usage.prompt_tokens + usage.completion_tokens
            if not turn.tool_calls:
                self.steps += 1
                self.calls.lost += turn.lost
                note = ("Your tool call could not be read: " + "; ".join(turn.lost) + ". ") if turn.lost else ""
                self.messages.append({"role": "user", "content": note + NUDGE})
                self._emit(AgentStep(run_id=self.run_id, step=self.steps, phase="done", reflection=turn.content[:500],
                                     action="reply", result=note + NUDGE, status="error", tokens=tokens, usage=usage))
                continue
            usable_before = self.calls.usable
            state = self._state()
            # an execute or inspect repeats an earlier one only on the same working copy
            keys = {action_key(c) + (state if c.name in ("execute_cell", "inspect") else "") for c in turn.tool_calls}
            self.stuck = keys <= self.made
            self.progress = False
            self.made |= keys
            seen: set[str] = set()
            for i, call in enumerate(turn.tool_calls):
                key = call_key(call)
                if key in seen:  # a runaway reply repeats one call: it runs once, it is one step
                    self.calls.repeated += 1
                    self.messages.append({"role": "tool", "tool_call_id": call.id,
                                          "content": "not run: the same call as an earlier one of this reply"})
                    continue
                seen.add(key)
                reason = self._limit_reached() if i else None
                if reason or finished:
                    why = "the run already finished" if finished else reason
                    self.messages.append({"role": "tool", "tool_call_id": call.id, "content": f"not run: {why}"})
                    continue
                finished = self._step(call, usage if i == 0 else StepUsage(), tokens if i == 0 else 0)
            self.calls.usable_turns += self.calls.usable > usable_before
            self.no_progress = self.stuck or not self.progress
        if finished:
            return self._proposal("fixed", "finished")
        if error:
            return self._proposal("error", error)
        user_stop = self.stop_event.is_set()
        if not user_stop and self._changed():  # nothing changed: nothing to verify, no fix
            try:
                self.evidence = self.runner.verify()
            except Exception as exc:
                log.warning("agent: final verification failed: %s", exc)
        fixed = self.evidence is not None and self.evidence.status == "ok" and not self.runner.final_guard()
        if fixed and not self.explanation:
            self.explanation = next((s.reflection for s in reversed(self.log) if s.reflection), "")
        return self._proposal("stopped" if user_stop else "fixed" if fixed else "not-fixed", stop_reason or "ended")

    def _proposal(self, status: ProposalStatus, stop_reason: str) -> Proposal:
        t = self.ledger.totals()
        r = self.runner
        fixed = status == "fixed"
        return Proposal(
            run_id=self.run_id, notebook=self.nb.path, target=self.target, status=status, fixed=fixed,
            stop_reason=stop_reason, explanation=self.explanation, edits=r.edits(), additions=r.additions(),
            run_first=r.plan(self.target) if status != "clean" else [], evidence=self.evidence,
            guard=list(r.refusals), steps=self.steps,
            usage=AgentUsage(requests=t.requests, prompt_tokens=t.prompt_tokens, completion_tokens=t.completion_tokens,
                             cached_tokens=t.cached_tokens,
                             cost_usd=t.cost_usd if t.requests > t.unpriced_requests else None,
                             unpriced_requests=t.unpriced_requests),
            model=self.settings.model or "", elapsed_s=round(time.monotonic() - self.start, 3), log=list(self.log),
            calls=msgspec.structs.replace(self.calls, lost=list(self.calls.lost)),
            crash_certain=self.ctx.crash_certain if self.ctx is not None else None,
            crash_doubt=self.ctx.crash_doubt if self.ctx is not None else "",
        )


def start_fix(
    notebook: Notebook,
    target: int,
    settings: LLMSettings,
    *,
    goal: str | None = None,
    on_step: Callable[[AgentStep], None] | None = None,
    step_gate: StepGate | None = None,
    stop_event: threading.Event | None = None,
    sandbox_factory: Callable[[Notebook], ExecutionSandbox] | None = None,
    budget: AgentBudget | None = None,
    ledger: CostLedger | None = None,
    run_id: str | None = None,
    clock: Callable[[], float] = time.monotonic,
    candidates: list | None = None,
) -> Proposal:
    """Run the repair agent on cell `target` (blocking; the daemon runs it in a worker thread).

    The sandbox comes from `sandbox_factory(notebook)` (default: a replay kernel CRANE owns) and is closed at
    the end. `clock` measures the time budget (tests pass a virtual one). `candidates`: verified quick fixes
    (crane.fixes.model.VerifiedFix) the agent starts from. Raises NotebookError for a bad target,
    LLMNotConfigured without a model and KernelError when no
    sandbox can be started; every other failure ends the run with a proposal whose status says so."""
    from crane.llm.client import LLMNotConfigured

    check_target(notebook, target)
    if not settings.enabled:
        raise LLMNotConfigured("no model is configured (set --model, CRANE_MODEL or crane.llm.model)")
    sandbox = (sandbox_factory or replay_sandbox_factory())(notebook)
    try:
        run = AgentRun(notebook, target, settings, sandbox, goal=goal, budget=budget, on_step=on_step,
                       step_gate=step_gate, stop_event=stop_event, ledger=ledger, run_id=run_id, clock=clock,
                       candidates=candidates)
        return run.run()
    finally:
        sandbox.close()
