/**
 * Starts `python -m crane serve` through vscode-languageclient, restarts it, and connects the server's
 * custom notifications to the UI. One `ServerManager` per extension activation.
 */
import * as vscode from 'vscode';
import {
  ConfigurationParams,
  DidChangeConfigurationNotification,
  ExecuteCommandSignature,
  LanguageClient,
  LanguageClientOptions,
  MessageTransports,
  ProgressToken,
  ServerOptions,
  State,
  WorkDoneProgressBegin,
  WorkDoneProgressEnd,
  WorkDoneProgressReport,
  WorkspaceEdit as LspWorkspaceEdit,
} from 'vscode-languageclient/node';
import { errorMessage, getLogChannel, traceError, traceInfo } from './log';
import { AgentStepParams, DiagnosisParams, KernelStatusParams, Methods } from './protocol';
import {
  checkEnvironment,
  environmentProblemMessage,
  getPythonApi,
  installCommand,
  Interpreter,
  PythonEnvironmentsApi,
  resolveInterpreter,
} from './python';
import { serverEnvironment } from './secrets';
import type { CraneServer } from './serverApi';
import { ServerNotRunningError } from './serverApi';
import { FilteringMessageReader, isLogMessageNotification, pipeServerStderr, pipeServerStdout } from './serverLog';
import { didChangeConfigurationParams, getClientSettings, getServerSettings, SECTION } from './settings';
import type { ServerState } from './statusModel';

export const CLIENT_ID = 'crane';
export const CLIENT_NAME = 'CRANE';

/**
 * Python cells of Jupyter notebooks only. Not the interactive window: its cells have all run already (CRANE
 * predicts cells not run yet) and its input box is not a notebook cell, so nothing there can be predicted.
 */
export const DOCUMENT_SELECTOR = [{ notebook: 'jupyter-notebook', language: 'python' }];

export interface ServerHooks {
  state(state: ServerState, message: string, interpreter?: string): void;
  kernelStatus(params: KernelStatusParams): void;
  diagnosis(params: DiagnosisParams): void;
  agentStep(params: AgentStepParams): void;
  /** Work-done progress from the server: +1 on begin, -1 on end. */
  progress(delta: 1 | -1, title?: string): void;
  /** Commands invoked through the client's registration of server ids (code actions). */
  executeCommand(command: string, args: unknown[], next: ExecuteCommandSignature): Promise<unknown>;
  /** Called after each successful start (e.g. to re-attach kernels). */
  started(server: CraneServer): void;
  /** API keys for the server environment. */
  secretEnvironment(): Promise<Record<string, string>>;
  /** Other variables for the server environment (e.g. where the Jupyter extension keeps its files). */
  extraEnvironment?(): Record<string, string>;
  /**
   * The interpreter of the environment the extension owns, used when `crane.python` is empty (serverEnvUi.ts):
   * created, upgraded or rebuilt as needed; a string is the failure, already shown to the user.
   */
  ownEnvironment?(pythonApi: PythonEnvironmentsApi | undefined, resource?: vscode.Uri): Promise<Interpreter | string>;
}

export function buildServerOptions(python: string, env: Record<string, string>, cwd?: string): ServerOptions {
  return {
    command: python,
    args: ['-m', 'crane', 'serve'],
    options: { env, cwd },
  };
}

export function buildClientOptions(
  initializationOptions: unknown,
  middleware: LanguageClientOptions['middleware'],
): LanguageClientOptions {
  return {
    documentSelector: DOCUMENT_SELECTOR,
    initializationOptions,
    outputChannel: getLogChannel(),
    revealOutputChannelOn: 4 /* RevealOutputChannelOn.Never */,
    middleware,
    connectionOptions: { maxRestartCount: 3 },
    // one channel line per server log record (see serverLog.ts)
    stdioOptions: { stderr: pipeServerStderr, stdout: pipeServerStdout },
  };
}

/** Answers `workspace/configuration` for the `crane` section with the same object as initializationOptions. */
export function answerConfiguration(params: ConfigurationParams, fromVsCode: unknown[]): unknown[] {
  return params.items.map((item, i) => {
    if (item.section === SECTION) {
      return getServerSettings(item.scopeUri ? vscode.Uri.parse(item.scopeUri) : undefined);
    }
    return fromVsCode[i] ?? null;
  });
}

function convertEdit(client: LanguageClient, edit: unknown): Promise<vscode.WorkspaceEdit> {
  return client.protocol2CodeConverter.asWorkspaceEdit(edit as LspWorkspaceEdit);
}

/** The language client, minus `window/logMessage` (the same records are logged from the server's stderr). */
class CraneLanguageClient extends LanguageClient {
  protected override async createMessageTransports(encoding: string): Promise<MessageTransports> {
    const transports = await super.createMessageTransports(encoding);
    return { ...transports, reader: new FilteringMessageReader(transports.reader, isLogMessageNotification) };
  }
}

export class ServerManager implements vscode.Disposable {
  private client: LanguageClient | undefined;
  private queue: Promise<void> = Promise.resolve();
  private pythonApi: PythonEnvironmentsApi | undefined;
  private interpreter: Interpreter | undefined;
  private readonly progressTokens = new Set<string>();
  private disposed = false;

  constructor(private readonly hooks: ServerHooks) {}

  get running(): CraneServer | undefined {
    const client = this.client;
    if (!client || client.state !== State.Running) {
      return undefined;
    }
    return {
      executeCommand: <T>(command: string, args: unknown[]) =>
        client.sendRequest<T>('workspace/executeCommand', { command, arguments: args }),
      sendRequest: <T>(method: string, params: unknown) => client.sendRequest<T>(method, params),
      asWorkspaceEdit: (edit: unknown) => convertEdit(client, edit),
    };
  }

  /** Sends the current settings with `workspace/didChangeConfiguration` (no restart). */
  async notifySettings(): Promise<boolean> {
    const client = this.client;
    if (!client || client.state !== State.Running) {
      return false;
    }
    const params = didChangeConfigurationParams(getServerSettings());
    traceInfo(`settings sent to the server: ${JSON.stringify(params.settings.crane)}`);
    await client.sendNotification(DidChangeConfigurationNotification.type, params);
    return true;
  }

  /** A server handle that fails with a clear message when the server is not running. */
  get server(): CraneServer {
    const running = this.running;
    if (running) {
      return running;
    }
    const fail = () => Promise.reject(new ServerNotRunningError());
    const client = this.client;
    return {
      executeCommand: fail,
      sendRequest: fail,
      // converting an edit needs no server, only the client's converter
      asWorkspaceEdit: (edit: unknown) =>
        client ? convertEdit(client, edit) : fail(),
    };
  }

  get currentInterpreter(): Interpreter | undefined {
    return this.interpreter;
  }

  async initPythonApi(): Promise<PythonEnvironmentsApi | undefined> {
    this.pythonApi = await getPythonApi();
    return this.pythonApi;
  }

  /** Restarts (or starts) the server; restarts are serialised. */
  restart(reason: string): Promise<void> {
    this.queue = this.queue.then(() => this.doRestart(reason)).catch((err) => traceError('restart failed', err));
    return this.queue;
  }

  private async doRestart(reason: string): Promise<void> {
    await this.stopClient();
    if (this.disposed) {
      return;
    }
    traceInfo(`starting the server (${reason})`);
    const settings = getClientSettings();
    const resource = vscode.window.activeNotebookEditor?.notebook.uri;
    let interpreter: Interpreter;
    if (!settings.python && this.hooks.ownEnvironment) {
      this.hooks.state('starting', 'preparing the server environment');
      const own = await this.hooks.ownEnvironment(this.pythonApi, resource);
      if (typeof own === 'string') {
        this.hooks.state('error', own);
        return;
      }
      interpreter = own;
      if (this.disposed) {
        return;
      }
    } else {
      interpreter = await resolveInterpreter(settings.python, this.pythonApi, resource);
    }
    this.interpreter = interpreter;
    const label = `${interpreter.command} (${interpreter.source})`;
    this.hooks.state('starting', `checking ${interpreter.command}`, label);

    const check = await checkEnvironment(interpreter.command);
    if (!check.ok) {
      const message = environmentProblemMessage(interpreter.command, check);
      traceError(message);
      this.hooks.state('error', message, label);
      void this.showEnvironmentProblem(message, interpreter.command, check.reason === 'no-crane');
      return;
    }
    traceInfo(`Python ${check.version} at ${interpreter.command} (${interpreter.source}); mode ${settings.mode}`);

    const keys = await this.hooks.secretEnvironment();
    if (Object.keys(keys).length) {
      traceInfo(`API keys passed to the server: ${Object.keys(keys).join(', ')}`);
    }
    const env = { ...serverEnvironment(process.env, keys), ...this.hooks.extraEnvironment?.() };
    const cwd = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
    const initializationOptions = getServerSettings();
    traceInfo(`settings: ${JSON.stringify(initializationOptions)}`);
    const client = new CraneLanguageClient(
      CLIENT_ID,
      CLIENT_NAME,
      buildServerOptions(interpreter.command, env, cwd),
      buildClientOptions(initializationOptions, this.middleware()),
    );
    client.onNotification(Methods.kernelStatus, (p: KernelStatusParams) => this.hooks.kernelStatus(p));
    client.onNotification(Methods.diagnosis, (p: DiagnosisParams) => this.hooks.diagnosis(p));
    client.onNotification(Methods.agentStep, (p: AgentStepParams) => this.hooks.agentStep(p));
    client.onDidChangeState((e) => {
      if (e.newState === State.Stopped && this.client === client) {
        this.hooks.state('stopped', 'the server stopped', label);
      } else if (e.newState === State.Running && this.client === client) {
        this.hooks.state('running', '', label);
      }
    });
    this.client = client;
    try {
      await client.start();
      this.hooks.state('running', '', label);
      const running = this.running;
      if (running) {
        this.hooks.started(running);
      }
    } catch (err) {
      const message = `The CRANE server failed to start with ${interpreter.command}: ${errorMessage(err)}`;
      traceError(message);
      this.hooks.state('error', message, label);
      void this.showEnvironmentProblem(
        `${message}. Check that CRANE is installed there (${installCommand(interpreter.command)}).`,
        interpreter.command,
        true,
      );
    }
  }

  private middleware(): LanguageClientOptions['middleware'] {
    return {
      executeCommand: (command, args, next) => this.hooks.executeCommand(command, args, next),
      workspace: {
        configuration: async (params, token, next) => {
          const fromVsCode = await next(params, token);
          return Array.isArray(fromVsCode) ? answerConfiguration(params, fromVsCode) : fromVsCode;
        },
      },
      handleWorkDoneProgress: (
        token: ProgressToken,
        params: WorkDoneProgressBegin | WorkDoneProgressReport | WorkDoneProgressEnd,
        next,
      ) => {
        const key = String(token);
        if (params.kind === 'begin' && !this.progressTokens.has(key)) {
          this.progressTokens.add(key);
          this.hooks.progress(1, params.title);
        } else if (params.kind === 'end' && this.progressTokens.delete(key)) {
          this.hooks.progress(-1);
        }
        next(token, params);
      },
    };
  }

  private async showEnvironmentProblem(message: string, python: string, offerInstall: boolean): Promise<void> {
    const actions = offerInstall
      ? ['Copy install command', 'Open settings', 'Show log']
      : ['Open settings', 'Show log'];
    const choice = await vscode.window.showErrorMessage(message, ...actions);
    if (choice === 'Copy install command') {
      await vscode.env.clipboard.writeText(installCommand(python));
    } else if (choice === 'Open settings') {
      await vscode.commands.executeCommand('workbench.action.openSettings', 'crane.python');
    } else if (choice === 'Show log') {
      getLogChannel().show(true);
    }
  }

  private async stopClient(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    for (const _ of this.progressTokens) {
      this.hooks.progress(-1);
    }
    this.progressTokens.clear();
    if (client) {
      try {
        await client.dispose(2000);
      } catch (err) {
        traceError('stopping the server', err);
      }
    }
  }

  async dispose(): Promise<void> {
    this.disposed = true;
    await this.stopClient();
  }
}
