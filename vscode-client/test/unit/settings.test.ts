import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { beforeEach, describe, expect, it } from 'vitest';
import { mock, workspace, Uri } from '../vscode.mock';
import {
  classifyChange,
  didChangeConfigurationParams,
  getClientSettings,
  getServerSettings,
  resolveVariables,
} from '../../src/common/settings';

function changeEvent(...keys: string[]) {
  return {
    affectsConfiguration: (section: string) => keys.some((k) => k === section || k.startsWith(`${section}.`)),
  };
}

/** The defaults as package.json contributes them (VS Code's getConfiguration returns these when unset). */
function contributedDefaults(): Record<string, unknown> {
  const pkg = JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', 'package.json'), 'utf8'));
  const props = pkg.contributes.configuration.properties as Record<string, { default: unknown }>;
  return Object.fromEntries(Object.entries(props).map(([k, v]) => [k, v.default]));
}

const UNSET_LLM = {
  model: null,
  apiBase: null,
  timeout: null,
  firstTokenTimeout: null,
  maxTokens: null,
  temperature: null,
  retries: null,
  budgetUsd: null,
  cache: null,
  cacheDir: null,
  structured: null,
};

// the sandbox's run options (crane.sandbox.options.RunOptions, in crane.speculative) at their defaults
const RUN_DEFAULTS = {
  layer: 'auto', transplant: true, transplantCopyMb: 128, warmWorkers: true, exportSeconds: 0.7, watchedExportSeconds: 5,
  workerIdleSeconds: 600, prewarmFreeMb: 1024,
};

const CONTRACT_DEFAULTS = {
  mode: 'auto',
  speculative: { ...RUN_DEFAULTS, enabled: true, budgetSeconds: 10, backgroundSeconds: 120 },
  sandbox: 'auto',
  llm: UNSET_LLM,
  agent: { maxSteps: 10, budgetUsd: null, stepMode: false },
  kernel: { connectionFile: null },
  jupyterServer: { url: null },
  hover: true,
  logLevel: 'info',
};

describe('server settings (initializationOptions / didChangeConfiguration)', () => {
  beforeEach(() => mock.reset());

  it('has the contract defaults, with nothing configured', () => {
    expect(getServerSettings()).toEqual(CONTRACT_DEFAULTS);
  });

  it('has the contract defaults with the defaults package.json contributes', () => {
    mock.config = contributedDefaults();
    expect(getServerSettings()).toEqual(CONTRACT_DEFAULTS);
    expect(mock.config['crane.python']).toBe('');
    expect(mock.config['crane.trace.server']).toBe('off');
  });

  it('sends exactly the contract shape, camelCase, without the interpreter or the trace level', () => {
    mock.config = {
      'crane.mode': 'llm',
      'crane.python': '/opt/py/bin/python',
      'crane.trace.server': 'verbose',
      'crane.llm.model': 'openai/gpt-4o-mini',
      'crane.llm.apiBase': 'http://127.0.0.1:8000/v1',
      'crane.agent.maxSteps': 3,
      'crane.agent.budgetUsd': 0.1,
      'crane.agent.stepMode': true,
      'crane.speculative.enabled': false,
      'crane.speculative.budgetSeconds': 2.5,
      'crane.speculative.backgroundSeconds': 0,
      'crane.kernel.connectionFile': '/tmp/kernel-1.json',
      'crane.jupyterServer.url': 'https://hub.example.org/user/me/',
      'crane.hover': false,
      'crane.logLevel': 'debug',
    };
    expect(getServerSettings()).toEqual({
      mode: 'llm',
      speculative: { ...RUN_DEFAULTS, enabled: false, budgetSeconds: 2.5, backgroundSeconds: 0 },
      sandbox: 'auto',
      llm: { ...UNSET_LLM, model: 'openai/gpt-4o-mini', apiBase: 'http://127.0.0.1:8000/v1' },
      agent: { maxSteps: 3, budgetUsd: 0.1, stepMode: true },
      kernel: { connectionFile: '/tmp/kernel-1.json' },
      jupyterServer: { url: 'https://hub.example.org/user/me/' },
      hover: false,
      logLevel: 'debug',
    });
    expect(didChangeConfigurationParams(getServerSettings()).settings.crane.mode).toBe('llm');
    expect(getClientSettings()).toEqual({
      python: '/opt/py/bin/python',
      connectionFile: '/tmp/kernel-1.json',
      jupyterServerUrl: 'https://hub.example.org/user/me/',
      stepMode: true,
      mode: 'llm',
    });
  });

  it('sends empty strings as null (unset)', () => {
    mock.config = { 'crane.llm.model': '', 'crane.llm.apiBase': '  ', 'crane.kernel.connectionFile': '' };
    const s = getServerSettings();
    expect(s.llm).toEqual(UNSET_LLM);
    expect(s.kernel.connectionFile).toBeNull();
  });

  it('passes invalid values through for the server to report (one warning there, that key falls back)', () => {
    mock.config = { 'crane.mode': 'turbo', 'crane.agent.maxSteps': -2 };
    const s = getServerSettings();
    expect(s.mode).toBe('turbo');
    expect(s.agent.maxSteps).toBe(-2);
    // the client's own reading falls back
    expect(getClientSettings().mode).toBe('auto');
  });

  it('never carries API keys', () => {
    mock.config = { 'crane.llm.model': 'x' };
    expect(JSON.stringify(getServerSettings())).not.toMatch(/key/i);
  });

  it('sends the structured-output choice (crane.llm.structured) for local servers that need it', () => {
    mock.config = {
      'crane.llm.model': 'openai/qwen2.5-coder-0.5b',
      'crane.llm.apiBase': 'http://127.0.0.1:8080/v1',
      'crane.llm.structured': 'object',
    };
    expect(getServerSettings().llm).toEqual({
      ...UNSET_LLM,
      model: 'openai/qwen2.5-coder-0.5b',
      apiBase: 'http://127.0.0.1:8080/v1',
      structured: 'object',
    });
    expect(classifyChange(changeEvent('crane.llm.structured') as never)).toEqual({
      restart: false,
      notify: true,
      connectionFile: false,
    });
    mock.config = { 'crane.llm.structured': null };
    expect(getServerSettings().llm.structured).toBeNull();
  });

  it('expands variables in paths', () => {
    workspace.workspaceFolders = [{ uri: Uri.file('/proj') }];
    process.env.CRANE_TEST_VAR = '/envdir';
    expect(resolveVariables('${workspaceFolder}/.venv/bin/python')).toBe('/proj/.venv/bin/python');
    expect(resolveVariables('~/py')).toBe(`${os.homedir()}/py`);
    expect(resolveVariables('${env:CRANE_TEST_VAR}/python')).toBe('/envdir/python');
    expect(resolveVariables('')).toBe('');
    mock.config = { 'crane.kernel.connectionFile': '${workspaceFolder}/k.json' };
    expect(getServerSettings().kernel.connectionFile).toBe('/proj/k.json');
  });
});

describe('configuration changes', () => {
  it('restart the server only for the interpreter and the trace level', () => {
    expect(classifyChange(changeEvent('crane.python') as never)).toEqual({ restart: true, notify: false, connectionFile: false });
    expect(classifyChange(changeEvent('crane.trace.server') as never).restart).toBe(true);
    expect(classifyChange(changeEvent('crane.trace.server', 'crane.mode') as never)).toEqual({
      restart: true,
      notify: false,
      connectionFile: false,
    });
  });

  it('send mode, llm, agent, speculative, hover and logLevel changes with didChangeConfiguration', () => {
    for (const key of [
      'crane.mode',
      'crane.llm.model',
      'crane.llm.apiBase',
      'crane.agent.maxSteps',
      'crane.agent.budgetUsd',
      'crane.agent.stepMode',
      'crane.speculative.enabled',
      'crane.speculative.budgetSeconds',
      'crane.hover',
      'crane.logLevel',
    ]) {
      expect(classifyChange(changeEvent(key) as never), key).toEqual({ restart: false, notify: true, connectionFile: false });
    }
  });

  it('attach kernels when the connection file changes (and tell the server)', () => {
    expect(classifyChange(changeEvent('crane.kernel.connectionFile') as never)).toEqual({ restart: false, notify: true, connectionFile: true });
  });

  it('ignore other extensions settings', () => {
    expect(classifyChange(changeEvent('python.defaultInterpreterPath') as never)).toEqual({ restart: false, notify: false, connectionFile: false });
  });
});
