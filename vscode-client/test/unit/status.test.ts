import { beforeEach, describe, expect, it } from 'vitest';
import { mock, window } from '../vscode.mock';
import { StatusBar } from '../../src/common/statusBar';
import { initialStatus, reduceStatus, renderStatus, StatusEvent, StatusState } from '../../src/common/statusModel';
import type { KernelStatusParams } from '../../src/common/protocol';

const NB = 'file:///tmp/x/nb.ipynb';

function run(...events: StatusEvent[]): StatusState {
  return events.reduce(reduceStatus, initialStatus());
}

function kernel(state: KernelStatusParams['state'], notebookUri: string | null = NB): StatusEvent {
  return {
    type: 'kernelStatus',
    params: {
      notebookUri,
      state,
      kernel: state === 'static-only' ? null : { connectionFile: '/run/kernel-v3ab.json', source: 'request' },
      message: '',
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
    expect(view.tooltip).toContain('request');
    expect(view.tooltip).toContain('/venv/bin/python');
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

  it('marks dead and stale kernels as warnings', () => {
    expect(renderStatus(run(running, active, kernel('dead')))).toMatchObject({ kind: 'warning' });
    expect(renderStatus(run(running, active, kernel('stale'))).text).toContain('stale');
  });

  it('says when the bridge fell back to discovery', () => {
    const s = run(running, active, { type: 'bridgeNote', notebookUri: NB, note: 'Jupyter kernel access was declined' });
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
