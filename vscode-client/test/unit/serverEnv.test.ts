import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import {
  classifyPipFailure,
  Candidate,
  candidateInterpreters,
  decideEnvironment,
  ENV_DIR,
  EnsureHooks,
  envPython,
  execRunner,
  findBasePython,
  findBundledWheel,
  Marker,
  MARKER,
  pipProgress,
  pythonEnvironment,
  readMarker,
  RunOptions,
  RunResult,
  ServerEnvironment,
  sha256File,
} from '../../src/common/serverEnv';

// ---- a fake Python world: interpreters on "PATH", venv creation and pip (everything else is real: the decisions,
// the folders, the renames, the lock) -----------------------------------------------------------------------------

interface FakeInterpreter {
  version: number[];
  venv?: boolean;
}

type PipBehaviour = 'ok' | 'network' | 'no-distribution' | 'broken-wheel' | ((python: string) => Promise<RunResult>);

class FakePython {
  interpreters: Record<string, FakeInterpreter> = {};
  pip: PipBehaviour = 'ok';
  /** When set, a successful install leaves a CRANE that fails to import. */
  importFails = false;
  calls: string[][] = [];

  run = async (command: string, args: string[], options: RunOptions): Promise<RunResult> => {
    this.calls.push([command, ...args]);
    const ok = (stdout = ''): RunResult => ({ code: 0, stdout, stderr: '' });
    const script = args[args.indexOf('-c') + 1] ?? '';
    if (args.includes('-c') && script.includes('"venv": venv')) {
      const i = this.interpreters[command];
      if (!i) {
        return { code: null, stdout: '', stderr: '', error: 'ENOENT' };
      }
      return ok(JSON.stringify({ version: i.version, executable: `/usr/bin/${command}`, venv: i.venv ?? true }) + '\n');
    }
    if (args.includes('-m') && args[args.indexOf('-m') + 1] === 'venv') {
      const dir = args[args.indexOf('-m') + 2];
      fs.mkdirSync(path.dirname(envPython(dir)), { recursive: true });
      fs.writeFileSync(envPython(dir), '');
      return ok();
    }
    if (args.includes('pip')) {
      options.onLine?.('Collecting pygls<2.2,>=2.1 (from crane-notebook==0.1.0)');
      if (typeof this.pip === 'function') {
        return this.pip(command);
      }
      if (this.pip === 'network') {
        return {
          code: 1,
          stdout: '',
          stderr:
            "WARNING: Retrying (Retry(total=4)) after connection broken by 'NewConnectionError('Failed to establish a new connection: [Errno -3] Temporary failure in name resolution')'\n" +
            'ERROR: Could not find a version that satisfies the requirement pygls<2.2,>=2.1 (from crane-notebook) (from versions: none)\n' +
            'ERROR: No matching distribution found for pygls<2.2,>=2.1\n',
        };
      }
      if (this.pip === 'no-distribution') {
        // the index answered: it has no distribution of the requirement for this Python / platform
        return {
          code: 1,
          stdout: '',
          stderr:
            'ERROR: Could not find a version that satisfies the requirement torch==2.9.0 (from crane-notebook) (from versions: 2.1.0, 2.2.0)\n' +
            'ERROR: No matching distribution found for torch==2.9.0\n',
        };
      }
      if (this.pip === 'broken-wheel') {
        return { code: 1, stdout: '', stderr: 'ERROR: crane_notebook-0.1.0-py3-none-any.whl is not a valid wheel filename.\n' };
      }
      fs.writeFileSync(path.join(path.dirname(command), 'crane-installed'), this.importFails ? 'broken' : 'ok');
      options.onLine?.('Installing collected packages: pygls, crane-notebook');
      return ok('Successfully installed crane-notebook-0.1.0 pygls-2.1.1\n');
    }
    if (args.includes('-c') && script.includes('import crane')) {
      if (!fs.existsSync(command)) {
        return { code: null, stdout: '', stderr: '', error: 'ENOENT' };
      }
      const installed = path.join(path.dirname(command), 'crane-installed');
      if (!fs.existsSync(installed) || fs.readFileSync(installed, 'utf8') !== 'ok') {
        return { code: 4, stdout: "NOCRANE ModuleNotFoundError: No module named 'crane'\n", stderr: '' };
      }
      return ok('OK 3.11.7\n');
    }
    throw new Error(`unexpected command ${command} ${args.join(' ')}`);
  };

  pipCalls(): number {
    return this.calls.filter((c) => c.includes('pip')).length;
  }
}

const made: string[] = [];
afterAll(() => made.forEach((d) => fs.rmSync(d, { recursive: true, force: true })));

function tmp(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'crane-env-'));
  made.push(dir);
  return dir;
}

function wheelIn(dir: string, content = 'wheel v1'): string {
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, 'crane_notebook-0.1.0-py3-none-any.whl');
  fs.writeFileSync(file, content);
  return file;
}

interface Recorded extends EnsureHooks {
  logs: string[];
  progressTitles: string[];
  reports: string[];
}

function hooks(candidates: Candidate[] = candidateInterpreters([], 'linux')): Recorded {
  const h: Recorded = {
    logs: [],
    progressTitles: [],
    reports: [],
    candidates: async () => candidates,
    withProgress: async (title, work) => {
      h.progressTitles.push(title);
      return work((m) => h.reports.push(m));
    },
    log: (m) => h.logs.push(m),
  };
  return h;
}

function leftovers(storage: string): string[] {
  return fs.readdirSync(storage).filter((n) => n !== ENV_DIR && n !== 'ext');
}

describe('interpreter discovery', () => {
  it('tries the Python extension first (active, then known), then py -3 on Windows, python3, python', () => {
    expect(candidateInterpreters(['/venv/bin/python', '/usr/bin/python3.12', '/venv/bin/python'], 'linux')).toEqual([
      { command: '/venv/bin/python', args: [], source: 'python-extension' },
      { command: '/usr/bin/python3.12', args: [], source: 'python-extension' },
      { command: 'python3', args: [], source: 'path' },
      { command: 'python', args: [], source: 'path' },
    ]);
    expect(candidateInterpreters([], 'win32').map((c) => [c.command, ...c.args].join(' '))).toEqual([
      'py -3',
      'python3',
      'python',
    ]);
  });

  it('takes the first Python 3.10+ that can create a venv, and says why the others were skipped', async () => {
    const py = new FakePython();
    py.interpreters = {
      '/old/python': { version: [3, 9, 18] },
      '/debian/python3': { version: [3, 11, 2], venv: false },
      python3: { version: [3, 10, 0] },
      python: { version: [3, 12, 1] },
    };
    const candidates = candidateInterpreters(['/missing/python', '/old/python', '/debian/python3'], 'linux');
    const { found, rejected } = await findBasePython(py.run, candidates, {});
    expect(found).toMatchObject({ candidate: { command: 'python3' }, version: '3.10.0' });
    expect(rejected.map((r) => [r.candidate.command, r.why])).toEqual([
      ['/missing/python', 'not found'],
      ['/old/python', 'Python 3.9.18, older than 3.10'],
      ['/debian/python3', expect.stringMatching(/without the venv\/ensurepip modules.*python3-venv/)],
    ]);
    // python (3.12) was never run: the first suitable one wins
    expect(py.calls.map((c) => c[0])).toEqual(['/missing/python', '/old/python', '/debian/python3', 'python3']);
  });

  it('finds nothing when every candidate is too old or missing', async () => {
    const py = new FakePython();
    py.interpreters = { python: { version: [2, 7, 18] } };
    const { found, rejected } = await findBasePython(py.run, candidateInterpreters([], 'linux'), {});
    expect(found).toBeUndefined();
    expect(rejected.map((r) => r.why)).toEqual(['not found', 'Python 2.7.18, older than 3.10']);
  });

  it('probes real interpreters: this machine has a Python 3.10+ on PATH or not, and says which', async () => {
    const { found, rejected } = await findBasePython(execRunner, candidateInterpreters([], process.platform), process.env);
    if (found) {
      expect(found.version).toMatch(/^3\.(1\d|[2-9]\d)\./);
      expect(path.isAbsolute(found.executable)).toBe(true);
    } else {
      expect(rejected.length).toBeGreaterThan(0);
    }
  });
});

describe('reuse, upgrade and rebuild decisions', () => {
  const bundled = { wheel: 'crane_notebook-0.2.0-py3-none-any.whl', sha256: 'b'.repeat(64) };
  const marker = (sha: string): Marker => ({
    schema: 1,
    wheel: 'crane_notebook-0.1.0-py3-none-any.whl',
    wheelSha256: sha,
    basePython: '/usr/bin/python3',
    pythonVersion: '3.11.7',
    created: '2026-01-01T00:00:00Z',
  });

  it('creates when there is none, rebuilds one without a marker, upgrades on another wheel, rebuilds a broken one', () => {
    expect(decideEnvironment({ exists: false }, bundled)).toMatchObject({ action: 'create' });
    expect(decideEnvironment({ exists: true }, bundled)).toMatchObject({ action: 'rebuild', reason: /crane-env\.json/ });
    expect(decideEnvironment({ exists: true, marker: marker('a'.repeat(64)), health: { ok: true, detail: '3.11.7' } }, bundled)).toMatchObject({
      action: 'upgrade',
      reason: /crane_notebook-0\.1\.0.*crane_notebook-0\.2\.0/,
    });
    expect(decideEnvironment({ exists: true, marker: marker('b'.repeat(64)), health: { ok: false, detail: 'No module named crane' } }, bundled)).toMatchObject({
      action: 'rebuild',
      reason: /broken: No module named crane/,
    });
    expect(decideEnvironment({ exists: true, marker: marker('b'.repeat(64)) }, bundled)).toMatchObject({ action: 'rebuild' });
    expect(decideEnvironment({ exists: true, marker: marker('b'.repeat(64)), health: { ok: true, detail: '3.11.7' } }, bundled)).toEqual({
      action: 'reuse',
    });
  });
});

describe('the server environment', () => {
  let storage: string;
  let wheel: string;
  let py: FakePython;
  const make = (extra: Partial<ConstructorParameters<typeof ServerEnvironment>[0]> = {}) =>
    new ServerEnvironment({ storageDir: storage, wheel, run: py.run, env: {}, platform: 'linux', ...extra });

  beforeEach(() => {
    storage = tmp();
    wheel = wheelIn(path.join(storage, 'ext', 'python'));
    py = new FakePython();
    py.interpreters = { python3: { version: [3, 11, 7] } };
  });

  it('is created on first use with progress, then reused without installing', async () => {
    const h = hooks();
    const first = await make().ensure(h);
    expect(first).toEqual({ ok: true, python: path.join(storage, ENV_DIR, 'bin', 'python'), action: 'create', version: '3.11.7' });
    expect(h.progressTitles).toEqual([expect.stringMatching(/first-use setup \(a minute or a few\)/)]);
    expect(h.reports).toContain('collecting pygls');
    // the notification shows the title and one message on a line: every message is short
    expect(Math.max(...h.reports.map((m) => m.length))).toBeLessThanOrEqual(32);
    expect(py.pipCalls()).toBe(1);
    expect(readMarker(path.join(storage, ENV_DIR))).toMatchObject({ wheelSha256: sha256File(wheel), basePython: '/usr/bin/python3' });
    expect(leftovers(storage)).toEqual([]); // no partial folder, no lock

    const h2 = hooks();
    const second = await make().ensure(h2);
    expect(second).toMatchObject({ ok: true, action: 'reuse' });
    expect(py.pipCalls()).toBe(1);
    expect(h2.progressTitles).toEqual([]);
    expect(h2.logs.join('\n')).toMatch(/reusing the server environment/);
  });

  it('upgrades when the extension carries another wheel', async () => {
    await make().ensure(hooks());
    wheel = wheelIn(path.join(storage, 'ext', 'python'), 'wheel v2');
    const h = hooks();
    expect(await make().ensure(h)).toMatchObject({ ok: true, action: 'upgrade' });
    expect(h.progressTitles).toEqual([expect.stringMatching(/updating/)]);
    expect(readMarker(path.join(storage, ENV_DIR))?.wheelSha256).toBe(sha256File(wheel));
    expect(py.pipCalls()).toBe(2);
    expect(leftovers(storage)).toEqual([]);
  });

  it('rebuilds an environment whose python is gone or where crane does not import', async () => {
    await make().ensure(hooks());
    fs.rmSync(envPython(path.join(storage, ENV_DIR)));
    expect(await make().ensure(hooks())).toMatchObject({ ok: true, action: 'rebuild' });
    fs.writeFileSync(path.join(storage, ENV_DIR, 'bin', 'crane-installed'), 'broken');
    const h = hooks();
    expect(await make().ensure(h)).toMatchObject({ ok: true, action: 'rebuild' });
    expect(h.logs.join('\n')).toMatch(/rebuild \(the environment is broken: ModuleNotFoundError/);
    expect(py.pipCalls()).toBe(3);
  });

  it('never puts a half-built environment in place: during the install only a partial folder exists', async () => {
    const seen: string[][] = [];
    py.pip = async (python) => {
      seen.push(fs.readdirSync(storage).sort());
      fs.writeFileSync(path.join(path.dirname(python), 'crane-installed'), 'ok');
      return { code: 0, stdout: '', stderr: '' };
    };
    await make().ensure(hooks());
    expect(seen).toHaveLength(1);
    expect(seen[0]).not.toContain(ENV_DIR);
    expect(seen[0].filter((n) => n.startsWith(`${ENV_DIR}.partial-`))).toHaveLength(1);
    expect(seen[0]).toContain(`${ENV_DIR}.lock`);
    expect(fs.existsSync(path.join(storage, ENV_DIR, MARKER))).toBe(true);
  });

  it('without the network: a message saying what to do, and nothing left behind', async () => {
    py.pip = 'network';
    const r = await make().ensure(hooks());
    expect(r).toMatchObject({ ok: false, kind: 'network' });
    if (!r.ok) {
      expect(r.message).toMatch(/package index/);
      expect(r.message).toMatch(/PIP_INDEX_URL/);
      expect(r.message).toMatch(/crane\.python/);
      // the details give the network's cause, not only pip's conclusion
      expect(r.message).toMatch(/Details: Failed to establish a new connection: \[Errno -3\] Temporary failure in name resolution/);
      expect(r.message).toMatch(/No matching distribution found for pygls/);
    }
    expect(fs.readdirSync(storage).filter((n) => n !== 'ext')).toEqual([]);
  });

  it('a dependency without a distribution for this Python is not called a network problem', async () => {
    py.pip = 'no-distribution';
    const r = await make().ensure(hooks());
    expect(r).toMatchObject({ ok: false, kind: 'no-distribution' });
    if (!r.ok) {
      expect(r.message).toMatch(/no version of torch==2\.9\.0 for Python 3\.11\.7/);
      expect(r.message).toMatch(/the index was reachable/);
      expect(r.message).not.toMatch(/network/);
    }
  });

  it('a failed upgrade leaves the environment as it was, not half-replaced, and the build is retried next time', async () => {
    await make().ensure(hooks());
    const before = fs.readFileSync(path.join(storage, ENV_DIR, MARKER), 'utf8');
    wheel = wheelIn(path.join(storage, 'ext', 'python'), 'wheel v2');
    py.pip = 'broken-wheel';
    const r = await make().ensure(hooks());
    expect(r).toMatchObject({ ok: false, kind: 'install-failed', message: /not a valid wheel/ });
    expect(fs.readFileSync(path.join(storage, ENV_DIR, MARKER), 'utf8')).toBe(before);
    expect(leftovers(storage)).toEqual([]);
    py.pip = 'ok';
    expect(await make().ensure(hooks())).toMatchObject({ ok: true, action: 'upgrade' });
  });

  it('an install whose crane does not import is not put in place', async () => {
    py.importFails = true;
    const r = await make().ensure(hooks());
    expect(r).toMatchObject({ ok: false, kind: 'install-failed', message: /does not import crane/ });
    expect(fs.readdirSync(storage).filter((n) => n !== 'ext')).toEqual([]);
  });

  it('cleans up after a build that was killed (partial folder, lock of a dead process) and builds again', async () => {
    fs.mkdirSync(path.join(storage, `${ENV_DIR}.partial-dead`, 'bin'), { recursive: true });
    fs.mkdirSync(path.join(storage, `${ENV_DIR}.old-dead`));
    fs.mkdirSync(path.join(storage, `${ENV_DIR}.lock`));
    fs.writeFileSync(path.join(storage, `${ENV_DIR}.lock`, 'pid'), '999999999');
    const h = hooks();
    expect(await make().ensure(h)).toMatchObject({ ok: true, action: 'create' });
    expect(leftovers(storage)).toEqual([]);
    expect(h.logs.join('\n')).toMatch(/taking over/);
  });

  it('takes over an old lock whose holder died before writing its pid', async () => {
    const lock = path.join(storage, `${ENV_DIR}.lock`);
    fs.mkdirSync(lock);
    const old = new Date(Date.now() - 60_000);
    fs.utimesSync(lock, old, old);
    expect(await make({ staleLockMs: 30_000 }).ensure(hooks())).toMatchObject({ ok: true, action: 'create' });
    expect(leftovers(storage)).toEqual([]);
  });

  it('waits for another window that holds the lock, and gives up with a message after its wait', async () => {
    fs.mkdirSync(path.join(storage, `${ENV_DIR}.lock`));
    fs.writeFileSync(path.join(storage, `${ENV_DIR}.lock`, 'pid'), String(process.pid)); // alive
    const r = await make({ lockWaitMs: 1500 }).ensure(hooks());
    expect(r).toMatchObject({ ok: false, kind: 'busy' });
    expect(py.pipCalls()).toBe(0);
  });

  it('says so when no Python 3.10+ is found, naming what it tried', async () => {
    py.interpreters = { python: { version: [3, 8, 10] } };
    const r = await make().ensure(hooks());
    expect(r).toMatchObject({ ok: false, kind: 'no-python' });
    if (!r.ok) {
      expect(r.message).toMatch(/Python 3\.10 or newer/);
      expect(r.message).toMatch(/python3: not found; python: Python 3\.8\.10, older than 3\.10/);
      expect(r.message).toMatch(/crane\.python/);
    }
    expect(fs.readdirSync(storage).filter((n) => n !== 'ext')).toEqual([]);
  });

  it('says so when the extension carries no wheel', async () => {
    const r = await make({ wheel: undefined }).ensure(hooks());
    expect(r).toMatchObject({ ok: false, kind: 'no-wheel', message: /make vsix.*crane\.python/ });
    expect(findBundledWheel(path.join(storage, 'nowhere'))).toBeUndefined();
    expect(findBundledWheel(path.dirname(wheel))).toBe(wheel);
  });
});

describe('helpers', () => {
  it('runs programs: output lines, exit codes, a missing program, a timeout', async () => {
    const lines: string[] = [];
    const ok = await execRunner(process.execPath, ['-e', 'console.log("a\\nb"); console.error("c"); process.exit(3)'], {
      timeoutMs: 20_000,
      onLine: (l) => lines.push(l),
    });
    expect(ok).toMatchObject({ code: 3, stdout: 'a\nb\n', stderr: 'c\n' });
    expect(lines.sort()).toEqual(['a', 'b', 'c']);
    expect(await execRunner('/definitely/not/here', [], { timeoutMs: 5000 })).toMatchObject({ code: null, error: 'ENOENT' });
    expect(await execRunner(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { timeoutMs: 300 })).toMatchObject({
      code: null,
      error: 'TIMEOUT',
    });
  });

  it("keeps pip's index settings and drops what would install elsewhere", () => {
    const env = pythonEnvironment({ PATH: '/bin', PYTHONPATH: '/x', PIP_USER: '1', PIP_INDEX_URL: 'https://idx', HTTPS_PROXY: 'http://p' });
    expect(env).toMatchObject({ PATH: '/bin', PIP_INDEX_URL: 'https://idx', HTTPS_PROXY: 'http://p', PIP_NO_INPUT: '1' });
    expect(env.PYTHONPATH).toBeUndefined();
    expect(env.PIP_USER).toBeUndefined();
  });

  it("shows pip's steps, not its noise", () => {
    expect(pipProgress('Collecting pygls<2.2,>=2.1 (from crane-notebook==0.1.0)')).toBe('collecting pygls');
    expect(pipProgress('Downloading https://files.example/packages/ab/pyzmq-27.3.0-cp311.whl (855 kB)')).toBe('downloading pyzmq');
    expect(pipProgress('Downloading lsprotocol-2025.0.0-py3-none-any.whl (70 kB)')).toBe('downloading lsprotocol');
    expect(pipProgress('Collecting nvidia-cuda-nvrtc-cu12-with-a-very-long-name==12.4')).toHaveLength(32);
    expect(pipProgress('Installing collected packages: a, b')).toBe('installing 2 packages');
    expect(pipProgress('  Using cached x.whl')).toBeUndefined();
  });

  it('tells a network failure (with its cause) from a missing distribution', () => {
    const refused =
      "WARNING: Retrying (Retry(total=0)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPConnection object at 0x7f>: Failed to establish a new connection: [Errno 111] Connection refused')': /simple/x/\n" +
      'ERROR: No matching distribution found for x\n';
    expect(classifyPipFailure(refused, false)).toEqual({
      kind: 'network',
      cause: 'Failed to establish a new connection: [Errno 111] Connection refused',
    });
    expect(classifyPipFailure('ERROR: No matching distribution found for numpy==9.9\n', false)).toEqual({
      kind: 'no-distribution',
      requirement: 'numpy==9.9',
    });
    expect(classifyPipFailure('', true)).toMatchObject({ kind: 'network' });
    expect(classifyPipFailure('ERROR: something else\n', false)).toEqual({ kind: 'other' });
  });
});

/** A small valid wheel `crane_notebook-0.0.1`: package `crane` (VERSION = `version`), requiring `requires`. */
async function dummyWheel(dir: string, version: string, requires?: string): Promise<string> {
  const wheel = path.join(dir, 'crane_notebook-0.0.1-py3-none-any.whl');
  const meta = `Metadata-Version: 2.1\nName: crane-notebook\nVersion: 0.0.1\n${requires ? `Requires-Dist: ${requires}\n` : ''}`;
  const script = [
    'import json, sys, zipfile',
    'files = json.loads(sys.argv[2])',
    'with zipfile.ZipFile(sys.argv[1], "w") as z:',
    '    for k, v in files.items(): z.writestr(k, v)',
    '    z.writestr("crane_notebook-0.0.1.dist-info/RECORD", "".join(k + ",,\\n" for k in files) + "crane_notebook-0.0.1.dist-info/RECORD,,\\n")',
  ].join('\n');
  const files = {
    'crane/__init__.py': `VERSION = ${JSON.stringify(version)}\n`,
    'crane_notebook-0.0.1.dist-info/METADATA': meta,
    'crane_notebook-0.0.1.dist-info/WHEEL': 'Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n',
  };
  const r = await execRunner('python3', ['-c', script, wheel, JSON.stringify(files)], { timeoutMs: 30_000 });
  expect(r).toMatchObject({ code: 0 });
  return wheel;
}

describe('with a real Python and pip', () => {
  it('creates a real environment, reuses it, upgrades it in place of the old one', async () => {
    const storage = tmp();
    const wheels = tmp();
    let wheel = await dummyWheel(wheels, '1');
    const first = await new ServerEnvironment({ storageDir: storage, wheel }).ensure(hooks());
    expect(first).toMatchObject({ ok: true, action: 'create', python: envPython(path.join(storage, ENV_DIR)) });
    const version = async () =>
      (await execRunner(envPython(path.join(storage, ENV_DIR)), ['-c', 'import crane; print(crane.VERSION)'], { timeoutMs: 30_000 })).stdout.trim();
    expect(await version()).toBe('1');
    expect(await new ServerEnvironment({ storageDir: storage, wheel }).ensure(hooks())).toMatchObject({ ok: true, action: 'reuse' });
    wheel = await dummyWheel(wheels, '2');
    expect(await new ServerEnvironment({ storageDir: storage, wheel }).ensure(hooks())).toMatchObject({ ok: true, action: 'upgrade' });
    expect(await version()).toBe('2');
    expect(fs.readdirSync(storage)).toEqual([ENV_DIR]);
  }, 240_000);

  it('creates a real venv, pip fails on the network: a message saying what to do, nothing left behind', async () => {
    const storage = tmp();
    // a wheel that depends on a package only the (unreachable) index would have
    const wheel = await dummyWheel(storage, '1', 'crane-dependency-only-on-the-index');
    const env = {
      ...process.env,
      PIP_INDEX_URL: 'http://127.0.0.1:9/simple', // nothing listens on the discard port
      PIP_FIND_LINKS: '',
      PIP_EXTRA_INDEX_URL: '',
      PIP_CONFIG_FILE: os.devNull,
      PIP_RETRIES: '0',
      PIP_TIMEOUT: '5',
    };
    const h = hooks();
    const r = await new ServerEnvironment({ storageDir: storage, wheel, env }).ensure(h);
    expect(h.logs.join('\n')).toMatch(/installing crane_notebook-0\.0\.1/);
    expect(r).toMatchObject({ ok: false, kind: 'network' });
    if (!r.ok) {
      expect(r.message).toMatch(/could not download its dependencies from the package index/);
      expect(r.message).toMatch(/crane-dependency-only-on-the-index/);
    }
    expect(fs.readdirSync(storage)).toEqual([path.basename(wheel)]);
  }, 180_000);
});
