/**
 * VS Code's side of the server environment (serverEnv.ts): the Python extension's interpreters to build it
 * from, the progress notification while it is built, and the message when it cannot be.
 */
import * as path from 'node:path';
import * as vscode from 'vscode';
import { getLogChannel, traceError, traceInfo } from './log';
import type { Interpreter, PythonEnvironmentsApi } from './python';
import { candidateInterpreters, EnsureResult, findBundledWheel, Runner, ServerEnvironment } from './serverEnv';

/** The Python extension's `environments.known` (the part CRANE reads). */
interface KnownEnvironments {
  known?: readonly { path: string; executable?: { uri?: vscode.Uri } }[];
}

/** Executables the Python extension offers: its active interpreter for `resource` first, then the others. */
export async function pythonExtensionInterpreters(
  api: (PythonEnvironmentsApi & KnownEnvironments) | undefined,
  resource?: vscode.Uri,
): Promise<string[]> {
  if (!api) {
    return [];
  }
  const out: string[] = [];
  try {
    const resolved = await api.resolveEnvironment(api.getActiveEnvironmentPath(resource));
    const exe = resolved?.executable.uri?.fsPath;
    if (exe) {
      out.push(exe);
    }
  } catch (err) {
    traceError('asking the Python extension for its active interpreter', err);
  }
  for (const env of api.known ?? []) {
    const exe = env.executable?.uri?.fsPath;
    if (exe) {
      out.push(exe);
    }
  }
  return out;
}

export interface OwnEnvironmentOptions {
  storageDir: string;
  extensionDir: string;
  run?: Runner;
}

/**
 * The interpreter of the environment the extension owns (created, upgraded or rebuilt when needed), or the
 * message shown to the user when there is none.
 */
export class OwnEnvironment {
  private readonly env: ServerEnvironment;

  constructor(o: OwnEnvironmentOptions) {
    this.env = new ServerEnvironment({
      storageDir: o.storageDir,
      wheel: findBundledWheel(path.join(o.extensionDir, 'python')),
      run: o.run,
    });
  }

  async interpreter(pythonApi: PythonEnvironmentsApi | undefined, resource?: vscode.Uri): Promise<Interpreter | string> {
    let result: EnsureResult;
    try {
      result = await this.env.ensure({
        candidates: async () =>
          candidateInterpreters(await pythonExtensionInterpreters(pythonApi, resource), process.platform),
        withProgress: (title, work) =>
          Promise.resolve(
            vscode.window.withProgress(
              { location: vscode.ProgressLocation.Notification, title, cancellable: false },
              (progress) => work((message) => progress.report({ message })),
            ),
          ),
        log: traceInfo,
      });
    } catch (err) {
      result = { ok: false, kind: 'install-failed', message: `CRANE could not set up its server environment: ${String(err)}` };
    }
    if (result.ok) {
      return { command: result.python, source: 'extension-env' };
    }
    traceError(result.message);
    if (result.detail) {
      traceError(`pip's output:\n${result.detail.split('\n').slice(-40).join('\n')}`);
    }
    void this.show(result.message);
    return result.message;
  }

  private async show(message: string): Promise<void> {
    const choice = await vscode.window.showErrorMessage(message, 'Retry', 'Open settings', 'Show log');
    if (choice === 'Retry') {
      await vscode.commands.executeCommand('crane.ui.restartServer');
    } else if (choice === 'Open settings') {
      await vscode.commands.executeCommand('workbench.action.openSettings', 'crane.python');
    } else if (choice === 'Show log') {
      getLogChannel().show(true);
    }
  }
}
