import { beforeEach, describe, expect, it, vi } from 'vitest';
import { mock, Uri } from '../vscode.mock';
import {
  BridgeDeps,
  CONNECTION_FILE_PROBE,
  DECLINED_NOTE,
  getJupyterKernelsApi,
  JupyterKernel,
  KernelBridge,
  NO_JUPYTER_NOTE,
  parseConnectionFile,
} from '../../src/common/kernelBridge';

const NB = Uri.parse('file:///tmp/x/nb.ipynb');
const enc = new TextEncoder();

function kernelPrinting(text: string): JupyterKernel & { calls: string[] } {
  const calls: string[] = [];
  return {
    status: 'idle',
    language: 'python',
    calls,
    async *executeCode(code: string) {
      calls.push(code);
      yield { items: [{ mime: 'application/vnd.code.notebook.stdout', data: enc.encode(text) }] };
    },
  };
}

function kernelThrowing(err: Error): JupyterKernel {
  return {
    status: 'idle',
    language: 'python',
    // eslint-disable-next-line require-yield
    async *executeCode() {
      throw err;
    },
  };
}

function deps(kernel: JupyterKernel | undefined, api = true): BridgeDeps & { notes: Array<[string, string | undefined]> } {
  const notes: Array<[string, string | undefined]> = [];
  return {
    notes,
    getKernelsApi: vi.fn(async () => (api ? { getKernel: vi.fn(async () => kernel) } : undefined)),
    attach: vi.fn(async (p) => ({ attached: true, message: 'ok', kernel: { connectionFile: p.connectionFile, source: 'request' as const, notebookPath: null, pid: null } })),
    note: (uri, note) => notes.push([uri, note]),
    log: () => undefined,
    timeoutMs: 200,
  };
}

describe('kernel bridge', () => {
  beforeEach(() => mock.reset());

  it('asks the kernel once and sends crane/attachKernel with the connection file', async () => {
    const k = kernelPrinting('/run/user/1000/jupyter/runtime/kernel-v3abc.json\n');
    const d = deps(k);
    const bridge = new KernelBridge(d);
    const first = await bridge.connect(NB);
    expect(first).toMatchObject({ kind: 'attached', connectionFile: '/run/user/1000/jupyter/runtime/kernel-v3abc.json' });
    expect(d.attach).toHaveBeenCalledWith({
      notebookUri: 'file:///tmp/x/nb.ipynb',
      connectionFile: '/run/user/1000/jupyter/runtime/kernel-v3abc.json',
    });
    expect(k.calls).toEqual([CONNECTION_FILE_PROBE]);
    await bridge.connect(NB);
    expect(k.calls.length).toBe(1); // same kernel: not asked again
    expect(d.attach).toHaveBeenCalledTimes(2);
    expect(bridge.connectionFileOf(NB)).toContain('kernel-v3abc.json');
    expect(d.notes.at(-1)).toEqual(['file:///tmp/x/nb.ipynb', undefined]);
  });

  it('falls back to discovery when access is declined, says so and never prompts again', async () => {
    const d = deps(kernelThrowing(new Error('Access to the kernel was denied by the user')));
    const bridge = new KernelBridge(d);
    expect(await bridge.connect(NB)).toMatchObject({ kind: 'declined' });
    expect(d.attach).not.toHaveBeenCalled();
    expect(d.notes.at(-1)).toEqual(['file:///tmp/x/nb.ipynb', DECLINED_NOTE]);
    const again = await bridge.connect(Uri.parse('file:///tmp/x/other.ipynb'));
    expect(again).toMatchObject({ kind: 'declined' });
    expect(d.notes.at(-1)?.[1]).toBe(DECLINED_NOTE);
  });

  it('falls back when the Jupyter extension is missing', async () => {
    const d = deps(undefined, false);
    expect(await new KernelBridge(d).connect(NB)).toEqual({ kind: 'no-extension' });
    expect(d.notes.at(-1)?.[1]).toBe(NO_JUPYTER_NOTE);
  });

  it('does nothing until the user has started a kernel', async () => {
    const d = deps(undefined);
    expect(await new KernelBridge(d).connect(NB)).toEqual({ kind: 'no-kernel' });
    expect(d.attach).not.toHaveBeenCalled();
  });

  it('treats a kernel error as a failure, not as a declined prompt', async () => {
    const k: JupyterKernel = {
      status: 'idle',
      language: 'python',
      async *executeCode() {
        yield { items: [{ mime: 'application/vnd.code.notebook.error', data: enc.encode('{"name":"ModuleNotFoundError","message":"permission"}') }] };
      },
    };
    const d = deps(k);
    const bridge = new KernelBridge(d);
    expect(await bridge.connect(NB)).toMatchObject({ kind: 'failed' });
    expect(d.notes.at(-1)?.[1]).toMatch(/own discovery/);
  });

  it('times out when the kernel is busy', async () => {
    const k: JupyterKernel = {
      status: 'busy',
      language: 'python',
      async *executeCode() {
        await new Promise(() => undefined);
      },
    };
    const d = deps(k);
    expect(await new KernelBridge(d).connect(NB)).toMatchObject({ kind: 'failed', message: expect.stringMatching(/timed out/) });
  });

  it('reports a server that cannot attach', async () => {
    const d = deps(kernelPrinting('/k.json'));
    d.attach = vi.fn(async () => ({ attached: false, message: 'connection refused', kernel: null }));
    expect(await new KernelBridge(d).connect(NB)).toMatchObject({ kind: 'not-attached' });
    expect(d.notes.at(-1)?.[1]).toContain('connection refused');
  });

  it('re-attaches known kernels after a server restart without asking them again', async () => {
    const k = kernelPrinting('/k.json');
    const d = deps(k);
    const bridge = new KernelBridge(d);
    await bridge.connect(NB);
    await bridge.reattachAll();
    expect(d.attach).toHaveBeenCalledTimes(2);
    expect(k.calls.length).toBe(1);
    bridge.forget(NB);
    await bridge.reattachAll();
    expect(d.attach).toHaveBeenCalledTimes(2);
  });

  it('shares one probe between concurrent requests', async () => {
    const k = kernelPrinting('/k.json');
    const bridge = new KernelBridge(deps(k));
    await Promise.all([bridge.connect(NB), bridge.connect(NB)]);
    expect(k.calls.length).toBe(1);
  });

  it('parses the probe output', () => {
    expect(parseConnectionFile('warning\n/a/kernel-1.json\n')).toBe('/a/kernel-1.json');
    expect(parseConnectionFile('nothing')).toBeUndefined();
  });

  it('finds the kernels API of ms-toolsai.jupyter', async () => {
    expect(await getJupyterKernelsApi()).toBeUndefined();
    const kernels = { getKernel: vi.fn() };
    mock.extensions['ms-toolsai.jupyter'] = { isActive: true, exports: { kernels } };
    expect(await getJupyterKernelsApi()).toBe(kernels);
  });
});
