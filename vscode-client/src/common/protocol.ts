/** The CRANE wire contract (docs/protocol.md): server command ids, custom messages and shared shapes. */

/** Server-side command ids. vscode-languageclient registers these; the extension must not. */
export const ServerCommands = {
  checkNotebook: 'crane.checkNotebook',
  diagnoseCell: 'crane.diagnoseCell',
  runSpeculatively: 'crane.runSpeculatively',
  fixCell: 'crane.fixCell',
  stopAgent: 'crane.stopAgent',
  attachKernel: 'crane.attachKernel',
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
}

export type KernelState = 'attached' | 'busy' | 'idle' | 'dead' | 'static-only' | 'stale';

export interface KernelStatusParams {
  notebookUri: string | null;
  state: KernelState;
  kernel: KernelInfo | null;
  message: string;
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

export interface AgentStepParams {
  runId: string;
  step: number;
  reflection: string;
  action: string;
  code: string;
  result: string;
  tokens: number;
}
