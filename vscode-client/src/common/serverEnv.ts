/**
 * The server environment the extension owns (a venv in its global storage), without VS Code: which Python to
 * build it from, whether to reuse, upgrade or rebuild it, and building it atomically.
 *
 * Layout under the storage folder: `server-env/` (the environment in use, with `crane-env.json`, the marker
 * written last), `server-env.partial-<id>/` (one being built), `server-env.old-<id>/` (one being replaced),
 * `server-env.lock/` (held while deciding or building: windows share the global storage).
 * A build goes into a partial folder and is renamed to `server-env` only once pip has finished, CRANE imports
 * there and the marker is written: an interrupted or failed build is never used, and is removed by the next.
 * VS Code's side (progress, messages, the Python extension's interpreters) is serverEnvUi.ts.
 */
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';

export const ENV_DIR = 'server-env';
export const MARKER = 'crane-env.json';
export const MIN_PYTHON: readonly [number, number] = [3, 10];

// ---- running programs -----------------------------------------------------------------------------------------

export interface RunResult {
  /** Exit code; null when the program could not start or was killed. */
  code: number | null;
  stdout: string;
  stderr: string;
  /** `ENOENT`, `EACCES`, `TIMEOUT`, ... when the program did not run to its end. */
  error?: string;
}

export interface RunOptions {
  timeoutMs: number;
  env?: NodeJS.ProcessEnv;
  /** Each line of stdout and stderr as it comes (pip's progress). */
  onLine?: (line: string) => void;
}

export type Runner = (command: string, args: string[], options: RunOptions) => Promise<RunResult>;

/** Runs a program without a shell; never rejects. */
export const execRunner: Runner = (command, args, options) =>
  new Promise((resolve) => {
    let stdout = '';
    let stderr = '';
    let error: string | undefined;
    let child;
    try {
      child = spawn(command, args, { env: options.env ?? process.env, stdio: ['ignore', 'pipe', 'pipe'], windowsHide: true });
    } catch (err) {
      resolve({ code: null, stdout, stderr, error: (err as NodeJS.ErrnoException).code ?? String(err) });
      return;
    }
    const timer = setTimeout(() => {
      error = 'TIMEOUT';
      child.kill('SIGKILL');
    }, options.timeoutMs);
    const lines = (chunk: Buffer, into: 'out' | 'err') => {
      const text = chunk.toString('utf8');
      if (into === 'out') {
        stdout += text;
      } else {
        stderr += text;
      }
      if (options.onLine) {
        for (const line of text.split(/\r?\n/)) {
          if (line.trim()) {
            options.onLine(line.trim());
          }
        }
      }
    };
    child.stdout.on('data', (c: Buffer) => lines(c, 'out'));
    child.stderr.on('data', (c: Buffer) => lines(c, 'err'));
    child.on('error', (err: NodeJS.ErrnoException) => {
      error ??= err.code ?? err.message;
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code: error ? null : code, stdout, stderr, error });
    });
  });

/**
 * The environment for Python and pip: the user's, minus what would make Python or pip look elsewhere than the
 * environment being built (PYTHONPATH/PYTHONHOME, pip's --user/--target/--prefix). pip's index settings
 * (PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, proxies, certificates, pip.conf) are kept.
 */
export function pythonEnvironment(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const out: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(env)) {
    if (!/^(PYTHONPATH|PYTHONHOME|PYTHONSTARTUP|VIRTUAL_ENV|PIP_USER|PIP_TARGET|PIP_PREFIX|PIP_ROOT|PIP_REQUIRE_VIRTUALENV|CONDA_PREFIX)$/i.test(k)) {
      out[k] = v;
    }
  }
  out.PIP_DISABLE_PIP_VERSION_CHECK = '1';
  out.PIP_NO_INPUT = '1';
  out.PYTHONNOUSERSITE = '1';
  return out;
}

// ---- interpreter discovery ------------------------------------------------------------------------------------

export type CandidateSource = 'python-extension' | 'path';

export interface Candidate {
  command: string;
  /** Arguments before the script's own (`py -3`). */
  args: string[];
  source: CandidateSource;
}

/**
 * The interpreters to try, in order: the Python extension's (its active one first, then the others it knows),
 * then `py -3` (Windows), `python3` and `python` on PATH. Duplicates are dropped.
 */
export function candidateInterpreters(fromExtension: readonly string[], platform: NodeJS.Platform): Candidate[] {
  const out: Candidate[] = [];
  const seen = new Set<string>();
  const add = (c: Candidate) => {
    const key = [c.command, ...c.args].join('\0');
    if (c.command && !seen.has(key)) {
      seen.add(key);
      out.push(c);
    }
  };
  for (const exe of fromExtension) {
    add({ command: exe, args: [], source: 'python-extension' });
  }
  if (platform === 'win32') {
    add({ command: 'py', args: ['-3'], source: 'path' });
  }
  add({ command: 'python3', args: [], source: 'path' });
  add({ command: 'python', args: [], source: 'path' });
  return out;
}

export interface BasePython {
  candidate: Candidate;
  /** sys.executable */
  executable: string;
  version: string;
}

export interface Rejected {
  candidate: Candidate;
  why: string;
}

const PROBE =
  'import json, sys\n' +
  'venv = True\n' +
  'try:\n' +
  '    import ensurepip, venv as _v\n' +
  'except Exception:\n' +
  '    venv = False\n' +
  'print(json.dumps({"version": list(sys.version_info[:3]), "executable": sys.executable, "venv": venv}))\n';

/** Runs `candidate` once: its version, its executable, and whether it can create a venv with pip. */
export async function probeInterpreter(
  run: Runner,
  candidate: Candidate,
  env: NodeJS.ProcessEnv,
): Promise<BasePython | Rejected> {
  const r = await run(candidate.command, [...candidate.args, '-c', PROBE], { timeoutMs: 30_000, env });
  if (r.error === 'ENOENT' || r.error === 'EACCES') {
    return { candidate, why: 'not found' };
  }
  let info: { version: number[]; executable: string; venv: boolean };
  try {
    info = JSON.parse(r.stdout.trim().split('\n').pop() ?? '');
  } catch {
    return { candidate, why: `did not run (${(r.error ?? r.stderr.trim().split('\n').pop()) || `exit ${r.code}`})` };
  }
  const version = info.version.join('.');
  const [major, minor] = info.version;
  if (major < MIN_PYTHON[0] || (major === MIN_PYTHON[0] && minor < MIN_PYTHON[1])) {
    return { candidate, why: `Python ${version}, older than ${MIN_PYTHON.join('.')}` };
  }
  if (!info.venv) {
    return { candidate, why: `Python ${version} without the venv/ensurepip modules (Debian/Ubuntu: apt install python3-venv)` };
  }
  return { candidate, executable: info.executable || candidate.command, version };
}

export function isBasePython(p: BasePython | Rejected): p is BasePython {
  return 'version' in p;
}

/** The first candidate that is Python 3.10+ and can create a venv; and why the ones before it were not. */
export async function findBasePython(
  run: Runner,
  candidates: readonly Candidate[],
  env: NodeJS.ProcessEnv,
): Promise<{ found?: BasePython; rejected: Rejected[] }> {
  const rejected: Rejected[] = [];
  for (const c of candidates) {
    const p = await probeInterpreter(run, c, env);
    if (isBasePython(p)) {
      return { found: p, rejected };
    }
    rejected.push(p);
  }
  return { rejected };
}

// ---- the decision ---------------------------------------------------------------------------------------------

/** `crane-env.json`: what the environment was built from. */
export interface Marker {
  schema: 1;
  wheel: string;
  wheelSha256: string;
  basePython: string;
  pythonVersion: string;
  created: string;
}

export interface Bundled {
  /** The wheel the extension carries. */
  wheel: string;
  sha256: string;
}

export interface EnvState {
  exists: boolean;
  marker?: Marker;
  /** Whether the environment's Python runs and imports CRANE (checked when the marker matches). */
  health?: { ok: boolean; detail: string };
}

export type Decision =
  | { action: 'reuse' }
  | { action: 'create' | 'upgrade' | 'rebuild'; reason: string };

export function decideEnvironment(state: EnvState, bundled: Bundled): Decision {
  if (!state.exists) {
    return { action: 'create', reason: 'no server environment yet' };
  }
  if (!state.marker) {
    return { action: 'rebuild', reason: `the environment has no readable ${MARKER}` };
  }
  if (state.marker.wheelSha256 !== bundled.sha256) {
    return {
      action: 'upgrade',
      reason: `built from ${state.marker.wheel} (sha256 ${state.marker.wheelSha256.slice(0, 12)}), the extension carries ${bundled.wheel} (sha256 ${bundled.sha256.slice(0, 12)})`,
    };
  }
  if (!state.health?.ok) {
    return { action: 'rebuild', reason: `the environment is broken: ${state.health?.detail ?? 'not checked'}` };
  }
  return { action: 'reuse' };
}

// ---- the environment ------------------------------------------------------------------------------------------

export function envPython(dir: string, platform: NodeJS.Platform = process.platform): string {
  return platform === 'win32' ? path.join(dir, 'Scripts', 'python.exe') : path.join(dir, 'bin', 'python');
}

export function sha256File(file: string): string {
  return createHash('sha256').update(fs.readFileSync(file)).digest('hex');
}

/** The crane-notebook wheel in `dir` (the vsix's `python/` folder), if there is exactly one. */
export function findBundledWheel(dir: string): string | undefined {
  let names: string[];
  try {
    names = fs.readdirSync(dir).filter((f) => /^crane_notebook-.+\.whl$/.test(f));
  } catch {
    return undefined;
  }
  return names.length === 1 ? path.join(dir, names[0]) : undefined;
}

export function readMarker(dir: string): Marker | undefined {
  try {
    const m = JSON.parse(fs.readFileSync(path.join(dir, MARKER), 'utf8')) as Marker;
    return m?.schema === 1 && typeof m.wheelSha256 === 'string' ? m : undefined;
  } catch {
    return undefined;
  }
}

const HEALTH =
  'import sys\n' +
  'try:\n' +
  '    import crane\n' +
  'except Exception as e:\n' +
  '    print("NOCRANE " + type(e).__name__ + ": " + str(e)); sys.exit(4)\n' +
  'print("OK " + sys.version.split()[0])\n';

export type FailureKind = 'no-wheel' | 'no-python' | 'network' | 'no-distribution' | 'install-failed' | 'busy';

export type EnsureResult =
  | { ok: true; python: string; action: Decision['action']; version?: string }
  | { ok: false; kind: FailureKind; message: string; detail?: string };

export interface EnsureHooks {
  /** The interpreters to build from, in order (only asked when a build is needed). */
  candidates(): Promise<Candidate[]>;
  /** A build starts: `work` runs it, reporting steps through `report`. Wraps it in a progress UI. */
  withProgress<T>(title: string, work: (report: (message: string) => void) => Promise<T>): Promise<T>;
  log(message: string): void;
}

export interface ServerEnvironmentOptions {
  storageDir: string;
  wheel: string | undefined;
  run?: Runner;
  env?: NodeJS.ProcessEnv;
  platform?: NodeJS.Platform;
  pipTimeoutMs?: number;
  /** How long to wait for another window's build (its lock) before giving up. */
  lockWaitMs?: number;
  /** A lock older than this is a crashed build's and is taken over. */
  staleLockMs?: number;
}

/** pip's lines that name a network failure (the cause, not pip's conclusion that nothing was found). */
const NETWORK_CAUSE =
  /NewConnectionError|Failed to establish a new connection|Connection refused|Temporary failure in name resolution|Name or service not known|getaddrinfo failed|nodename nor servname|ConnectTimeout|Read timed out|Max retries exceeded|ProxyError|SSLError|CERTIFICATE_VERIFY_FAILED|Network is unreachable|No route to host|connection broken/i;
/** pip found no distribution of a requirement (for this Python and platform, or at all). */
const NO_DISTRIBUTION = /No matching distribution found for (\S+)|Could not find a version that satisfies the requirement (\S+)/;

/** pip's reason, without its noise: the last lines starting with ERROR, else the last line. */
function pipReason(out: string): string {
  const lines = out.split(/\r?\n/).map((l) => l.trim()).filter(Boolean);
  const errors = lines.filter((l) => /^ERROR:/.test(l));
  return (errors.length ? errors.slice(-2).join(' ') : lines.slice(-1)[0] ?? '').slice(0, 500);
}

/** The network cause in pip's output ("Failed to establish a new connection: [Errno -3] Temporary failure in
 * name resolution"), shortened, or undefined when pip's output names none. */
export function networkCause(out: string): string | undefined {
  const line = out.split(/\r?\n/).find((l) => NETWORK_CAUSE.test(l));
  if (!line) {
    return undefined;
  }
  const inner = /(?:NewConnectionError|ConnectTimeoutError|ProxyError|SSLError)\('?(?:<[^>]*>:\s*)?([^'"]+)/.exec(line);
  return (inner ? inner[1] : line.replace(/^WARNING:\s*/, '')).trim().slice(0, 300);
}

/** Why pip failed, told apart: the network (with its cause), a requirement with no distribution for this
 * Python (the index answered), or anything else. */
export function classifyPipFailure(
  out: string,
  timedOut: boolean,
): { kind: 'network'; cause: string } | { kind: 'no-distribution'; requirement: string } | { kind: 'other' } {
  const cause = networkCause(out);
  if (cause || timedOut) {
    return { kind: 'network', cause: cause ?? 'pip did not finish in time' };
  }
  const m = NO_DISTRIBUTION.exec(out);
  if (m) {
    return { kind: 'no-distribution', requirement: m[1] ?? m[2] };
  }
  return { kind: 'other' };
}

/** The longest progress message: the notification shows its title and the message on one line. */
const PROGRESS_MAX = 32;

/** One line of pip's output as a short progress message ("downloading pyzmq"), or undefined for the rest. */
export function pipProgress(line: string): string | undefined {
  const m = /^(Collecting|Downloading|Installing collected packages:|Successfully installed)\s*(.*)$/.exec(line);
  if (!m) {
    return undefined;
  }
  let text: string;
  if (m[1] === 'Installing collected packages:') {
    const n = m[2].split(',').filter((p) => p.trim()).length;
    text = `installing ${n} package${n === 1 ? '' : 's'}`;
  } else if (m[1] === 'Successfully installed') {
    text = 'installed';
  } else {
    const file = m[2].replace(/\s*\(.*\)$/, '').replace(/^https?:\/\/\S*\//, '').trim();
    // a requirement ("pygls<2.2,>=2.1") or a file ("pyzmq-27.3.0-cp311-...whl"): its name alone
    const name = /^[A-Za-z0-9][A-Za-z0-9_.-]*?(?=-\d|[<>=!~[;\s(]|$)/.exec(file)?.[0] ?? file;
    text = `${m[1].toLowerCase()} ${name}`;
  }
  return text.length > PROGRESS_MAX ? `${text.slice(0, PROGRESS_MAX - 1)}…` : text;
}

export class ServerEnvironment {
  readonly dir: string;
  private readonly run: Runner;
  private readonly env: NodeJS.ProcessEnv;
  private readonly platform: NodeJS.Platform;

  constructor(private readonly o: ServerEnvironmentOptions) {
    this.dir = path.join(o.storageDir, ENV_DIR);
    this.run = o.run ?? execRunner;
    this.env = pythonEnvironment(o.env ?? process.env);
    this.platform = o.platform ?? process.platform;
  }

  get python(): string {
    return envPython(this.dir, this.platform);
  }

  /** The environment as it is now, and what to do with it. */
  async inspect(bundled: Bundled): Promise<{ state: EnvState; decision: Decision }> {
    const state: EnvState = { exists: fs.existsSync(this.dir) };
    if (state.exists) {
      state.marker = readMarker(this.dir);
      if (state.marker?.wheelSha256 === bundled.sha256) {
        state.health = await this.health(this.python);
      }
    }
    return { state, decision: decideEnvironment(state, bundled) };
  }

  /** Reuses the environment when it is current and sound; otherwise builds it (under the lock). */
  async ensure(hooks: EnsureHooks): Promise<EnsureResult> {
    if (!this.o.wheel || !fs.existsSync(this.o.wheel)) {
      return {
        ok: false,
        kind: 'no-wheel',
        message:
          'CRANE: this build of the extension carries no crane-notebook wheel (python/*.whl), so it cannot set up ' +
          'its server environment. Install a vsix built with "make vsix", or set "crane.python" to an interpreter ' +
          'that has crane-notebook installed.',
      };
    }
    const bundled: Bundled = { wheel: path.basename(this.o.wheel), sha256: sha256File(this.o.wheel) };
    const quick = await this.inspect(bundled);
    if (quick.decision.action === 'reuse') {
      hooks.log(`reusing the server environment ${this.dir} (${bundled.wheel}, sha256 ${bundled.sha256.slice(0, 12)})`);
      return { ok: true, python: this.python, action: 'reuse', version: quick.state.health?.detail };
    }
    fs.mkdirSync(this.o.storageDir, { recursive: true });
    const release = await this.lock(hooks);
    if (!release) {
      return {
        ok: false,
        kind: 'busy',
        message: 'CRANE: another VS Code window has been setting up the server environment for too long. Run "CRANE: Restart server" to try again.',
      };
    }
    try {
      this.removeLeftovers(hooks);
      // another window may have built it while this one waited for the lock
      const { state, decision } = await this.inspect(bundled);
      if (decision.action === 'reuse') {
        hooks.log(`reusing the server environment ${this.dir} (built meanwhile by another window)`);
        return { ok: true, python: this.python, action: 'reuse', version: state.health?.detail };
      }
      hooks.log(`server environment: ${decision.action} (${decision.reason})`);
      // the expected duration stays in the title: the messages below it change every second
      const title = decision.action === 'upgrade' ? 'CRANE: updating (a minute or a few)' : 'CRANE: first-use setup (a minute or a few)';
      return await hooks.withProgress(title, (report) => this.build(bundled, decision, hooks, report));
    } finally {
      release();
    }
  }

  private async health(python: string): Promise<{ ok: boolean; detail: string }> {
    const r = await this.run(python, ['-c', HEALTH], { timeoutMs: 60_000, env: this.env });
    const out = r.stdout.trim().split('\n').pop() ?? '';
    if (r.code === 0 && out.startsWith('OK ')) {
      return { ok: true, detail: out.slice(3) };
    }
    if (r.error === 'ENOENT' || r.error === 'EACCES') {
      return { ok: false, detail: `${python} is missing (${r.error})` };
    }
    return { ok: false, detail: (out.startsWith('NOCRANE ') ? out.slice(8) : r.error ?? (r.stderr.trim() || `exit ${r.code}`)).slice(0, 300) };
  }

  private async build(
    bundled: Bundled,
    decision: Exclude<Decision, { action: 'reuse' }>,
    hooks: EnsureHooks,
    report: (message: string) => void,
  ): Promise<EnsureResult> {
    report('looking for Python 3.10+');
    const candidates = await hooks.candidates();
    const { found, rejected } = await findBasePython(this.run, candidates, this.env);
    for (const r of rejected) {
      hooks.log(`not building from ${[r.candidate.command, ...r.candidate.args].join(' ')} (${r.candidate.source}): ${r.why}`);
    }
    if (!found) {
      const tried = rejected.map((r) => `${[r.candidate.command, ...r.candidate.args].join(' ')}: ${r.why}`).join('; ');
      return {
        ok: false,
        kind: 'no-python',
        message:
          'CRANE needs Python 3.10 or newer to run its server, and found none' +
          (tried ? ` (${tried})` : '') +
          '. Install Python 3.10+ (python.org, your package manager, or conda), or select one with "Python: Select ' +
          'Interpreter", or set "crane.python" to an interpreter that has crane-notebook installed; then run "CRANE: Restart server".',
      };
    }
    hooks.log(`building the server environment from ${found.executable} (Python ${found.version}, ${found.candidate.source})`);
    const partial = path.join(this.o.storageDir, `${ENV_DIR}.partial-${randomBytes(4).toString('hex')}`);
    try {
      report(`creating a venv (Python ${found.version})`);
      const venv = await this.run(found.candidate.command, [...found.candidate.args, '-m', 'venv', partial], {
        timeoutMs: 5 * 60_000,
        env: this.env,
      });
      if (venv.code !== 0) {
        return this.failed('install-failed', `could not create a virtual environment with ${found.executable}`, venv);
      }
      const python = envPython(partial, this.platform);
      report('installing CRANE');
      hooks.log(`installing ${bundled.wheel} into ${partial} (pip, dependencies from the package index)`);
      const pip = await this.run(python, ['-m', 'pip', 'install', '--progress-bar', 'off', this.o.wheel!], {
        timeoutMs: this.o.pipTimeoutMs ?? 20 * 60_000,
        env: this.env,
        onLine: (line) => {
          const msg = pipProgress(line);
          if (msg) {
            report(msg);
          }
        },
      });
      if (pip.code !== 0) {
        const out = `${pip.stdout}\n${pip.stderr}`;
        let why = classifyPipFailure(out, pip.error === 'TIMEOUT');
        if (why.kind === 'no-distribution' && /from versions: none/.test(out)) {
          // pip says the same when the index cannot be reached (it logs why only at -vv): ask once more, verbosely
          const probe = await this.run(
            python,
            ['-m', 'pip', 'download', '--no-deps', '--progress-bar', 'off', '-vv', '-d', path.join(partial, 'probe'), why.requirement],
            { timeoutMs: 2 * 60_000, env: this.env },
          );
          const again = classifyPipFailure(`${probe.stdout}\n${probe.stderr}`, probe.error === 'TIMEOUT');
          if (again.kind === 'network') {
            why = again;
          }
        }
        if (why.kind === 'network') {
          return this.failed(
            'network',
            'could not download its dependencies from the package index. Check the network connection and run "CRANE: Restart server"; ' +
              "behind a proxy or a private index, set pip's settings (pip.conf, or PIP_INDEX_URL / HTTPS_PROXY in the environment VS Code starts with); " +
              'or set "crane.python" to an interpreter that has crane-notebook installed',
            pip,
            `${why.cause}${pipReason(out) ? ` (pip: ${pipReason(out)})` : ''}`,
          );
        }
        if (why.kind === 'no-distribution') {
          return this.failed(
            'no-distribution',
            `could not install its dependencies: the package index has no version of ${why.requirement} for Python ` +
              `${found.version} on ${this.platform} (the index was reachable). Select another Python 3.10+ with "Python: Select Interpreter" ` +
              '(CRANE builds from it) or set "crane.python" to an interpreter that has crane-notebook installed; then run "CRANE: Restart server"',
            pip,
          );
        }
        return this.failed('install-failed', `pip could not install ${bundled.wheel}`, pip);
      }
      report('checking the environment');
      const health = await this.health(python);
      if (!health.ok) {
        return { ok: false, kind: 'install-failed', message: `CRANE: the new server environment does not import crane (${health.detail}). See "CRANE: Show log".` };
      }
      const marker: Marker = {
        schema: 1,
        wheel: bundled.wheel,
        wheelSha256: bundled.sha256,
        basePython: found.executable,
        pythonVersion: health.detail,
        created: new Date().toISOString(),
      };
      fs.writeFileSync(path.join(partial, MARKER), JSON.stringify(marker, null, 2));
      this.swapIn(partial);
      hooks.log(`server environment ready: ${this.dir} (${decision.action}, Python ${health.detail})`);
      return { ok: true, python: this.python, action: decision.action, version: health.detail };
    } finally {
      fs.rmSync(partial, { recursive: true, force: true });
    }
  }

  /** Puts the finished `partial` in place of the environment: renames only, the old one removed after. */
  private swapIn(partial: string): void {
    let old: string | undefined;
    if (fs.existsSync(this.dir)) {
      old = path.join(this.o.storageDir, `${ENV_DIR}.old-${randomBytes(4).toString('hex')}`);
      try {
        fs.renameSync(this.dir, old);
      } catch (err) {
        // Windows: a server of another window still runs from it
        throw new Error(
          `the old environment ${this.dir} is in use (${(err as NodeJS.ErrnoException).code ?? err}); ` +
            'reload the other VS Code windows, then run "CRANE: Restart server"',
        );
      }
    }
    fs.renameSync(partial, this.dir);
    if (old) {
      fs.rmSync(old, { recursive: true, force: true });
    }
  }

  private failed(kind: FailureKind, what: string, r: RunResult, cause?: string): EnsureResult {
    const detail = cause || pipReason(`${r.stdout}\n${r.stderr}`) || r.error || `exit ${r.code}`;
    return { ok: false, kind, message: `CRANE ${what}. Details: ${detail}`, detail: `${r.stdout}\n${r.stderr}`.trim() };
  }

  /** Partial and replaced environments of an earlier, interrupted run (the lock is held). */
  private removeLeftovers(hooks: EnsureHooks): void {
    for (const name of fs.readdirSync(this.o.storageDir)) {
      if (name.startsWith(`${ENV_DIR}.partial-`) || name.startsWith(`${ENV_DIR}.old-`)) {
        hooks.log(`removing ${name}, left by an interrupted build`);
        fs.rmSync(path.join(this.o.storageDir, name), { recursive: true, force: true });
      }
    }
  }

  /** Takes `server-env.lock` (mkdir is atomic); waits for another holder; takes over a stale lock. */
  private async lock(hooks: EnsureHooks): Promise<(() => void) | undefined> {
    const lockDir = path.join(this.o.storageDir, `${ENV_DIR}.lock`);
    const deadline = Date.now() + (this.o.lockWaitMs ?? 30 * 60_000);
    const stale = this.o.staleLockMs ?? 30 * 60_000;
    let told = false;
    for (;;) {
      try {
        fs.mkdirSync(lockDir);
        fs.writeFileSync(path.join(lockDir, 'pid'), String(process.pid));
        return () => fs.rmSync(lockDir, { recursive: true, force: true });
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') {
          throw err;
        }
      }
      if (this.lockIsStale(lockDir, stale)) {
        hooks.log(`taking over ${lockDir} (its build is gone)`);
        fs.rmSync(lockDir, { recursive: true, force: true });
        continue;
      }
      if (!told) {
        hooks.log('another window is setting up the server environment: waiting for it');
        told = true;
      }
      if (Date.now() > deadline) {
        return undefined;
      }
      await new Promise((r) => setTimeout(r, 1000));
    }
  }

  private lockIsStale(lockDir: string, staleMs: number): boolean {
    let pid = NaN;
    try {
      pid = Number(fs.readFileSync(path.join(lockDir, 'pid'), 'utf8'));
    } catch {
      // no pid file: being created, or its holder died right after mkdir (then its age decides)
    }
    if (pid > 0) {
      try {
        process.kill(pid, 0);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ESRCH') {
          return true; // its process is gone
        }
      }
    }
    try {
      return Date.now() - fs.statSync(lockDir).mtimeMs > staleMs;
    } catch {
      return false; // the lock just went away: try to take it again
    }
  }
}
