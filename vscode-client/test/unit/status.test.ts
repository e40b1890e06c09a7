import { beforeEach, describe, expect, it } from 'vitest';
import { mock, Uri, window, workspace } from '../vscode.mock';
import { activeCell, currentNotebook, NotebookFocus } from '../../src/common/notebooks';
import { StatusBar } from '../../src/common/statusBar';
import { initialStatus, reduceStatus, renderStatus, StatusEvent, StatusState } from '../../src/common/statusModel';
import type { KernelSource, KernelStatusParams } from '../../src/common/protocol';

const NB = 'file:///tmp/x/nb.ipynb';

function run(...events: StatusEvent[]): StatusState {
  return events.reduce(reduceStatus, initialStatus());
}

function kernel(
  state: KernelStatusParams['state'],
  notebookUri: string | null = NB,
  source: KernelSource = 'request',
  stale = false,
): StatusEvent {
  return {
    type: 'kernelStatus',
    params: {
      notebookUri,
      state,
      kernel:
        state === 'static-only'
          ? null
          : {
              connectionFile: '/run/kernel-v3ab.json', source, notebookPath: null, pid: null,
              serverUrl: null, kernelId: null, description: '/run/kernel-v3ab.json',
            },
      message: '',
      stale,
      sandbox: null,
      sandboxReason: null,
    },
  };
}

const running: StatusEvent = { type: 'server', state: 'running', interpreter: '/venv/bin/python (setting)' };
const active: StatusEvent = { type: 'activeNotebook', uri: NB };

describe('status transitions', () => {
  it('starts stopped, then starting, then static only', () => {
    expect(renderStatus(initialStatus()).text).toContain('stopped');
    expect(renderStatus(run({ type: 'server', state: 'starting' })).text).toContain('starting');
    expect(renderStatus(run(running)).text).toContain('static only');
  });

  it('shows the attached kernel of the active notebook, with its file in the tooltip', () => {
    const view = renderStatus(run(running, active, kernel('attached')));
    expect(view.text).toContain('kernel attached');
    expect(view.tooltip).toContain('/run/kernel-v3ab.json');
    expect(view.tooltip).toContain('Kernel: attached (named by the client: /run/kernel-v3ab.json)');
    expect(view.tooltip).toContain('/venv/bin/python');
  });

  it('says when the kernel was reached through the Jupyter extension', () => {
    const view = renderStatus(run(running, active, kernel('attached', NB, 'jupyter-extension')));
    expect(view.text).toBe('$(plug) CRANE: kernel attached via Jupyter');
    expect(view.tooltip).toContain('Kernel: attached (through the Jupyter extension: /run/kernel-v3ab.json)');
    expect(renderStatus(run(running, active, kernel('busy', NB, 'jupyter-extension'))).text).toContain('busy via Jupyter');
    expect(renderStatus(run(running, active, kernel('attached', NB, 'discovery'))).tooltip).toContain("found by CRANE's discovery");
  });

  it('says when the kernel comes from crane.kernel.connectionFile, and why the toolbar may differ', () => {
    const view = renderStatus(run(running, active, kernel('attached', NB, 'setting')));
    expect(view.text).toBe('$(plug) CRANE: kernel attached (from setting)');
    expect(view.tooltip).toContain('Kernel: attached (crane.kernel.connectionFile: /run/kernel-v3ab.json)');
    expect(view.tooltip).toMatch(/not from the notebook's kernel picker.*"Select Kernel"/);
    expect(renderStatus(run(running, active, kernel('attached', NB, 'jupyter-extension'))).tooltip).not.toMatch(/kernel picker/);
  });

  it('says the kernel is restarting while the bridge waits for the new process, whatever the server says meanwhile', () => {
    const restarting: StatusEvent = { type: 'bridgeNote', notebookUri: NB, note: { kind: 'restarting', text: 'restarting…' } };
    const s = run(running, active, kernel('attached', NB, 'jupyter-extension'), restarting, kernel('dead'));
    expect(renderStatus(s).text).toBe('$(sync~spin) CRANE: kernel restarting');
    expect(renderStatus(s).text).not.toMatch(/dead|could not/);
    const back = run(running, active, restarting, { type: 'bridgeNote', notebookUri: NB, note: undefined }, kernel('attached', NB, 'jupyter-extension'));
    expect(renderStatus(back).text).toContain('kernel attached via Jupyter');
  });

  it('a note while waiting for the Jupyter extension goes in the tooltip only', () => {
    const s = run(running, active, kernel('attached', NB, 'discovery'), {
      type: 'bridgeNote',
      notebookUri: NB,
      note: { kind: 'waiting', text: 'Waiting for the Jupyter extension' },
    });
    expect(renderStatus(s).text).toBe('$(plug) CRANE: kernel attached');
    expect(renderStatus(s).tooltip).toContain('Waiting for the Jupyter extension');
  });

  it('names a remote kernel with its server', () => {
    const remote: StatusEvent = {
      type: 'kernelStatus',
      params: {
        notebookUri: NB,
        state: 'attached',
        kernel: {
          connectionFile: null, source: 'request', notebookPath: null, pid: 7, serverUrl: 'https://hub/user/a/',
          kernelId: 'k-1', description: 'remote kernel (https://hub/user/a/)',
        },
        message: 'attached to remote kernel (https://hub/user/a/), named by the client',
        stale: false,
        sandbox: null,
        sandboxReason: null,
      },
    };
    const view = renderStatus(run(running, active, remote));
    expect(view.text).toContain('kernel attached (remote)');
    expect(view.tooltip).toContain('Kernel: attached (named by the client: remote kernel (https://hub/user/a/))');
  });

  it('uses the server-wide status when the notebook has none', () => {
    expect(renderStatus(run(running, active, kernel('attached', null))).text).toContain('kernel attached');
    expect(renderStatus(run(running, active, kernel('attached', 'file:///other.ipynb'))).text).toContain('static only');
  });

  it('analysing wins over the kernel state and ends when the work ends', () => {
    let s = run(running, active, kernel('attached'), { type: 'busy', delta: 1, title: 'Checking notebook' });
    expect(renderStatus(s).text).toContain('analysing');
    expect(renderStatus(s).tooltip).toContain('Checking notebook');
    s = reduceStatus(s, { type: 'busy', delta: 1 });
    s = reduceStatus(s, { type: 'busy', delta: -1 });
    expect(renderStatus(s).text).toContain('analysing');
    s = reduceStatus(s, { type: 'busy', delta: -1 });
    expect(renderStatus(s).text).toContain('kernel attached');
    s = reduceStatus(s, { type: 'busy', delta: -1 });
    expect(s.busy).toBe(0);
  });

  it('agent running wins over analysing', () => {
    let s = run(running, { type: 'busy', delta: 1 }, { type: 'agentStarted', runId: 'r1' });
    expect(renderStatus(s).text).toContain('agent running');
    s = reduceStatus(s, { type: 'agentStopped', runId: 'r1' });
    expect(renderStatus(s).text).toContain('analysing');
  });

  it('says which sandbox mode the speculative runs use', () => {
    const layered: StatusEvent = { type: 'kernelStatus', params: { ...(kernel('attached') as any).params, sandbox: 'layered' } };
    expect(renderStatus(run(running, active, layered)).tooltip).toContain('Sandbox: layered');
    const blocking: StatusEvent = {
      type: 'kernelStatus',
      params: { ...(kernel('attached') as any).params, sandbox: 'blocking', sandboxReason: 'namespaces unavailable' },
    };
    expect(renderStatus(run(running, active, blocking)).tooltip).toContain('Sandbox: blocking (side effects are refused: namespaces unavailable)');
    expect(renderStatus(run(running, active, kernel('attached'))).tooltip).not.toContain('Sandbox');
  });

  it('marks dead and stale kernels as warnings', () => {
    expect(renderStatus(run(running, active, kernel('dead')))).toMatchObject({ kind: 'warning' });
    expect(renderStatus(run(running, active, kernel('busy', NB, 'request', true))).text).toContain('stale');
    expect(renderStatus(run(running, active, kernel('busy', NB, 'request', true)))).toMatchObject({ kind: 'warning' });
  });

  it('says when the bridge fell back to discovery', () => {
    const s = run(running, active, {
      type: 'bridgeNote',
      notebookUri: NB,
      note: { kind: 'fallback', text: 'Jupyter kernel access was declined' },
    });
    expect(renderStatus(s).text).toContain('(discovery)');
    expect(renderStatus(s).tooltip).toContain('declined');
    const cleared = reduceStatus(s, { type: 'bridgeNote', notebookUri: NB, note: undefined });
    expect(renderStatus(cleared).text).not.toContain('discovery');
  });

  it('a server error is shown as an error and clears kernels, work and runs', () => {
    const s = run(running, active, kernel('attached'), { type: 'busy', delta: 1 }, { type: 'agentStarted', runId: 'r' }, {
      type: 'server',
      state: 'error',
      message: 'CRANE is not installed',
    });
    expect(renderStatus(s)).toMatchObject({ text: '$(error) CRANE', kind: 'error' });
    expect(renderStatus(s).tooltip).toContain('CRANE is not installed');
    expect(s.kernels).toEqual({});
    expect(s.busy).toBe(0);
    expect(s.agentRuns).toEqual([]);
  });
});

describe('status bar item', () => {
  beforeEach(() => mock.reset());

  it('renders updates and opens details on click', async () => {
    const bar = new StatusBar();
    const item = window.createStatusBarItem.mock.results[0].value;
    expect(item.command).toBe('crane.ui.showStatus');
    bar.update(running);
    expect(item.text).toContain('static only');
    const seen: string[] = [];
    bar.onDidChange((s) => seen.push(s.server));
    await bar.busy('x', async () => {
      expect(item.text).toContain('analysing');
    });
    expect(item.text).toContain('static only');
    expect(seen.length).toBe(2);
    bar.update({ type: 'server', state: 'error' });
    expect(item.backgroundColor).toMatchObject({ id: 'statusBarItem.errorBackground' });
  });
});

describe('the notebook the status bar follows', () => {
  beforeEach(() => mock.reset());

  const nb = (uri: string, notebookType = 'jupyter-notebook') => {
    const cell = { kind: 2, document: { uri: Uri.parse(`vscode-notebook-cell:${uri.slice(7)}#c1`) } };
    return { uri: Uri.parse(uri), notebookType, cellCount: 1, cellAt: () => cell, getCells: () => [cell] };
  };

  it('is the active notebook editor', () => {
    const a = nb(NB);
    window.activeNotebookEditor = { notebook: a };
    expect(currentNotebook()).toBe(a);
  });

  it('stays on the visible CRANE notebook when another editor (the diagnosis preview) takes the focus', () => {
    const a = nb(NB);
    window.visibleNotebookEditors = [{ notebook: nb('file:///tmp/x/other.nb', 'other-type') }, { notebook: a }];
    window.activeNotebookEditor = undefined;
    expect(currentNotebook()).toBe(a);
    // the last one wins among several visible notebooks
    const b = nb('file:///tmp/x/b.ipynb');
    window.visibleNotebookEditors = [{ notebook: b }, { notebook: a }];
    expect(currentNotebook(NB)).toBe(a);
    expect(currentNotebook('file:///gone.ipynb')).toBe(b);
  });

  it('is none when no CRANE notebook is visible', () => {
    window.visibleNotebookEditors = [{ notebook: nb('file:///tmp/x/other.nb', 'other-type') }];
    expect(currentNotebook(NB)).toBeUndefined();
  });

  it('keeps the kernel state in the status bar through a focus change (the code-server bug)', () => {
    const bar = new StatusBar();
    const item = window.createStatusBarItem.mock.results[0].value;
    const a = nb(NB);
    window.activeNotebookEditor = { notebook: a };
    window.visibleNotebookEditors = [{ notebook: a }];
    const focus = new NotebookFocus();
    const follow = () => bar.update({ type: 'activeNotebook', uri: focus.update() });
    bar.update(running);
    follow();
    bar.update(kernel('attached'));
    expect(item.text).toContain('kernel attached');
    window.activeNotebookEditor = undefined; // the markdown preview beside the notebook takes the focus
    follow();
    expect(item.text).toContain('kernel attached');
    window.visibleNotebookEditors = []; // the notebook is closed
    follow();
    expect(item.text).toContain('static only');
  });

  it('commands find the selected cell of the visible notebook while the preview has the focus', () => {
    const a = nb(NB);
    window.visibleNotebookEditors = [{ notebook: a, selection: { start: 0, end: 1 } }];
    workspace.notebookDocuments = [a];
    expect(activeCell()?.document.uri.toString()).toBe('vscode-notebook-cell:/tmp/x/nb.ipynb#c1');
  });
});
