/**
 * Pure state of the agent panel: the streamed steps of the current run, step mode (the server holds every
 * proposed action until the client sends `crane.continueAgent`), and the final `crane.fixCell` result.
 *
 * Pause/Step/Resume act on the server, not on the display: in a step-mode run, "Resume" lets the client
 * approve each proposed action as it arrives, "Pause" stops approving (the run halts at its next action) and
 * "Step" approves exactly one. A run started without step mode cannot be paused (the server does not wait
 * for anyone); pressing Pause then says so, and makes the next run start in step mode.
 */
import { extractEdit, LspWorkspaceEdit, textEditsByUri } from './edits';
import type { AgentStepParams, FixResult, Proposal } from './protocol';

export type AgentStatus = 'idle' | 'running' | 'stopping' | 'proposed' | 'no-proposal' | 'failed' | 'applied' | 'discarded';

export interface UsageTotals {
  promptTokens: number;
  completionTokens: number;
  cachedTokens: number;
  costUsd: number | null;
}

export interface AgentState {
  runId: string | undefined;
  cellUri: string | undefined;
  status: AgentStatus;
  /** The current (or last) run was started in step mode. */
  stepMode: boolean;
  /** Step mode: approve proposed actions automatically as they arrive (false = paused). */
  autoContinue: boolean;
  /** The next run starts in step mode (the user pressed Pause while no step-mode run was going). */
  stepNext: boolean;
  /** The proposed step waiting for the go-ahead (step mode), if any. */
  waiting: number | undefined;
  /** One entry per step number, in order: its latest phase. */
  steps: AgentStepParams[];
  result: FixResult | undefined;
  /** The result's WorkspaceEdit when it changes something (what Apply and Show diff use). */
  edit: LspWorkspaceEdit | undefined;
  message: string;
  usage: UsageTotals;
}

export type AgentEvent =
  | { type: 'start'; cellUri: string; stepMode: boolean }
  | { type: 'step'; params: AgentStepParams }
  | { type: 'pause' }
  | { type: 'resume' }
  | { type: 'continued'; step: number }
  | { type: 'stopRequested' }
  | { type: 'finished'; result: unknown }
  | { type: 'failed'; message: string }
  | { type: 'applied' }
  | { type: 'discarded' };

export function emptyUsage(): UsageTotals {
  return { promptTokens: 0, completionTokens: 0, cachedTokens: 0, costUsd: null };
}

export function initialAgentState(): AgentState {
  return {
    runId: undefined,
    cellUri: undefined,
    status: 'idle',
    stepMode: false,
    autoContinue: true,
    stepNext: false,
    waiting: undefined,
    steps: [],
    result: undefined,
    edit: undefined,
    message: '',
    usage: emptyUsage(),
  };
}

export function isActive(s: AgentState): boolean {
  return s.status === 'running' || s.status === 'stopping';
}

/** Whether the client should send `crane.continueAgent` for a step it just received. */
export function shouldAutoContinue(s: AgentState, p: AgentStepParams): boolean {
  return isActive(s) && s.stepMode && s.autoContinue && p.phase === 'proposed' && s.runId === p.runId;
}

/** Totals over the steps (each model request's usage rides on the first step it produced). */
export function sumUsage(steps: AgentStepParams[]): UsageTotals {
  const out = emptyUsage();
  for (const st of steps) {
    const u = st.usage;
    if (!u) {
      continue;
    }
    out.promptTokens += u.promptTokens || 0;
    out.completionTokens += u.completionTokens || 0;
    out.cachedTokens += u.cachedTokens || 0;
    if (typeof u.costUsd === 'number') {
      out.costUsd = (out.costUsd ?? 0) + u.costUsd;
    }
  }
  return out;
}

function isFixResult(v: unknown): v is FixResult {
  const o = v as FixResult;
  return !!o && typeof o === 'object' && 'edit' in o && (typeof o.markdown === 'string' || typeof o.runId === 'string');
}

/**
 * How a fixed run's verification falls short of certain, in the server's words (crane.fixes.model.verification_words),
 * or '' when it is plainly verified: the crash it repaired was seen only on a copy of the kernel's state
 * (`crashCertain: false`: "verified against a likely crash", with the reason), or its clean run is only likely.
 */
export function verifiedAgainst(p: Proposal | null | undefined): string {
  if (!p) {
    return '';
  }
  const parts: string[] = [];
  if (p.crashCertain === false) {
    parts.push(`against a likely crash${p.crashDoubt ? ` (${p.crashDoubt})` : ''}`);
  }
  if (p.evidence && p.evidence.certain === false) {
    parts.push(`by a likely clean run${p.evidence.doubt ? ` (${p.evidence.doubt})` : ''}`);
  }
  return parts.length ? `verified ${parts.join(', ')}` : '';
}

/** A one-line outcome of a run for the panel. */
export function describeOutcome(result: FixResult, hasEdit: boolean): string {
  const p: Proposal | null = result.proposal;
  const status = p?.status ?? result.status;
  const reason = p?.stopReason ? ` (${p.stopReason})` : '';
  switch (status) {
    case 'fixed': {
      const likely = verifiedAgainst(p);
      if (!hasEdit && p?.runFirst?.length) {
        return `No code change needed: run cell${p.runFirst.length > 1 ? 's' : ''} ${p.runFirst.join(', ')} first${likely ? ` (${likely})` : ''}.`;
      }
      return hasEdit
        ? `${likely ? `Fixed, ${likely}, in a fresh sandbox` : 'Fixed and verified in a fresh sandbox'}. Review it as a diff, or with Apply (preview): tick the changes in the Refactor Preview and press its Apply.`
        : 'Fixed: nothing to change.';
    }
    case 'clean':
      return 'Nothing to fix: the cell already runs clean in the sandbox.';
    case 'stopped':
      return `Stopped${reason}.${hasEdit ? ' The changes made so far can still be reviewed; they are not verified.' : ''}`;
    case 'error':
      return `The agent run failed${reason}.`;
    default:
      return `Not fixed${reason}.${hasEdit ? ' The changes it tried can still be reviewed; they do not fix the cell.' : ''}`;
  }
}

function mergeStep(steps: AgentStepParams[], p: AgentStepParams): AgentStepParams[] {
  const i = steps.findIndex((x) => x.step === p.step);
  if (i < 0) {
    return [...steps, p].sort((a, b) => a.step - b.step);
  }
  const out = [...steps];
  out[i] = p;
  return out;
}

const PAUSE_FREE_RUN =
  'Pause only applies to step-mode runs: this run was started without step mode and goes on by itself (Stop ends it). ' +
  'The next run will start in step mode.';

export function reduceAgent(s: AgentState, e: AgentEvent): AgentState {
  switch (e.type) {
    case 'start':
      return {
        ...initialAgentState(),
        cellUri: e.cellUri,
        status: 'running',
        stepMode: e.stepMode,
        autoContinue: !e.stepMode,
        message: e.stepMode
          ? 'Step mode: each action the agent proposes waits for Step (or Resume to let it run).'
          : 'The agent is working in a sandbox; nothing runs in your kernel.',
      };
    case 'step': {
      const p = e.params;
      if (!isActive(s) || (s.runId !== undefined && p.runId !== s.runId)) {
        return s; // a step of another (older) run, or after the run ended
      }
      const steps = mergeStep(s.steps, p);
      const waiting = p.phase === 'proposed' ? p.step : s.waiting === p.step ? undefined : s.waiting;
      return { ...s, runId: p.runId, steps, waiting, usage: sumUsage(steps) };
    }
    case 'pause':
      if (isActive(s) && s.stepMode) {
        return {
          ...s,
          autoContinue: false,
          message: s.waiting !== undefined
            ? `Paused at step ${s.waiting}: Step runs it, Resume lets the agent go on, Stop ends the run.`
            : 'Paused: the run halts at the next action the agent proposes.',
        };
      }
      if (isActive(s)) {
        return { ...s, stepNext: true, message: PAUSE_FREE_RUN };
      }
      return { ...s, stepNext: true, message: 'The next run starts in step mode: every action waits for Step.' };
    case 'resume':
      if (isActive(s) && s.stepMode) {
        return { ...s, autoContinue: true, message: 'Resumed: the agent goes on without waiting.' };
      }
      return isActive(s) ? s : { ...s, stepNext: false, message: '' };
    case 'continued':
      return s.waiting === e.step ? { ...s, waiting: undefined } : s;
    case 'stopRequested':
      return isActive(s) ? { ...s, status: 'stopping', message: 'Stopping the agent…' } : s;
    case 'finished': {
      if (!isFixResult(e.result)) {
        return { ...s, status: 'failed', waiting: undefined, message: 'The server answered crane.fixCell with an unexpected result.' };
      }
      const result = e.result;
      const lspEdit = extractEdit(result);
      const edit = lspEdit && [...textEditsByUri(lspEdit).values()].some((l) => l.length > 0) ? lspEdit : undefined;
      const u = result.proposal?.usage;
      const usage = u
        ? { promptTokens: u.promptTokens, completionTokens: u.completionTokens, cachedTokens: u.cachedTokens, costUsd: u.costUsd }
        : s.usage;
      return {
        ...s,
        runId: result.runId ?? s.runId,
        status: edit ? 'proposed' : 'no-proposal',
        waiting: undefined,
        result,
        edit,
        usage,
        message: describeOutcome(result, Boolean(edit)),
      };
    }
    case 'failed':
      return { ...s, status: 'failed', waiting: undefined, message: e.message };
    case 'applied':
      return s.edit ? { ...s, status: 'applied', message: 'Applied. Nothing has run in your kernel; run the cell when ready.' } : s;
    case 'discarded':
      return s.edit ? { ...s, status: 'discarded', message: 'The proposal was discarded.' } : s;
  }
}
