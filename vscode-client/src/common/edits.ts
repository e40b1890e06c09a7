/**
 * LSP WorkspaceEdits from the agent (plain JSON, no `vscode` import): confirmation on every change, the proposed
 * text for the diff view, the changed lines for the highlight.
 */

export interface LspPosition {
  line: number;
  character: number;
}
export interface LspRange {
  start: LspPosition;
  end: LspPosition;
}
export interface LspTextEdit {
  range: LspRange;
  newText: string;
}
export interface LspWorkspaceEdit {
  changes?: Record<string, LspTextEdit[]>;
  documentChanges?: unknown[];
}

function isTextEdit(v: unknown): v is LspTextEdit {
  const e = v as LspTextEdit;
  return !!e && typeof e.newText === 'string' && !!e.range && !!e.range.start && !!e.range.end;
}

function isWorkspaceEdit(v: unknown): v is LspWorkspaceEdit {
  const o = v as LspWorkspaceEdit;
  return !!o && typeof o === 'object' && (typeof o.changes === 'object' || Array.isArray(o.documentChanges));
}

/** The WorkspaceEdit in a command result: the result itself or its `edit` field. */
export function extractEdit(result: unknown): LspWorkspaceEdit | undefined {
  if (isWorkspaceEdit(result)) {
    return result;
  }
  const inner = result && typeof result === 'object' ? (result as { edit?: unknown }).edit : undefined;
  return isWorkspaceEdit(inner) ? inner : undefined;
}

/** Text edits per document URI string (from `changes` and from TextDocumentEdits in `documentChanges`). */
export function textEditsByUri(edit: LspWorkspaceEdit): Map<string, LspTextEdit[]> {
  const out = new Map<string, LspTextEdit[]>();
  const add = (uri: string, edits: unknown[]) => {
    const list = out.get(uri) ?? [];
    list.push(...edits.filter(isTextEdit));
    out.set(uri, list);
  };
  for (const [uri, edits] of Object.entries(edit.changes ?? {})) {
    add(uri, edits);
  }
  for (const dc of edit.documentChanges ?? []) {
    const d = dc as { textDocument?: { uri?: string }; edits?: unknown[] };
    if (d.textDocument?.uri && Array.isArray(d.edits)) {
      add(d.textDocument.uri, d.edits);
    }
  }
  return out;
}

export interface LspChangeAnnotation {
  label: string;
  needsConfirmation?: boolean;
  description?: string;
}

export const FALLBACK_ANNOTATION = 'crane.fix.confirm';

/**
 * The edit with every text edit annotated by a change annotation that needs confirmation, so that
 * `workspace.applyEdit` always opens the refactor preview. The server's annotations are kept when they already
 * need confirmation; text edits without one (or `changes` entries) get a client annotation. File operations
 * (create/rename/delete) are refused: the agent only edits cells.
 */
export function ensureConfirmation(edit: LspWorkspaceEdit, label: string): LspWorkspaceEdit & {
  documentChanges: unknown[];
  changeAnnotations: Record<string, LspChangeAnnotation>;
} {
  const raw = (edit as { changeAnnotations?: Record<string, LspChangeAnnotation> }).changeAnnotations ?? {};
  const annotations: Record<string, LspChangeAnnotation> = {};
  for (const [id, a] of Object.entries(raw)) {
    if (a && typeof a === 'object') {
      annotations[id] = { ...a, label: typeof a.label === 'string' && a.label ? a.label : label, needsConfirmation: true };
    }
  }
  let fallbackUsed = false;
  const annotate = (e: LspTextEdit & { annotationId?: string }) => {
    if (e.annotationId && annotations[e.annotationId]) {
      return { range: e.range, newText: e.newText, annotationId: e.annotationId };
    }
    fallbackUsed = true;
    return { range: e.range, newText: e.newText, annotationId: FALLBACK_ANNOTATION };
  };
  const documentChanges: unknown[] = [];
  for (const dc of edit.documentChanges ?? []) {
    const d = dc as { kind?: string; textDocument?: { uri?: string; version?: number | null }; edits?: unknown[] };
    if (d.kind !== undefined || !d.textDocument?.uri || !Array.isArray(d.edits)) {
      throw new Error(`the proposal contains an unsupported change (${d.kind ?? 'not a text edit'})`);
    }
    documentChanges.push({
      textDocument: { uri: d.textDocument.uri, version: typeof d.textDocument.version === 'number' ? d.textDocument.version : null },
      edits: d.edits.filter(isTextEdit).map(annotate),
    });
  }
  for (const [uri, edits] of Object.entries(edit.changes ?? {})) {
    documentChanges.push({ textDocument: { uri, version: null }, edits: edits.filter(isTextEdit).map(annotate) });
  }
  if (fallbackUsed) {
    annotations[FALLBACK_ANNOTATION] = { label, needsConfirmation: true };
  }
  return { documentChanges, changeAnnotations: annotations };
}

function offsetAt(lines: string[], p: LspPosition): number {
  let off = 0;
  for (let i = 0; i < Math.min(p.line, lines.length); i++) {
    off += lines[i].length + 1;
  }
  const line = lines[p.line] ?? '';
  return Math.min(off + Math.min(p.character, line.length), lines.join('\n').length);
}

/** Applies non-overlapping text edits to `text` (the proposal shown in the diff view). */
export function applyTextEdits(text: string, edits: LspTextEdit[]): string {
  const lines = text.split('\n');
  const withOffsets = edits
    .map((e) => ({ e, start: offsetAt(lines, e.range.start), end: offsetAt(lines, e.range.end) }))
    .sort((a, b) => b.start - a.start || b.end - a.end);
  let out = text;
  for (const { e, start, end } of withOffsets) {
    out = out.slice(0, start) + e.newText + out.slice(end);
  }
  return out;
}

/** Zero-based [first, last] line ranges occupied by the new text after the edits are applied. */
export function changedLineRanges(edits: LspTextEdit[]): Array<[number, number]> {
  const sorted = [...edits].sort(
    (a, b) => a.range.start.line - b.range.start.line || a.range.start.character - b.range.start.character,
  );
  const out: Array<[number, number]> = [];
  let delta = 0;
  for (const e of sorted) {
    const newLines = e.newText.split('\n').length - 1;
    const oldLines = e.range.end.line - e.range.start.line;
    const first = e.range.start.line + delta;
    let last = first + newLines;
    if (newLines > 0 && e.newText.endsWith('\n')) {
      last -= 1; // a trailing newline does not change the next line
    }
    if (e.newText.length > 0) {
      out.push([first, Math.max(first, last)]);
    }
    delta += newLines - oldLines;
  }
  return out;
}
