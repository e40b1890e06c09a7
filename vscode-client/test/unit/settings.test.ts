import * as os from 'node:os';
import { beforeEach, describe, expect, it } from 'vitest';
import { mock, workspace, Uri } from '../vscode.mock';
import { getSettings, needsRestart, resolveVariables, toInitializationOptions } from '../../src/common/settings';

function changeEvent(...keys: string[]) {
  return {
    affectsConfiguration: (section: string) => keys.some((k) => k === section || k.startsWith(`${section}.`)),
  };
}

describe('settings', () => {
  beforeEach(() => mock.reset());

  it('has the documented defaults', () => {
    const s = getSettings();
    expect(s).toEqual({
      mode: 'auto',
      python: '',
      llm: { model: '', apiBase: '' },
      agent: { maxSteps: 8, budgetUsd: 0.5 },
      speculative: { enabled: true },
      kernel: { connectionFile: '' },
    });
  });

  it('reads crane.* values and builds camelCase initializationOptions without the interpreter', () => {
    mock.config = {
      'crane.mode': 'llm',
      'crane.python': '/opt/py/bin/python',
      'crane.llm.model': 'openai/gpt-4o-mini',
      'crane.llm.apiBase': 'http://127.0.0.1:8000/v1',
      'crane.agent.maxSteps': 3,
      'crane.agent.budgetUsd': 0.1,
      'crane.speculative.enabled': false,
      'crane.kernel.connectionFile': '/tmp/kernel-1.json',
    };
    const s = getSettings();
    expect(s.python).toBe('/opt/py/bin/python');
    expect(toInitializationOptions(s)).toEqual({
      mode: 'llm',
      llm: { model: 'openai/gpt-4o-mini', apiBase: 'http://127.0.0.1:8000/v1' },
      agent: { maxSteps: 3, budgetUsd: 0.1 },
      speculative: { enabled: false },
      kernel: { connectionFile: '/tmp/kernel-1.json' },
    });
  });

  it('falls back on invalid values', () => {
    mock.config = { 'crane.mode': 'turbo', 'crane.agent.maxSteps': -2, 'crane.agent.budgetUsd': -1 };
    const s = getSettings();
    expect(s.mode).toBe('auto');
    expect(s.agent).toEqual({ maxSteps: 8, budgetUsd: 0.5 });
  });

  it('never carries API keys in initializationOptions', () => {
    mock.config = { 'crane.llm.model': 'x' };
    const opts = toInitializationOptions(getSettings());
    expect(opts.kernel.connectionFile).toBeNull();
    const json = JSON.stringify(opts);
    expect(json).not.toMatch(/key/i);
  });

  it('expands variables in paths', () => {
    workspace.workspaceFolders = [{ uri: Uri.file('/proj') }];
    process.env.CRANE_TEST_VAR = '/envdir';
    expect(resolveVariables('${workspaceFolder}/.venv/bin/python')).toBe('/proj/.venv/bin/python');
    expect(resolveVariables('~/py')).toBe(`${os.homedir()}/py`);
    expect(resolveVariables('${env:CRANE_TEST_VAR}/python')).toBe('/envdir/python');
    expect(resolveVariables('')).toBe('');
  });

  it('restarts on crane settings but not on trace alone', () => {
    expect(needsRestart(changeEvent('crane.python') as never)).toBe(true);
    expect(needsRestart(changeEvent('crane.mode') as never)).toBe(true);
    expect(needsRestart(changeEvent('crane.llm.model') as never)).toBe(true);
    expect(needsRestart(changeEvent('crane.trace.server') as never)).toBe(false);
    expect(needsRestart(changeEvent('crane.trace.server', 'crane.kernel.connectionFile') as never)).toBe(true);
    expect(needsRestart(changeEvent('python.defaultInterpreterPath') as never)).toBe(false);
  });
});
