/** The `crane.*` settings, the server's initializationOptions and which changes need a server restart. */
import * as os from 'node:os';
import * as vscode from 'vscode';

export type Mode = 'static' | 'auto' | 'llm';

export interface CraneSettings {
  mode: Mode;
  python: string;
  llm: { model: string; apiBase: string };
  agent: { maxSteps: number; budgetUsd: number };
  speculative: { enabled: boolean };
  kernel: { connectionFile: string };
}

/** What the server reads from initializationOptions and `workspace/didChangeConfiguration` (camelCase). */
export interface InitializationOptions {
  mode: Mode;
  llm: { model: string; apiBase: string };
  agent: { maxSteps: number; budgetUsd: number };
  speculative: { enabled: boolean };
  /** null when unset: the server then asks the client bridge or uses its discovery. */
  kernel: { connectionFile: string | null };
}

export const SECTION = 'crane';

/** Settings handled by the language client itself, without a restart. */
const LIVE_KEYS = ['crane.trace.server'];
/** Settings whose change restarts the server. */
const RESTART_KEYS = [
  'crane.mode',
  'crane.python',
  'crane.llm',
  'crane.agent',
  'crane.speculative',
  'crane.kernel',
];

const MODES: readonly Mode[] = ['static', 'auto', 'llm'];

export function getSettings(scope?: vscode.ConfigurationScope): CraneSettings {
  const cfg = vscode.workspace.getConfiguration(SECTION, scope);
  const mode = cfg.get<string>('mode', 'auto');
  return {
    mode: (MODES as readonly string[]).includes(mode) ? (mode as Mode) : 'auto',
    python: resolveVariables(cfg.get<string>('python', '') ?? ''),
    llm: {
      model: cfg.get<string>('llm.model', '') ?? '',
      apiBase: cfg.get<string>('llm.apiBase', '') ?? '',
    },
    agent: {
      maxSteps: positive(cfg.get<number>('agent.maxSteps', 8), 8),
      budgetUsd: nonNegative(cfg.get<number>('agent.budgetUsd', 0.5), 0.5),
    },
    speculative: { enabled: cfg.get<boolean>('speculative.enabled', true) ?? true },
    kernel: { connectionFile: resolveVariables(cfg.get<string>('kernel.connectionFile', '') ?? '') },
  };
}

export function toInitializationOptions(s: CraneSettings): InitializationOptions {
  return {
    mode: s.mode,
    llm: { ...s.llm },
    agent: { ...s.agent },
    speculative: { ...s.speculative },
    kernel: { connectionFile: s.kernel.connectionFile || null },
  };
}

export function needsRestart(e: vscode.ConfigurationChangeEvent): boolean {
  if (LIVE_KEYS.some((k) => e.affectsConfiguration(k))) {
    return RESTART_KEYS.some((k) => e.affectsConfiguration(k));
  }
  return e.affectsConfiguration(SECTION);
}

/** Expands `~`, `${userHome}`, `${workspaceFolder}` and `${env:NAME}` in path settings. */
export function resolveVariables(value: string): string {
  if (!value) {
    return value;
  }
  const folder = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath ?? '';
  let out = value
    .replace(/\$\{userHome\}/g, os.homedir())
    .replace(/\$\{workspaceFolder\}/g, folder)
    .replace(/\$\{env:([^}]+)\}/g, (_m, name: string) => process.env[name] ?? '');
  if (out === '~' || out.startsWith('~/')) {
    out = os.homedir() + out.slice(1);
  }
  return out;
}

function positive(v: number | undefined, fallback: number): number {
  return typeof v === 'number' && Number.isFinite(v) && v > 0 ? Math.floor(v) : fallback;
}

function nonNegative(v: number | undefined, fallback: number): number {
  return typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : fallback;
}
