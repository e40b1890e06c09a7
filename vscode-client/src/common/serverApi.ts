/** What the UI modules need from the running server (implemented by server.ts, faked in tests). */
import type * as vscode from 'vscode';

export interface CraneServer {
  /** `workspace/executeCommand` with the server-side command id and positional arguments. */
  executeCommand<T = unknown>(command: string, args: unknown[]): Promise<T>;
  /** A custom request such as `crane/attachKernel`. */
  sendRequest<T = unknown>(method: string, params: unknown): Promise<T>;
  /** An LSP WorkspaceEdit as a VS Code one (the language client's protocol converter: change annotations included). */
  asWorkspaceEdit(edit: unknown): Promise<vscode.WorkspaceEdit>;
}

export class ServerNotRunningError extends Error {
  constructor() {
    super('The CRANE server is not running. Use "CRANE: Restart server" or see "CRANE: Show log".');
  }
}
