/**
 * The `crane.*` settings: what the client itself uses, the server's settings object (initializationOptions and
 * `workspace/didChangeConfiguration`, camelCase, unset = null) and what a configuration change requires.
 */
import * as os from 'node:os';
import * as vscode from 'vscode';

import pkg from '../../package.json';

export type Mode = 'static' | 'auto' | 'llm';

/**
 * The server's settings, exactly the contract's shape: `{mode, speculative: {...}, llm: {...}, ...}`, camelCase,
 * every key the server declares (package.json's server properties are generated from that declaration:
 * server/crane/lsp/settings_schema.py), unset = null. Values are passed as the user wrote them (an empty string
 * becomes null): the server validates them, warns once about an invalid value and falls back to that key's
 * default, so the user hears about a typo instead of the client silently replacing it.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- a JSON object passed through as the user wrote it
export type ServerSettings = Record<string, any>;

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

interface Declared {
  default?: unknown;
  enum?: unknown[];
}
/** Every `crane.*` setting as package.json declares it (type, default, bounds, description). */
const DECLARED = pkg.contributes.configuration.properties as Record<string, Declared>;

/** The extension's own settings: never sent to the server (settings_schema.CLIENT_KEYS on the server side). */
export const CLIENT_KEYS = ['crane.python', 'crane.trace.server'];
/** The server's settings keys, without the `crane.` prefix (e.g. `speculative.budgetSeconds`). */
export const SERVER_KEYS = Object.keys(DECLARED)
  .filter((k) => k.startsWith(`${SECTION}.`) && !CLIENT_KEYS.includes(k))
  .map((k) => k.slice(SECTION.length + 1));
/** Path settings: `~`, `${workspaceFolder}`, `${userHome}` and `${env:NAME}` are expanded before sending. */
const PATH_KEYS = ['kernel.connectionFile', 'llm.cacheDir'];

/** Changes that restart the server (the interpreter, and the client's trace level). */
export const RESTART_KEYS = CLIENT_KEYS;
/** Changes sent to the running server with `workspace/didChangeConfiguration`: each top-level key or section. */
export const LIVE_KEYS = [...new Set(SERVER_KEYS.map((k) => `${SECTION}.${k.split('.')[0]}`))];
export const CONNECTION_FILE_KEY = 'crane.kernel.connectionFile';

/** The default package.json declares for `key` (`crane.`-relative). */
export function declaredDefault(key: string): unknown {
  return DECLARED[`${SECTION}.${key}`]?.default ?? null;
}

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
  const out: ServerSettings = {};
  for (const key of SERVER_KEYS) {
    const raw = cfg.get<unknown>(key, declaredDefault(key));
    const value = PATH_KEYS.includes(key) ? pathOrNull(raw) : orNull(raw === undefined ? declaredDefault(key) : raw);
    const parts = key.split('.');
    let node = out;
    for (const part of parts.slice(0, -1)) {
      node = (node[part] ??= {}) as ServerSettings;
    }
    node[parts[parts.length - 1]] = value;
  }
  return out;
}

export function getClientSettings(scope?: vscode.ConfigurationScope): ClientSettings {
  const cfg = vscode.workspace.getConfiguration(SECTION, scope);
  const modes = (DECLARED['crane.mode']?.enum ?? []) as unknown[];
  const mode = cfg.get<unknown>('mode', declaredDefault('mode'));
  const python = cfg.get<unknown>('python', '');
  return {
    python: typeof python === 'string' ? resolveVariables(python.trim()) : '',
    connectionFile: pathOrNull(cfg.get<unknown>('kernel.connectionFile', null)) ?? '',
    jupyterServerUrl: (() => {
      const url = cfg.get<unknown>('jupyterServer.url', null);
      return typeof url === 'string' ? url.trim() : '';
    })(),
    stepMode: cfg.get<unknown>('agent.stepMode', declaredDefault('agent.stepMode')) === true,
    mode: (modes.includes(mode) ? mode : declaredDefault('mode')) as Mode,
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
