// Builds the crane-notebook wheel the vsix carries (python/crane_notebook-<version>-py3-none-any.whl): the
// extension installs it into the server environment it creates (src/common/serverEnv.ts). The sources
// (pyproject.toml, README.md, server/) are copied to a temporary folder first, so the build leaves nothing in
// the checkout (no build/, no egg-info). Python: $CRANE_PYTHON, else ../.venv/bin/python, else python3, with pip;
// setuptools and wheel are used from it when it has them (the project's .venv: no download).
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..');
const out = path.join(here, 'python');
const venvPython = path.join(root, '.venv', process.platform === 'win32' ? 'Scripts/python.exe' : 'bin/python');
const python = process.env.CRANE_PYTHON || (existsSync(venvPython) ? venvPython : 'python3');

const src = mkdtempSync(path.join(os.tmpdir(), 'crane-wheel-'));
try {
  for (const name of ['pyproject.toml', 'README.md', 'server']) {
    cpSync(path.join(root, name), path.join(src, name), {
      recursive: true,
      filter: (p) => !/(__pycache__|\.egg-info|\.pyc)$/.test(p),
    });
  }
  rmSync(out, { recursive: true, force: true });
  // with setuptools and wheel at hand (the project's .venv), no download; else pip fetches them (build isolation)
  let isolation = [];
  try {
    execFileSync(python, ['-c', 'import setuptools, wheel'], { stdio: 'ignore' });
    isolation = ['--no-build-isolation'];
  } catch {
    console.log(`wheel: ${python} lacks setuptools/wheel; pip fetches them for the build`);
  }
  execFileSync(
    python,
    ['-m', 'pip', 'wheel', '--no-deps', ...isolation, '--disable-pip-version-check', '-q', '-w', out, src],
    // fixed zip timestamps: the same sources give the same wheel, so the extension's environment is rebuilt
    // (its marker holds the wheel's sha256) only when the server's code changed
    { stdio: 'inherit', env: { ...process.env, SOURCE_DATE_EPOCH: '315532800' } },
  );
} finally {
  rmSync(src, { recursive: true, force: true });
}
const wheels = readdirSync(out).filter((f) => f.endsWith('.whl'));
if (wheels.length !== 1 || !/^crane_notebook-.+-py3-none-any\.whl$/.test(wheels[0])) {
  throw new Error(`expected one crane_notebook wheel in ${out}, found: ${wheels.join(', ') || 'none'}`);
}
console.log(`wheel: python/${wheels[0]}`);
