import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { beforeEach, describe, expect, it, vi } from 'vitest';
import { EventEmitter, mock, Uri, window } from '../vscode.mock';
import type { PythonEnvironmentsApi } from '../../src/common/python';
import { RunOptions, RunResult } from '../../src/common/serverEnv';
import { OwnEnvironment, pythonExtensionInterpreters } from '../../src/common/serverEnvUi';

function api(active: string | undefined, known: string[]): PythonEnvironmentsApi {
  return {
    getActiveEnvironmentPath: vi.fn(() => ({ id: 'a', path: active ?? '' })),
    resolveEnvironment: vi.fn(async () => (active ? { executable: { uri: Uri.file(active) as never } } : undefined)),
    onDidChangeActiveEnvironmentPath: new EventEmitter<unknown>().event as never,
    known: known.map((k) => ({ path: k, executable: { uri: Uri.file(k) } })),
  } as PythonEnvironmentsApi;
}

describe("the Python extension's interpreters", () => {
  it('lists the active one first, then the known ones; none without the extension', async () => {
    expect(await pythonExtensionInterpreters(api('/proj/.venv/bin/python', ['/usr/bin/python3.12', '/proj/.venv/bin/python']))).toEqual([
      '/proj/.venv/bin/python',
      '/usr/bin/python3.12',
      '/proj/.venv/bin/python',
    ]);
    expect(await pythonExtensionInterpreters(api(undefined, ['/opt/conda/bin/python']))).toEqual(['/opt/conda/bin/python']);
    expect(await pythonExtensionInterpreters(undefined)).toEqual([]);
  });
});

describe('the environment the extension owns, in VS Code', () => {
  let storage: string;
  let extensionDir: string;
  beforeEach(() => {
    mock.reset();
    storage = fs.mkdtempSync(path.join(os.tmpdir(), 'crane-own-'));
    extensionDir = fs.mkdtempSync(path.join(os.tmpdir(), 'crane-ext-'));
    fs.mkdirSync(path.join(extensionDir, 'python'));
    fs.writeFileSync(path.join(extensionDir, 'python', 'crane_notebook-0.1.0-py3-none-any.whl'), 'wheel');
  });

  it("builds from the Python extension's interpreter first, under a progress notification", async () => {
    const tried: string[] = [];
    const run = async (command: string, args: string[], _o: RunOptions): Promise<RunResult> => {
      tried.push(command);
      if (args.includes('venv') || args.includes('pip')) {
        return { code: 1, stdout: '', stderr: 'ERROR: No matching distribution found for pygls\n' };
      }
      return { code: 0, stdout: JSON.stringify({ version: [3, 12, 0], executable: command, venv: true }), stderr: '' };
    };
    const own = new OwnEnvironment({ storageDir: storage, extensionDir, run });
    const result = await own.interpreter(api('/proj/.venv/bin/python', []));
    expect(tried[0]).toBe('/proj/.venv/bin/python');
    expect(window.withProgress).toHaveBeenCalledWith(
      expect.objectContaining({ location: 15, title: expect.stringMatching(/first-use setup \(a minute or a few\)/) }),
      expect.any(Function),
    );
    expect(typeof result).toBe('string');
    expect(window.showErrorMessage).toHaveBeenCalledWith(expect.stringMatching(/virtual environment/), 'Retry', 'Open settings', 'Show log');
    expect(fs.readdirSync(storage)).toEqual([]);
  });

  it('says what to do when the vsix carries no wheel', async () => {
    fs.rmSync(path.join(extensionDir, 'python'), { recursive: true });
    const own = new OwnEnvironment({ storageDir: storage, extensionDir, run: vi.fn() });
    expect(await own.interpreter(undefined)).toMatch(/carries no crane-notebook wheel/);
    expect(window.showErrorMessage).toHaveBeenCalled();
  });
});
