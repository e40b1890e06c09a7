/** The CRANE status bar item: renders the status model; clicking shows the details. */
import * as vscode from 'vscode';
import { initialStatus, reduceStatus, renderStatus, StatusEvent, StatusState } from './statusModel';

export const SHOW_DETAILS_COMMAND = 'crane.ui.showStatus';

export class StatusBar implements vscode.Disposable {
  private state: StatusState = initialStatus();
  private readonly item: vscode.StatusBarItem;
  private readonly listeners = new Set<(s: StatusState) => void>();

  constructor() {
    this.item = vscode.window.createStatusBarItem('crane.status', vscode.StatusBarAlignment.Left, 50);
    this.item.name = 'CRANE';
    this.item.command = SHOW_DETAILS_COMMAND;
    this.render();
    this.item.show();
  }

  get current(): StatusState {
    return this.state;
  }

  update(e: StatusEvent): void {
    this.state = reduceStatus(this.state, e);
    this.render();
    for (const l of this.listeners) {
      l(this.state);
    }
  }

  onDidChange(listener: (s: StatusState) => void): vscode.Disposable {
    this.listeners.add(listener);
    return { dispose: () => this.listeners.delete(listener) };
  }

  /** Runs `work` with the status showing "analysing". */
  async busy<T>(title: string, work: () => Promise<T>): Promise<T> {
    this.update({ type: 'busy', delta: 1, title });
    try {
      return await work();
    } finally {
      this.update({ type: 'busy', delta: -1 });
    }
  }

  private render(): void {
    const view = renderStatus(this.state);
    this.item.text = view.text;
    this.item.tooltip = view.tooltip;
    this.item.backgroundColor =
      view.kind === 'error'
        ? new vscode.ThemeColor('statusBarItem.errorBackground')
        : view.kind === 'warning'
          ? new vscode.ThemeColor('statusBarItem.warningBackground')
          : undefined;
  }

  dispose(): void {
    this.listeners.clear();
    this.item.dispose();
  }
}
