/** The CRANE wire contract (docs/protocol.md): server command ids, custom messages and shared shapes. */

/** Server-side command ids. vscode-languageclient registers these; the extension must not. */
export const ServerCommands = {
  checkNotebook: 'crane.checkNotebook',
  diagnoseCell: 'crane.diagnoseCell',
  runSpeculatively: 'crane.runSpeculatively',
  fixCell: 'crane.fixCell',
  stopAgent: 'crane.stopAgent',
  continueAgent: 'crane.continueAgent',
  attachKernel: 'crane.attachKernel',
} as const;

/**
 * Client-side command ids the server puts into code actions (the extension registers them; docs/protocol.md):
 * `crane.ui.runCells(notebookUri, cellUris)` runs cells through VS Code ("Run cell K first (tested)").
 */
export const ClientCommands = {
  runCells: 'crane.ui.runCells',
} as const;

export const Methods = {
  attachKernel: 'crane/attachKernel',
  kernelStatus: 'crane/kernelStatus',
  diagnosis: 'crane/diagnosis',
  agentStep: 'crane/agentStep',
} as const;

export interface Finding {
  rule: string;
  ename: string;
  message: string;
  line: number;
  col: number;
  endLine: number;
  endCol: number;
  rootCause: string;
  confidence: number;
  evidence: string[];
}

export interface Usage {
  promptTokens: number;
  completionTokens: number;
  cachedTokens: number;
  costUsd: number | null;
  model: string;
}

export interface KernelInfo {
  connectionFile: string;
  source: 'request' | 'discovery' | 'setting';
  notebookPath?: string | null;
  pid?: number | null;
}

export type KernelState = 'attached' | 'busy' | 'idle' | 'dead' | 'static-only' | 'stale';

export interface KernelStatusParams {
  notebookUri: string | null;
  state: KernelState;
  kernel: KernelInfo | null;
  message: string;
  stale?: boolean;
}

export interface AttachKernelParams {
  notebookUri: string;
  connectionFile: string;
}

export interface AttachResult {
  attached: boolean;
  message: string;
  kernel: KernelInfo | null;
}

export interface DiagnosisParams {
  notebookUri: string;
  cellUri: string;
  /** 1-based cell number (DiagnosisResult). */
  cell?: number;
  verdict: Finding | null;
  markdown: string;
  usage: Usage | null;
}

/** `crane/agentStep` (crane.agent.proposal.AgentStep; docs/agent.md). */
export interface AgentStepParams {
  runId: string;
  /** 1-based. In step mode each step arrives twice: phase "proposed" (waiting for the go-ahead), then "done". */
  step: number;
  phase: 'proposed' | 'done';
  /** ok | error | refused | stopped */
  status: string;
  reflection: string;
  /** edit_cell | add_cell | execute_cell | inspect | finish | reply */
  action: string;
  code: string;
  result: string;
  /** 1-based cell number the action is about, if any. */
  cell: number | null;
  tokens?: number;
  usage: StepUsage | null;
  elapsedS: number;
}

export interface StepUsage {
  promptTokens: number;
  completionTokens: number;
  cachedTokens: number;
  costUsd: number | null;
}

export interface CellEdit {
  cell: number;
  old: string;
  new: string;
}

export interface CellAddition {
  cell: number;
  after: number;
  source: string;
}

export interface ProposalEvidence {
  sandbox: string;
  ran: number[];
  target: number;
  status: string;
  ename?: string | null;
  evalue?: string | null;
  traceback?: string;
  stdout?: string;
  failedBefore?: string[];
}

export interface AgentUsage {
  requests: number;
  promptTokens: number;
  completionTokens: number;
  cachedTokens: number;
  costUsd: number | null;
  unpricedRequests: number;
}

export type ProposalStatus = 'fixed' | 'not-fixed' | 'stopped' | 'error' | 'clean';

/** crane.agent.proposal.Proposal (camelCase). */
export interface Proposal {
  runId: string;
  notebook: string | null;
  target: number;
  status: ProposalStatus;
  fixed: boolean;
  stopReason: string;
  explanation: string;
  edits: CellEdit[];
  additions: CellAddition[];
  runFirst: number[];
  evidence: ProposalEvidence | null;
  guard: string[];
  steps: number;
  usage: AgentUsage;
  model: string;
  elapsedS: number;
}

/** `crane.fixCell` result. */
export interface FixResult {
  runId: string;
  status: ProposalStatus | string;
  proposal: Proposal | null;
  /** LSP WorkspaceEdit with change annotations needing confirmation, or null (nothing to apply). */
  edit: unknown;
  markdown: string;
}

export interface FixOptions {
  goal?: string;
  stepMode?: boolean;
}

export type SpeculativeVerdict = 'crash' | 'no-crash' | 'timeout' | 'blocked' | 'unavailable';

/** `crane.runSpeculatively` result. */
export interface SpeculativeResult {
  cellUri: string;
  verdict: SpeculativeVerdict;
  ename: string | null;
  evalue: string | null;
  line: number | null;
  stdout: string;
  stderr: string;
  displays: Array<{ kind: string; text: string }>;
  reason: string | null;
  elapsedMs: number;
  /** 1-based cell number. */
  cell?: number;
  markdown: string;
}
