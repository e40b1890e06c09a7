/**
 * `crane.ui.runCells(notebookUri, cellUris)`: what the "Run cell K first (tested)" quick fix does once the user
 * picks it. LSP cannot run notebook cells, so the server's code action carries this client-side command; the
 * cells run through VS Code's own `notebook.cell.execute`, in the given order, each after the previous one —
 * a real run in the user's kernel, the user's decision.
 */
import * as vscode from 'vscode';

export const EXECUTE_CELL = 'notebook.cell.execute';

/** Runs the cells (by URI, as the server sent them) of an open notebook in order; their indices. */
export async function runCells(notebookUri: unknown, cellUris: unknown): Promise<number[]> {
  if (typeof notebookUri !== 'string' || !Array.isArray(cellUris) || !cellUris.every((u) => typeof u === 'string')) {
    throw new Error('crane.ui.runCells needs a notebook URI and a list of cell URIs.');
  }
  const nb = vscode.workspace.notebookDocuments.find((n) => n.uri.toString() === notebookUri);
  if (!nb) {
    throw new Error('the notebook of this quick fix is not open any more.');
  }
  const cells = nb.getCells();
  const indices = (cellUris as string[]).map((u) => cells.findIndex((c) => c.document.uri.toString() === u));
  if (indices.some((i) => i < 0)) {
    throw new Error('a cell this quick fix runs is no longer in the notebook.');
  }
  for (const i of indices) {
    await vscode.commands.executeCommand(EXECUTE_CELL, { ranges: [{ start: i, end: i + 1 }], document: nb.uri });
  }
  return indices;
}
