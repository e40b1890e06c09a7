/**
 * The `crane.*` settings: what the client itself uses, the server's settings object (initializationOptions and
 * `workspace/didChangeConfiguration`, camelCase, unset = null) and what a configuration change requires.
 */
import * as os from 'node:os';
import * as vscode from 'vscode';

export type Mode = 'static' | 'auto' | 'llm';
export type LogLevel = 'error' | 'warn' | 'info' | 'debug';

/**
 * The server's settings, exactly the contract's shape. Values are passed as the user wrote them (an empty
 * string becomes null): the server validates them, warns once about an invalid value and falls back to that
 * key's default, so the user hears about a typo instead of the client silently replacing it.
 */
export interface ServerSettings {
  mode: unknown;
  speculative: { enabled: unknown; budgetSeconds: unknown };
  llm: { model: unknown; apiBase: unknown };
  agent: { maxSteps: unknown; budgetUsd: unknown; stepMode: unknown };
  kernel: { connectionFile: string | null };
  jupyterServer: { url: unknown };
  hover: unknown;
  logLevel: unknown;
}

/** What the client itself needs (typed, with client-side fallbacks). */
export interface ClientSettings {
  /** Interpreter for `python -m crane serve` ('' = Python extension / python3). */
  python: string;
  /** Resolved kernel connection file, '' when unset. */
  connectionFile: string;
  /** `crane.jupyterServer.url`: remote kernels attach through this server ('' when unset). */
  jupyterServerUrl: string;
  /** Whether agent runs start in step mode. */
  stepMode: boolean;
  mode: Mode;
}

export const SECTION = 'crane';

/** Changes that restart the server (the interpreter, and the client's trace level). */
export const RESTART_KEYS = ['crane.python', 'crane.trace.server'];
/** Changes sent to the running server with `workspace/didChangeConfiguration`. */
export const LIVE_KEYS = [
  'crane.mode',
  'crane.speculative',
  'crane.llm',
  'crane.agent',
  'crane.kernel',
  'crane.jupyterServer',
  'crane.hover',
  'crane.logLevel',
];
export const CONNECTION_FILE_KEY = 'crane.kernel.connectionFile';

const MODES: readonly Mode[] = ['static', 'auto', 'llm'];

export const DEFAULTS = {
  mode: 'auto',
  speculativeEnabled: true,
  budgetSeconds: 10,
  maxSteps: 10,
  stepMode: false,
  hover: true,
  logLevel: 'info',
} as const;

function orNull(v: unknown): unknown {
  if (v === undefined || v === null) {
    return null;
  }
  if (typeof v === 'string' && v.trim() === '') {
    return null;
  }
  return v;
}

function pathOrNull(v: unknown): string | null {
  return typeof v === 'string' && v.trim() ? resolveVariables(v.trim()) : null;
}

export function getServerSettings(scope?: vscode.ConfigurationScope): ServerSettings {
  const cfg = vscode.workspace.getConfiguration(SECTION, scope);
  const get = <T>(key: string, fallback: T): unknown => {
    const v = cfg.get<unknown>(key, fallback);
    return v === undefined ? fallback : v;
  };
  return {
    mode: orNull(get('mode', DEFAULTS.mode)),
    speculative: {
      enabled: orNull(get('speculative.enabled', DEFAULTS.speculativeEnabled)),
      budgetSeconds: orNull(get('speculative.budgetSeconds', DEFAULTS.budgetSeconds)),
    },
    llm: {
      model: orNull(get('llm.model', null)),
      apiBase: orNull(get('llm.apiBase', null)),
    },
    agent: {
      maxSteps: orNull(get('agent.maxSteps', DEFAULTS.maxSteps)),
      budgetUsd: orNull(get('agent.budgetUsd', null)),
      stepMode: orNull(get('agent.stepMode', DEFAULTS.stepMode)),
    },
    kernel: { connectionFile: pathOrNull(get('kernel.connectionFile', null)) },
    jupyterServer: { url: orNull(get('jupyterServer.url', null)) },
    hover: orNull(get('hover', DEFAULTS.hover)),
    logLevel: orNull(get('logLevel', DEFAULTS.logLevel)),
  };
}

export function getClientSettings(scope?: vscode.ConfigurationScope): ClientSettings {
  const cfg = vscode.workspace.getConfiguration(SECTION, scope);
  const mode = cfg.get<unknown>('mode', DEFAULTS.mode);
  const python = cfg.get<unknown>('python', '');
  return {
    python: typeof python === 'string' ? resolveVariables(python.trim()) : '',
    connectionFile: pathOrNull(cfg.get<unknown>('kernel.connectionFile', null)) ?? '',
    jupyterServerUrl: (() => {
      const url = cfg.get<unknown>('jupyterServer.url', null);
      return typeof url === 'string' ? url.trim() : '';
    })(),
    stepMode: cfg.get<unknown>('agent.stepMode', DEFAULTS.stepMode) === true,
    mode: (MODES as readonly unknown[]).includes(mode) ? (mode as Mode) : DEFAULTS.mode,
  };
}

/** The `workspace/didChangeConfiguration` params for the server. */
export function didChangeConfigurationParams(s: ServerSettings): { settings: { crane: ServerSettings } } {
  return { settings: { crane: s } };
}

export interface ConfigChange {
  /** Restart the server (it then gets everything in initializationOptions). */
  restart: boolean;
  /** Send `workspace/didChangeConfiguration` with the new settings. */
  notify: boolean;
  /** `crane.kernel.connectionFile` changed: attach the open notebooks to it (or let the bridge take over). */
  connectionFile: boolean;
}

export function classifyChange(e: vscode.ConfigurationChangeEvent): ConfigChange {
  const restart = RESTART_KEYS.some((k) => e.affectsConfiguration(k));
  return {
    restart,
    notify: !restart && LIVE_KEYS.some((k) => e.affectsConfiguration(k)),
    connectionFile: !restart && e.affectsConfiguration(CONNECTION_FILE_KEY),
  };
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
