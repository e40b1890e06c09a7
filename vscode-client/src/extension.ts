/** CRANE for VS Code: wires the modules in src/common together. Logic lives there. */
import * as vscode from 'vscode';
import { AgentController, PROPOSAL_SCHEME } from './common/agentPanel';
import { Commands } from './common/commands';
import { runtimeDirs } from './common/connectionFiles';
import { DIAGNOSIS_SCHEME, DiagnosisView } from './common/diagnosisView';
import { disposeHighlight } from './common/highlight';
import { getJupyterKernelsApi, jupyterStorageDir } from './common/jupyterApi';
import { bridgeTiming, KernelBridge, Trigger } from './common/kernelBridge';
import { getLogChannel, traceError, traceInfo } from './common/log';
import { lmApi, mcpApi, McpServers, registerLmTools } from './common/lmTools';
import { currentNotebook, isCraneNotebook, NotebookFocus } from './common/notebooks';
import { AttachResult, LmToolResult, Methods } from './common/protocol';
import { ApiKeyStore } from './common/secrets';
import { ServerManager } from './common/server';
import { OwnEnvironment } from './common/serverEnvUi';
import { classifyChange, getClientSettings } from './common/settings';
import { StatusBar } from './common/statusBar';

let manager: ServerManager | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const log = getLogChannel();
  const status = new StatusBar();
  const keys = new ApiKeyStore(context.secrets, context.globalState);
  const diagnosis = new DiagnosisView();
  let commands: Commands | undefined;

  const agent = new AgentController(() => manager?.running, {
    started: (key) => status.update({ type: 'agentStarted', runId: key }),
    stopped: (key) => status.update({ type: 'agentStopped', runId: key }),
    showReport: (cellUri, markdown) => diagnosis.showMarkdown(cellUri, 'agent', markdown),
    stepModeDefault: () => getClientSettings().stepMode,
  });

  const bridge = new KernelBridge({
    getKernelsApi: getJupyterKernelsApi,
    attach: (params) => server.server.sendRequest<AttachResult>(Methods.attachKernel, params),
    note: (notebookUri, note) => status.update({ type: 'bridgeNote', notebookUri, note }),
    log: traceInfo,
    ...bridgeTiming(process.env),
    jupyterServerUrl: (uri) => getClientSettings(uri).jupyterServerUrl,
  });
  const connectKernel = (nb: vscode.NotebookDocument | undefined, trigger: Trigger) => {
    if (!nb || !isCraneNotebook(nb) || !server.running || getClientSettings(nb.uri).connectionFile) {
      return;
    }
    bridge.connect(nb.uri, trigger).catch((err) => traceError('kernel bridge', err));
  };
  // the Jupyter extension's fallback folder for connection files is in its global storage: discovery looks there
  const jupyterStorage = jupyterStorageDir(context.globalStorageUri.fsPath);
  // the server's Python environment, owned by the extension in its global storage (unless crane.python is set)
  const ownEnvironment = new OwnEnvironment({
    storageDir: context.globalStorageUri.fsPath,
    extensionDir: context.extensionPath,
  });

  // CRANE's MCP server for VS Code's MCP support: one per notebook attached to a local kernel (lmTools.ts)
  const mcpServers = new McpServers(() => manager?.currentInterpreter?.command);
  const server = new ServerManager({
    state: (state, message, interpreter) => status.update({ type: 'server', state, message, interpreter }),
    kernelStatus: (p) => {
      status.update({ type: 'kernelStatus', params: p });
      if (p.notebookUri) {
        const alive = p.state !== 'dead' && p.state !== 'static-only';
        mcpServers.update(p.notebookUri, p.notebookUri.split('/').pop() ?? p.notebookUri,
          alive ? (p.kernel?.connectionFile ?? undefined) : undefined);
      }
    },
    diagnosis: (p) => void diagnosis.show(p).catch((err) => traceError('diagnosis view', err)),
    agentStep: (p) => agent.onStep(p),
    progress: (delta, title) => status.update({ type: 'busy', delta, title }),
    executeCommand: (command, args, next) => commands!.routeServerCommand(command, args, next),
    started: () => {
      void bridge
        .reattachAll()
        .then(() => vscode.workspace.notebookDocuments.forEach((nb) => connectKernel(nb, 'serverStarted')));
    },
    secretEnvironment: () => keys.environment(),
    extraEnvironment: () => ({ CRANE_JUPYTER_STORAGE: jupyterStorage }),
    ownEnvironment: (pythonApi, resource) => ownEnvironment.interpreter(pythonApi, resource),
  });
  manager = server;

  /** The status bar follows the notebook in use; a preview or other editor taking the focus keeps it. */
  const focus = new NotebookFocus();
  const updateActiveNotebook = () => status.update({ type: 'activeNotebook', uri: focus.update() });

  /** `crane.kernel.connectionFile` changed: attach every open notebook to it, or let the bridge find kernels. */
  const attachConfiguredKernel = async () => {
    for (const nb of vscode.workspace.notebookDocuments.filter(isCraneNotebook)) {
      const file = getClientSettings(nb.uri).connectionFile;
      if (!file) {
        connectKernel(nb, 'command');
        continue;
      }
      try {
        const result = await server.server.sendRequest<AttachResult>(Methods.attachKernel, {
          notebookUri: nb.uri.toString(),
          connectionFile: file,
        });
        traceInfo(`attach ${nb.uri.toString()} to ${file}: ${JSON.stringify(result)}`);
        if (!result?.attached) {
          void vscode.window.showWarningMessage(`CRANE: could not attach to ${file}: ${result?.message ?? 'no answer'}`);
        }
      } catch (err) {
        traceError(`attaching ${file}`, err);
      }
    }
  };

  commands = new Commands({
    server: () => server.server,
    status,
    agent,
    diagnosis,
    keys,
    restart: (reason) => server.restart(reason),
    runtimeDirs: () => runtimeDirs(process.env, process.platform, undefined, jupyterStorage),
    askJupyter: async (nb) => {
      if (!server.running) {
        return undefined;
      }
      return bridge.connect(nb.uri, 'command');
    },
  });

  context.subscriptions.push(
    log,
    status,
    diagnosis,
    agent,
    { dispose: disposeHighlight },
    vscode.workspace.registerTextDocumentContentProvider(DIAGNOSIS_SCHEME, diagnosis),
    vscode.workspace.registerTextDocumentContentProvider(PROPOSAL_SCHEME, agent),
    ...commands.register(),
    // the agent tools for Copilot agent mode and chat participants, and the MCP servers (where VS Code has the APIs)
    ...registerLmTools(lmApi(vscode), {
      request: (params) => server.running?.sendRequest<LmToolResult>(Methods.lmTool, params),
      notebooks: () => vscode.workspace.notebookDocuments.filter(isCraneNotebook),
      current: () => currentNotebook(focus.uri),
    }, (err) => traceError('registering a language-model tool', err)),
    ...mcpServers.register(mcpApi(vscode), (err) => traceError('registering the MCP servers', err)),
    vscode.workspace.onDidChangeConfiguration((e) => {
      const change = classifyChange(e);
      if (change.restart) {
        void server.restart('settings changed');
        return;
      }
      if (change.notify) {
        void server.notifySettings().catch((err) => traceError('sending the settings', err));
      }
      if (change.connectionFile) {
        void attachConfiguredKernel();
      }
    }),
    vscode.window.onDidChangeActiveNotebookEditor((editor) => {
      updateActiveNotebook();
      connectKernel(editor?.notebook, 'focused');
    }),
    vscode.window.onDidChangeVisibleNotebookEditors(() => updateActiveNotebook()),
    // the user clicks in the notebook: only matters to ask again after access was declined
    vscode.window.onDidChangeNotebookEditorSelection((e) => connectKernel(e.notebookEditor.notebook, 'selection')),
    vscode.workspace.onDidOpenNotebookDocument((nb) => connectKernel(nb, 'opened')),
    vscode.workspace.onDidCloseNotebookDocument((nb) => bridge.forget(nb.uri)),
    vscode.workspace.onDidChangeNotebookDocument((e) => {
      // a cell ran: the kernel may exist now (the bridge does nothing when its file is attached already)
      if (e.cellChanges.some((c) => c.executionSummary !== undefined)) {
        connectKernel(e.notebook, 'cellRun');
      }
    }),
    bridge,
  );

  updateActiveNotebook();
  // the Python extension's interpreters are candidates to build the server environment from (serverEnvUi.ts);
  // changing the active one later changes nothing: the server runs in its own environment or crane.python
  await server.initPythonApi();
  await server.restart('activation');
}

export async function deactivate(): Promise<void> {
  await manager?.dispose();
  manager = undefined;
}
