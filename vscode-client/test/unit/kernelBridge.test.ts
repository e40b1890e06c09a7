/**
 * The kernel bridge against a scripted stand-in for the Jupyter extension's kernels API (the real one needs
 * VS Code; e2e/jupyter*.e2e.test.mjs drives the real extension). Each of the seven defects of issue 12 the
 * bridge's side fixes has its own test here.
 */
import { beforeEach, describe, expect, it, vi } from 'vitest';
import {
  BridgeDeps,
  bridgeTiming,
  DECLINED_NOTE,
  KernelBridge,
  kernelIdFromConnectionFile,
  languageNote,
  NO_JUPYTER_NOTE,
  RESTARTING_NOTE,
  remoteKernelFor,
  WAITING_NOTE,
} from '../../src/common/kernelBridge';
import {
  ACCESS_REVOKED_ERROR,
  askConnectionFile,
  CONNECTION_FILE_PROBE,
  getJupyterKernelsApi,
  isAccessRevoked,
  JupyterKernel,
  JupyterKernelStatus,
  jupyterStorageDir,
  parseConnectionFile,
  ProbeError,
} from '../../src/common/jupyterApi';
import type { BridgeNote } from '../../src/common/statusModel';
import { EventEmitter, mock, Uri } from '../vscode.mock';

const NB = Uri.parse('file:///work/nb.ipynb');
const NB2 = Uri.parse('file:///work/other.ipynb');
const K1 = '/run/jupyter/runtime/kernel-v3aaa.json';
const K2 = '/run/jupyter/runtime/kernel-v3bbb.json';
const enc = new TextEncoder();

/** What the kernel does with the next executeCode: print a file, throw, or wait for `release` first. */
type Script = { file: string; release?: Promise<void> } | { error: Error } | { errorOutput: string };

function revoked(): Error {
  const err = new Error('Access to Jupyter Kernel has been revoked');
  err.name = ACCESS_REVOKED_ERROR;
  return err;
}

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

/** The Jupyter extension's `Kernel` for one notebook, as a script. */
class FakeKernel implements JupyterKernel {
  status: JupyterKernelStatus = 'idle';
  private readonly emitter = new EventEmitter<JupyterKernelStatus>();
  readonly onDidChangeStatus = this.emitter.event;
  readonly calls: Array<{ code: string; token: { isCancellationRequested: boolean } }> = [];
  constructor(
    private readonly script: Script[],
    readonly language = 'python',
  ) {}

  async *executeCode(code: string, token: { isCancellationRequested: boolean }) {
    this.calls.push({ code, token });
    const step = this.script.shift();
    if (!step) {
      throw new Error('executeCode called more often than the test expected');
    }
    if ('error' in step) {
      throw step.error;
    }
    if ('errorOutput' in step) {
      yield { items: [{ mime: 'application/vnd.code.notebook.error', data: enc.encode(step.errorOutput) }] };
      return;
    }
    await step.release;
    yield { items: [{ mime: 'application/vnd.code.notebook.stdout', data: enc.encode(`${step.file}\n`) }] };
  }

  setStatus(status: JupyterKernelStatus): void {
    this.status = status;
    this.emitter.fire(status);
  }
}

interface TestDeps extends BridgeDeps {
  notes: Array<[string, BridgeNote | undefined]>;
  files: Set<string>;
  clock: { t: number };
  kernels: Map<string, FakeKernel | undefined>;
}

function deps(kernel: FakeKernel | undefined, opts: { api?: boolean } = {}): TestDeps {
  const notes: Array<[string, BridgeNote | undefined]> = [];
  const files = new Set([K1, K2]);
  const clock = { t: 1_000_000 };
  const kernels = new Map<string, FakeKernel | undefined>([[NB.toString(), kernel]]);
  return {
    notes,
    files,
    clock,
    kernels,
    getKernelsApi: vi.fn(async () =>
      opts.api === false ? undefined : { getKernel: vi.fn(async (uri: { toString(): string }) => kernels.get(uri.toString())) },
    ),
    attach: vi.fn(async (p) => ({
      attached: true,
      message: 'ok',
      kernel: {
        connectionFile: p.connectionFile ?? null, source: 'jupyter-extension' as const, notebookPath: null, pid: null,
        serverUrl: null, kernelId: null, description: p.connectionFile ?? '',
      },
    })),
    note: (uri, note) => notes.push([uri, note]),
    log: () => undefined,
    fileExists: (p) => files.has(p),
    now: () => clock.t,
    waitMs: 50,
    retryMs: 2000,
  };
}

const lastNote = (d: TestDeps, uri = NB) => [...d.notes].reverse().find(([u]) => u === uri.toString())?.[1];
const attachedFiles = (d: TestDeps) => (d.attach as ReturnType<typeof vi.fn>).mock.calls.map((c) => c[0].connectionFile);

describe('kernel bridge', () => {
  beforeEach(() => mock.reset());

  it('asks the kernel for its connection file and attaches it as learned through the Jupyter extension', async () => {
    const k = new FakeKernel([{ file: K1 }]);
    const d = deps(k);
    const bridge = new KernelBridge(d);
    expect(await bridge.connect(NB, 'cellRun')).toMatchObject({ kind: 'attached', connectionFile: K1 });
    expect(d.attach).toHaveBeenCalledWith({ notebookUri: NB.toString(), connectionFile: K1, source: 'jupyter-extension' });
    expect(k.calls.map((c) => c.code)).toEqual([CONNECTION_FILE_PROBE]);
    expect(bridge.connectionFileOf(NB)).toBe(K1);
    expect(lastNote(d)).toBeUndefined();
  });

  // defect 2
  it('does nothing on later cell runs while the same live file is attached (no re-attach, no question)', async () => {
    const k = new FakeKernel([{ file: K1 }]);
    const d = deps(k);
    const bridge = new KernelBridge(d);
    await bridge.connect(NB, 'cellRun');
    for (let i = 0; i < 5; i++) {
      expect(await bridge.connect(NB, 'cellRun')).toEqual({ kind: 'unchanged', connectionFile: K1 });
      k.setStatus('busy'); // the user's cells (and the extension's own requests) go busy and idle
      k.setStatus('idle');
    }
    expect(d.attach).toHaveBeenCalledTimes(1);
    expect(k.calls).toHaveLength(1);
  });

  // defect 1
  it('after a restart (same kernel object, new process) asks again and attaches the new file, never the deleted one', async () => {
    const k = new FakeKernel([{ file: K1 }, { file: K2 }]);
    const d = deps(k);
    const bridge = new KernelBridge(d);
    await bridge.connect(NB, 'cellRun');
    k.setStatus('restarting');
    d.files.delete(K1); // the Jupyter extension deletes the old process's connection file
    expect(lastNote(d)).toEqual({ kind: 'restarting', text: RESTARTING_NOTE });
    expect(bridge.connectionFileOf(NB)).toBeUndefined();
    k.setStatus('idle'); // the new process is up: the bridge asks it on its own
    await vi.waitFor(() => expect(attachedFiles(d)).toEqual([K1, K2]));
    expect(k.calls).toHaveLength(2);
    expect(lastNote(d)).toBeUndefined();
    expect(await bridge.connect(NB, 'cellRun')).toEqual({ kind: 'unchanged', connectionFile: K2 });
  });

  // defect 1, without a status event
  it('asks again when the known connection file is gone', async () => {
    const k = new FakeKernel([{ file: K1 }, { file: K2 }]);
    const d = deps(k);
    const bridge = new KernelBridge(d);
    await bridge.connect(NB, 'cellRun');
    d.files.delete(K1);
    expect(await bridge.connect(NB, 'cellRun')).toMatchObject({ kind: 'attached', connectionFile: K2 });
    expect(attachedFiles(d)).toEqual([K1, K2]);
  });

  it('drops an answer about the process that was restarted while it was asked, and asks the new one', async () => {
    const gate = deferred();
    const k = new FakeKernel([{ file: K1, release: gate.promise }, { file: K2 }]);
    const d = deps(k);
    d.waitMs = 10_000;
    const bridge = new KernelBridge(d);
    const pending = bridge.connect(NB, 'cellRun');
    await vi.waitFor(() => expect(k.calls).toHaveLength(1));
    k.setStatus('restarting');
    gate.resolve(); // the old process answers late
    expect(await pending).toMatchObject({ kind: 'attached', connectionFile: K2 });
    expect(attachedFiles(d)).toEqual([K2]);
  });

  // defect 4
  it('recognises a refusal by the error name, not by the message', async () => {
    const looksLikeIt = new Error('permission denied: access not allowed'); // a plain failure, whatever it says
    const d = deps(new FakeKernel([{ error: looksLikeIt }]));
    expect(await new KernelBridge(d).connect(NB, 'cellRun')).toMatchObject({ kind: 'failed' });
    expect(lastNote(d)?.text).toMatch(/Could not learn/);

    const d2 = deps(new FakeKernel([{ error: revoked() }]));
    expect(await new KernelBridge(d2).connect(NB, 'cellRun')).toMatchObject({ kind: 'declined' });
    expect(lastNote(d2)).toEqual({ kind: 'fallback', text: DECLINED_NOTE });
    expect(d2.attach).not.toHaveBeenCalled();
  });

  // defect 4
  it('after a refusal asks again only on a user action, and attaches once access is granted', async () => {
    const k = new FakeKernel([{ error: revoked() }, { error: revoked() }, { file: K1 }]);
    const d = deps(k);
    const bridge = new KernelBridge(d);
    expect(await bridge.connect(NB, 'cellRun')).toMatchObject({ kind: 'declined' });
    // not on its own: a server restart, a status change, nor a user action right away (no prompt storm)
    expect(await bridge.connect(NB, 'serverStarted')).toMatchObject({ kind: 'declined' });
    k.setStatus('busy');
    k.setStatus('idle');
    expect(await bridge.connect(NB, 'cellRun')).toMatchObject({ kind: 'declined' });
    expect(k.calls).toHaveLength(1);
    // a later user action asks again: still refused
    d.clock.t += 2500;
    expect(await bridge.connect(NB, 'selection')).toMatchObject({ kind: 'declined' });
    expect(k.calls).toHaveLength(2);
    // the user granted access ("Jupyter: Manage Access To Jupyter Kernels"); the next action attaches
    d.clock.t += 2500;
    expect(await bridge.connect(NB, 'cellRun')).toMatchObject({ kind: 'attached', connectionFile: K1 });
    expect(lastNote(d)).toBeUndefined();
  });

  // defect 4: no session-wide memory
  it('a refusal for one kernel does not stop the bridge from asking another notebook\'s kernel', async () => {
    const k1 = new FakeKernel([{ error: revoked() }]);
    const k2 = new FakeKernel([{ file: K2 }]);
    const d = deps(k1);
    d.kernels.set(NB2.toString(), k2);
    const bridge = new KernelBridge(d);
    expect(await bridge.connect(NB, 'cellRun')).toMatchObject({ kind: 'declined' });
    expect(await bridge.connect(NB2, 'cellRun')).toMatchObject({ kind: 'attached', connectionFile: K2 });
  });

  it('follows the notebook to another kernel picked in the kernel picker', async () => {
    const k1 = new FakeKernel([{ file: K1 }]);
    const k2 = new FakeKernel([{ file: K2 }]);
    const d = deps(k1);
    const bridge = new KernelBridge(d);
    await bridge.connect(NB, 'cellRun');
    d.kernels.set(NB.toString(), k2);
    expect(await bridge.connect(NB, 'cellRun')).toMatchObject({ kind: 'attached', connectionFile: K2 });
    k1.setStatus('restarting'); // the old kernel no longer concerns this notebook
    expect(lastNote(d)).toBeUndefined();
    expect(bridge.connectionFileOf(NB)).toBe(K2);
  });

  it('a click in the notebook matters only after a refusal', async () => {
    const k = new FakeKernel([{ file: K1 }]);
    const d = deps(k);
    const bridge = new KernelBridge(d);
    expect(await bridge.connect(NB, 'selection')).toEqual({ kind: 'skipped' });
    expect(d.getKernelsApi).not.toHaveBeenCalled();
  });

  // defect 5
  it('stops waiting without cancelling, says so, and attaches when the answer comes', async () => {
    const gate = deferred(); // the consent prompt is open, or a long cell runs before the question
    const k = new FakeKernel([{ file: K1, release: gate.promise }]);
    const d = deps(k);
    const bridge = new KernelBridge(d);
    expect(await bridge.connect(NB, 'cellRun')).toEqual({ kind: 'waiting' });
    expect(lastNote(d)).toEqual({ kind: 'waiting', text: WAITING_NOTE });
    const token = k.calls[0].token;
    expect(token.isCancellationRequested).toBe(false);
    // asking again meanwhile shares the question
    expect(await bridge.connect(NB, 'cellRun')).toEqual({ kind: 'waiting' });
    expect(k.calls).toHaveLength(1);
    gate.resolve();
    await vi.waitFor(() => expect(attachedFiles(d)).toEqual([K1]));
    expect(token.isCancellationRequested).toBe(false); // never cancelled: that would interrupt the kernel
    await vi.waitFor(() => expect(lastNote(d)).toBeUndefined());
  });

  // defect 5: a refusal that comes after the bridge stopped waiting
  it('reports a refusal that comes after it stopped waiting', async () => {
    const gate = deferred();
    const k: FakeKernel = new FakeKernel([]);
    k.executeCode = async function* (code: string, token: { isCancellationRequested: boolean }) {
      k.calls.push({ code, token });
      await gate.promise; // the user looks at the prompt for a while, then denies
      throw revoked();
    } as FakeKernel['executeCode'];
    const d = deps(k);
    const bridge = new KernelBridge(d);
    expect(await bridge.connect(NB, 'cellRun')).toEqual({ kind: 'waiting' });
    gate.resolve();
    await vi.waitFor(() => expect(lastNote(d)).toEqual({ kind: 'fallback', text: DECLINED_NOTE }));
    expect(d.attach).not.toHaveBeenCalled();
  });

  // defect 6
  it('never asks a kernel that is not Python (no consent prompt, no failing probe)', async () => {
    const k = new FakeKernel([], 'R');
    const d = deps(k);
    expect(await new KernelBridge(d).connect(NB, 'cellRun')).toEqual({ kind: 'unsupported-language', language: 'R' });
    expect(k.calls).toHaveLength(0);
    expect(lastNote(d)).toEqual({ kind: 'info', text: languageNote('R') });
    expect(d.attach).not.toHaveBeenCalled();
  });

  it('falls back when the Jupyter extension is missing', async () => {
    const d = deps(undefined, { api: false });
    expect(await new KernelBridge(d).connect(NB)).toEqual({ kind: 'no-extension' });
    expect(lastNote(d)).toEqual({ kind: 'fallback', text: NO_JUPYTER_NOTE });
  });

  it('does nothing until the user has started a kernel', async () => {
    const d = deps(undefined);
    expect(await new KernelBridge(d).connect(NB)).toEqual({ kind: 'no-kernel' });
    expect(d.attach).not.toHaveBeenCalled();
  });

  it('treats a kernel error as a failure, retried on the next status change', async () => {
    const k = new FakeKernel([{ errorOutput: '{"name":"ModuleNotFoundError","message":"No module named ipykernel"}' }, { file: K1 }]);
    const d = deps(k);
    const bridge = new KernelBridge(d);
    expect(await bridge.connect(NB, 'cellRun')).toMatchObject({ kind: 'failed', message: expect.stringMatching(/ModuleNotFoundError/) });
    expect(lastNote(d)?.kind).toBe('fallback');
    k.setStatus('restarting');
    k.setStatus('idle');
    await vi.waitFor(() => expect(attachedFiles(d)).toEqual([K1]));
  });

  it('says so when the connection file is not on this machine (a remote kernel)', async () => {
    const d = deps(new FakeKernel([{ file: '/elsewhere/kernel-1.json' }]));
    expect(await new KernelBridge(d).connect(NB, 'cellRun')).toMatchObject({ kind: 'failed', message: expect.stringMatching(/not on this machine/) });
    expect(d.attach).not.toHaveBeenCalled();
  });

  it('reports a server that cannot attach', async () => {
    const d = deps(new FakeKernel([{ file: K1 }]));
    d.attach = vi.fn(async () => ({ attached: false, message: 'connection refused', kernel: null }));
    expect(await new KernelBridge(d).connect(NB, 'cellRun')).toMatchObject({ kind: 'not-attached' });
    expect(lastNote(d)?.text).toContain('connection refused');
  });

  it('re-attaches known kernels after a server restart without asking them again', async () => {
    const k = new FakeKernel([{ file: K1 }]);
    const d = deps(k);
    const bridge = new KernelBridge(d);
    await bridge.connect(NB, 'cellRun');
    await bridge.reattachAll();
    expect(attachedFiles(d)).toEqual([K1, K1]);
    expect(k.calls).toHaveLength(1);
    bridge.forget(NB);
    await bridge.reattachAll();
    expect(d.attach).toHaveBeenCalledTimes(2);
  });

  it('reads its timing from the environment (defaults otherwise)', () => {
    expect(bridgeTiming({ CRANE_BRIDGE_WAIT_MS: '2000', CRANE_BRIDGE_RETRY_MS: '0' })).toEqual({ waitMs: 2000, retryMs: 0 });
    expect(bridgeTiming({ CRANE_BRIDGE_WAIT_MS: 'soon' })).toEqual({ waitMs: undefined, retryMs: undefined });
  });

  it('shares one question between concurrent requests', async () => {
    const k = new FakeKernel([{ file: K1 }]);
    const bridge = new KernelBridge(deps(k));
    await Promise.all([bridge.connect(NB, 'opened'), bridge.connect(NB, 'cellRun')]);
    expect(k.calls).toHaveLength(1);
  });
});

describe("the Jupyter extension's API", () => {
  beforeEach(() => mock.reset());

  it('reads the connection file from the probe output; a kernel error is a ProbeError', async () => {
    expect(await askConnectionFile(new FakeKernel([{ file: K1 }]))).toBe(K1);
    await expect(askConnectionFile(new FakeKernel([{ errorOutput: 'boom' }]))).rejects.toBeInstanceOf(ProbeError);
    expect(parseConnectionFile('warning\n/a/kernel-1.json\n')).toBe('/a/kernel-1.json');
    expect(parseConnectionFile('nothing')).toBeUndefined();
  });

  it('knows a refusal by its error name only', () => {
    expect(isAccessRevoked(revoked())).toBe(true);
    expect(isAccessRevoked(new Error('access revoked'))).toBe(false);
    expect(isAccessRevoked('vscode.jupyter.apiAccessRevoked')).toBe(false);
  });

  it('finds the kernels API of ms-toolsai.jupyter', async () => {
    expect(await getJupyterKernelsApi()).toBeUndefined();
    const kernels = { getKernel: vi.fn() };
    mock.extensions['ms-toolsai.jupyter'] = { isActive: true, exports: { kernels } };
    expect(await getJupyterKernelsApi()).toBe(kernels);
  });

  it("locates the Jupyter extension's global storage beside CRANE's", () => {
    expect(jupyterStorageDir('/home/u/.config/Code/User/globalStorage/crane.crane')).toBe(
      '/home/u/.config/Code/User/globalStorage/ms-toolsai.jupyter',
    );
  });
});

describe('remote kernels', () => {
  const ID = '0b0c2d6e-1f2a-4b3c-9d8e-7f6a5b4c3d2e';
  const REMOTE_FILE = `/home/jovyan/.local/share/jupyter/runtime/kernel-${ID}.json`;
  const URL = 'https://hub.example.org/user/alice/';

  it('reads the kernel id from a jupyter_server connection file name', () => {
    expect(kernelIdFromConnectionFile(REMOTE_FILE)).toBe(ID);
    expect(kernelIdFromConnectionFile(`C:\\runtime\\kernel-${ID}.json`)).toBe(ID);
    expect(kernelIdFromConnectionFile('/run/kernel-v3abc.json')).toBeUndefined();
    expect(remoteKernelFor(REMOTE_FILE, URL, false)).toEqual({ serverUrl: URL, kernelId: ID });
    expect(remoteKernelFor(REMOTE_FILE, URL, true)).toBeUndefined(); // the file is here: a local kernel
    expect(remoteKernelFor(REMOTE_FILE, ' ', false)).toBeUndefined(); // no server configured
  });

  it('attaches a remote kernel through the configured server', async () => {
    const d = deps(new FakeKernel([{ file: REMOTE_FILE }]));
    d.jupyterServerUrl = () => URL;
    d.attach = vi.fn(async (p) => ({
      attached: true,
      message: 'ok',
      kernel: {
        connectionFile: null, source: 'jupyter-extension' as const, notebookPath: null, pid: 1,
        serverUrl: p.serverUrl ?? null, kernelId: p.kernelId ?? null, description: `remote kernel (${p.serverUrl})`,
      },
    }));
    const bridge = new KernelBridge(d);
    expect(await bridge.connect(NB)).toMatchObject({ kind: 'attached', remote: { serverUrl: URL, kernelId: ID } });
    const params = { notebookUri: NB.toString(), serverUrl: URL, kernelId: ID, source: 'jupyter-extension' };
    expect(d.attach).toHaveBeenCalledWith(params);
    await bridge.reattachAll();
    expect(d.attach).toHaveBeenLastCalledWith(params);
  });

  it('says how to reach a remote kernel when no server is configured', async () => {
    const d = deps(new FakeKernel([{ file: REMOTE_FILE }]));
    expect(await new KernelBridge(d).connect(NB)).toMatchObject({ kind: 'failed' });
    expect(d.attach).not.toHaveBeenCalled();
    expect(d.notes.at(-1)?.[1]?.text).toContain('set crane.jupyterServer.url');
  });
});
