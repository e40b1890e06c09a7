/**
 * A minimal LSP client for the wire test: spawns `python -m crane serve` and speaks to it with
 * vscode-languageserver-protocol, declaring the capabilities vscode-languageclient 11 declares
 * for what CRANE uses (notebook sync with execution summaries, code action literals, work-done progress).
 */
import { ChildProcess, spawn } from 'node:child_process';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  createProtocolConnection,
  InitializeResult,
  ProtocolConnection,
  StreamMessageReader,
  StreamMessageWriter,
} from 'vscode-languageserver-protocol/node';

export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
export const PYTHON = process.env.CRANE_PYTHON || path.join(REPO_ROOT, '.venv', 'bin', 'python');
/**
 * Waits are for events (a condition polled until it holds); their timeouts only bound a failure, so they are
 * scaled up as the Python tests' are (tests/lsp/conftest.py: `CRANE_TEST_TIMEOUT_SCALE`, default 3): on a loaded
 * machine the server's first model request imports litellm, which took over 45 s at load 15 (the CI of 5225361).
 */
export const TIMEOUT_SCALE = Number(process.env.CRANE_TEST_TIMEOUT_SCALE ?? '3') || 3;

/** Server → client messages the harness records (what vscode-languageclient handles for CRANE). */
const NOTIFICATIONS = [
  'textDocument/publishDiagnostics',
  '$/progress',
  'window/logMessage',
  'window/showMessage',
  '$/logTrace',
  'telemetry/event',
  'crane/kernelStatus',
  'crane/diagnosis',
  'crane/agentStep',
];
const REQUESTS = [
  'window/workDoneProgress/create',
  'workspace/configuration',
  'client/registerCapability',
  'client/unregisterCapability',
  'window/showMessageRequest',
  'workspace/applyEdit',
];

export interface Received {
  method: string;
  params: any;
  /** Arrival order across all messages (see `mark()`). */
  seq: number;
}

export class WireClient {
  readonly proc: ChildProcess;
  readonly conn: ProtocolConnection;
  readonly notifications: Received[] = [];
  readonly requests: Received[] = [];
  stderr = '';
  private waiters: Array<() => void> = [];
  private seq = 0;
  /** Rejects when the server process exits (so requests fail instead of hanging). */
  readonly died: Promise<never>;

  constructor(initSettings: Record<string, unknown>) {
    const env: NodeJS.ProcessEnv = { ...process.env, PYTHONUNBUFFERED: '1' };
    for (const k of Object.keys(env)) {
      if (/_API_KEY$/.test(k)) {
        delete env[k]; // the wire test never talks to a model provider
      }
    }
    env.PYTHONPATH = [path.join(REPO_ROOT, 'server'), env.PYTHONPATH].filter(Boolean).join(path.delimiter);
    // models are only reached on 127.0.0.1 (the scripted model of fakeModel.ts), never through a proxy
    for (const k of ['HTTP_PROXY', 'HTTPS_PROXY', 'ALL_PROXY', 'http_proxy', 'https_proxy', 'all_proxy']) {
      delete env[k];
    }
    env.NO_PROXY = '127.0.0.1,localhost';
    env.LITELLM_LOCAL_MODEL_COST_MAP = 'True';
    this.proc = spawn(PYTHON, ['-m', 'crane', 'serve'], { cwd: path.join(REPO_ROOT, 'vscode-client'), env });
    this.proc.stderr!.on('data', (d) => {
      this.stderr += String(d);
    });
    this.died = new Promise<never>((_resolve, reject) => {
      const fail = (why: string) =>
        reject(new Error(`the server (${PYTHON} -m crane serve) ${why}; stderr:\n${this.stderr.slice(-3000)}`));
      this.proc.once('error', (err) => fail(`could not start: ${err.message}`));
      this.proc.once('exit', (code, signal) => setTimeout(() => fail(`exited (code ${code}, signal ${signal})`), 50));
    });
    this.died.catch(() => undefined);
    this.conn = createProtocolConnection(
      new StreamMessageReader(this.proc.stdout!),
      new StreamMessageWriter(this.proc.stdin!),
    );
    for (const method of NOTIFICATIONS) {
      this.conn.onNotification(method, (params: unknown) => this.record(this.notifications, method, params));
    }
    for (const method of REQUESTS) {
      this.conn.onRequest(method, (params: any) => {
        this.record(this.requests, method, params);
        if (method === 'workspace/configuration') {
          return (params?.items ?? []).map((item: { section?: string }) =>
            item.section === 'crane' || !item.section ? initSettings : null,
          );
        }
        if (method === 'workspace/applyEdit') {
          return { applied: false, failureReason: 'the wire test applies nothing' };
        }
        return null; // window/workDoneProgress/create, client/registerCapability, showMessageRequest
      });
    }
    this.conn.listen();
  }

  private record(list: Received[], method: string, params: unknown): void {
    list.push({ method, params, seq: ++this.seq });
    const waiters = this.waiters;
    this.waiters = [];
    waiters.forEach((w) => w());
  }

  /** Waits until `find` returns a value from what has been received so far. */
  async waitFor<T>(what: string, find: () => T | undefined, timeoutMs = 20_000): Promise<T> {
    timeoutMs *= TIMEOUT_SCALE;
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = find();
      if (found !== undefined) {
        return found;
      }
      const left = deadline - Date.now();
      if (this.proc.exitCode !== null || this.proc.signalCode !== null) {
        throw new Error(`the server exited while waiting for ${what}; stderr:\n${this.stderr.slice(-3000)}`);
      }
      if (left <= 0) {
        throw new Error(`timed out waiting for ${what}; server stderr:\n${this.stderr.slice(-3000)}`);
      }
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, Math.min(left, 250));
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
  }

  /** A request that fails if the server dies before answering. */
  request<T = any>(method: string, params?: unknown, timeoutMs = 30_000): Promise<T> {
    timeoutMs *= TIMEOUT_SCALE;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<never>((_resolve, reject) => {
      timer = setTimeout(
        () => reject(new Error(`no answer to ${method} within ${timeoutMs} ms; server stderr:\n${this.stderr.slice(-3000)}`)),
        timeoutMs,
      );
    });
    return Promise.race([this.conn.sendRequest<T>(method, params), this.died, timeout]).finally(() => clearTimeout(timer));
  }

  /** The position of the last message received; pass it as `after` to see only newer messages. */
  mark(): number {
    return this.seq;
  }

  diagnosticsFor(uri: string, after = 0): any[] | undefined {
    const hits = this.notifications.filter(
      (n) => n.method === 'textDocument/publishDiagnostics' && n.params.uri === uri && n.seq > after,
    );
    return hits.length ? hits[hits.length - 1].params.diagnostics : undefined;
  }

  async initialize(initializationOptions: unknown): Promise<InitializeResult> {
    const result = await this.request<InitializeResult>('initialize', {
      processId: process.pid,
      clientInfo: { name: 'crane-wire-test', version: '0' },
      rootUri: null,
      workspaceFolders: null,
      initializationOptions,
      capabilities: {
        general: { positionEncodings: ['utf-16'] },
        window: { workDoneProgress: true, showMessage: {} },
        workspace: {
          configuration: true,
          didChangeConfiguration: { dynamicRegistration: true },
          executeCommand: { dynamicRegistration: true },
          applyEdit: true,
          workspaceEdit: { documentChanges: true, changeAnnotationSupport: { groupsOnLabel: true } },
        },
        textDocument: {
          synchronization: { dynamicRegistration: true, didSave: true },
          publishDiagnostics: { relatedInformation: true, versionSupport: false, codeDescriptionSupport: true, dataSupport: true },
          hover: { dynamicRegistration: true, contentFormat: ['markdown', 'plaintext'] },
          codeAction: {
            dynamicRegistration: true,
            isPreferredSupport: true,
            dataSupport: true,
            resolveSupport: { properties: ['edit'] },
            codeActionLiteralSupport: {
              codeActionKind: { valueSet: ['', 'quickfix', 'refactor', 'refactor.rewrite', 'source'] },
            },
          },
        },
        notebookDocument: { synchronization: { dynamicRegistration: true, executionSummarySupport: true } },
      },
    });
    await this.conn.sendNotification('initialized', {});
    return result;
  }

  async shutdown(): Promise<number | null> {
    const exited = new Promise<number | null>((resolve) => {
      if (this.proc.exitCode !== null) {
        resolve(this.proc.exitCode);
      } else {
        this.proc.once('exit', (code) => resolve(code));
      }
    });
    try {
      if (this.proc.exitCode === null) {
        await Promise.race([this.conn.sendRequest('shutdown'), this.died]);
        await this.conn.sendNotification('exit');
      }
    } catch {
      // the process may already be gone; the exit code tells
    }
    const timer = setTimeout(() => this.proc.kill('SIGKILL'), 10_000);
    const code = await exited;
    clearTimeout(timer);
    this.conn.dispose();
    return code;
  }
}
