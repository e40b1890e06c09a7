/**
 * Shows CRANE reports (diagnoses, speculative runs, agent reports) as read-only markdown documents
 * (`crane-diagnosis:` scheme) in the markdown preview beside the notebook.
 */
import * as vscode from 'vscode';
import { formatDiagnosis } from './diagnosisFormat';
import type { DiagnosisParams, SpeculativeResult } from './protocol';
import { formatSpeculative } from './speculativeFormat';

export type ReportKind = 'diagnosis' | 'speculative' | 'agent';

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

  /**
   * The virtual document URI for a cell and kind of report (stable per cell and kind, so a new diagnosis
   * replaces the old one).
   */
  uriFor(cellUri: string, kind: ReportKind = 'diagnosis'): vscode.Uri {
    const key = `${kind}\n${cellUri}`;
    let id = this.keys.get(key);
    if (!id) {
      id = String(++this.counter);
      this.keys.set(key, id);
    }
    return vscode.Uri.from({ scheme: DIAGNOSIS_SCHEME, path: `/${kind}-${id}.md` });
  }

  /** Updates the cell's diagnosis and opens its preview. Duplicate deliveries within 2 s are shown once. */
  async show(d: DiagnosisParams): Promise<vscode.Uri> {
    return this.showMarkdown(d.cellUri, 'diagnosis', formatDiagnosis(d, cellLabel(d.cellUri)));
  }

  /** Shows a speculative run's result in the same preview. */
  async showSpeculative(r: SpeculativeResult, cellUri: string): Promise<vscode.Uri> {
    return this.showMarkdown(r.cellUri || cellUri, 'speculative', formatSpeculative(r, cellLabel(r.cellUri || cellUri)));
  }

  /** Updates the report document of a cell and opens its preview (a duplicate within 2 s is not re-opened). */
  async showMarkdown(cellUri: string, kind: ReportKind, text: string): Promise<vscode.Uri> {
    const uri = this.uriFor(cellUri, kind);
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
