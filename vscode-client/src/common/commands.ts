/**
 * Palette commands (`crane.ui.*`). They forward to the server's command ids with
 * `workspace/executeCommand`; the server ids themselves are registered by vscode-languageclient.
 */
import * as path from 'node:path';
import * as vscode from 'vscode';
import type { ExecuteCommandSignature } from 'vscode-languageclient/node';
import type { AgentController } from './agentPanel';
import { summarizeCheck } from './checkSummary';
import { listConnectionFiles } from './connectionFiles';
import { JUPYTER_EXTENSION_ID } from './jupyterApi';
import type { BridgeOutcome } from './kernelBridge';
import type { DiagnosisView } from './diagnosisView';
import { errorMessage, showLog, traceError, traceInfo } from './log';
import { activeCell, currentNotebook, notebookOfCell } from './notebooks';
import { AttachResult, ClientCommands, DiagnosisParams, FixOptions, ServerCommands } from './protocol';
import { isSpeculativeResult } from './speculativeFormat';
import { ApiKeyStore, promptForApiKey, promptForJupyterToken } from './secrets';
import type { CraneServer } from './serverApi';
import type { StatusBar } from './statusBar';
import { SHOW_DETAILS_COMMAND } from './statusBar';
import { renderStatus } from './statusModel';
import { runCells } from './runCells';

export const UiCommands = {
  checkNotebook: 'crane.ui.checkNotebook',
  diagnoseCell: 'crane.ui.diagnoseCell',
  fixCell: 'crane.ui.fixCell',
  runSpeculatively: 'crane.ui.runSpeculatively',
  stopAgent: 'crane.ui.stopAgent',
  attachKernel: 'crane.ui.attachKernel',
  setApiKey: 'crane.ui.setApiKey',
  setJupyterToken: 'crane.ui.setJupyterToken',
  restartServer: 'crane.ui.restartServer',
  showLog: 'crane.ui.showLog',
  showStatus: SHOW_DETAILS_COMMAND,
  /** Not in the palette: the command of the server's "Run cell K first (tested)" quick fixes. */
  runCells: ClientCommands.runCells,
} as const;

export interface CommandDeps {
  server(): CraneServer;
  status: StatusBar;
  agent: AgentController;
  diagnosis: DiagnosisView;
  keys: ApiKeyStore;
  restart(reason: string): Promise<void>;
  /** Where to look for connection files ("Attach to kernel…"). */
  runtimeDirs(): string[];
  /** Asks the notebook's kernel through the Jupyter extension (undefined: the server is not running). */
  askJupyter(nb: vscode.NotebookDocument): Promise<BridgeOutcome | undefined>;
}

export function isDiagnosis(v: unknown): v is DiagnosisParams {
  const o = v as DiagnosisParams;
  return !!o && typeof o === 'object' && typeof o.markdown === 'string' && 'verdict' in o;
}

export class Commands {
  constructor(private readonly deps: CommandDeps) {}

  register(): vscode.Disposable[] {
    const wrap = (id: string, fn: (...args: unknown[]) => Promise<unknown>) =>
      vscode.commands.registerCommand(id, async (...args: unknown[]) => {
        try {
          return await fn(...args);
        } catch (err) {
          traceError(`${id} failed`, err);
          void vscode.window.showErrorMessage(`CRANE: ${errorMessage(err)}`);
          return undefined;
        }
      });
    return [
      wrap(UiCommands.checkNotebook, () => this.checkNotebook()),
      wrap(UiCommands.diagnoseCell, () => this.diagnoseCell()),
      wrap(UiCommands.fixCell, () => this.fixCell()),
      wrap(UiCommands.runSpeculatively, () => this.runSpeculatively()),
      wrap(UiCommands.stopAgent, () => this.stopAgent()),
      wrap(UiCommands.attachKernel, () => this.attachKernel()),
      wrap(UiCommands.setApiKey, () => this.setApiKey()),
      wrap(UiCommands.setJupyterToken, () => this.setJupyterToken()),
      wrap(UiCommands.restartServer, () => this.deps.restart('restart command')),
      wrap(UiCommands.showLog, async () => showLog()),
      wrap(UiCommands.showStatus, () => this.showStatus()),
      wrap(UiCommands.runCells, (notebookUri, cellUris) => runCells(notebookUri, cellUris)),
    ];
  }

  async checkNotebook(): Promise<unknown> {
    const nb = requireNotebook();
    const result = await this.deps.status.busy('Checking notebook', () =>
      this.deps.server().executeCommand(ServerCommands.checkNotebook, [nb.uri.toString()]),
    );
    traceInfo(`check ${nb.uri.toString()}: ${JSON.stringify(result)?.slice(0, 4000)}`);
    void vscode.window.showInformationMessage(summarizeCheck(result).text);
    return result;
  }

  async diagnoseCell(cellUri?: string): Promise<unknown> {
    const uri = cellUri ?? requireCell().document.uri.toString();
    const result = await this.deps.status.busy('Diagnosing cell', () =>
      this.deps.server().executeCommand(ServerCommands.diagnoseCell, [uri]),
    );
    await this.showDiagnosisResult(uri, result);
    return result;
  }

  async showDiagnosisResult(cellUri: string, result: unknown): Promise<void> {
    if (isDiagnosis(result)) {
      const notebookUri = result.notebookUri ?? notebookOfCell(cellUri)?.uri.toString() ?? '';
      await this.deps.diagnosis.show({ ...result, cellUri: result.cellUri ?? cellUri, notebookUri });
    }
  }

  async fixCell(): Promise<unknown> {
    const cell = requireCell();
    const goal = await vscode.window.showInputBox({
      title: 'CRANE: Fix cell with agent',
      prompt: 'Optional goal for the agent (Enter to let it fix the predicted crash)',
      placeHolder: 'e.g. keep the output shape (2, 3)',
    });
    if (goal === undefined) {
      return undefined;
    }
    return this.deps.agent.fix(cell.document.uri.toString(), goal.trim() ? { goal: goal.trim() } : {});
  }

  /** `crane.runSpeculatively`: runs the cell in a sandboxed copy of the kernel and shows the verdict. */
  async runSpeculatively(cellUri?: string): Promise<unknown> {
    const uri = cellUri ?? requireCell().document.uri.toString();
    const result = await this.deps.status.busy('Running speculatively', () =>
      this.deps.server().executeCommand(ServerCommands.runSpeculatively, [uri]),
    );
    await this.showSpeculativeResult(uri, result);
    return result;
  }

  async showSpeculativeResult(cellUri: string, result: unknown): Promise<void> {
    if (isSpeculativeResult(result)) {
      await this.deps.diagnosis.showSpeculative(result, cellUri);
    } else {
      traceError(`crane.runSpeculatively answered with an unexpected result: ${JSON.stringify(result)?.slice(0, 500)}`);
      throw new Error('the server answered crane.runSpeculatively with an unexpected result (see "CRANE: Show log").');
    }
  }

  async stopAgent(): Promise<void> {
    const stopped = await this.deps.agent.stop();
    void vscode.window.showInformationMessage(stopped ? 'CRANE: agent stopped.' : 'CRANE: no agent run to stop.');
  }

  async attachKernel(): Promise<AttachResult | undefined> {
    const nb = requireNotebook();
    const file = await pickConnectionFile(this.deps.runtimeDirs(), !!vscode.extensions.getExtension(JUPYTER_EXTENSION_ID));
    if (!file) {
      return undefined;
    }
    if (file === ASK_JUPYTER) {
      const outcome = await this.deps.askJupyter(nb);
      if (outcome?.kind === 'attached' || outcome?.kind === 'unchanged') {
        void vscode.window.showInformationMessage(`CRANE: attached to ${path.basename(outcome.connectionFile)} through the Jupyter extension.`);
        return outcome.kind === 'attached' ? outcome.result : undefined;
      }
      void vscode.window.showWarningMessage(`CRANE: the Jupyter extension did not give the kernel: ${describeOutcome(outcome)}`);
      return undefined;
    }
    const result = await this.deps.server().executeCommand<AttachResult>(ServerCommands.attachKernel, [
      nb.uri.toString(),
      file,
    ]);
    if (result?.attached) {
      this.deps.status.update({ type: 'bridgeNote', notebookUri: nb.uri.toString(), note: undefined });
      void vscode.window.showInformationMessage(`CRANE: attached to ${path.basename(file)}. ${result.message ?? ''}`);
    } else {
      void vscode.window.showWarningMessage(`CRANE: could not attach ${path.basename(file)}: ${result?.message ?? 'no answer'}`);
    }
    return result;
  }

  async setApiKey(): Promise<void> {
    const changed = await promptForApiKey(this.deps.keys);
    if (changed) {
      await this.deps.restart(`API key ${changed} changed`);
    }
  }

  async setJupyterToken(): Promise<void> {
    if (await promptForJupyterToken(this.deps.keys)) {
      await this.deps.restart('Jupyter server token changed');
    }
  }

  async showStatus(): Promise<void> {
    const view = renderStatus(this.deps.status.current);
    const details = view.tooltip.split('\n').filter((l) => l !== 'Click for details.');
    const actions: Array<vscode.QuickPickItem & { command?: string }> = [
      ...details.map((d) => ({ label: d })),
      { label: '', kind: vscode.QuickPickItemKind.Separator },
      { label: '$(output) Show log', command: UiCommands.showLog },
      { label: '$(plug) Attach to kernel…', command: UiCommands.attachKernel },
      { label: '$(checklist) Check notebook', command: UiCommands.checkNotebook },
      { label: '$(debug-restart) Restart server', command: UiCommands.restartServer },
    ];
    const picked = await vscode.window.showQuickPick(actions, { title: 'CRANE status' });
    if (picked?.command) {
      await vscode.commands.executeCommand(picked.command);
    }
  }

  /**
   * Middleware for server command ids invoked by VS Code itself (code actions): the agent and the
   * diagnosis view get their results, and slow commands show "analysing".
   */
  async routeServerCommand(command: string, args: unknown[], next: ExecuteCommandSignature): Promise<unknown> {
    switch (command) {
      case ServerCommands.fixCell:
        return this.deps.agent.fix(String(args[0]), fixOptions(args[1]));
      case ServerCommands.diagnoseCell: {
        const result = await this.deps.status.busy('Diagnosing cell', async () => next(command, args));
        await this.showDiagnosisResult(String(args[0]), result);
        return result;
      }
      case ServerCommands.runSpeculatively: {
        const result = await this.deps.status.busy('Running speculatively', async () => next(command, args));
        await this.showSpeculativeResult(String(args[0]), result);
        return result;
      }
      case ServerCommands.checkNotebook:
        return this.deps.status.busy('Checking notebook', async () => next(command, args));
      default:
        return next(command, args);
    }
  }
}

/** The options of a `crane.fixCell` invocation: `{goal, stepMode}` (a bare goal string is accepted too). */
export function fixOptions(v: unknown): FixOptions {
  if (typeof v === 'string') {
    return v.trim() ? { goal: v.trim() } : {};
  }
  const o = v && typeof v === 'object' ? (v as Record<string, unknown>) : {};
  const out: FixOptions = {};
  if (typeof o.goal === 'string' && o.goal.trim()) {
    out.goal = o.goal.trim();
  }
  if (typeof o.stepMode === 'boolean') {
    out.stepMode = o.stepMode;
  }
  return out;
}

function requireNotebook(): vscode.NotebookDocument {
  const nb = currentNotebook();
  if (!nb) {
    throw new Error('open a Jupyter notebook first.');
  }
  return nb;
}

function requireCell(): vscode.NotebookCell {
  const cell = activeCell();
  if (!cell) {
    throw new Error('select a Python code cell in a Jupyter notebook first.');
  }
  return cell;
}

/** The pick "ask the notebook's kernel through the Jupyter extension" (not a file). */
const ASK_JUPYTER = '\u0000jupyter';

function describeOutcome(outcome: BridgeOutcome | undefined): string {
  switch (outcome?.kind) {
    case undefined:
      return 'the CRANE server is not running';
    case 'no-extension':
      return 'it is not installed';
    case 'no-kernel':
      return 'the notebook has no running kernel yet (run a cell first)';
    case 'unsupported-language':
      return `the kernel runs ${outcome.language}, not Python`;
    case 'declined':
      return 'access was declined (run "Jupyter: Manage Access To Jupyter Kernels")';
    case 'waiting':
      return 'no answer yet (a cell may be running): CRANE attaches when it comes';
    case 'not-attached':
      return outcome.result.message;
    case 'failed':
      return outcome.message;
    default:
      return outcome?.kind ?? 'no answer';
  }
}

async function pickConnectionFile(dirs: string[], jupyter: boolean): Promise<string | undefined> {
  const files = listConnectionFiles(dirs);
  const browse = '$(folder-opened) Browse…';
  const ask = "$(notebook-kernel-select) Ask the notebook's kernel through the Jupyter extension";
  const items: vscode.QuickPickItem[] = [
    ...(jupyter ? [{ label: ask }] : []),
    ...files.map((f) => ({
      label: path.basename(f.path),
      description: path.dirname(f.path),
      detail: `modified ${new Date(f.mtimeMs).toLocaleString()}`,
    })),
    { label: browse },
  ];
  const picked = await vscode.window.showQuickPick(items, {
    title: 'CRANE: Attach to kernel…',
    placeHolder: files.length ? 'Pick the kernel connection file' : 'No connection files found in the Jupyter runtime directories',
  });
  if (!picked) {
    return undefined;
  }
  if (picked.label === ask) {
    return ASK_JUPYTER;
  }
  if (picked.label !== browse) {
    return path.join(picked.description ?? '', picked.label);
  }
  const chosen = await vscode.window.showOpenDialog({
    title: 'Kernel connection file',
    canSelectMany: false,
    filters: { 'Connection file': ['json'] },
    defaultUri: dirs.length ? vscode.Uri.file(dirs[dirs.length - 1]) : undefined,
  });
  return chosen?.[0]?.fsPath;
}
