/** Finding the notebook and cell a command applies to. */
import * as vscode from 'vscode';

/** The notebook types CRANE works on (not the interactive window: see server.ts DOCUMENT_SELECTOR). */
export const NOTEBOOK_TYPES = ['jupyter-notebook'];
export const CELL_SCHEME = 'vscode-notebook-cell';

export function isCraneNotebook(nb: vscode.NotebookDocument): boolean {
  return NOTEBOOK_TYPES.includes(nb.notebookType);
}

export function activeNotebook(): vscode.NotebookDocument | undefined {
  const nb = vscode.window.activeNotebookEditor?.notebook;
  return nb && isCraneNotebook(nb) ? nb : undefined;
}

/** The CRANE notebooks shown in visible notebook editors. */
export function visibleNotebooks(): vscode.NotebookDocument[] {
  return (vscode.window.visibleNotebookEditors ?? []).map((e) => e.notebook).filter(isCraneNotebook);
}

/**
 * The notebook the user is working with: the active notebook editor's; else, while another editor has the
 * focus (e.g. the diagnosis preview beside the notebook), a visible CRANE notebook — `lastUri`'s when it is
 * visible. Undefined when no CRANE notebook is visible.
 */
export function currentNotebook(lastUri?: string): vscode.NotebookDocument | undefined {
  const active = activeNotebook();
  if (active) {
    return active;
  }
  const visible = visibleNotebooks();
  return visible.find((nb) => nb.uri.toString() === lastUri) ?? visible[0];
}

/** Follows the notebook in use across focus changes (what the status bar shows the kernel of). */
export class NotebookFocus {
  private last: string | undefined;

  /** Re-reads the editors; returns the URI of the notebook in use, if any. */
  update(): string | undefined {
    this.last = currentNotebook(this.last)?.uri.toString();
    return this.last;
  }

  get uri(): string | undefined {
    return this.last;
  }
}

/** The editor of `currentNotebook()`. */
function currentNotebookEditor(): vscode.NotebookEditor | undefined {
  const active = vscode.window.activeNotebookEditor;
  if (active && isCraneNotebook(active.notebook)) {
    return active;
  }
  return (vscode.window.visibleNotebookEditors ?? []).find((e) => isCraneNotebook(e.notebook));
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
  const editor = currentNotebookEditor();
  if (!editor) {
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
