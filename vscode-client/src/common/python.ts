/**
 * Which Python runs the server when the extension's own environment is not used (serverEnvUi.ts):
 * `crane.python`, else the Python extension's active interpreter, else `python3`.
 * Also checks that CRANE is importable there, so a broken environment gives a message with the fix.
 */
import { execFile } from 'node:child_process';
import * as vscode from 'vscode';

export const PYTHON_EXTENSION_ID = 'ms-python.python';
export const DEFAULT_PYTHON = 'python3';

/** The part of the Python extension's API (`exports.environments`) that CRANE uses. */
export interface PythonEnvironmentsApi {
  getActiveEnvironmentPath(resource?: vscode.Uri): { id: string; path: string };
  resolveEnvironment(env: { id: string; path: string } | string): Promise<
    { executable: { uri?: vscode.Uri } } | undefined
  >;
  onDidChangeActiveEnvironmentPath: vscode.Event<unknown>;
}

/** `extension-env`: the environment the extension owns (serverEnv.ts), used when `crane.python` is empty. */
export type InterpreterSource = 'setting' | 'python-extension' | 'default' | 'extension-env';

export interface Interpreter {
  command: string;
  source: InterpreterSource;
}

export async function getPythonApi(): Promise<PythonEnvironmentsApi | undefined> {
  const ext = vscode.extensions.getExtension<{ environments?: PythonEnvironmentsApi }>(PYTHON_EXTENSION_ID);
  if (!ext) {
    return undefined;
  }
  try {
    const api = ext.isActive ? ext.exports : await ext.activate();
    return api?.environments;
  } catch {
    return undefined;
  }
}

export async function resolveInterpreter(
  settingPython: string,
  api: PythonEnvironmentsApi | undefined,
  resource?: vscode.Uri,
): Promise<Interpreter> {
  if (settingPython.trim()) {
    return { command: settingPython.trim(), source: 'setting' };
  }
  if (api) {
    try {
      const active = api.getActiveEnvironmentPath(resource);
      const resolved = await api.resolveEnvironment(active);
      const exe = resolved?.executable.uri?.fsPath;
      if (exe) {
        return { command: exe, source: 'python-extension' };
      }
    } catch {
      // fall through to the default interpreter
    }
  }
  return { command: DEFAULT_PYTHON, source: 'default' };
}

export type EnvCheck =
  | { ok: true; version: string }
  | { ok: false; reason: 'not-found' | 'no-crane' | 'old-python' | 'error'; detail: string };

/** Runs `python -c "import crane"` and reports what is wrong, if anything. */
export function checkEnvironment(python: string, timeoutMs = 20_000): Promise<EnvCheck> {
  const script =
    'import sys\n' +
    'if sys.version_info < (3, 10):\n' +
    '    print("OLD " + sys.version.split()[0]); sys.exit(3)\n' +
    'try:\n' +
    '    import crane\n' +
    'except Exception as e:\n' +
    '    print("NOCRANE " + type(e).__name__ + ": " + str(e)); sys.exit(4)\n' +
    'print("OK " + sys.version.split()[0])\n';
  return new Promise((resolve) => {
    execFile(python, ['-c', script], { timeout: timeoutMs, env: process.env }, (err, stdout, stderr) => {
      const out = String(stdout).trim();
      if (!err && out.startsWith('OK ')) {
        resolve({ ok: true, version: out.slice(3) });
        return;
      }
      const code = (err as NodeJS.ErrnoException | null)?.code;
      if (code === 'ENOENT' || code === 'EACCES') {
        resolve({ ok: false, reason: 'not-found', detail: `${python}: ${code}` });
      } else if (out.startsWith('OLD ')) {
        resolve({ ok: false, reason: 'old-python', detail: `Python ${out.slice(4)}` });
      } else if (out.startsWith('NOCRANE ')) {
        resolve({ ok: false, reason: 'no-crane', detail: out.slice(8) });
      } else {
        resolve({ ok: false, reason: 'error', detail: (String(stderr) || out || String(err)).trim().slice(0, 2000) });
      }
    });
  });
}

export function installCommand(python: string): string {
  return `${quote(python)} -m pip install crane-notebook`;
}

/** The message shown when the environment cannot run the server, with the fix. */
export function environmentProblemMessage(python: string, check: Exclude<EnvCheck, { ok: true }>): string {
  switch (check.reason) {
    case 'not-found':
      return (
        `CRANE: the Python interpreter "${python}" was not found. ` +
        'Set "crane.python" to a Python 3.10+ interpreter or select one with "Python: Select Interpreter".'
      );
    case 'old-python':
      return `CRANE needs Python 3.10 or newer, but "${python}" is ${check.detail}. Set "crane.python" to a newer interpreter.`;
    case 'no-crane':
      return (
        `CRANE is not installed in "${python}" (${check.detail}). ` +
        `Install it into that environment with: ${installCommand(python)} (or, in a CRANE checkout, ${quote(python)} -m pip install -e .) — or point "crane.python" at an environment that has it.`
      );
    default:
      return `CRANE: "${python}" could not be run (${check.detail.split('\n').pop()}). See "CRANE: Show log".`;
  }
}

function quote(s: string): string {
  return /^[\w./:\\-]+$/.test(s) ? s : `"${s.replace(/"/g, '\\"')}"`;
}
