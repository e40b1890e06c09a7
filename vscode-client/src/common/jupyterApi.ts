/**
 * The part of Microsoft's Jupyter extension (`ms-toolsai.jupyter`, `@vscode/jupyter-extension` api.d.ts)
 * that CRANE uses, and how its answers are read. What the extension does, from its source
 * (vscode-jupyter v2025.4.1, src/standalone/api/kernels/*, src/kernels/execution/codeExecution.ts):
 * - `kernels.getKernel(uri)` answers only kernels the user started; the same object for the notebook's
 *   whole session, also across restarts (which start a new process with a new connection file);
 * - the first `executeCode` of an extension raises a modal consent prompt (Allow / Learn more / Deny /
 *   Cancel); a refusal (Deny, or a dismissed prompt, or an untrusted workspace) throws an error named
 *   `vscode.jupyter.apiAccessRevoked`. Deny is stored; a dismissal is remembered per kernel object until
 *   the access list changes ("Jupyter: Manage Access To Jupyter Kernels");
 * - the code is queued behind the user's cells and sent with `silent: false, store_history: false`: it
 *   does not advance the execution count nor enter `In`, and its outputs come back only to the caller;
 * - cancelling the token of a request that already started INTERRUPTS THE KERNEL (`CodeExecution.cancel`),
 *   so CRANE never cancels: it stops waiting and keeps listening for the answer.
 */
import * as path from 'node:path';
import * as vscode from 'vscode';

export const JUPYTER_EXTENSION_ID = 'ms-toolsai.jupyter';
/** `KernelAPIAccessRevoked.name` in vscode-jupyter ("should never be changed as extensions can rely on this"). */
export const ACCESS_REVOKED_ERROR = 'vscode.jupyter.apiAccessRevoked';

/**
 * Prints ipykernel's connection file. An expression statement whose value is None: the display hook keeps
 * `_`/`Out` as they are; no name is bound; with `store_history: false` the count and `In` do not move.
 */
export const CONNECTION_FILE_PROBE =
  "print(__import__('ipykernel.connect', fromlist=['get_connection_file']).get_connection_file())";

export type JupyterKernelStatus =
  | 'unknown'
  | 'starting'
  | 'idle'
  | 'busy'
  | 'terminating'
  | 'restarting'
  | 'autorestarting'
  | 'dead';

export interface JupyterOutputItem {
  mime: string;
  data: Uint8Array;
}
export interface JupyterKernel {
  readonly status: JupyterKernelStatus;
  readonly language: string;
  readonly onDidChangeStatus?: vscode.Event<JupyterKernelStatus>;
  executeCode(code: string, token: vscode.CancellationToken): AsyncIterable<{ items: JupyterOutputItem[] }>;
}
export interface JupyterKernelsApi {
  getKernel(uri: vscode.Uri): Thenable<JupyterKernel | undefined>;
}

/** Statuses after which a connection file learned before is void: a new process (or none) follows. */
export const RESTART_STATUSES: ReadonlySet<string> = new Set([
  'starting',
  'restarting',
  'autorestarting',
  'terminating',
  'dead',
]);

export async function getJupyterKernelsApi(): Promise<JupyterKernelsApi | undefined> {
  const ext = vscode.extensions.getExtension<{ kernels?: JupyterKernelsApi }>(JUPYTER_EXTENSION_ID);
  if (!ext) {
    return undefined;
  }
  const api = ext.isActive ? ext.exports : await ext.activate();
  return api?.kernels;
}

/** The folder of the Jupyter extension's global storage, beside CRANE's own (`<user data>/globalStorage/<id>`). */
export function jupyterStorageDir(craneGlobalStorage: string): string {
  return path.join(path.dirname(craneGlobalStorage), JUPYTER_EXTENSION_ID);
}

/** The Jupyter extension refused access (the user denied or dismissed its prompt, or revoked access). */
export function isAccessRevoked(err: unknown): boolean {
  return err instanceof Error && err.name === ACCESS_REVOKED_ERROR;
}

/** A probe failure that is not about access (kernel error, no connection file in the answer). */
export class ProbeError extends Error {}

const STDOUT_MIMES = new Set(['application/vnd.code.notebook.stdout', 'application/x.notebook.stream.stdout', 'text/plain']);
const ERROR_MIME = 'application/vnd.code.notebook.error';

/** The connection file path from the probe's stdout (the last line ending in .json). */
export function parseConnectionFile(stdout: string): string | undefined {
  const lines = stdout.split(/\r?\n/).map((l) => l.trim()).filter(Boolean);
  for (let i = lines.length - 1; i >= 0; i--) {
    if (lines[i].endsWith('.json')) {
      return lines[i];
    }
  }
  return undefined;
}

/**
 * Asks the kernel for its connection file through `executeCode`. The token is never cancelled (that would
 * interrupt the kernel); the caller stops waiting instead. Rejects with the extension's error (access) or a
 * ProbeError.
 */
export async function askConnectionFile(kernel: JupyterKernel): Promise<string> {
  const cts = new vscode.CancellationTokenSource();
  const decoder = new TextDecoder();
  let stdout = '';
  try {
    for await (const output of kernel.executeCode(CONNECTION_FILE_PROBE, cts.token)) {
      for (const item of output.items) {
        if (item.mime === ERROR_MIME) {
          throw new ProbeError(`kernel error: ${decoder.decode(item.data).slice(0, 300)}`);
        }
        if (STDOUT_MIMES.has(item.mime)) {
          stdout += decoder.decode(item.data);
        }
      }
    }
  } finally {
    cts.dispose(); // disposing does not cancel
  }
  const file = parseConnectionFile(stdout);
  if (!file) {
    throw new ProbeError(`the kernel did not report a connection file (${JSON.stringify(stdout.slice(0, 200))})`);
  }
  return file;
}
