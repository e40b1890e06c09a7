import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { beforeEach, describe, expect, it, vi } from 'vitest';
import { EventEmitter, mock, Uri } from '../vscode.mock';
import {
  checkEnvironment,
  environmentProblemMessage,
  getPythonApi,
  installCommand,
  PythonEnvironmentsApi,
  resolveInterpreter,
} from '../../src/common/python';

function fakeApi(exe: string | undefined): PythonEnvironmentsApi {
  return {
    getActiveEnvironmentPath: vi.fn(() => ({ id: 'env', path: exe ?? '' })),
    resolveEnvironment: vi.fn(async () => (exe ? { executable: { uri: Uri.file(exe) as never } } : undefined)),
    onDidChangeActiveEnvironmentPath: new EventEmitter<unknown>().event as never,
  };
}

/** A fake "python" shell script that prints what the real check script would. */
function fakePython(body: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'crane-py-'));
  const file = path.join(dir, 'python');
  fs.writeFileSync(file, `#!/bin/sh\n${body}\n`, { mode: 0o755 });
  return file;
}

describe('interpreter choice', () => {
  beforeEach(() => mock.reset());

  it('prefers crane.python', async () => {
    const api = fakeApi('/env/bin/python');
    expect(await resolveInterpreter('/custom/python', api)).toEqual({ command: '/custom/python', source: 'setting' });
    expect(api.getActiveEnvironmentPath).not.toHaveBeenCalled();
  });

  it('uses the Python extension active interpreter when crane.python is empty', async () => {
    expect(await resolveInterpreter('', fakeApi('/env/bin/python'))).toEqual({
      command: '/env/bin/python',
      source: 'python-extension',
    });
  });

  it('falls back to python3 without the Python extension or when it cannot resolve', async () => {
    expect(await resolveInterpreter('', undefined)).toEqual({ command: 'python3', source: 'default' });
    expect(await resolveInterpreter('  ', fakeApi(undefined))).toEqual({ command: 'python3', source: 'default' });
    const broken = fakeApi('/x');
    broken.resolveEnvironment = vi.fn(async () => {
      throw new Error('boom');
    });
    expect(await resolveInterpreter('', broken)).toEqual({ command: 'python3', source: 'default' });
  });

  it('gets the environments API from ms-python.python', async () => {
    expect(await getPythonApi()).toBeUndefined();
    const environments = fakeApi('/p');
    mock.extensions['ms-python.python'] = { isActive: false, activate: async () => ({ environments }) };
    expect(await getPythonApi()).toBe(environments);
  });
});

describe('environment check', () => {
  it('reports a missing interpreter', async () => {
    const r = await checkEnvironment('/definitely/not/here/python3');
    expect(r).toMatchObject({ ok: false, reason: 'not-found' });
    if (!r.ok) {
      expect(environmentProblemMessage('/definitely/not/here/python3', r)).toMatch(/not found.*crane\.python/);
    }
  });

  it('reports CRANE missing with the install command', async () => {
    const py = fakePython('echo "NOCRANE ModuleNotFoundError: No module named \'crane\'"; exit 4');
    const r = await checkEnvironment(py);
    expect(r).toMatchObject({ ok: false, reason: 'no-crane' });
    if (!r.ok) {
      const msg = environmentProblemMessage(py, r);
      expect(msg).toContain(installCommand(py));
      expect(msg).toContain('No module named');
    }
  });

  it('reports an old Python', async () => {
    const r = await checkEnvironment(fakePython('echo "OLD 3.8.10"; exit 3'));
    expect(r).toMatchObject({ ok: false, reason: 'old-python', detail: 'Python 3.8.10' });
  });

  it('accepts a working environment', async () => {
    expect(await checkEnvironment(fakePython('echo "OK 3.11.2"'))).toEqual({ ok: true, version: '3.11.2' });
  });

  it('runs the real check script against a real Python', async () => {
    const r = await checkEnvironment('python3');
    // whether or not crane is importable there, the script itself must run and classify
    expect(r.ok || ['no-crane', 'old-python'].includes(r.reason)).toBe(true);
  });

  it('quotes interpreter paths with spaces in the install command', () => {
    expect(installCommand('/a b/python')).toBe('"/a b/python" -m pip install crane-notebook');
    expect(installCommand('/usr/bin/python3')).toBe('/usr/bin/python3 -m pip install crane-notebook');
  });
});
