import { beforeEach, describe, expect, it, vi } from 'vitest';
import { commands, mock, NotebookCellKind, Uri, window, workspace, WorkspaceEdit } from '../vscode.mock';
import { AgentController } from '../../src/common/agentPanel';
import { agentPanelHtml, isPanelAction } from '../../src/common/agentHtml';
import { AgentEvent, AgentState, initialAgentState, reduceAgent, shouldAutoContinue, sumUsage } from '../../src/common/agentState';
import type { AgentStepParams, FixResult } from '../../src/common/protocol';
import type { CraneServer } from '../../src/common/serverApi';

const NB = 'file:///tmp/x/nb.ipynb';
const CELL = 'vscode-notebook-cell:/tmp/x/nb.ipynb#W0sZmlsZQ%3D%3D';
const CELL2 = 'vscode-notebook-cell:/tmp/x/nb.ipynb#W1sZmlsZQ%3D%3D';

/** The WorkspaceEdit crane.agent.proposal.to_workspace_edit produces. */
const EDIT = {
  documentChanges: [
    {
      textDocument: { uri: CELL2, version: 3 },
      edits: [
        {
          range: { start: { line: 1, character: 0 }, end: { line: 1, character: 8 } },
          newText: 'for i in range(len(lst)):\n    lst[i]',
          annotationId: 'crane.fix.cell2',
        },
      ],
    },
  ],
  changeAnnotations: { 'crane.fix.cell2': { label: 'CRANE fix: cell 2', needsConfirmation: true, description: 'bound the loop' } },
};

function proposal(status: string, extra: Record<string, unknown> = {}) {
  return {
    runId: 'r1',
    notebook: '/tmp/x/nb.ipynb',
    target: 2,
    status,
    fixed: status === 'fixed',
    stopReason: status === 'fixed' ? 'finished' : 'step limit (2 steps)',
    explanation: 'bound the loop',
    edits: [],
    additions: [],
    runFirst: [1, 2],
    evidence: null,
    guard: [],
    steps: 2,
    usage: { requests: 2, promptTokens: 300, completionTokens: 40, cachedTokens: 100, costUsd: 0.0012, unpricedRequests: 0 },
    model: 'openai/test',
    elapsedS: 1.5,
    ...extra,
  };
}

function fixResult(status: FixResult['status'] = 'fixed', edit: unknown = EDIT): FixResult {
  return { runId: 'r1', status, proposal: proposal(status) as never, edit, markdown: `## CRANE agent: ${status}` };
}

function step(n: number, phase: 'proposed' | 'done' = 'done', runId = 'r1'): AgentStepParams {
  return {
    runId,
    step: n,
    phase,
    status: 'ok',
    reflection: `think ${n}`,
    action: 'execute_cell',
    code: 'lst[i]',
    result: phase === 'done' ? 'ran clean' : '',
    cell: 2,
    tokens: 110,
    usage: { promptTokens: 100, completionTokens: 10, cachedTokens: 50, costUsd: 0.001 },
    elapsedS: 0.2,
  };
}

function run(...events: AgentEvent[]): AgentState {
  return events.reduce(reduceAgent, initialAgentState());
}

const start = (stepMode = false): AgentEvent => ({ type: 'start', cellUri: CELL2, stepMode });

describe('agent panel state', () => {
  it('streams steps of the current run, one entry per step (proposed, then done), with usage totals', () => {
    const s = run(start(true), { type: 'step', params: step(1, 'proposed') }, { type: 'step', params: step(1) }, { type: 'step', params: step(2) });
    expect(s.status).toBe('running');
    expect(s.runId).toBe('r1');
    expect(s.steps.map((x) => [x.step, x.phase])).toEqual([
      [1, 'done'],
      [2, 'done'],
    ]);
    expect(s.usage).toEqual({ promptTokens: 200, completionTokens: 20, cachedTokens: 100, costUsd: 0.002 });
    // steps of another run are ignored, and so are steps after the run ended
    expect(reduceAgent(s, { type: 'step', params: step(3, 'done', 'other') }).steps.length).toBe(2);
    expect(run({ type: 'step', params: step(1) }).steps).toEqual([]);
  });

  it('sums usage with unknown costs as null', () => {
    expect(sumUsage([{ ...step(1), usage: { promptTokens: 1, completionTokens: 2, cachedTokens: 0, costUsd: null } }]).costUsd).toBeNull();
    expect(sumUsage([{ ...step(1), usage: null as never }]).promptTokens).toBe(0);
  });

  it('step mode: a proposed step waits; auto-continue only when resumed', () => {
    let s = run(start(true), { type: 'step', params: step(1, 'proposed') });
    expect(s.waiting).toBe(1);
    expect(s.autoContinue).toBe(false);
    expect(shouldAutoContinue(s, step(1, 'proposed'))).toBe(false);
    s = reduceAgent(s, { type: 'resume' });
    expect(shouldAutoContinue(s, step(2, 'proposed'))).toBe(true);
    expect(shouldAutoContinue(s, step(2, 'done'))).toBe(false);
    s = reduceAgent(s, { type: 'continued', step: 1 });
    expect(s.waiting).toBeUndefined();
    s = reduceAgent(s, { type: 'pause' });
    expect(s.autoContinue).toBe(false);
    expect(shouldAutoContinue(s, step(2, 'proposed'))).toBe(false);
    expect(s.message).toMatch(/halts at the next action/);
  });

  it('a run without step mode is never held; pause says so and makes the next run a step-mode run', () => {
    let s = run(start(false), { type: 'step', params: step(1, 'proposed') });
    expect(shouldAutoContinue(s, step(1, 'proposed'))).toBe(false); // the server does not wait: nothing to send
    s = reduceAgent(s, { type: 'pause' });
    expect(s.message).toMatch(/Pause only applies to step-mode runs/);
    expect(s.stepNext).toBe(true);
    expect(s.status).toBe('running');
    // pressing Pause while idle also asks for step mode next time; Resume cancels that
    const idle = run({ type: 'pause' });
    expect(idle.stepNext).toBe(true);
    expect(reduceAgent(idle, { type: 'resume' }).stepNext).toBe(false);
    // a new run resets it
    expect(reduceAgent(idle, start(true)).stepNext).toBe(false);
  });

  it('ends with an edit to review, or a report without one, or failed', () => {
    const proposed = run(start(), { type: 'finished', result: fixResult('fixed') });
    expect(proposed).toMatchObject({ status: 'proposed', runId: 'r1', edit: EDIT });
    expect(proposed.message).toMatch(/Fixed and verified/);
    expect(proposed.usage).toEqual({ promptTokens: 300, completionTokens: 40, cachedTokens: 100, costUsd: 0.0012 });
    // issue 42 (h5): a crash seen only on a copy of the kernel's state is said, and a fix is not plainly verified
    const likelyResult = fixResult('fixed');
    likelyResult.proposal = proposal('fixed', {
      crashCertain: false,
      crashDoubt: 'the crash is only likely: the notebook patched the library class DataFrame beyond what the copy carries',
    }) as never;
    const likely = run(start(), { type: 'finished', result: likelyResult });
    expect(likely.message).toMatch(/^Fixed, verified against a likely crash \(the crash is only likely: the notebook patched/);
    expect(likely.message).not.toMatch(/Fixed and verified/);
    const clean = run(start(), { type: 'finished', result: fixResult('clean', null) });
    expect(clean).toMatchObject({ status: 'no-proposal', edit: undefined });
    expect(clean.message).toMatch(/already runs clean/);
    const notFixed = run(start(), { type: 'finished', result: fixResult('not-fixed', null) });
    expect(notFixed.message).toBe('Not fixed (step limit (2 steps)).');
    const runFirst = run(start(), { type: 'finished', result: fixResult('fixed', { documentChanges: [] }) });
    expect(runFirst).toMatchObject({ status: 'no-proposal', message: 'No code change needed: run cells 1, 2 first.' });
    expect(run(start(), { type: 'finished', result: null }).status).toBe('failed');
    expect(run(start(), { type: 'failed', message: 'crane.fixCell needs a model' })).toMatchObject({
      status: 'failed',
      message: 'crane.fixCell needs a model',
    });
  });

  it('stop only applies to an active run; apply and discard only to an edit', () => {
    expect(run({ type: 'stopRequested' }).status).toBe('idle');
    expect(run(start(), { type: 'stopRequested' }).status).toBe('stopping');
    expect(run(start(), { type: 'applied' }).status).toBe('running');
    const s = run(start(), { type: 'finished', result: fixResult() });
    expect(reduceAgent(s, { type: 'applied' }).status).toBe('applied');
    expect(reduceAgent(s, { type: 'discarded' }).status).toBe('discarded');
  });

  it('the panel only accepts its own actions and renders with a nonce', () => {
    expect(isPanelAction('report')).toBe(true);
    expect(isPanelAction('bogus')).toBe(false);
    expect(agentPanelHtml('N0NCE', 'vscode-resource:')).toContain("script-src 'nonce-N0NCE'");
  });
});

describe('agent controller', () => {
  let server: CraneServer & { executeCommand: ReturnType<typeof vi.fn>; asWorkspaceEdit: ReturnType<typeof vi.fn> };
  let hooks: {
    started: ReturnType<typeof vi.fn<(key: string) => void>>;
    stopped: ReturnType<typeof vi.fn<(key: string) => void>>;
    showReport: ReturnType<typeof vi.fn<(cellUri: string, markdown: string) => Promise<unknown>>>;
    stepModeDefault: () => boolean;
  };

  beforeEach(() => {
    mock.reset();
    const converted = new WorkspaceEdit();
    server = {
      executeCommand: vi.fn(),
      sendRequest: vi.fn(),
      asWorkspaceEdit: vi.fn(async (_e: unknown) => converted),
    } as never;
    hooks = {
      started: vi.fn<(key: string) => void>(),
      stopped: vi.fn<(key: string) => void>(),
      showReport: vi.fn<(cellUri: string, markdown: string) => Promise<unknown>>(async () => undefined),
      stepModeDefault: () => false,
    };
  });

  it('runs crane.fixCell(cellUri, {goal, stepMode}), shows the panel, stops by runId', async () => {
    let finish: (v: unknown) => void = () => undefined;
    server.executeCommand.mockImplementation((cmd: string) =>
      cmd === 'crane.fixCell' ? new Promise((r) => (finish = r)) : Promise.resolve({ stopped: true }),
    );
    const agent = new AgentController(() => server, hooks);
    const running = agent.fix(CELL2, { goal: 'keep shape' });
    await Promise.resolve();
    expect(server.executeCommand).toHaveBeenCalledWith('crane.fixCell', [CELL2, { goal: 'keep shape', stepMode: false }]);
    expect(window.createWebviewPanel).toHaveBeenCalledTimes(1);
    expect(hooks.started).toHaveBeenCalled();
    agent.onStep(step(1));
    expect(await agent.stop()).toBe(true);
    expect(server.executeCommand).toHaveBeenLastCalledWith('crane.stopAgent', ['r1']);
    finish(fixResult('stopped', null));
    await running;
    expect(agent.current.status).toBe('no-proposal');
    expect(hooks.stopped).toHaveBeenCalled();
    const panel = window.createWebviewPanel.mock.results[0].value;
    const last = panel.webview.postMessage.mock.calls.at(-1)[0];
    expect(last).toMatchObject({ type: 'state', state: { status: 'no-proposal' } });
  });

  it('stop before the first step stops every run (no runId yet)', async () => {
    server.executeCommand.mockImplementation((cmd: string) => (cmd === 'crane.fixCell' ? new Promise(() => undefined) : Promise.resolve({ stopped: false })));
    const agent = new AgentController(() => server, hooks);
    void agent.fix(CELL2);
    await Promise.resolve();
    expect(await agent.stop()).toBe(false);
    expect(server.executeCommand).toHaveBeenLastCalledWith('crane.stopAgent', []);
  });

  it('step mode: Step sends crane.continueAgent for the waiting action; Resume approves it and the next ones; Pause stops approving', async () => {
    server.executeCommand.mockImplementation((cmd: string) =>
      cmd === 'crane.fixCell' ? new Promise(() => undefined) : Promise.resolve({ continued: true }),
    );
    hooks.stepModeDefault = () => true;
    const agent = new AgentController(() => server, hooks);
    void agent.fix(CELL2);
    await Promise.resolve();
    expect(server.executeCommand).toHaveBeenCalledWith('crane.fixCell', [CELL2, { stepMode: true }]);
    const continues = () => server.executeCommand.mock.calls.filter((c) => c[0] === 'crane.continueAgent').length;

    agent.onStep(step(1, 'proposed'));
    expect(continues()).toBe(0); // held: the user decides
    await agent.handleAction('step');
    expect(server.executeCommand).toHaveBeenLastCalledWith('crane.continueAgent', ['r1']);
    expect(agent.current.waiting).toBeUndefined();
    await agent.handleAction('step'); // nothing waiting: nothing sent
    expect(continues()).toBe(1);

    agent.onStep(step(1));
    agent.onStep(step(2, 'proposed'));
    await agent.handleAction('resume');
    expect(continues()).toBe(2);
    agent.onStep(step(3, 'proposed'));
    await Promise.resolve();
    expect(continues()).toBe(3); // resumed: approved as it arrives

    await agent.handleAction('pause');
    agent.onStep(step(4, 'proposed'));
    await Promise.resolve();
    expect(continues()).toBe(3);
    expect(agent.current.waiting).toBe(4);
  });

  it('a continue the server refuses keeps the step waiting', async () => {
    server.executeCommand.mockImplementation((cmd: string) =>
      cmd === 'crane.fixCell' ? new Promise(() => undefined) : Promise.resolve({ continued: false }),
    );
    const agent = new AgentController(() => server, hooks);
    void agent.fix(CELL2, { stepMode: true });
    await Promise.resolve();
    agent.onStep(step(1, 'proposed'));
    expect(await agent.continueRun(1)).toBe(false);
    expect(agent.current.waiting).toBe(1);
  });

  it('applies only through the converted edit with confirmation annotations, as a refactoring, then highlights', async () => {
    server.executeCommand.mockResolvedValue(fixResult());
    const agent = new AgentController(() => server, hooks);
    await agent.fix(CELL2);
    const setDecorations = vi.fn();
    window.visibleTextEditors = [{ document: { uri: { toString: () => CELL2 } }, setDecorations }];
    await agent.handleAction('apply');
    const lsp = server.asWorkspaceEdit.mock.calls[0][0] as typeof EDIT;
    expect(lsp.changeAnnotations['crane.fix.cell2']).toMatchObject({ needsConfirmation: true, label: 'CRANE fix: cell 2' });
    expect(lsp.documentChanges[0].edits[0].annotationId).toBe('crane.fix.cell2');
    expect(workspace.applyEdit).toHaveBeenCalledWith(await server.asWorkspaceEdit.mock.results[0].value, { isRefactoring: true });
    expect(agent.current.status).toBe('applied');
    expect(setDecorations).toHaveBeenCalledWith(expect.anything(), [
      expect.objectContaining({ start: expect.objectContaining({ line: 1 }), end: expect.objectContaining({ line: 2 }) }),
    ]);
    // nothing ran in the kernel
    expect(commands.executeCommand).not.toHaveBeenCalledWith('notebook.cell.execute', expect.anything());
  });

  it('keeps the proposal when the user cancels the refactor preview', async () => {
    server.executeCommand.mockResolvedValue(fixResult());
    workspace.applyEdit.mockResolvedValueOnce(false);
    const agent = new AgentController(() => server, hooks);
    await agent.fix(CELL2);
    expect(await agent.apply()).toBe(false);
    expect(agent.current.status).toBe('proposed');
  });

  it('Run cell runs the proposal runFirst cells then the target, only after applying, only on request', async () => {
    const cells = [CELL, CELL2].map((u) => ({ kind: NotebookCellKind.Code, document: { uri: Uri.parse(u) } }));
    const nb = { uri: Uri.parse(NB), notebookType: 'jupyter-notebook', getCells: () => cells };
    workspace.notebookDocuments = [nb];
    server.executeCommand.mockResolvedValue(fixResult());
    const agent = new AgentController(() => server, hooks);
    await agent.fix(CELL2);
    await agent.handleAction('run');
    expect(commands.executeCommand).not.toHaveBeenCalledWith('notebook.cell.execute', expect.anything());
    await agent.handleAction('apply');
    await agent.handleAction('run');
    expect(commands.executeCommand).toHaveBeenCalledWith('notebook.cell.execute', {
      ranges: [
        { start: 0, end: 1 },
        { start: 1, end: 2 },
      ],
      document: nb.uri,
    });
  });

  it('Report opens the run markdown in the preview', async () => {
    server.executeCommand.mockResolvedValue(fixResult('not-fixed', null));
    const agent = new AgentController(() => server, hooks);
    await agent.fix(CELL2);
    await agent.handleAction('report');
    expect(hooks.showReport).toHaveBeenCalledWith(CELL2, '## CRANE agent: not-fixed');
  });

  it('panel buttons reach the controller', async () => {
    server.executeCommand.mockResolvedValue(fixResult('clean', null));
    const agent = new AgentController(() => server, hooks);
    await agent.fix(CELL2);
    const panel = window.createWebviewPanel.mock.results[0].value;
    panel.webview.receive({ type: 'action', action: 'pause' });
    await Promise.resolve();
    expect(agent.current.stepNext).toBe(true);
    panel.webview.receive({ type: 'action', action: 'bogus' });
    expect(agent.current.stepNext).toBe(true);
  });

  it('a failing run is shown, not thrown; malformed steps are ignored', async () => {
    server.executeCommand.mockRejectedValue(new Error('crane.fixCell needs a model: set crane.llm.model'));
    const agent = new AgentController(() => server, hooks);
    await agent.fix(CELL2);
    expect(agent.current).toMatchObject({ status: 'failed', message: 'crane.fixCell needs a model: set crane.llm.model' });
    expect(window.showWarningMessage).toHaveBeenCalledWith('CRANE: crane.fixCell needs a model: set crane.llm.model.', 'Open settings');
    agent.onStep({ nonsense: true } as never);
    expect(agent.current.steps).toEqual([]);
  });
});
