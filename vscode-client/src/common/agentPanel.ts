/**
 * The repair agent: runs `crane.fixCell`, streams `crane/agentStep` into a webview panel, paces step-mode runs
 * with `crane.continueAgent`, stops runs with `crane.stopAgent`, and applies the final edit only through VS
 * Code's refactor preview (or shows it as a diff). Nothing runs in the user's kernel unless they press Run cell.
 */
import * as crypto from 'node:crypto';
import * as vscode from 'vscode';
import { agentPanelHtml, isPanelAction, PanelAction } from './agentHtml';
import { AgentEvent, AgentState, initialAgentState, isActive, reduceAgent, shouldAutoContinue } from './agentState';
import { applyTextEdits, ensureConfirmation, textEditsByUri } from './edits';
import { highlightChanges } from './highlight';
import { errorMessage, traceError, traceInfo } from './log';
import { notebookOfCell } from './notebooks';
import { AgentStepParams, FixOptions, ServerCommands } from './protocol';
import type { CraneServer } from './serverApi';

export const PROPOSAL_SCHEME = 'crane-proposal';
export const APPLY_LABEL = 'CRANE agent fix';

export interface AgentHooks {
  started(runKey: string): void;
  stopped(runKey: string): void;
  /** Shows the run's markdown report (the diagnosis preview). */
  showReport?(cellUri: string, markdown: string): Promise<unknown>;
  /** `crane.agent.stepMode`: whether runs start in step mode by default. */
  stepModeDefault?(): boolean;
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
  async fix(cellUri: string, options: FixOptions = {}): Promise<unknown> {
    const server = this.server();
    if (!server) {
      throw new Error('The CRANE server is not running.');
    }
    if (isActive(this.state)) {
      const choice = await vscode.window.showWarningMessage('CRANE: an agent run is in progress.', 'Show agent', 'Stop it');
      if (choice === 'Stop it') {
        await this.stop();
      } else {
        this.reveal();
      }
      return undefined;
    }
    const stepMode = options.stepMode ?? (this.state.stepNext || Boolean(this.hooks.stepModeDefault?.()));
    this.dispatch({ type: 'start', cellUri, stepMode });
    this.reveal();
    const key = `run-${Date.now()}`;
    this.runKey = key;
    this.hooks.started(key);
    const opts: FixOptions = { stepMode };
    if (options.goal) {
      opts.goal = options.goal;
    }
    try {
      const result = await server.executeCommand(ServerCommands.fixCell, [cellUri, opts]);
      this.dispatch({ type: 'finished', result });
      return result;
    } catch (err) {
      const message = errorMessage(err);
      this.dispatch({ type: 'failed', message });
      traceError('agent run failed', err);
      if (/needs a model/i.test(message)) {
        void this.offerModelSettings(message);
      }
      return undefined;
    } finally {
      this.hooks.stopped(key);
    }
  }

  private async offerModelSettings(message: string): Promise<void> {
    const choice = await vscode.window.showWarningMessage(`CRANE: ${message}.`, 'Open settings');
    if (choice === 'Open settings') {
      await vscode.commands.executeCommand('workbench.action.openSettings', 'crane.llm');
    }
  }

  onStep(params: AgentStepParams): void {
    if (!params || typeof params.runId !== 'string' || typeof params.step !== 'number') {
      traceError(`ignored a malformed crane/agentStep: ${JSON.stringify(params)?.slice(0, 300)}`);
      return;
    }
    this.dispatch({ type: 'step', params });
    if (shouldAutoContinue(this.state, params)) {
      void this.continueRun(params.step);
    }
  }

  /** Step mode: lets the proposed action `step` run (`crane.continueAgent`). */
  async continueRun(step: number): Promise<boolean> {
    const server = this.server();
    const runId = this.state.runId;
    if (!server || !runId) {
      return false;
    }
    try {
      const result = await server.executeCommand<{ continued?: boolean }>(ServerCommands.continueAgent, [runId]);
      if (result?.continued) {
        this.dispatch({ type: 'continued', step });
        return true;
      }
      traceInfo(`agent continue ${runId}: ${JSON.stringify(result)}`);
      return false;
    } catch (err) {
      traceError('agent continue failed', err);
      throw err;
    }
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

  /**
   * Applies the proposal through VS Code's refactor preview (every edit carries a change annotation that needs
   * confirmation); returns true when the user applied it.
   */
  async apply(): Promise<boolean> {
    const edit = this.state.edit;
    const server = this.server();
    if (!edit || this.state.status !== 'proposed') {
      return false;
    }
    if (!server) {
      throw new Error('The CRANE server is not running.');
    }
    const confirmed = ensureConfirmation(edit, APPLY_LABEL);
    const workspaceEdit = await server.asWorkspaceEdit(confirmed);
    const applied = await vscode.workspace.applyEdit(workspaceEdit, { isRefactoring: true });
    if (applied) {
      this.dispatch({ type: 'applied' });
      highlightChanges(edit);
    }
    return applied;
  }

  /** Opens a diff of each edited document against the proposed text. */
  async showDiff(): Promise<void> {
    const edit = this.state.edit;
    if (!edit) {
      return;
    }
    for (const [uriString, edits] of textEditsByUri(edit)) {
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

  /** Opens the run's markdown report in the preview. */
  async showReport(): Promise<void> {
    const markdown = this.state.result?.markdown;
    if (markdown && this.state.cellUri && this.hooks.showReport) {
      await this.hooks.showReport(this.state.cellUri, markdown);
    }
  }

  /**
   * Runs the cells the proposal says to run (its `runFirst`, then the target; else the edited cells) in the
   * user's kernel — only on the user's explicit request, after the edit was applied.
   */
  async runChangedCells(): Promise<void> {
    const edit = this.state.edit;
    if (!edit || this.state.status !== 'applied' || !this.state.cellUri) {
      return;
    }
    const nb = notebookOfCell(this.state.cellUri);
    if (!nb) {
      throw new Error('the notebook of this run is no longer open.');
    }
    const cells = nb.getCells();
    const proposal = this.state.result?.proposal;
    let indices: number[];
    if (proposal) {
      indices = [...(proposal.runFirst ?? []), proposal.target].map((n) => n - 1);
    } else {
      const edited = new Set(textEditsByUri(edit).keys());
      indices = cells.map((c, i) => (edited.has(c.document.uri.toString()) ? i : -1));
    }
    const ordered = [...new Set(indices)].filter((i) => i >= 0 && i < cells.length && cells[i].kind === vscode.NotebookCellKind.Code);
    const ranges = ordered.map((i) => ({ start: i, end: i + 1 }));
    if (ranges.length) {
      await vscode.commands.executeCommand('notebook.cell.execute', { ranges, document: nb.uri });
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
      case 'resume': {
        this.dispatch({ type: 'resume' });
        const waiting = this.state.waiting;
        if (waiting !== undefined && isActive(this.state) && this.state.autoContinue) {
          await this.continueRun(waiting);
        }
        return;
      }
      case 'step': {
        const waiting = this.state.waiting;
        if (waiting !== undefined && isActive(this.state)) {
          await this.continueRun(waiting);
        }
        return;
      }
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
      case 'report':
        await this.showReport();
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
