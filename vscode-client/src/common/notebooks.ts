/** Finding the notebook and cell a command applies to. */
import * as vscode from 'vscode';

export const NOTEBOOK_TYPES = ['jupyter-notebook', 'interactive'];
export const CELL_SCHEME = 'vscode-notebook-cell';

export function isCraneNotebook(nb: vscode.NotebookDocument): boolean {
  return NOTEBOOK_TYPES.includes(nb.notebookType);
}

export function activeNotebook(): vscode.NotebookDocument | undefined {
  const nb = vscode.window.activeNotebookEditor?.notebook;
  return nb && isCraneNotebook(nb) ? nb : undefined;
}

/** The focused code cell: the active cell editor, else the notebook editor's selection. */
export function activeCell(): vscode.NotebookCell | undefined {
  const editorDoc = vscode.window.activeTextEditor?.document;
  if (editorDoc?.uri.scheme === CELL_SCHEME) {
    for (const nb of vscode.workspace.notebookDocuments) {
      const cell = nb.getCells().find((c) => c.document.uri.toString() === editorDoc.uri.toString());
      if (cell) {
        return cell.kind === vscode.NotebookCellKind.Code ? cell : undefined;
      }
    }
  }
  const editor = vscode.window.activeNotebookEditor;
  if (!editor || !isCraneNotebook(editor.notebook)) {
    return undefined;
  }
  const index = editor.selection?.start ?? editor.selections?.[0]?.start;
  if (index === undefined || index >= editor.notebook.cellCount) {
    return undefined;
  }
  const cell = editor.notebook.cellAt(index);
  return cell.kind === vscode.NotebookCellKind.Code ? cell : undefined;
}

/** The notebook that owns a cell URI. */
export function notebookOfCell(cellUri: string): vscode.NotebookDocument | undefined {
  return vscode.workspace.notebookDocuments.find((nb) =>
    nb.getCells().some((c) => c.document.uri.toString() === cellUri),
  );
}
