"""The verdict of a sandboxed run from what its processes wrote and how they ended: the child's JSON lines
(setup, record, the supervisor's exit and denied lines), validated at the edge, and the exit status when no
record came (signals: budget, limits, a pool or shared memory the sandbox withheld, a real crash). Shared by
the fork runs (fork_runner.py) and the transplant runs (transplant.py)."""

from __future__ import annotations

import hashlib
import signal

import msgspec

from crane.sandbox.channel import RunOutcome
from crane.sandbox.shared.seal import SEAL_CLEAN, SEAL_ENDS, SEAL_RAISED, SEAL_RECORD, SEAL_TAMPERED, TAMPERED_EXIT
from crane.sandbox.verdict import (
    ChildRecord,
    DeniedLine,
    ExitLine,
    ExitStatus,
    Integrity,
    SandboxVerdict,
    SetupLine,
    unavailable,
)

_GRACE_S = 0.5  # setup time allowed on top of the cell's budget


class ChildLines(msgspec.Struct):
    setup: SetupLine | None = None
    record: ChildRecord | None = None
    exit: ExitLine | None = None
    denied: list[str] = []  # network attempts of any process of the sandbox (the supervisor's record)
    started: bool = False  # the cell's own code began (its "cell" line): a death before it is not the cell's
    error: str | None = None
    extra: list[str] = []  # lines CRANE's processes never write: a second record, setup or "cell" line, a line
    # after the record other than the supervisor's, a line that is not one of ours (see `parse_lines`)
    refusals: list[ChildRecord] = []  # every `blocked` record, the first included: the cell's own processes (a
    # DataLoader's workers, a pool's children) each end with CRANE's refusal record when one of them is refused


def parse_lines(data: bytes) -> ChildLines:
    """The child's JSON lines, each validated: setup, the final record, the supervisor's exit line. CRANE's own
    processes write at most one setup line, one "cell" line and one record, then only the supervisor's "denied"
    and "exit" lines; anything else (a second record, a line after the record, a line that is not one of ours)
    was written by the cell and is listed in `extra`: the run is then `blocked`, never a verdict (`assemble`)."""
    out = ChildLines()
    seen: dict[str, int] = {}
    for raw in data.split(b"\n"):
        raw = raw.strip()
        if not raw:
            continue
        try:
            obj = msgspec.json.decode(raw)
            event = obj.get("event") if isinstance(obj, dict) else None
            kind = event if event in ("setup", "exit", "denied", "cell") else "record"
            if kind == "setup" and "transplant" in obj:  # a transplant worker's own, after its confinement's
                kind = "transplant setup"
            seen[kind] = seen.get(kind, 0) + 1
            if kind != "denied" and seen[kind] > 1:
                out.extra.append(f"a second {kind} line")
            elif out.record is not None and kind not in ("denied", "exit"):
                out.extra.append(f"a {kind} line after the record")
            if event == "setup":  # a transplant worker's own line (after its confinement's) is the one that counts
                out.setup = msgspec.convert(obj, SetupLine) if kind == "transplant setup" or out.setup is None \
                    else out.setup
            elif event == "exit":
                out.exit = out.exit or msgspec.convert(obj, ExitLine)
            elif event == "denied":
                out.denied.append(msgspec.convert(obj, DeniedLine).what)
            elif event == "cell":
                out.started = True
            else:
                rec = msgspec.convert(obj, ChildRecord)
                out.record = out.record or rec
                if rec.verdict == "blocked":
                    out.refusals.append(rec)
        except (msgspec.DecodeError, msgspec.ValidationError, AttributeError) as exc:
            out.error = f"the sandbox child sent a malformed record: {exc}"
            out.extra.append(f"a line that is not CRANE's ({str(exc)[:80]})")
    return out


FORGED = "the cell wrote into CRANE's result channel"
TAMPERED = TAMPERED_EXIT  # the exit code of a sandbox process whose cell rebound CRANE's own code


def threads_doubt(v: SandboxVerdict, names: list[str]) -> None:
    """A fork's certain crash or clean run made "likely" when the notebook's threads were running in the kernel
    (`names`: kernel/fork_threads.py): the child has none of them. The one-shot's and a fork session's."""
    if not names or v.verdict not in ("crash", "no-crash") or not v.certain:
        return
    shown = ", ".join(f"'{n}'" for n in names[:3]) + (", ..." if len(names) > 3 else "")
    what = "the crash" if v.verdict == "crash" else "the clean run"
    v.certain, v.reason = False, (f"{what} is only likely: the notebook's thread(s) {shown} still running in the "
                                  "kernel do not exist in the sandbox's fork (what they do while the cell runs was "
                                  "not there)")


def _signal_verdict(sig: int | None, exitcode: int | None, memory_mb: int, setup: SetupLine | None) -> SandboxVerdict:
    if sig is None:
        if exitcode == TAMPERED:  # kernel/common._TAMPERED: it wrote nothing, and says why by how it ended
            return SandboxVerdict(verdict="blocked", reason="the cell changed CRANE's own code or what it runs on (its "
                                  "functions, the standard functions or builtins its record is made with): its "
                                  "record cannot be trusted")
        if exitcode == 70:
            return unavailable("the sandbox child failed during setup")
        return unavailable(f"the sandbox child ended without a result (exit code {exitcode})")
    name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
    if sig == signal.SIGXCPU:
        return SandboxVerdict(verdict="timeout", reason="the cell exceeded its CPU-time budget")
    if sig == signal.SIGALRM:
        return SandboxVerdict(verdict="timeout", reason="the cell exceeded its wall-clock budget")
    if sig == signal.SIGKILL:
        return SandboxVerdict(verdict="timeout", reason=f"the sandbox child was killed (memory budget {memory_mb} MiB "
                                                         "or CPU budget exhausted)")
    if sig == signal.SIGXFSZ:
        return SandboxVerdict(verdict="blocked", reason="the cell wrote more than the sandbox's file-size limit")
    if sig == signal.SIGSYS:
        return SandboxVerdict(verdict="blocked", reason="the cell made a system call the sandbox forbids")
    maps = setup.mappings if setup else {}
    withheld = int(maps.get("readonly", 0) or 0) + int(maps.get("unmapped", 0) or 0)
    if withheld and sig in (signal.SIGSEGV, signal.SIGBUS):
        return SandboxVerdict(verdict="blocked", reason=f"killed by {name}: probably an access to shared memory the "
                                                         f"sandbox withheld ({withheld} mapping(s) too large to copy)")
    pools = int(setup.pool_threads) if setup else 0
    if pools and sig in (signal.SIGSEGV, signal.SIGBUS):  # a pool's threads do not exist in a forked copy
        return SandboxVerdict(verdict="blocked", reason=f"killed by {name}, with {pools} native worker thread(s) "
                                                         "(OpenMP, BLAS, rayon) in the kernel that a forked copy "
                                                         "does not have: not a certain crash")
    if sig == signal.SIGABRT:  # libzmq, gRPC, OpenMP, CUDA... abort when a socket, thread or memory is refused
        return SandboxVerdict(verdict="blocked", reason="the process aborted (SIGABRT): libraries abort when the "
                                                         "sandbox refuses them a socket, a thread or memory")
    return SandboxVerdict(
        verdict="crash",
        ename="DeadKernelError",
        evalue=f"the process died with {name}: running this cell would kill the kernel",
        reason=f"killed by {name}",
    )


def _before_the_cell(v: SandboxVerdict, lines: ChildLines) -> SandboxVerdict:
    """A process that died before the cell's code began (setting up, shrinking, loading a transplant's copy of
    the kernel's state) says nothing about the cell."""
    if v.verdict != "crash" or lines.started:
        return v
    return unavailable(f"the sandbox process died before the cell started ({v.reason}): its setup or the copy of "
                       "the kernel's state failed there, not the cell")


def _only_refusals(lines: ChildLines) -> bool:
    """Every extra line is a further record, and one of the records is CRANE's refusal (`blocked`): the cell's own
    processes (a DataLoader's workers, a pool's children) were refused, and the process that waited on them then
    ended too (its crash is the refusal's consequence)."""
    further = ("a second record line", "a record line after the record")
    return bool(lines.refusals) and all(x in further for x in lines.extra)


# the seal's codes (shared/seal.py, imported above): how CRANE's epilogue says the cell ended
# what a record may say under each code: "no-crash" only where the cell ended clean
# (a transplant worker's record may say "unavailable" for a NameError on a kernel name it did not copy: the cell's
# raise, or an exception IPython caught and showed — `%run -i script.py` whose script reads such a name ends the cell
# clean, its record the shown exception's, as a shown `crash` is (round 16, F12). "unavailable" claims nothing the
# cell did: a record of another code's verdict, or bytes CRANE did not write, stay `blocked`)
_SEAL_ALLOWS = {SEAL_CLEAN: {"no-crash", "crash", "blocked", "timeout", "unavailable"},
                SEAL_RAISED: {"crash", "blocked", "timeout", "unavailable"},
                SEAL_RECORD: {"timeout", "unavailable", "blocked"}}
ENDED_ITSELF = "the cell ends the kernel's process"


def _digest(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def _ended_itself(status: ExitStatus, memory_mb: int, setup: SetupLine | None) -> SandboxVerdict:
    """A run's process that ended before CRANE's epilogue sealed it, after its cell began: by its own exit (any
    code: in the kernel that ends the kernel) or a signal nobody of CRANE's sent."""
    if status.signal is None:
        code = status.exitcode
        if code == 70:  # (kernel/entry._fork: CRANE's own code failed)
            return unavailable("the sandbox child failed")
        if code == TAMPERED:  # (a handler of the cell's stayed set through the seal's signal step: kernel/run)
            return _signal_verdict(None, TAMPERED, memory_mb, setup)
        return SandboxVerdict(verdict="crash", ename="DeadKernelError",
                              evalue=f"{ENDED_ITSELF} (it exited with code {code}): running it would end the kernel",
                              reason=f"{ENDED_ITSELF} (exit code {code})")
    return _signal_verdict(status.signal, None, memory_mb, setup)


def _sealed_verdict(outcome: RunOutcome, lines: ChildLines, budget_s: float, memory_mb: int) -> SandboxVerdict | None:
    """The verdict of a run whose parent looked for the seal (`status.checked`): None when the record stands as
    it is (sealed over exactly these bytes, and saying what the seal allows)."""
    st, rec = outcome.status, lines.record
    assert st is not None
    seal = st.sealed if st.sealed and len(st.sealed) == 2 else None
    if seal is None:
        if outcome.how == "cancelled":
            return unavailable("stopped before the cell finished")
        if outcome.how == "deadline" or st.deadline:  # (what it wrote meanwhile is not a record: never sealed)
            return SandboxVerdict(verdict="timeout", reason=f"the cell did not finish within {budget_s:g} s")
        if not lines.started:  # before the cell: only CRANE's code ran, its lines stand
            return None if rec is not None else _before_the_cell(_ended_itself(st, memory_mb, lines.setup), lines)
        if st.signal is None and st.exitcode is None:
            return unavailable("the sandbox child ended without a result")
        v = _ended_itself(st, memory_mb, lines.setup)
        if rec is not None or lines.extra:
            v.reason = f"{v.reason}; {FORGED} first" if v.reason else FORGED
        return v
    code, digest = seal
    exact = digest == _digest(outcome.data)
    if code == SEAL_ENDS:
        evalue = rec.evalue if exact and rec is not None and rec.ename == "DeadKernelError" else None
        return SandboxVerdict(verdict="crash", ename="DeadKernelError",
                              evalue=evalue or f"{ENDED_ITSELF}: running it would end the kernel",
                              reason=(rec.reason if exact and rec is not None else None) or ENDED_ITSELF)
    if code == SEAL_TAMPERED:
        return _signal_verdict(None, TAMPERED, memory_mb, lines.setup)
    if not exact:
        return SandboxVerdict(verdict="blocked", reason=f"{FORGED} (what CRANE wrote there is not what it holds)")
    if rec is None:
        return SandboxVerdict(verdict="blocked", reason="the cell closed CRANE's result channel: its record could not "
                                                        "be delivered")
    if rec.verdict not in _SEAL_ALLOWS.get(code, set()):
        return SandboxVerdict(verdict="blocked", reason=f"{FORGED} (the record says {rec.verdict!r}, how the cell "
                                                        "ended says otherwise)")
    return None


def _unsealed_verdict(outcome: RunOutcome, budget_s: float) -> SandboxVerdict:
    """A run whose process should have been sealed by its parent (every fork run), with no word from that parent
    on how it ended (its status never came, or came without the watch): whatever the channel holds may be the
    cell's, so it is never the verdict."""
    if outcome.how == "cancelled":
        return unavailable("stopped before the cell finished")
    if outcome.how == "deadline":
        return SandboxVerdict(verdict="timeout", reason=f"the cell did not finish within {budget_s:g} s")
    return unavailable("the kernel-side watcher never said how the sandbox's process ended: its record cannot be "
                       "trusted")


def assemble(outcome: RunOutcome, budget_s: float, memory_mb: int, expect_seal: bool = False) -> SandboxVerdict:
    """The verdict from what the child wrote and how it ended. `expect_seal`: the run's parent watches for the
    seal (fork runs): without its word the record never stands."""
    lines = parse_lines(outcome.data)
    setup, rec = lines.setup, lines.record
    st = outcome.status
    # a parent that never looked (the process ended before it said its record was out) found no seal either
    looked = st is not None and (st.checked or (expect_seal and st.checked is None))
    sealed = _sealed_verdict(outcome, lines, budget_s, memory_mb) if looked else None
    if sealed is not None:
        v = sealed
    elif expect_seal and st is None and (rec is not None or lines.extra):
        v = _unsealed_verdict(outcome, budget_s)
    elif lines.extra and _only_refusals(lines):
        # processes of the cell (a DataLoader's workers, a pool's children) ended with CRANE's refusal: blocked,
        # named by the first refusal (a record the cell forged can only make a run "blocked" this way, never a
        # crash or a clean run)
        first = lines.refusals[0]
        v = SandboxVerdict(verdict="blocked", reason=first.reason, denied=first.denied, refusal=first.refusal)
    elif lines.extra:  # the cell wrote on the channel: whatever the record says, it is not a verdict
        v = SandboxVerdict(verdict="blocked", reason=f"{FORGED} ({'; '.join(lines.extra[:3])})",
                           ename=rec.ename if rec is not None else None,
                           evalue=rec.evalue if rec is not None else None)
    elif rec is not None:
        v = SandboxVerdict(
            verdict=rec.verdict, ename=rec.ename, evalue=rec.evalue, line=rec.line, traceback=rec.traceback,
            displays=rec.displays, elapsed_ms=rec.elapsed_ms, reason=rec.reason, denied=rec.denied,
            absorbed=rec.absorbed,
            landlock_abi=rec.confinement.get("landlock_abi") if isinstance(rec.confinement, dict) else None,
            refusal=rec.refusal, certain=not rec.unsettled,
        )
    elif outcome.how == "cancelled":
        v = unavailable("stopped before the cell finished")
    elif outcome.how == "deadline" or (lines.exit is not None and lines.exit.deadline):
        v = SandboxVerdict(verdict="timeout", reason=f"the cell did not finish within {budget_s:g} s")
    elif lines.error:
        v = unavailable(lines.error)
    elif lines.exit is not None and (lines.exit.signal is not None or lines.exit.exitcode is not None):
        v = _before_the_cell(_signal_verdict(lines.exit.signal, lines.exit.exitcode, memory_mb, setup), lines)
    elif outcome.status is not None:
        v = _before_the_cell(_signal_verdict(outcome.status.signal, outcome.status.exitcode, memory_mb, setup), lines)
    else:
        v = unavailable("the sandbox child ended without a result")
    denied = lines.denied + list(outcome.denied) + (list(st.denied) if st is not None else [])
    if denied and v.verdict in ("crash", "no-crash") and v.ename != "DeadKernelError":
        # a program the cell started tried the network: what it did without it says nothing certain
        what = f" ({v.ename} followed)" if v.verdict == "crash" and v.ename else ""
        v.verdict, v.reason = "blocked", f"{denied[0]}{what}"
    v.denied = list(v.denied) + denied[:20]
    if setup is not None:
        v.mode, v.mode_reason, v.kept = setup.mode, setup.reason, setup.kept
        threads_doubt(v, setup.user_threads)
        v.setup_ms = float(setup.steps.get("total", 0.0) or 0.0)
        v.setup_steps = {str(k): float(x) for k, x in setup.steps.items() if isinstance(x, (int, float))}
        if setup.kept:
            v.scale = "miniature"
    v.stdout, v.stderr = outcome.stdout, outcome.stderr
    # read to its end (EOF, or the process gone) and nothing but CRANE's lines: the record is the only one (and,
    # where the parent looked for the seal, sealed over exactly these bytes)
    checked = outcome.how in ("eof", "exit", "record") and not lines.extra
    if expect_seal and st is None:
        checked = False
    elif looked:
        assert st is not None
        checked = checked and st.sealed is not None and len(st.sealed) == 2 and st.sealed[1] == _digest(outcome.data)
    v.integrity = Integrity(writer="cell-process", channel_checked=checked)
    return v
