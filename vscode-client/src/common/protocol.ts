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
  lmTool: 'crane/lmTool',
  kernelStatus: 'crane/kernelStatus',
  diagnosis: 'crane/diagnosis',
  agentStep: 'crane/agentStep',
} as const;

export type {
  AgentStep,
  AgentUsage,
  AttachKernelParams,
  AttachResult,
  CallStats,
  CellAddition,
  CellCheck,
  CellEdit,
  CheckResult,
  ContinueAgentResult,
  DiagnosisResult,
  DiagnosticData,
  DisplayOutput,
  Evidence,
  Finding,
  FixOptions,
  FixResult,
  Integrity,
  KernelInfo,
  KernelStatus,
  KeptObject,
  LmToolParams,
  LmToolResult,
  Proposal,
  Refusal,
  Related,
  SandboxVerdict,
  SessionTotals,
  SpeculativeResult,
  StepUsage,
  StopAgentResult,
  TransplantInfo,
  Usage,
} from './protocol.generated';

import type {
  AgentStep,
  DiagnosisResult,
  Evidence,
  KernelInfo,
  KernelStatus,
  Proposal,
  SandboxVerdict,
} from './protocol.generated';

/**
 * How the server found the kernel: named by the client (`request`), learned through the Jupyter extension's
 * kernels API (`jupyter-extension`), its own discovery (`discovery`), `crane.kernel.connectionFile` (`setting`).
 */
export type KernelSource = KernelInfo['source'];
/** `crane/kernelStatus` params. */
export type KernelStatusParams = KernelStatus;
export type KernelState = KernelStatus['state'];
/** `crane/diagnosis` params (a `crane.diagnoseCell` result). */
export type DiagnosisParams = DiagnosisResult;
/** `crane/agentStep` params. */
export type AgentStepParams = AgentStep;
export type ProposalEvidence = Evidence;
export type ProposalStatus = Proposal['status'];
export type SpeculativeVerdict = SandboxVerdict['verdict'];
