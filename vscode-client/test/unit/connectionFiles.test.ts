import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { jupyterExtensionRuntimeDirs, listConnectionFiles, runtimeDirs } from '../../src/common/connectionFiles';

const tmp: string[] = [];
function tempDir(): string {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'crane-cf-'));
  tmp.push(d);
  return d;
}
afterEach(() => {
  for (const d of tmp.splice(0)) {
    fs.rmSync(d, { recursive: true, force: true });
  }
});

describe('connection file folders (defect 7)', () => {
  it("keeps the classic folder the Jupyter extension uses, whatever JUPYTER_DATA_DIR and XDG_DATA_HOME say", () => {
    const dirs = runtimeDirs({ XDG_DATA_HOME: '/x', JUPYTER_DATA_DIR: '/j', XDG_RUNTIME_DIR: '/run/u' }, 'linux', '/home/u');
    expect(dirs).toEqual(['/j/runtime', '/run/u/jupyter/runtime', '/x/jupyter/runtime', '/home/u/.local/share/jupyter/runtime']);
    expect(runtimeDirs({ JUPYTER_RUNTIME_DIR: '/r' }, 'darwin', '/Users/u')).toEqual(['/r', '/Users/u/Library/Jupyter/runtime']);
  });

  it("adds the Jupyter extension's fallback folders in its global storage", () => {
    const storage = tempDir();
    fs.mkdirSync(path.join(storage, 'version-2025.4.1', 'jupyter', 'runtime'), { recursive: true });
    fs.mkdirSync(path.join(storage, 'other'));
    expect(jupyterExtensionRuntimeDirs(storage)).toEqual([path.join(storage, 'version-2025.4.1', 'jupyter', 'runtime')]);
    expect(runtimeDirs({}, 'linux', '/home/u', storage)).toContain(path.join(storage, 'version-2025.4.1', 'jupyter', 'runtime'));
    expect(jupyterExtensionRuntimeDirs(path.join(storage, 'missing'))).toEqual([]);
  });

  it('lists kernel-*.json files newest first', () => {
    const d = tempDir();
    fs.writeFileSync(path.join(d, 'kernel-v3old.json'), '{}');
    fs.writeFileSync(path.join(d, 'kernel-v3new.json'), '{}');
    fs.writeFileSync(path.join(d, 'other.json'), '{}');
    const old = Date.now() / 1000 - 100;
    fs.utimesSync(path.join(d, 'kernel-v3old.json'), old, old);
    expect(listConnectionFiles([d, path.join(d, 'missing')]).map((f) => path.basename(f.path))).toEqual([
      'kernel-v3new.json',
      'kernel-v3old.json',
    ]);
  });
});
