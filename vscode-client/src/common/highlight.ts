/** Highlights the lines an applied agent edit changed, for a while. */
import * as vscode from 'vscode';
import { changedLineRanges, LspWorkspaceEdit, textEditsByUri } from './edits';

export const HIGHLIGHT_MS = 8000;

let decoration: vscode.TextEditorDecorationType | undefined;

function decorationType(): vscode.TextEditorDecorationType {
  decoration ??= vscode.window.createTextEditorDecorationType({
    isWholeLine: true,
    backgroundColor: new vscode.ThemeColor('diffEditor.insertedLineBackground'),
    overviewRulerColor: new vscode.ThemeColor('editorOverviewRuler.addedForeground'),
    overviewRulerLane: vscode.OverviewRulerLane.Left,
  });
  return decoration;
}

/** Decorates the changed lines in visible editors; returns how many editors were decorated. */
export function highlightChanges(edit: LspWorkspaceEdit, ms = HIGHLIGHT_MS): number {
  const type = decorationType();
  let count = 0;
  for (const [uri, edits] of textEditsByUri(edit)) {
    const target = vscode.Uri.parse(uri).toString();
    const ranges = changedLineRanges(edits).map(([a, b]) => new vscode.Range(a, 0, b, 0));
    for (const editor of vscode.window.visibleTextEditors) {
      if (editor.document.uri.toString() === target) {
        editor.setDecorations(type, ranges);
        count++;
        setTimeout(() => editor.setDecorations(type, []), ms);
      }
    }
  }
  return count;
}

export function disposeHighlight(): void {
  decoration?.dispose();
  decoration = undefined;
}
