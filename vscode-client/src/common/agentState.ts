/**
 * Pure state of the agent panel: streamed steps, viewer pause/step, the final proposal.
 * Pause and step pace the *display*: while paused, incoming steps are held back and "Step" reveals one.
 */
import type { AgentStepParams } from './protocol';
import { extractEdit, LspWorkspaceEdit } from './edits';

export type AgentStatus = 'idle' | 'running' | 'stopping' | 'proposed' | 'no-proposal' | 'failed' | 'applied' | 'discarded';

export interface Proposal {
  edit: LspWorkspaceEdit;
  summary: string;
}

export interface AgentState {
  runId: string | undefined;
  cellUri: string | undefined;
  status: AgentStatus;
  steps: AgentStepParams[];
  held: AgentStepParams[];
  paused: boolean;
  proposal: Proposal | undefined;
  message: string;
  tokens: number;
}

export type AgentEvent =
  | { type: 'start'; cellUri: string }
  | { type: 'step'; params: AgentStepParams }
  | { type: 'pause' }
  | { type: 'resume' }
  | { type: 'stepOnce' }
  | { type: 'stopRequested' }
  | { type: 'finished'; result: unknown }
  | { type: 'failed'; message: string }
  | { type: 'applied' }
  | { type: 'discarded' };

export function initialAgentState(): AgentState {
  return {
    runId: undefined,
    cellUri: undefined,
    status: 'idle',
    steps: [],
    held: [],
    paused: false,
    proposal: undefined,
    message: '',
    tokens: 0,
  };
}

export function isActive(s: AgentState): boolean {
  return s.status === 'running' || s.status === 'stopping';
}

/** Reads the `crane.fixCell` result: a WorkspaceEdit, or an object carrying one (`edit`) plus text. */
export function extractProposal(result: unknown): { proposal?: Proposal; runId?: string; message: string } {
  const obj = result && typeof result === 'object' ? (result as Record<string, unknown>) : undefined;
  const runId = typeof obj?.runId === 'string' ? obj.runId : undefined;
  const text = ['summary', 'message', 'explanation'].map((k) => obj?.[k]).find((v) => typeof v === 'string') as
    | string
    | undefined;
  const edit = extractEdit(result);
  if (edit) {
    return { proposal: { edit, summary: text ?? 'The agent proposes an edit.' }, runId, message: text ?? '' };
  }
  return { runId, message: text ?? 'The agent finished without proposing an edit.' };
}

export function reduceAgent(s: AgentState, e: AgentEvent): AgentState {
  switch (e.type) {
    case 'start':
      return { ...initialAgentState(), cellUri: e.cellUri, status: 'running', paused: s.paused };
    case 'step': {
      if (s.runId !== undefined && e.params.runId !== s.runId) {
        return s; // a step of another (older) run
      }
      if (!isActive(s) && s.runId === undefined) {
        return s;
      }
      const base = { ...s, runId: e.params.runId, tokens: s.tokens + (e.params.tokens || 0) };
      return s.paused ? { ...base, held: [...s.held, e.params] } : { ...base, steps: [...s.steps, e.params] };
    }
    case 'pause':
      return { ...s, paused: true };
    case 'resume':
      return { ...s, paused: false, steps: [...s.steps, ...s.held], held: [] };
    case 'stepOnce':
      if (s.held.length === 0) {
        return { ...s, paused: true };
      }
      return { ...s, paused: true, steps: [...s.steps, s.held[0]], held: s.held.slice(1) };
    case 'stopRequested':
      return isActive(s) ? { ...s, status: 'stopping', message: 'Stopping the agent…' } : s;
    case 'finished': {
      const r = extractProposal(e.result);
      const runId = s.runId ?? r.runId;
      if (r.proposal) {
        return { ...s, runId, status: 'proposed', proposal: r.proposal, message: r.message };
      }
      return { ...s, runId, status: 'no-proposal', message: r.message };
    }
    case 'failed':
      return { ...s, status: 'failed', message: e.message };
    case 'applied':
      return s.proposal ? { ...s, status: 'applied', message: 'Applied. Nothing has run in your kernel; run the cell when ready.' } : s;
    case 'discarded':
      return s.proposal ? { ...s, status: 'discarded', message: 'The proposal was discarded.' } : s;
  }
}
