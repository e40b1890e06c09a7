import { beforeEach, describe, expect, it, vi } from 'vitest';
import { commands, mock, window, workspace, WorkspaceEdit } from '../vscode.mock';
import { AgentController } from '../../src/common/agentPanel';
import { extractProposal, initialAgentState, reduceAgent, AgentEvent, AgentState } from '../../src/common/agentState';
import type { AgentStepParams } from '../../src/common/protocol';
import type { CraneServer } from '../../src/common/serverApi';

const CELL = 'vscode-notebook-cell:/tmp/x/nb.ipynb#W0sZmlsZQ%3D%3D';
const EDIT = {
  changes: {
    [CELL]: [{ range: { start: { line: 2, character: 0 }, end: { line: 2, character: 19 } }, newText: 'undefined_thing = 0\nundefined_thing + 1' }],
  },
};

function step(n: number, runId = 'r1'): AgentStepParams {
  return { runId, step: n, reflection: `think ${n}`, action: 'probe', code: 'x.shape', result: '(3,)', tokens: 10 };
}

function run(...events: AgentEvent[]): AgentState {
  return events.reduce(reduceAgent, initialAgentState());
}

describe('agent panel state', () => {
  it('streams steps of the current run and counts tokens', () => {
    const s = run({ type: 'start', cellUri: CELL }, { type: 'step', params: step(1) }, { type: 'step', params: step(2) });
    expect(s.status).toBe('running');
    expect(s.runId).toBe('r1');
    expect(s.steps.map((x) => x.step)).toEqual([1, 2]);
    expect(s.tokens).toBe(20);
    // steps of another run are ignored
    expect(reduceAgent(s, { type: 'step', params: step(3, 'other') }).steps.length).toBe(2);
  });

  it('pause holds steps, step reveals one, resume flushes', () => {
    let s = run({ type: 'start', cellUri: CELL }, { type: 'step', params: step(1) }, { type: 'pause' });
    s = reduceAgent(s, { type: 'step', params: step(2) });
    s = reduceAgent(s, { type: 'step', params: step(3) });
    expect(s.steps.length).toBe(1);
    expect(s.held.length).toBe(2);
    s = reduceAgent(s, { type: 'stepOnce' });
    expect(s.steps.map((x) => x.step)).toEqual([1, 2]);
    expect(s.paused).toBe(true);
    s = reduceAgent(s, { type: 'resume' });
    expect(s.steps.map((x) => x.step)).toEqual([1, 2, 3]);
    expect(s.held).toEqual([]);
    expect(s.paused).toBe(false);
  });

  it('ends with a proposal, or without one, or failed', () => {
    const proposed = run({ type: 'start', cellUri: CELL }, { type: 'finished', result: { runId: 'r9', edit: EDIT, summary: 'define it' } });
    expect(proposed).toMatchObject({ status: 'proposed', runId: 'r9', proposal: { summary: 'define it' } });
    expect(run({ type: 'start', cellUri: CELL }, { type: 'finished', result: EDIT }).proposal?.edit).toBe(EDIT);
    expect(run({ type: 'start', cellUri: CELL }, { type: 'finished', result: null }).status).toBe('no-proposal');
    expect(run({ type: 'start', cellUri: CELL }, { type: 'failed', message: 'not available yet' })).toMatchObject({
      status: 'failed',
      message: 'not available yet',
    });
  });

  it('stop only applies to an active run; apply and discard only to a proposal', () => {
    expect(run({ type: 'stopRequested' }).status).toBe('idle');
    expect(run({ type: 'start', cellUri: CELL }, { type: 'stopRequested' }).status).toBe('stopping');
    expect(run({ type: 'start', cellUri: CELL }, { type: 'applied' }).status).toBe('running');
    const s = run({ type: 'start', cellUri: CELL }, { type: 'finished', result: EDIT });
    expect(reduceAgent(s, { type: 'applied' }).status).toBe('applied');
    expect(reduceAgent(s, { type: 'discarded' }).status).toBe('discarded');
  });

  it('extracts proposals from the documented result shapes', () => {
    expect(extractProposal({ documentChanges: [] }).proposal).toBeDefined();
    expect(extractProposal({ message: 'nothing to do' })).toEqual({ message: 'nothing to do', runId: undefined });
  });
});

describe('agent controller', () => {
  let server: CraneServer & { executeCommand: ReturnType<typeof vi.fn> };
  const hooks = { started: vi.fn(), stopped: vi.fn() };

  beforeEach(() => {
    mock.reset();
    server = { executeCommand: vi.fn(), sendRequest: vi.fn() } as never;
  });

  it('runs crane.fixCell, shows the panel and reports the run to the status bar', async () => {
    let finish: (v: unknown) => void = () => undefined;
    server.executeCommand.mockImplementation((cmd: string) =>
      cmd === 'crane.fixCell' ? new Promise((r) => (finish = r)) : Promise.resolve({ stopped: true }),
    );
    const agent = new AgentController(() => server, hooks);
    const running = agent.fix(CELL, 'keep shape');
    await Promise.resolve();
    expect(server.executeCommand).toHaveBeenCalledWith('crane.fixCell', [CELL, 'keep shape']);
    expect(window.createWebviewPanel).toHaveBeenCalledTimes(1);
    expect(hooks.started).toHaveBeenCalled();
    agent.onStep(step(1));
    expect(await agent.stop()).toBe(true);
    expect(server.executeCommand).toHaveBeenLastCalledWith('crane.stopAgent', ['r1']);
    finish({ edit: EDIT, summary: 'fix' });
    await running;
    expect(agent.current.status).toBe('proposed');
    expect(hooks.stopped).toHaveBeenCalled();
    const panel = window.createWebviewPanel.mock.results[0].value;
    const last = panel.webview.postMessage.mock.calls.at(-1)[0];
    expect(last).toMatchObject({ type: 'state', state: { status: 'proposed' } });
  });

  it('applies only through a confirmation-needing edit (refactor preview) and then highlights', async () => {
    server.executeCommand.mockResolvedValue(EDIT);
    const agent = new AgentController(() => server, hooks);
    await agent.fix(CELL);
    expect(server.executeCommand).toHaveBeenCalledWith('crane.fixCell', [CELL]);
    const setDecorations = vi.fn();
    window.visibleTextEditors = [{ document: { uri: { toString: () => CELL } }, setDecorations }];
    await agent.handleAction('apply');
    const applied: WorkspaceEdit = workspace.applyEdit.mock.calls[0][0];
    expect(applied.edits).toHaveLength(1);
    expect(applied.edits[0].metadata).toEqual({ needsConfirmation: true, label: 'CRANE agent fix' });
    expect(applied.edits[0].uri.toString()).toBe(CELL);
    expect(agent.current.status).toBe('applied');
    expect(setDecorations).toHaveBeenCalledWith(expect.anything(), [expect.objectContaining({ start: expect.objectContaining({ line: 2 }), end: expect.objectContaining({ line: 3 }) })]);
    // nothing ran in the kernel
    expect(commands.executeCommand).not.toHaveBeenCalledWith('notebook.cell.execute', expect.anything());
  });

  it('keeps the proposal when the user cancels the refactor preview', async () => {
    server.executeCommand.mockResolvedValue(EDIT);
    workspace.applyEdit.mockResolvedValueOnce(false);
    const agent = new AgentController(() => server, hooks);
    await agent.fix(CELL);
    expect(await agent.apply()).toBe(false);
    expect(agent.current.status).toBe('proposed');
  });

  it('panel buttons reach the controller', async () => {
    server.executeCommand.mockResolvedValue(null);
    const agent = new AgentController(() => server, hooks);
    await agent.fix(CELL);
    const panel = window.createWebviewPanel.mock.results[0].value;
    panel.webview.receive({ type: 'action', action: 'pause' });
    await Promise.resolve();
    expect(agent.current.paused).toBe(true);
    panel.webview.receive({ type: 'action', action: 'bogus' });
    expect(agent.current.paused).toBe(true);
  });

  it('a failing run is shown, not thrown', async () => {
    server.executeCommand.mockRejectedValue(new Error('crane.fixCell is not available yet'));
    const agent = new AgentController(() => server, hooks);
    await agent.fix(CELL);
    expect(agent.current).toMatchObject({ status: 'failed', message: 'crane.fixCell is not available yet' });
  });
});
