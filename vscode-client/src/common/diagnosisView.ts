/** Shows diagnoses as read-only markdown documents (`crane-diagnosis:` scheme) in the markdown preview. */
import * as vscode from 'vscode';
import { formatDiagnosis } from './diagnosisFormat';
import type { DiagnosisParams } from './protocol';

export const DIAGNOSIS_SCHEME = 'crane-diagnosis';

export function cellLabel(cellUri: string): string {
  try {
    const uri = vscode.Uri.parse(cellUri);
    const nb = vscode.workspace.notebookDocuments.find((n) => n.getCells().some((c) => c.document.uri.toString() === cellUri));
    const index = nb?.getCells().findIndex((c) => c.document.uri.toString() === cellUri);
    const name = uri.path.split('/').pop() ?? uri.path;
    return index !== undefined && index >= 0 ? `${name}, cell ${index + 1}` : name;
  } catch {
    return cellUri;
  }
}

export class DiagnosisView implements vscode.TextDocumentContentProvider, vscode.Disposable {
  private readonly contents = new Map<string, string>();
  private readonly emitter = new vscode.EventEmitter<vscode.Uri>();
  readonly onDidChange = this.emitter.event;
  private last: { key: string; at: number } | undefined;
  private counter = 0;
  private readonly keys = new Map<string, string>();

  provideTextDocumentContent(uri: vscode.Uri): string {
    return this.contents.get(uri.toString()) ?? '# CRANE diagnosis\n\nThis diagnosis is no longer available.';
  }

  /** The virtual document URI for a cell (stable per cell, so a new diagnosis replaces the old one). */
  uriFor(cellUri: string): vscode.Uri {
    let id = this.keys.get(cellUri);
    if (!id) {
      id = String(++this.counter);
      this.keys.set(cellUri, id);
    }
    return vscode.Uri.from({ scheme: DIAGNOSIS_SCHEME, path: `/diagnosis-${id}.md` });
  }

  /** Updates the cell's diagnosis and opens its preview. Duplicate deliveries within 2 s are shown once. */
  async show(d: DiagnosisParams): Promise<vscode.Uri> {
    const text = formatDiagnosis(d, cellLabel(d.cellUri));
    const uri = this.uriFor(d.cellUri);
    const dedupeKey = `${uri.toString()}\n${text}`;
    const now = Date.now();
    const duplicate = this.last?.key === dedupeKey && now - this.last.at < 2000;
    this.last = { key: dedupeKey, at: now };
    this.contents.set(uri.toString(), text);
    this.emitter.fire(uri);
    if (!duplicate) {
      await vscode.commands.executeCommand('markdown.showPreviewToSide', uri);
    }
    return uri;
  }

  dispose(): void {
    this.emitter.dispose();
    this.contents.clear();
  }
}
