import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { beforeEach, describe, expect, it, vi } from 'vitest';
import { commands, mock, NotebookCellKind, Uri, window } from '../vscode.mock';
import { summarizeCheck } from '../../src/common/checkSummary';
import { Commands, fixOptions, UiCommands } from '../../src/common/commands';
import { listConnectionFiles, runtimeDirs } from '../../src/common/connectionFiles';
import { ServerCommands } from '../../src/common/protocol';
import { StatusBar } from '../../src/common/statusBar';

const NB = 'file:///tmp/x/nb.ipynb';
const CELL = 'vscode-notebook-cell:/tmp/x/nb.ipynb#W0sZmlsZQ%3D%3D';

function openNotebook() {
  const cell = { kind: NotebookCellKind.Code, document: { uri: Uri.parse(CELL) } };
  const notebook = { uri: Uri.parse(NB), notebookType: 'jupyter-notebook', cellCount: 1, cellAt: () => cell, getCells: () => [cell] };
  window.activeNotebookEditor = { notebook, selection: { start: 0, end: 1 } };
  return notebook;
}

function setup() {
  const server = { executeCommand: vi.fn(async (..._a: unknown[]) => ({}) as unknown), sendRequest: vi.fn() };
  const agent = { fix: vi.fn(async () => 'fixed'), stop: vi.fn(async () => true) };
  const diagnosis = { show: vi.fn(async () => undefined), showSpeculative: vi.fn(async (..._a: unknown[]) => undefined) };
  const restart = vi.fn(async () => undefined);
  const status = new StatusBar();
  const askJupyter = vi.fn(async (..._a: unknown[]) => undefined as never);
  const cmds = new Commands({
    server: () => server as never,
    status,
    agent: agent as never,
    diagnosis: diagnosis as never,
    keys: {} as never,
    restart,
    runtimeDirs: () => [],
    askJupyter,
  });
  return { server, agent, diagnosis, restart, status, cmds, askJupyter };
}

describe('palette commands', () => {
  beforeEach(() => mock.reset());

  it('registers only crane.ui.* ids, never the server ids', () => {
    const { cmds } = setup();
    cmds.register();
    const ids = commands.registerCommand.mock.calls.map((c) => c[0]);
    expect(ids).toEqual(expect.arrayContaining(Object.values(UiCommands)));
    for (const id of Object.values(ServerCommands)) {
      expect(ids).not.toContain(id);
    }
    expect(ids.every((id) => id.startsWith('crane.ui.'))).toBe(true);
  });

  it('forwards Check notebook with the notebook URI and reports the result while analysing', async () => {
    openNotebook();
    const { cmds, server, status } = setup();
    server.executeCommand.mockImplementation(async () => {
      expect(status.current.busy).toBe(1);
      return { notebookUri: NB, cells: [{ cellUri: CELL, cell: 1, findings: [{ ename: 'NameError' }] }], crashes: 1 };
    });
    await cmds.checkNotebook();
    expect(server.executeCommand).toHaveBeenCalledWith('crane.checkNotebook', [NB]);
    expect(window.showInformationMessage).toHaveBeenCalledWith('CRANE: 1 crash risk in 1 cell.');
    expect(status.current.busy).toBe(0);
  });

  it('forwards Diagnose cell with the cell URI and opens the diagnosis', async () => {
    openNotebook();
    const { cmds, server, diagnosis } = setup();
    server.executeCommand.mockResolvedValue({ notebookUri: NB, cellUri: CELL, verdict: null, markdown: 'ok', usage: null });
    await cmds.diagnoseCell();
    expect(server.executeCommand).toHaveBeenCalledWith('crane.diagnoseCell', [CELL]);
    expect(diagnosis.show).toHaveBeenCalledWith(expect.objectContaining({ cellUri: CELL, markdown: 'ok' }));
  });

  it('Fix cell asks for an optional goal and starts the agent; Escape cancels', async () => {
    openNotebook();
    const { cmds, agent } = setup();
    window.showInputBox.mockResolvedValueOnce('');
    await cmds.fixCell();
    expect(agent.fix).toHaveBeenCalledWith(CELL, {});
    window.showInputBox.mockResolvedValueOnce(' keep the shape ');
    await cmds.fixCell();
    expect(agent.fix).toHaveBeenLastCalledWith(CELL, { goal: 'keep the shape' });
    window.showInputBox.mockResolvedValueOnce(undefined);
    await cmds.fixCell();
    expect(agent.fix).toHaveBeenCalledTimes(2);
  });

  it('Run cell speculatively forwards the cell URI and shows the verdict in the preview', async () => {
    openNotebook();
    const { cmds, server, diagnosis, status } = setup();
    const result = { cellUri: CELL, cell: 2, sandbox: { verdict: 'crash', ename: 'IndexError', evalue: 'list index out of range', line: 1, elapsedMs: 40 }, markdown: '**crash**' };
    server.executeCommand.mockImplementation(async () => {
      expect(status.current.busy).toBe(1);
      return result;
    });
    await cmds.runSpeculatively();
    expect(server.executeCommand).toHaveBeenCalledWith('crane.runSpeculatively', [CELL]);
    expect(diagnosis.showSpeculative).toHaveBeenCalledWith(result, CELL);
    server.executeCommand.mockResolvedValue({ weird: true });
    await expect(cmds.runSpeculatively()).rejects.toThrow(/unexpected result/);
  });

  it('reads fixCell options from code actions and callers', () => {
    expect(fixOptions(undefined)).toEqual({});
    expect(fixOptions('  goal ')).toEqual({ goal: 'goal' });
    expect(fixOptions({ goal: 'g', stepMode: true, extra: 1 })).toEqual({ goal: 'g', stepMode: true });
    expect(fixOptions({ goal: 3, stepMode: 'yes' })).toEqual({});
  });

  it('Attach to kernel sends crane.attachKernel with the picked file', async () => {
    openNotebook();
    const { cmds, server } = setup();
    window.showQuickPick.mockResolvedValueOnce(undefined as never);
    window.showQuickPick.mockImplementationOnce(async () => ({ label: '$(folder-opened) Browse…' }));
    window.showOpenDialog.mockResolvedValueOnce([Uri.file('/run/k/kernel-v3ab.json')]);
    server.executeCommand.mockResolvedValue({ attached: true, message: 'ok', kernel: null });
    expect(await cmds.attachKernel()).toBeUndefined(); // cancelled
    await cmds.attachKernel();
    expect(server.executeCommand).toHaveBeenCalledWith('crane.attachKernel', [NB, '/run/k/kernel-v3ab.json']);
  });

  it('Attach to kernel can ask the notebook\'s kernel through the Jupyter extension (a user action after a refusal)', async () => {
    openNotebook();
    const { cmds, server, askJupyter } = setup();
    mock.extensions['ms-toolsai.jupyter'] = { isActive: true, exports: {} };
    const asked = () => window.showQuickPick.mock.calls.at(-1)?.[0] as Array<{ label: string }>;
    const ask = async () => {
      const items = asked();
      return items.find((i) => i.label.includes('through the Jupyter extension'));
    };
    window.showQuickPick.mockImplementationOnce(async (items: unknown) => (items as Array<{ label: string }>)[0]);
    askJupyter.mockResolvedValueOnce({ kind: 'declined', message: 'revoked' } as never);
    await cmds.attachKernel();
    expect(await ask()).toBeDefined();
    expect(askJupyter).toHaveBeenCalledTimes(1);
    expect(server.executeCommand).not.toHaveBeenCalled();
    expect(window.showWarningMessage).toHaveBeenCalledWith(expect.stringContaining('Manage Access To Jupyter Kernels'));
    // without the Jupyter extension the choice is not offered
    delete mock.extensions['ms-toolsai.jupyter'];
    window.showQuickPick.mockResolvedValueOnce(undefined as never);
    await cmds.attachKernel();
    expect(await ask()).toBeUndefined();
  });

  it('errors clearly without a notebook', async () => {
    const { cmds } = setup();
    await expect(cmds.checkNotebook()).rejects.toThrow(/open a Jupyter notebook/);
    await expect(cmds.diagnoseCell()).rejects.toThrow(/select a Python code cell/);
  });

  it('routes code-action invocations of server commands to the agent and the diagnosis view', async () => {
    const { cmds, agent, diagnosis } = setup();
    const next = vi.fn(async () => ({ notebookUri: NB, cellUri: CELL, verdict: null, markdown: 'm', usage: null }));
    expect(await cmds.routeServerCommand('crane.fixCell', [CELL], next)).toBe('fixed');
    expect(agent.fix).toHaveBeenCalledWith(CELL, {});
    expect(next).not.toHaveBeenCalled();
    await cmds.routeServerCommand('crane.diagnoseCell', [CELL], next);
    expect(next).toHaveBeenCalledWith('crane.diagnoseCell', [CELL]);
    expect(diagnosis.show).toHaveBeenCalled();
    const spec = vi.fn(async () => ({ cellUri: CELL, cell: 1, sandbox: { verdict: 'no-crash' }, markdown: 'clean' }));
    await cmds.routeServerCommand('crane.runSpeculatively', [CELL], spec as never);
    expect(spec).toHaveBeenCalledWith('crane.runSpeculatively', [CELL]);
    expect(diagnosis.showSpeculative).toHaveBeenCalledWith(expect.objectContaining({ sandbox: { verdict: 'no-crash' } }), CELL);
    await cmds.routeServerCommand('crane.other', [1], next);
    expect(next).toHaveBeenLastCalledWith('crane.other', [1]);
    expect(agent.fix).toHaveBeenCalledTimes(1);
  });
});

describe('helpers', () => {
  it('summarizes check results', () => {
    expect(summarizeCheck({ cells: [{ findings: [] }, { findings: [1, 2] }], crashes: 1 }).text).toBe('CRANE: 2 crash risks in 1 cell.');
    expect(summarizeCheck({ cells: [] }).text).toContain('no crash risks');
    expect(summarizeCheck(null).findings).toBe(0);
  });

  it('lists kernel connection files newest first from the runtime dirs', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'crane-rt-'));
    fs.writeFileSync(path.join(dir, 'kernel-v3aa.json'), '{}');
    fs.writeFileSync(path.join(dir, 'other.json'), '{}');
    const newer = path.join(dir, 'kernel-123.json');
    fs.writeFileSync(newer, '{}');
    fs.utimesSync(newer, new Date(), new Date(Date.now() + 10_000));
    expect(listConnectionFiles([dir, '/nonexistent']).map((f) => path.basename(f.path))).toEqual(['kernel-123.json', 'kernel-v3aa.json']);
    expect(runtimeDirs({ JUPYTER_RUNTIME_DIR: '/j', XDG_RUNTIME_DIR: '/run/user/1' }, 'linux', '/h')).toEqual([
      '/j',
      '/run/user/1/jupyter/runtime',
      '/h/.local/share/jupyter/runtime',
    ]);
    expect(runtimeDirs({}, 'darwin', '/h')).toEqual(['/h/Library/Jupyter/runtime']);
  });
});
