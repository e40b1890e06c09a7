/**
 * Kernel bridge: asks the notebook's kernel (through the Jupyter extension's kernels API) once for its
 * connection file and hands it to the server with `crane/attachKernel`. When the user declines the
 * Jupyter extension's access prompt, or the extension is missing, the server falls back to its own
 * discovery and the status bar says so.
 *
 * A remote kernel (a Jupyter Server, JupyterHub, Enterprise Gateway) reports a connection file of the
 * server's machine, named `kernel-<kernel id>.json` by jupyter_server: when that file does not exist here and
 * `crane.jupyterServer.url` is set, the bridge attaches with `{serverUrl, kernelId}` instead.
 */
import * as fs from 'node:fs';
import * as vscode from 'vscode';
import type { AttachKernelParams, AttachResult } from './protocol';

export const JUPYTER_EXTENSION_ID = 'ms-toolsai.jupyter';

/** Asks ipykernel for its connection file without leaving names in the user's namespace. */
export const CONNECTION_FILE_PROBE =
  "print(__import__('ipykernel.connect', fromlist=['get_connection_file']).get_connection_file())";

const STDOUT_MIMES = new Set([
  'application/vnd.code.notebook.stdout',
  'application/x.notebook.stream.stdout',
  'text/plain',
]);
const ERROR_MIME = 'application/vnd.code.notebook.error';

/** The part of `@vscode/jupyter-extension`'s API that CRANE uses. */
export interface JupyterOutputItem {
  mime: string;
  data: Uint8Array;
}
export interface JupyterKernel {
  readonly status: string;
  readonly language: string;
  executeCode(code: string, token: vscode.CancellationToken): AsyncIterable<{ items: JupyterOutputItem[] }>;
}
export interface JupyterKernelsApi {
  getKernel(uri: vscode.Uri): Thenable<JupyterKernel | undefined>;
}

export type BridgeOutcome =
  | { kind: 'attached'; connectionFile: string; remote?: RemoteKernel; result: AttachResult }
  | { kind: 'not-attached'; connectionFile: string; remote?: RemoteKernel; result: AttachResult }
  | { kind: 'no-extension' }
  | { kind: 'no-kernel' }
  | { kind: 'declined'; message: string }
  | { kind: 'failed'; message: string };

export interface BridgeDeps {
  getKernelsApi(): Promise<JupyterKernelsApi | undefined>;
  attach(params: AttachKernelParams): Promise<AttachResult>;
  /** A note for the status bar, or undefined to clear it. */
  note(notebookUri: string, note: string | undefined): void;
  log(message: string): void;
  timeoutMs?: number;
  /** `crane.jupyterServer.url` for this notebook ('' when unset). */
  jupyterServerUrl?(notebookUri: vscode.Uri): string;
  /** Whether a path exists on this machine (default: the file system). */
  fileExists?(path: string): boolean;
}

export interface RemoteKernel {
  serverUrl: string;
  kernelId: string;
}

const KERNEL_FILE_RE = /(?:^|[\\/])kernel-([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.json$/;

/** The kernel id in a connection file name written by jupyter_server (`kernel-<uuid>.json`). */
export function kernelIdFromConnectionFile(path: string): string | undefined {
  return KERNEL_FILE_RE.exec(path.trim())?.[1];
}

/** Where to attach: the remote kernel through the configured server when the file is not here and is named
 * after a jupyter_server kernel id; else the connection file itself. */
export function remoteKernelFor(connectionFile: string, serverUrl: string, exists: boolean): RemoteKernel | undefined {
  const kernelId = kernelIdFromConnectionFile(connectionFile);
  if (exists || !kernelId || !serverUrl.trim()) {
    return undefined;
  }
  return { serverUrl: serverUrl.trim(), kernelId };
}

export const DECLINED_NOTE =
  'Jupyter kernel access was declined: CRANE uses its own kernel discovery. ' +
  'Grant access with "Jupyter: Manage Access To Jupyter Kernels" or use "CRANE: Attach to kernel…".';
export const NO_JUPYTER_NOTE =
  'The Jupyter extension is not installed: CRANE uses its own kernel discovery.';

export async function getJupyterKernelsApi(): Promise<JupyterKernelsApi | undefined> {
  const ext = vscode.extensions.getExtension<{ kernels?: JupyterKernelsApi }>(JUPYTER_EXTENSION_ID);
  if (!ext) {
    return undefined;
  }
  const api = ext.isActive ? ext.exports : await ext.activate();
  return api?.kernels;
}

export function isAccessDenied(err: unknown): boolean {
  if (err instanceof ProbeError) {
    return false;
  }
  const msg = err instanceof Error ? `${err.name} ${err.message}` : String(err);
  return /access|denied|declined|revoked|permission|consent|not allowed|trust/i.test(msg);
}

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

interface Known {
  kernel: JupyterKernel;
  connectionFile: string;
}

export class KernelBridge {
  private readonly known = new Map<string, Known>();
  private readonly inFlight = new Map<string, Promise<BridgeOutcome>>();
  private declined = false;

  constructor(private readonly deps: BridgeDeps) {}

  /** Attaches the notebook's kernel, asking the kernel only when it is new to the bridge. */
  connect(notebookUri: vscode.Uri): Promise<BridgeOutcome> {
    const key = notebookUri.toString();
    const running = this.inFlight.get(key);
    if (running) {
      return running;
    }
    const p = this.doConnect(notebookUri).finally(() => this.inFlight.delete(key));
    this.inFlight.set(key, p);
    return p;
  }

  /** Re-sends known connection files (after a server restart) without asking the kernels again. */
  async reattachAll(): Promise<void> {
    for (const [uri, k] of this.known) {
      try {
        await this.deps.attach(this.attachParams(uri, k.connectionFile));
      } catch (err) {
        this.deps.log(`kernel bridge: re-attach of ${uri} failed: ${String(err)}`);
      }
    }
  }

  forget(notebookUri: vscode.Uri): void {
    this.known.delete(notebookUri.toString());
  }

  connectionFileOf(notebookUri: vscode.Uri): string | undefined {
    return this.known.get(notebookUri.toString())?.connectionFile;
  }

  private async doConnect(notebookUri: vscode.Uri): Promise<BridgeOutcome> {
    const key = notebookUri.toString();
    let api: JupyterKernelsApi | undefined;
    try {
      api = await this.deps.getKernelsApi();
    } catch (err) {
      this.deps.log(`kernel bridge: the Jupyter extension failed to activate: ${String(err)}`);
    }
    if (!api) {
      this.deps.note(key, NO_JUPYTER_NOTE);
      return { kind: 'no-extension' };
    }
    if (this.declined) {
      this.deps.note(key, DECLINED_NOTE);
      return { kind: 'declined', message: 'access declined earlier in this session' };
    }
    const kernel = await api.getKernel(notebookUri);
    if (!kernel) {
      return { kind: 'no-kernel' };
    }
    const known = this.known.get(key);
    if (known && known.kernel === kernel) {
      return this.sendAttach(key, known.connectionFile);
    }
    let stdout: string;
    try {
      stdout = await this.runProbe(kernel);
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      if (isAccessDenied(err)) {
        this.declined = true;
        this.deps.note(key, DECLINED_NOTE);
        this.deps.log(`kernel bridge: access to the kernel was declined (${message}); using the server's discovery`);
        return { kind: 'declined', message };
      }
      this.deps.note(key, `Could not ask the kernel for its connection file (${message}): CRANE uses its own discovery.`);
      this.deps.log(`kernel bridge: probe failed for ${key}: ${message}`);
      return { kind: 'failed', message };
    }
    const connectionFile = parseConnectionFile(stdout);
    if (!connectionFile) {
      const message = `unexpected probe output: ${JSON.stringify(stdout.slice(0, 200))}`;
      this.deps.note(key, 'The kernel did not report a connection file: CRANE uses its own discovery.');
      this.deps.log(`kernel bridge: ${message}`);
      return { kind: 'failed', message };
    }
    this.known.set(key, { kernel, connectionFile });
    return this.sendAttach(key, connectionFile);
  }

  /** `crane/attachKernel` params for a kernel that reported `connectionFile`. */
  attachParams(notebookUri: string, connectionFile: string): AttachKernelParams {
    const exists = (this.deps.fileExists ?? fs.existsSync)(connectionFile);
    const url = this.deps.jupyterServerUrl?.(vscode.Uri.parse(notebookUri)) ?? '';
    const remote = remoteKernelFor(connectionFile, url, exists);
    return remote ? { notebookUri, ...remote } : { notebookUri, connectionFile };
  }

  private async sendAttach(key: string, connectionFile: string): Promise<BridgeOutcome> {
    const params = this.attachParams(key, connectionFile);
    const remote = params.kernelId && params.serverUrl ? { serverUrl: params.serverUrl, kernelId: params.kernelId } : undefined;
    const what = remote ? `remote kernel (${remote.serverUrl})` : connectionFile;
    const result = await this.deps.attach(params);
    this.deps.log(`kernel bridge: ${key} -> ${what}: ${result.attached ? 'attached' : 'not attached'} ${result.message}`);
    if (result.attached) {
      this.deps.note(key, undefined);
      return { kind: 'attached', connectionFile, remote, result };
    }
    const hint =
      !remote && kernelIdFromConnectionFile(connectionFile) && !(this.deps.fileExists ?? fs.existsSync)(connectionFile)
        ? ' (the kernel runs on a Jupyter server: set crane.jupyterServer.url and its token)'
        : '';
    this.deps.note(key, `The server could not attach ${what}: ${result.message}${hint}`);
    return { kind: 'not-attached', connectionFile, remote, result };
  }

  private async runProbe(kernel: JupyterKernel): Promise<string> {
    const cts = new vscode.CancellationTokenSource();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<never>((_resolve, reject) => {
      timer = setTimeout(() => {
        cts.cancel();
        reject(new ProbeError('timed out waiting for the kernel (is a cell still running?)'));
      }, this.deps.timeoutMs ?? 30_000);
    });
    const collect = async (): Promise<string> => {
      const decoder = new TextDecoder();
      let stdout = '';
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
      return stdout;
    };
    try {
      return await Promise.race([collect(), timeout]);
    } finally {
      clearTimeout(timer);
      cts.dispose();
    }
  }
}

/** A probe failure that is not about access (kernel error, timeout). */
export class ProbeError extends Error {}
