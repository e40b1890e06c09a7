/**
 * A small in-memory `vscode` for unit tests (aliased in vitest.config.ts; test/setup.ts also routes
 * CommonJS `require('vscode')` here). Only what CRANE's modules use. `mock` holds the knobs.
 */
import { vi } from 'vitest';

type Listener<T> = (e: T) => unknown;

export class EventEmitter<T> {
  private listeners = new Set<Listener<T>>();
  event = (listener: Listener<T>) => {
    this.listeners.add(listener);
    return { dispose: () => this.listeners.delete(listener) };
  };
  fire(e: T): void {
    for (const l of [...this.listeners]) {
      l(e);
    }
  }
  dispose(): void {
    this.listeners.clear();
  }
}

export class Uri {
  private constructor(
    readonly scheme: string,
    readonly authority: string,
    readonly path: string,
    readonly query: string,
    readonly fragment: string,
    private readonly raw?: string,
  ) {}
  static parse(value: string): Uri {
    const m = /^([a-zA-Z][\w+.-]*):(?:\/\/([^/?#]*))?([^?#]*)(?:\?([^#]*))?(?:#(.*))?$/.exec(value);
    if (!m) {
      throw new Error(`bad uri ${value}`);
    }
    return new Uri(m[1], m[2] ?? '', m[3] ?? '', m[4] ?? '', m[5] ?? '', value);
  }
  static file(p: string): Uri {
    return new Uri('file', '', p, '', '');
  }
  static from(c: { scheme: string; authority?: string; path?: string; query?: string; fragment?: string }): Uri {
    return new Uri(c.scheme, c.authority ?? '', c.path ?? '', c.query ?? '', c.fragment ?? '');
  }
  get fsPath(): string {
    return this.path;
  }
  with(c: Partial<{ scheme: string; path: string; query: string; fragment: string }>): Uri {
    return new Uri(c.scheme ?? this.scheme, this.authority, c.path ?? this.path, c.query ?? this.query, c.fragment ?? this.fragment);
  }
  toJSON(): unknown {
    return { scheme: this.scheme, path: this.path, fragment: this.fragment };
  }
  toString(): string {
    if (this.raw) {
      return this.raw;
    }
    const auth = this.scheme === 'file' || this.authority ? `//${this.authority}` : '';
    return `${this.scheme}:${auth}${this.path}${this.query ? `?${this.query}` : ''}${this.fragment ? `#${this.fragment}` : ''}`;
  }
}

export class Position {
  constructor(readonly line: number, readonly character: number) {}
}

export class Range {
  readonly start: Position;
  readonly end: Position;
  constructor(a: number | Position, b: number | Position, c?: number, d?: number) {
    if (typeof a === 'number') {
      this.start = new Position(a, b as number);
      this.end = new Position(c as number, d as number);
    } else {
      this.start = a;
      this.end = b as Position;
    }
  }
}

export class TextEdit {
  constructor(readonly range: Range, readonly newText: string) {}
}

type EntryMetadata = { needsConfirmation: boolean; label: string; description?: string };

export class WorkspaceEdit {
  readonly edits: Array<{ uri: Uri; range: Range; newText: string; metadata?: EntryMetadata }> = [];
  replace(uri: Uri, range: Range, newText: string, metadata?: EntryMetadata): void {
    this.edits.push({ uri, range, newText, metadata });
  }
  /** The form vscode-languageclient's protocol converter uses: `[TextEdit, metadata]` pairs. */
  set(uri: Uri, edits: Array<TextEdit | [TextEdit, EntryMetadata | undefined]>): void {
    for (const e of edits) {
      const [edit, metadata] = Array.isArray(e) ? e : [e, undefined];
      this.edits.push({ uri, range: edit.range, newText: edit.newText, metadata });
    }
  }
  get size(): number {
    return new Set(this.edits.map((e) => e.uri.toString())).size;
  }
}

// base classes vscode-languageclient's converters extend at load time
export class CallHierarchyItem {}
export class CodeLens {}
export class CompletionItem {}
export class DocumentLink {}
export class InlayHint {}
export class SymbolInformation {}
export class TypeHierarchyItem {}
export class CodeAction {}
export class Diagnostic {}

/** `CodeActionKind.X` for any X (the converter maps kinds when it is created). */
export const CodeActionKind: Record<string, string> = new Proxy({} as Record<string, string>, {
  get: (_t, key) => (typeof key === 'string' ? `kind:${key}` : undefined),
});

export class ThemeColor {
  constructor(readonly id: string) {}
}

export class CancellationTokenSource {
  private emitter = new EventEmitter<void>();
  token = { isCancellationRequested: false, onCancellationRequested: this.emitter.event };
  cancel(): void {
    this.token.isCancellationRequested = true;
    this.emitter.fire();
  }
  dispose(): void {}
}

export enum ProgressLocation {
  SourceControl = 1,
  Window = 10,
  Notification = 15,
}
export enum StatusBarAlignment {
  Left = 1,
  Right = 2,
}
export enum NotebookCellKind {
  Markup = 1,
  Code = 2,
}
export enum QuickPickItemKind {
  Separator = -1,
  Default = 0,
}
export enum OverviewRulerLane {
  Left = 1,
}
export enum ViewColumn {
  Active = -1,
  Beside = -2,
  One = 1,
}

export function createStatusBarItem() {
  return { text: '', tooltip: '', command: undefined, name: '', backgroundColor: undefined, show: vi.fn(), hide: vi.fn(), dispose: vi.fn() };
}

export function createLogChannel() {
  const lines: string[] = [];
  const push = (level: string) => (msg: string) => lines.push(`[${level}] ${msg}`);
  return {
    lines,
    info: vi.fn(push('info')),
    warn: vi.fn(push('warn')),
    error: vi.fn(push('error')),
    debug: vi.fn(push('debug')),
    trace: vi.fn(push('trace')),
    append: vi.fn(),
    appendLine: vi.fn(push('line')),
    show: vi.fn(),
    dispose: vi.fn(),
  };
}

/** Knobs for tests. */
export const mock = {
  config: {} as Record<string, unknown>,
  extensions: {} as Record<string, unknown>,
  logChannel: createLogChannel(),
  reset(): void {
    this.config = {};
    this.extensions = {};
    this.logChannel = createLogChannel();
    window.activeNotebookEditor = undefined;
    window.activeTextEditor = undefined;
    window.visibleTextEditors = [];
    window.visibleNotebookEditors = [];
    workspace.notebookDocuments = [];
    workspace.workspaceFolders = undefined;
    vi.clearAllMocks();
  },
};

export const window = {
  activeNotebookEditor: undefined as unknown,
  activeTextEditor: undefined as unknown,
  visibleTextEditors: [] as unknown[],
  visibleNotebookEditors: [] as unknown[],
  createOutputChannel: vi.fn(() => mock.logChannel),
  createStatusBarItem: vi.fn(createStatusBarItem),
  showInformationMessage: vi.fn(async (..._a: unknown[]) => undefined as unknown),
  showWarningMessage: vi.fn(async (..._a: unknown[]) => undefined as unknown),
  showErrorMessage: vi.fn(async (..._a: unknown[]) => undefined as unknown),
  showQuickPick: vi.fn(async (..._a: unknown[]) => undefined as unknown),
  showInputBox: vi.fn(async (..._a: unknown[]) => undefined as string | undefined),
  showOpenDialog: vi.fn(async (..._a: unknown[]) => undefined as unknown),
  createWebviewPanel: vi.fn(() => {
    const messages = new EventEmitter<unknown>();
    const disposed = new EventEmitter<void>();
    return {
      webview: {
        html: '',
        cspSource: 'vscode-resource:',
        postMessage: vi.fn(async (_m: unknown) => true),
        onDidReceiveMessage: messages.event,
        receive: (m: unknown) => messages.fire(m),
      },
      reveal: vi.fn(),
      onDidDispose: disposed.event,
      dispose: vi.fn(() => disposed.fire()),
    };
  }),
  createTextEditorDecorationType: vi.fn(() => ({ dispose: vi.fn() })),
  withProgress: vi.fn(async (_options: unknown, task: (progress: { report: (v: unknown) => void }) => unknown) =>
    task({ report: vi.fn() }),
  ),
  onDidChangeActiveNotebookEditor: vi.fn(() => ({ dispose: vi.fn() })),
  onDidChangeVisibleNotebookEditors: vi.fn(() => ({ dispose: vi.fn() })),
};

function getPath(obj: Record<string, unknown>, key: string): unknown {
  return obj[key];
}

export const workspace = {
  workspaceFolders: undefined as unknown as Array<{ uri: Uri }> | undefined,
  notebookDocuments: [] as unknown[],
  getConfiguration: vi.fn((section?: string) => ({
    get<T>(key: string, fallback?: T): T | undefined {
      const full = section ? `${section}.${key}` : key;
      const v = getPath(mock.config, full);
      return (v === undefined ? fallback : v) as T | undefined;
    },
    has: (key: string) => getPath(mock.config, section ? `${section}.${key}` : key) !== undefined,
    update: vi.fn(),
  })),
  applyEdit: vi.fn(async (_e: WorkspaceEdit, _metadata?: { isRefactoring?: boolean }) => true),
  openTextDocument: vi.fn(async (uri: Uri) => ({ uri, getText: () => '' })),
  registerTextDocumentContentProvider: vi.fn(() => ({ dispose: vi.fn() })),
  onDidChangeConfiguration: vi.fn(() => ({ dispose: vi.fn() })),
};

export const extensions = {
  getExtension: vi.fn((id: string) => mock.extensions[id]),
};

export const commands = {
  executeCommand: vi.fn(async (..._a: unknown[]) => undefined as unknown),
  registerCommand: vi.fn((id: string, fn: (...a: unknown[]) => unknown) => ({ id, fn, dispose: vi.fn() })),
};

export const env = {
  clipboard: { writeText: vi.fn(async () => undefined) },
};

export default {
  EventEmitter,
  Uri,
  Position,
  Range,
  WorkspaceEdit,
  TextEdit,
  CallHierarchyItem,
  CodeLens,
  CompletionItem,
  DocumentLink,
  InlayHint,
  SymbolInformation,
  TypeHierarchyItem,
  CodeAction,
  Diagnostic,
  CodeActionKind,
  ThemeColor,
  CancellationTokenSource,
  StatusBarAlignment,
  ProgressLocation,
  NotebookCellKind,
  QuickPickItemKind,
  OverviewRulerLane,
  ViewColumn,
  window,
  workspace,
  extensions,
  commands,
  env,
};
