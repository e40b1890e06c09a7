/**
 * Kernel bridge: learns the connection file of each notebook's kernel through the Jupyter extension's
 * kernels API (jupyterApi.ts) and hands it to the server with `crane/attachKernel` (source
 * "jupyter-extension"). Without the extension, without access, or while waiting for it, the server's own
 * discovery applies and the status bar says why (a `BridgeNote`).
 *
 * Invariants:
 * - a request is never cancelled (cancelling one that started interrupts the user's kernel): after `waitMs`
 *   the bridge stops waiting, says so, and attaches when the answer comes;
 * - a kernel is asked once per process: again only after its status says it (re)started, stopped or died
 *   (a restart keeps the API object but brings a new process and connection file), or when the file is gone;
 * - a file the server already attached is not sent again (a cell run is no reason to re-attach);
 * - only Python kernels are asked: no consent prompt, no failing probe for R or Julia;
 * - a refusal (the error named `vscode.jupyter.apiAccessRevoked`: Deny, or a dismissed prompt) or a failure
 *   is remembered for that kernel and retried on the user's next action in the notebook, never on its own.
 *
 * A remote kernel (a Jupyter Server, JupyterHub, Enterprise Gateway) reports a connection file of the
 * server's machine, named `kernel-<kernel id>.json` by jupyter_server: when that file does not exist here and
 * `crane.jupyterServer.url` is set, the bridge attaches with `{serverUrl, kernelId}` instead.
 */
import * as fs from 'node:fs';
import * as vscode from 'vscode';
import { askConnectionFile, isAccessRevoked, JupyterKernel, JupyterKernelsApi, RESTART_STATUSES } from './jupyterApi';
import type { AttachKernelParams, AttachResult } from './protocol';
import type { BridgeNote } from './statusModel';

/** Why the bridge is asked to connect a notebook. */
export type Trigger =
  | 'opened'
  | 'focused'
  | 'cellRun'
  | 'selection'
  | 'command'
  | 'serverStarted'
  | 'kernelStatus'
  | 'answer';
/** Triggers that are the user's own actions: they may retry after a refusal (and so show the prompt again). */
const USER_ACTIONS: ReadonlySet<Trigger> = new Set(['opened', 'focused', 'cellRun', 'selection', 'command']);

export type BridgeOutcome =
  | { kind: 'attached'; connectionFile: string; remote?: RemoteKernel; result: AttachResult }
  | { kind: 'unchanged'; connectionFile: string }
  | { kind: 'not-attached'; connectionFile: string; remote?: RemoteKernel; result: AttachResult }
  | { kind: 'no-extension' }
  | { kind: 'no-kernel' }
  | { kind: 'unsupported-language'; language: string }
  | { kind: 'declined'; message: string }
  | { kind: 'waiting' }
  | { kind: 'failed'; message: string }
  | { kind: 'skipped' };

export interface BridgeDeps {
  getKernelsApi(): Promise<JupyterKernelsApi | undefined>;
  attach(params: AttachKernelParams): Promise<AttachResult>;
  /** A note for the status bar, or undefined to clear it. */
  note(notebookUri: string, note: BridgeNote | undefined): void;
  log(message: string): void;
  /** Asks the kernel for its connection file (default: `askConnectionFile`). */
  ask?(kernel: JupyterKernel): Promise<string>;
  /** Whether a path exists on this machine (default: the file system). */
  fileExists?(path: string): boolean;
  /** `crane.jupyterServer.url` for this notebook ('' when unset). */
  jupyterServerUrl?(notebookUri: vscode.Uri): string;
  now?(): number;
  /** How long `connect` waits for the kernel's answer (consent prompt, cells running) before it stops waiting. */
  waitMs?: number;
  /** Least time between two retries after a refusal or failure. */
  retryMs?: number;
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

export const NO_JUPYTER_NOTE = 'The Jupyter extension is not installed: CRANE uses its own kernel discovery.';
export const DECLINED_NOTE =
  'Access to Jupyter kernels was declined: CRANE uses its own kernel discovery. To grant it, run ' +
  '"Jupyter: Manage Access To Jupyter Kernels" and select CRANE: CRANE asks again on your next action in the notebook.';
export const WAITING_NOTE =
  'Waiting for the Jupyter extension (its access prompt may be open, or a cell is still running): ' +
  'CRANE uses its own kernel discovery meanwhile.';
export const RESTARTING_NOTE = 'The kernel is restarting: CRANE attaches to the new process when it is ready.';
export function languageNote(language: string): string {
  return `The notebook's kernel runs ${language}: CRANE reads Python kernels only (static diagnostics).`;
}

/**
 * The bridge's timing from the environment, like the server's CRANE_LSP_* tuning (tests use shorter waits):
 * `CRANE_BRIDGE_WAIT_MS` (how long to wait for an answer before saying so; default 10 s),
 * `CRANE_BRIDGE_RETRY_MS` (least time between two retries after a refusal; default 2 s).
 */
export function bridgeTiming(env: NodeJS.ProcessEnv): Pick<BridgeDeps, 'waitMs' | 'retryMs'> {
  const ms = (v: string | undefined) => {
    const n = Number(v);
    return v && Number.isFinite(n) && n >= 0 ? n : undefined;
  };
  return { waitMs: ms(env.CRANE_BRIDGE_WAIT_MS), retryMs: ms(env.CRANE_BRIDGE_RETRY_MS) };
}

type Answer = { kind: 'file'; path: string } | { kind: 'declined'; message: string } | { kind: 'failed'; message: string };

/** A kernel object of the Jupyter extension, as the bridge knows it. */
interface Tracked {
  kernel: JupyterKernel;
  notebooks: Map<string, vscode.Uri>;
  /** Bumped when the kernel (re)starts, stops or dies: answers of an older epoch are void. */
  epoch: number;
  answer?: { epoch: number; answer: Answer; at: number };
  asking?: { epoch: number; promise: Promise<Answer> };
  /** A restart (or stop) was seen and the kernel has not been asked since. */
  moved: boolean;
  subscription?: vscode.Disposable;
}

export class KernelBridge implements vscode.Disposable {
  private readonly kernels = new Map<JupyterKernel, Tracked>();
  private readonly byNotebook = new Map<string, Tracked>();
  /** The file the server confirmed attached, per notebook. */
  private readonly attached = new Map<string, string>();
  private readonly inFlight = new Map<string, Promise<BridgeOutcome>>();

  constructor(private readonly deps: BridgeDeps) {}

  /** Attaches the notebook's kernel if there is something to do; shares a call already running for it. */
  connect(notebookUri: vscode.Uri, trigger: Trigger = 'opened'): Promise<BridgeOutcome> {
    const key = notebookUri.toString();
    const running = this.inFlight.get(key);
    if (running) {
      return running;
    }
    const p = this.doConnect(notebookUri, key, trigger)
      .catch((err): BridgeOutcome => {
        const message = err instanceof Error ? err.message : String(err);
        this.deps.log(`kernel bridge: ${key}: ${message}`);
        return { kind: 'failed', message };
      })
      .finally(() => this.inFlight.delete(key));
    this.inFlight.set(key, p);
    return p;
  }

  /** Re-sends the known connection files (after a server restart) without asking the kernels again. */
  async reattachAll(): Promise<void> {
    this.attached.clear();
    for (const [key, t] of this.byNotebook) {
      const file = this.currentFile(t);
      if (file && this.reachable(key, file)) {
        try {
          await this.attachFile(key, file);
        } catch (err) {
          this.deps.log(`kernel bridge: re-attach of ${key} failed: ${String(err)}`);
        }
      }
    }
  }

  forget(notebookUri: vscode.Uri): void {
    const key = notebookUri.toString();
    this.attached.delete(key);
    const t = this.byNotebook.get(key);
    this.byNotebook.delete(key);
    if (t) {
      this.untrack(t, key);
    }
    this.deps.note(key, undefined);
  }

  private untrack(t: Tracked, key: string): void {
    t.notebooks.delete(key);
    if (t.notebooks.size === 0) {
      t.subscription?.dispose();
      this.kernels.delete(t.kernel);
    }
  }

  /** The connection file the server attached for this notebook through the bridge. */
  connectionFileOf(notebookUri: vscode.Uri): string | undefined {
    return this.attached.get(notebookUri.toString());
  }

  dispose(): void {
    for (const t of this.kernels.values()) {
      t.subscription?.dispose();
    }
    this.kernels.clear();
    this.byNotebook.clear();
  }

  private async doConnect(uri: vscode.Uri, key: string, trigger: Trigger): Promise<BridgeOutcome> {
    const known = this.byNotebook.get(key);
    if (trigger === 'selection' && !(known && this.refused(known))) {
      return { kind: 'skipped' }; // a click in the notebook matters only to retry after a refusal
    }
    let api: JupyterKernelsApi | undefined;
    try {
      api = await this.deps.getKernelsApi();
    } catch (err) {
      this.deps.log(`kernel bridge: the Jupyter extension failed to activate: ${String(err)}`);
    }
    if (!api) {
      this.deps.note(key, { kind: 'fallback', text: NO_JUPYTER_NOTE });
      return { kind: 'no-extension' };
    }
    const kernel = await api.getKernel(uri);
    if (!kernel) {
      return { kind: 'no-kernel' }; // no kernel the user started yet: the server's discovery meanwhile
    }
    const language = String(kernel.language ?? '');
    if (language.toLowerCase() !== 'python') {
      this.deps.note(key, { kind: 'info', text: languageNote(language || 'an unknown language') });
      return { kind: 'unsupported-language', language };
    }
    const t = this.track(kernel, uri, key);
    const last = t.answer?.epoch === t.epoch ? t.answer : undefined;
    if (last?.answer.kind === 'file') {
      if (this.reachable(key, last.answer.path)) {
        return this.attachFile(key, last.answer.path);
      }
      this.deps.log(`kernel bridge: ${last.answer.path} is gone: asking the kernel again`);
      t.epoch += 1;
    } else if (last && !this.mayRetry(last, trigger)) {
      return this.report(key, last.answer);
    }
    const epoch = t.epoch;
    const asking = this.ask(t);
    const answer = await within(asking, this.deps.waitMs ?? 10_000);
    if (answer === undefined) {
      this.deps.log(`kernel bridge: ${key}: no answer yet, still listening (never cancelled)`);
      this.deps.note(key, { kind: 'waiting', text: WAITING_NOTE });
      void asking.then(() => {
        if (this.byNotebook.get(key) === t) {
          void this.connect(uri, 'answer');
        }
      });
      return { kind: 'waiting' };
    }
    if (t.epoch !== epoch) {
      // the kernel restarted while it was being asked: that answer is about the old process
      return this.doConnect(uri, key, 'answer');
    }
    if (answer.kind === 'file' && !this.reachable(key, answer.path)) {
      const hint = kernelIdFromConnectionFile(answer.path)
        ? ' (the kernel runs on a Jupyter server: set crane.jupyterServer.url and its token)'
        : '';
      return this.report(key, {
        kind: 'failed',
        message: `its connection file ${answer.path} is not on this machine${hint}`,
      });
    }
    return answer.kind === 'file' ? this.attachFile(key, answer.path) : this.report(key, answer);
  }

  private track(kernel: JupyterKernel, uri: vscode.Uri, key: string): Tracked {
    let t = this.kernels.get(kernel);
    if (!t) {
      const tracked: Tracked = { kernel, notebooks: new Map(), epoch: 0, moved: false };
      tracked.subscription = kernel.onDidChangeStatus?.((status) => this.onStatus(tracked, status));
      this.kernels.set(kernel, tracked);
      t = tracked;
    }
    const previous = this.byNotebook.get(key);
    if (previous && previous !== t) {
      // another kernel for this notebook (picked in the kernel picker)
      this.attached.delete(key);
      this.untrack(previous, key);
    }
    t.notebooks.set(key, uri);
    this.byNotebook.set(key, t);
    return t;
  }

  /** The kernel's status: a restart voids the file; once it is up again, ask it again. */
  private onStatus(t: Tracked, status: string): void {
    if (RESTART_STATUSES.has(status)) {
      if (!t.moved) {
        t.moved = true;
        t.epoch += 1;
        this.deps.log(`kernel bridge: the kernel is ${status}: its connection file will change`);
        for (const key of t.notebooks.keys()) {
          this.attached.delete(key);
          if (status !== 'dead' && status !== 'terminating') {
            this.deps.note(key, { kind: 'restarting', text: RESTARTING_NOTE });
          }
        }
      }
      return;
    }
    if ((status === 'idle' || status === 'busy') && t.moved) {
      t.moved = false;
      for (const uri of t.notebooks.values()) {
        void this.connect(uri, 'kernelStatus');
      }
    }
  }

  /** One question per kernel process at a time; its answer is kept for that process (epoch). */
  private ask(t: Tracked): Promise<Answer> {
    if (t.asking && t.asking.epoch === t.epoch) {
      return t.asking.promise;
    }
    const epoch = t.epoch;
    const question = this.deps.ask ?? askConnectionFile;
    const promise: Promise<Answer> = question(t.kernel).then(
      (path): Answer => ({ kind: 'file', path }),
      (err): Answer => {
        const message = err instanceof Error ? err.message : String(err);
        return isAccessRevoked(err) ? { kind: 'declined', message } : { kind: 'failed', message };
      },
    );
    t.asking = { epoch, promise };
    void promise.then((answer) => {
      if (t.epoch === epoch) {
        t.answer = { epoch, answer, at: this.now() };
        this.deps.log(`kernel bridge: the kernel answered: ${answer.kind === 'file' ? answer.path : `${answer.kind} (${answer.message})`}`);
      }
      if (t.asking?.promise === promise) {
        t.asking = undefined;
      }
    });
    return promise;
  }

  private refused(t: Tracked): boolean {
    const a = t.answer;
    return !!a && a.epoch === t.epoch && a.answer.kind !== 'file';
  }

  /** A refusal or failure is asked again only on a user action (not too often), a failure also on a status change. */
  private mayRetry(last: { answer: Answer; at: number }, trigger: Trigger): boolean {
    if (last.answer.kind === 'failed' && trigger === 'kernelStatus') {
      return true;
    }
    return USER_ACTIONS.has(trigger) && this.now() - last.at >= (this.deps.retryMs ?? 2000);
  }

  private report(key: string, answer: Answer): BridgeOutcome {
    if (answer.kind === 'declined') {
      this.deps.note(key, { kind: 'fallback', text: DECLINED_NOTE });
      return { kind: 'declined', message: answer.message };
    }
    const message = answer.kind === 'failed' ? answer.message : `unexpected answer ${answer.path}`;
    this.deps.note(key, {
      kind: 'fallback',
      text: `Could not learn the kernel's connection file from the Jupyter extension (${message}): CRANE uses its own kernel discovery.`,
    });
    return { kind: 'failed', message };
  }

  private async attachFile(key: string, connectionFile: string): Promise<BridgeOutcome> {
    if (this.attached.get(key) === connectionFile) {
      return { kind: 'unchanged', connectionFile }; // already attached: a cell run is no reason to re-attach
    }
    const params = this.attachParams(key, connectionFile);
    const remote = params.kernelId && params.serverUrl ? { serverUrl: params.serverUrl, kernelId: params.kernelId } : undefined;
    const what = remote ? `remote kernel (${remote.serverUrl})` : connectionFile;
    const result = await this.deps.attach({ ...params, source: 'jupyter-extension' });
    this.deps.log(`kernel bridge: ${key} -> ${what}: ${result.attached ? 'attached' : 'not attached'} ${result.message}`);
    if (result.attached) {
      this.attached.set(key, connectionFile);
      this.deps.note(key, undefined);
      return { kind: 'attached', connectionFile, remote, result };
    }
    this.attached.delete(key);
    this.deps.note(key, { kind: 'fallback', text: `The server could not attach ${what}: ${result.message}` });
    return { kind: 'not-attached', connectionFile, remote, result };
  }

  /** `crane/attachKernel` params for a kernel that reported `connectionFile`: the file when it is on this
   * machine, else the remote kernel it names through the configured Jupyter server. */
  attachParams(notebookUri: string, connectionFile: string): AttachKernelParams {
    const remote = remoteKernelFor(connectionFile, this.serverUrl(notebookUri), this.exists(connectionFile));
    return remote ? { notebookUri, ...remote } : { notebookUri, connectionFile };
  }

  /** The kernel behind `connectionFile` can be reached: the file is here, or it names a kernel on the
   * configured Jupyter server. */
  private reachable(notebookUri: string, connectionFile: string): boolean {
    return this.exists(connectionFile) || remoteKernelFor(connectionFile, this.serverUrl(notebookUri), false) !== undefined;
  }

  private serverUrl(notebookUri: string): string {
    return this.deps.jupyterServerUrl?.(vscode.Uri.parse(notebookUri)) ?? '';
  }

  private currentFile(t: Tracked): string | undefined {
    const a = t.answer;
    return a && a.epoch === t.epoch && a.answer.kind === 'file' ? a.answer.path : undefined;
  }

  private exists(path: string): boolean {
    return (this.deps.fileExists ?? fs.existsSync)(path);
  }

  private now(): number {
    return (this.deps.now ?? Date.now)();
  }
}

/** `p`'s value, or undefined when it takes longer than `ms` (p keeps running). */
function within<T>(p: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), ms);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}
