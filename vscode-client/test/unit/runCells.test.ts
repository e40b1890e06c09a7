import { beforeEach, describe, expect, it } from 'vitest';
import { commands, mock, NotebookCellKind, Uri, workspace } from '../vscode.mock';
import { Commands, UiCommands } from '../../src/common/commands';
import { ClientCommands } from '../../src/common/protocol';
import { EXECUTE_CELL, runCells } from '../../src/common/runCells';
import { StatusBar } from '../../src/common/statusBar';

const NB = 'file:///tmp/x/nb.ipynb';
const cellUri = (i: number) => `vscode-notebook-cell:/tmp/x/nb.ipynb#W${i}sZmlsZQ%3D%3D`;

function openNotebook(n: number) {
  const cells = Array.from({ length: n }, (_, i) => ({ kind: NotebookCellKind.Code, document: { uri: Uri.parse(cellUri(i)) } }));
  const notebook = { uri: Uri.parse(NB), notebookType: 'jupyter-notebook', cellCount: n, cellAt: (i: number) => cells[i], getCells: () => cells };
  workspace.notebookDocuments = [notebook];
  return notebook;
}

describe('crane.ui.runCells (the "Run cell K first" quick fix)', () => {
  beforeEach(() => mock.reset());

  it('runs the cells through notebook.cell.execute, one at a time, in the given order', async () => {
    const nb = openNotebook(5);
    const order: number[] = [];
    commands.executeCommand.mockImplementation(async (id: unknown, arg: unknown) => {
      expect(id).toBe(EXECUTE_CELL);
      const { ranges, document } = arg as { ranges: Array<{ start: number; end: number }>; document: unknown };
      expect(document).toBe(nb.uri);
      expect(ranges).toHaveLength(1);
      order.push(ranges[0].start);
      expect(ranges[0].end).toBe(ranges[0].start + 1);
      return undefined;
    });
    const indices = await runCells(NB, [cellUri(3), cellUri(1)]);
    expect(indices).toEqual([3, 1]);
    expect(order).toEqual([3, 1]);
  });

  it('waits for each cell before starting the next', async () => {
    openNotebook(3);
    let running = 0;
    let max = 0;
    commands.executeCommand.mockImplementation(async () => {
      running += 1;
      max = Math.max(max, running);
      await new Promise((r) => setTimeout(r, 5));
      running -= 1;
      return undefined;
    });
    await runCells(NB, [cellUri(0), cellUri(2)]);
    expect(max).toBe(1);
  });

  it('refuses cells that are gone, a closed notebook and bad arguments, running nothing', async () => {
    openNotebook(2);
    await expect(runCells(NB, [cellUri(0), cellUri(7)])).rejects.toThrow(/no longer in the notebook/);
    await expect(runCells('file:///other.ipynb', [cellUri(0)])).rejects.toThrow(/not open/);
    await expect(runCells(NB, 'not a list')).rejects.toThrow(/needs a notebook URI/);
    expect(commands.executeCommand).not.toHaveBeenCalled();
  });

  it('is registered under the id the server puts into its code actions', async () => {
    openNotebook(2);
    const cmds = new Commands({ server: () => ({}) as never, status: new StatusBar(), agent: {} as never,
      diagnosis: {} as never, keys: {} as never, restart: async () => undefined, runtimeDirs: () => [],
      askJupyter: async () => undefined as never });
    cmds.register();
    expect(UiCommands.runCells).toBe(ClientCommands.runCells);
    const registered = commands.registerCommand.mock.calls.find((c) => c[0] === ClientCommands.runCells);
    expect(registered).toBeDefined();
    await (registered![1] as (...a: unknown[]) => Promise<unknown>)(NB, [cellUri(1)]);
    expect(commands.executeCommand).toHaveBeenCalledWith(EXECUTE_CELL, { ranges: [{ start: 1, end: 2 }], document: expect.anything() });
  });
});
