/**
 * The repair agent: runs `crane.fixCell`, streams `crane/agentStep` into a webview panel, stops the run,
 * and applies the final proposal only through the refactor preview (or shows it as a diff).
 */
import * as crypto from 'node:crypto';
import * as vscode from 'vscode';
import { agentPanelHtml, isPanelAction, PanelAction } from './agentHtml';
import { AgentEvent, AgentState, initialAgentState, isActive, reduceAgent } from './agentState';
import { applyTextEdits, textEditsByUri, toConfirmedWorkspaceEdit } from './edits';
import { highlightChanges } from './highlight';
import { errorMessage, traceError, traceInfo } from './log';
import { AgentStepParams, ServerCommands } from './protocol';
import type { CraneServer } from './serverApi';

export const PROPOSAL_SCHEME = 'crane-proposal';

export interface AgentHooks {
  started(runKey: string): void;
  stopped(runKey: string): void;
}

export class AgentController implements vscode.TextDocumentContentProvider, vscode.Disposable {
  private state: AgentState = initialAgentState();
  private panel: vscode.WebviewPanel | undefined;
  private runKey = '';
  private readonly proposals = new Map<string, string>();
  private readonly changed = new vscode.EventEmitter<vscode.Uri>();
  readonly onDidChange = this.changed.event;

  constructor(
    private readonly server: () => CraneServer | undefined,
    private readonly hooks: AgentHooks,
  ) {}

  get current(): AgentState {
    return this.state;
  }

  /** Starts a run for the cell (the palette command and the code action both end up here). */
  async fix(cellUri: string, goal?: string): Promise<unknown> {
    const server = this.server();
    if (!server) {
      throw new Error('The CRANE server is not running.');
    }
    if (isActive(this.state)) {
      const choice = await vscode.window.showWarningMessage(
        'CRANE: an agent run is in progress.',
        'Show agent',
        'Stop it',
      );
      if (choice === 'Stop it') {
        await this.stop();
      } else {
        this.reveal();
      }
      return undefined;
    }
    this.dispatch({ type: 'start', cellUri });
    this.reveal();
    const key = `run-${Date.now()}`;
    this.runKey = key;
    this.hooks.started(key);
    const args: unknown[] = goal ? [cellUri, goal] : [cellUri];
    try {
      const result = await server.executeCommand(ServerCommands.fixCell, args);
      this.dispatch({ type: 'finished', result });
      return result;
    } catch (err) {
      this.dispatch({ type: 'failed', message: errorMessage(err) });
      traceError('agent run failed', err);
      return undefined;
    } finally {
      this.hooks.stopped(key);
    }
  }

  onStep(params: AgentStepParams): void {
    this.dispatch({ type: 'step', params });
  }

  async stop(): Promise<boolean> {
    const server = this.server();
    if (!server) {
      return false;
    }
    this.dispatch({ type: 'stopRequested' });
    const args = this.state.runId ? [this.state.runId] : [];
    const result = await server.executeCommand<{ stopped?: boolean }>(ServerCommands.stopAgent, args);
    traceInfo(`agent stop: ${JSON.stringify(result)}`);
    return Boolean(result?.stopped);
  }

  /** Applies the proposal through VS Code's refactor preview; returns true when the user applied it. */
  async apply(): Promise<boolean> {
    const proposal = this.state.proposal;
    if (!proposal || this.state.status !== 'proposed') {
      return false;
    }
    const edit = toConfirmedWorkspaceEdit(proposal.edit, 'CRANE agent fix');
    const applied = await vscode.workspace.applyEdit(edit);
    if (applied) {
      this.dispatch({ type: 'applied' });
      highlightChanges(proposal.edit);
    }
    return applied;
  }

  /** Opens a diff of each edited document against the proposed text. */
  async showDiff(): Promise<void> {
    const proposal = this.state.proposal;
    if (!proposal) {
      return;
    }
    for (const [uriString, edits] of textEditsByUri(proposal.edit)) {
      const uri = vscode.Uri.parse(uriString);
      const doc = await vscode.workspace.openTextDocument(uri);
      const proposed = vscode.Uri.from({ scheme: PROPOSAL_SCHEME, path: uri.path, query: crypto.randomUUID() });
      this.proposals.set(proposed.toString(), applyTextEdits(doc.getText(), edits));
      await vscode.commands.executeCommand('vscode.diff', uri, proposed, 'CRANE agent proposal (current ↔ proposed)');
    }
  }

  provideTextDocumentContent(uri: vscode.Uri): string {
    return this.proposals.get(uri.toString()) ?? '';
  }

  /** Runs the edited cells — only on the user's explicit request. */
  async runChangedCells(): Promise<void> {
    const proposal = this.state.proposal;
    if (!proposal || this.state.status !== 'applied') {
      return;
    }
    for (const uriString of textEditsByUri(proposal.edit).keys()) {
      const target = vscode.Uri.parse(uriString).toString();
      for (const nb of vscode.workspace.notebookDocuments) {
        const index = nb.getCells().findIndex((c) => c.document.uri.toString() === target);
        if (index >= 0) {
          await vscode.commands.executeCommand('notebook.cell.execute', {
            ranges: [{ start: index, end: index + 1 }],
            document: nb.uri,
          });
        }
      }
    }
  }

  discard(): void {
    this.dispatch({ type: 'discarded' });
  }

  async handleAction(action: PanelAction): Promise<void> {
    switch (action) {
      case 'stop':
        await this.stop();
        return;
      case 'pause':
        this.dispatch({ type: 'pause' });
        return;
      case 'resume':
        this.dispatch({ type: 'resume' });
        return;
      case 'step':
        this.dispatch({ type: 'stepOnce' });
        return;
      case 'apply':
        await this.apply();
        return;
      case 'diff':
        await this.showDiff();
        return;
      case 'discard':
        this.discard();
        return;
      case 'run':
        await this.runChangedCells();
        return;
    }
  }

  reveal(): void {
    if (this.panel) {
      this.panel.reveal(vscode.ViewColumn.Beside, true);
      this.post();
      return;
    }
    const panel = vscode.window.createWebviewPanel(
      'crane.agent',
      'CRANE agent',
      { viewColumn: vscode.ViewColumn.Beside, preserveFocus: true },
      { enableScripts: true, retainContextWhenHidden: true },
    );
    const nonce = crypto.randomBytes(16).toString('base64');
    panel.webview.html = agentPanelHtml(nonce, panel.webview.cspSource);
    panel.webview.onDidReceiveMessage(async (m: { type?: string; action?: unknown }) => {
      if (m?.type === 'ready') {
        this.post();
      } else if (m?.type === 'action' && isPanelAction(m.action)) {
        try {
          await this.handleAction(m.action);
        } catch (err) {
          traceError(`agent panel: ${m.action} failed`, err);
          void vscode.window.showErrorMessage(`CRANE: ${m.action} failed: ${errorMessage(err)}`);
        }
      }
    });
    panel.onDidDispose(() => {
      this.panel = undefined;
    });
    this.panel = panel;
  }

  private dispatch(e: AgentEvent): void {
    this.state = reduceAgent(this.state, e);
    this.post();
  }

  private post(): void {
    void this.panel?.webview.postMessage({ type: 'state', state: this.state });
  }

  dispose(): void {
    this.panel?.dispose();
    this.changed.dispose();
    if (this.runKey) {
      this.hooks.stopped(this.runKey);
    }
  }
}
