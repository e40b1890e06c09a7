/**
 * CRANE's agent tools as VS Code language-model tools (Copilot agent mode, any chat participant), and CRANE's MCP
 * server for VS Code's MCP support (agents outside Copilot).
 *
 * The tools are declared in package.json (`contributes.languageModelTools`: names, descriptions, input schemas)
 * and implemented here: each sends `crane/lmTool` (docs/protocol.md) to the running CRANE language server for a
 * notebook open in the editor (the `notebook` input — a path or URI —, else the notebook in use), and hands the
 * server's JSON result to the model. Nothing runs in the user's kernel; `crane_try_code` (the one tool that runs
 * the model's code, in the sandbox) asks for confirmation as VS Code's conventions expect.
 *
 * The language-model and MCP APIs are newer than the oldest VS Code CRANE supports: `lmApi` and `mcpApi` read them
 * at run time and everything is skipped where they are missing.
 */
import type * as vscode from 'vscode';
import type { LmToolParams, LmToolResult } from './protocol';

/** The tools, as named in package.json and in `crane mcp` (crane.mcp.tools). */
export const TOOL_NAMES = [
  'crane_kernel_facts',
  'crane_check_code',
  'crane_check_cell',
  'crane_try_code',
  'crane_fixes',
] as const;
export type ToolName = (typeof TOOL_NAMES)[number];

/** Tools whose MCP arguments carry `notebook` themselves (the others only use it to pick the kernel). */
const NOTEBOOK_ARGUMENT: ReadonlySet<ToolName> = new Set(['crane_check_cell', 'crane_fixes']);
const CONFIRM: ReadonlySet<ToolName> = new Set(['crane_try_code']);

export type ToolInput = Record<string, unknown> & { notebook?: string };

/** The part of VS Code's language-model API these tools use (`vscode.lm` and its result classes, ≥ 1.95). */
export interface LmApi {
  registerTool(name: string, tool: LmTool): vscode.Disposable;
  makeResult(text: string): unknown;
}

export interface LmTool {
  prepareInvocation(
    options: { input: ToolInput },
    token?: vscode.CancellationToken,
  ): { invocationMessage: string; confirmationMessages?: { title: string; message: string } };
  invoke(options: { input: ToolInput }, token?: vscode.CancellationToken): Promise<unknown>;
}

export interface NotebookRef {
  uri: { toString(): string; fsPath?: string; path?: string };
}

export interface LmToolHost {
  /** `crane/lmTool` to the running server; undefined when no server runs. */
  request(params: LmToolParams): Promise<LmToolResult> | undefined;
  /** The notebooks open in the editor (CRANE's kind). */
  notebooks(): readonly NotebookRef[];
  /** The notebook in use (active, else visible). */
  current(): NotebookRef | undefined;
}

/** `vscode.lm`'s tool API where this VS Code has it, else undefined. */
export function lmApi(vs: typeof vscode): LmApi | undefined {
  const lm = (vs as unknown as { lm?: { registerTool?: unknown } }).lm;
  const ns = vs as unknown as {
    LanguageModelToolResult?: new (parts: unknown[]) => unknown;
    LanguageModelTextPart?: new (text: string) => unknown;
  };
  const Result = ns.LanguageModelToolResult;
  const Text = ns.LanguageModelTextPart;
  if (!lm || typeof lm.registerTool !== 'function' || !Result || !Text) {
    return undefined;
  }
  const register = lm.registerTool as (name: string, tool: LmTool) => vscode.Disposable;
  return {
    registerTool: (name, tool) => register.call(lm, name, tool),
    makeResult: (text) => new Result([new Text(text)]),
  };
}

/** The open notebook an input names (a path or a URI), else the notebook in use. */
export function resolveNotebook(host: LmToolHost, given: string | undefined): NotebookRef | undefined {
  if (!given) {
    return host.current();
  }
  const wanted = given.trim();
  return host.notebooks().find((nb) => {
    const uri = nb.uri.toString();
    const path = nb.uri.fsPath ?? nb.uri.path ?? '';
    return uri === wanted || path === wanted || (path !== '' && (path.endsWith('/' + wanted) || wanted.endsWith(path)));
  });
}

function describe(name: ToolName, input: ToolInput): string {
  switch (name) {
    case 'crane_kernel_facts':
      return Array.isArray(input.names) && input.names.length
        ? `Reading the kernel's facts about ${(input.names as string[]).join(', ')}`
        : "Reading the kernel's variables";
    case 'crane_check_code':
      return 'Checking whether the code would crash against the kernel';
    case 'crane_check_cell':
      return `Checking whether cell ${String(input.cell)} would crash`;
    case 'crane_try_code':
      return 'Running the code in a sandboxed copy of the kernel';
    case 'crane_fixes':
      return `Searching verified fixes for cell ${String(input.cell)}`;
  }
}

/** One language-model tool: `prepareInvocation` (message, confirmation) and `invoke` (the server request). */
export function makeTool(name: ToolName, host: LmToolHost, api: Pick<LmApi, 'makeResult'>): LmTool {
  return {
    prepareInvocation(options) {
      const input = options.input ?? {};
      const invocationMessage = `CRANE: ${describe(name, input)}`;
      if (!CONFIRM.has(name)) {
        return { invocationMessage };
      }
      const code = typeof input.code === 'string' ? input.code : '';
      const budget = typeof input.budget_s === 'number' ? input.budget_s : 30;
      return {
        invocationMessage,
        confirmationMessages: {
          title: 'Run code in the CRANE sandbox?',
          message:
            `The code runs in a confined copy-on-write fork of the notebook's kernel for at most ${budget} s; ` +
            'file writes stay private, network and programs are refused, and your kernel is not changed.\n\n' +
            '```python\n' + code + '\n```',
        },
      };
    },
    async invoke(options, token) {
      const input: ToolInput = { ...(options.input ?? {}) };
      const notebook = resolveNotebook(host, input.notebook);
      if (!notebook) {
        const why = input.notebook
          ? `the notebook ${input.notebook} is not open in the editor`
          : 'no Jupyter notebook is open in the editor';
        return api.makeResult(`${name}: ${why}: open it (and start its kernel) first`);
      }
      if (!NOTEBOOK_ARGUMENT.has(name) || !input.notebook) {
        delete input.notebook; // the server reads the open notebook's synced cells
      } else {
        input.notebook = notebook.uri.fsPath ?? input.notebook;
      }
      const pending = host.request({ notebookUri: notebook.uri.toString(), tool: name, input });
      if (!pending) {
        return api.makeResult(`${name}: the CRANE language server is not running`);
      }
      if (token?.isCancellationRequested) {
        return api.makeResult(`${name}: cancelled`);
      }
      try {
        const result = await pending;
        return api.makeResult(result.isError ? `${name} failed: ${result.text}` : result.text);
      } catch (err) {
        return api.makeResult(`${name}: ${err instanceof Error ? err.message : String(err)}`);
      }
    },
  };
}

/** Registers every tool where the API exists; [] where it does not (older VS Code). */
export function registerLmTools(
  api: LmApi | undefined,
  host: LmToolHost,
  onError: (err: unknown) => void = () => undefined,
): vscode.Disposable[] {
  if (!api) {
    return [];
  }
  const out: vscode.Disposable[] = [];
  for (const name of TOOL_NAMES) {
    try {
      out.push(api.registerTool(name, makeTool(name, host, api)));
    } catch (err) {
      onError(err); // never fails the extension's activation
    }
  }
  return out;
}

// -- CRANE's MCP server for VS Code's MCP support ---------------------------------------------------------------
export const MCP_PROVIDER_ID = 'crane.mcpServers';

export interface McpKernel {
  notebookUri: string;
  label: string; // the notebook's file name
  connectionFile: string;
}

export interface McpApi {
  register(id: string, provider: { onDidChangeMcpServerDefinitions: unknown; provideMcpServerDefinitions(): unknown[] }): vscode.Disposable;
  stdio(label: string, command: string, args: string[]): unknown;
}

/** `vscode.lm.registerMcpServerDefinitionProvider` (VS Code ≥ 1.101) where it exists, else undefined. */
export function mcpApi(vs: typeof vscode): McpApi | undefined {
  const lm = (vs as unknown as { lm?: { registerMcpServerDefinitionProvider?: unknown } }).lm;
  const Stdio = (vs as unknown as { McpStdioServerDefinition?: new (label: string, command: string, args: string[]) => unknown })
    .McpStdioServerDefinition;
  if (!lm || typeof lm.registerMcpServerDefinitionProvider !== 'function' || !Stdio) {
    return undefined;
  }
  const register = lm.registerMcpServerDefinitionProvider as McpApi['register'];
  return { register: (id, provider) => register.call(lm, id, provider), stdio: (l, c, a) => new Stdio(l, c, a) };
}

/** The MCP servers to offer: one `crane mcp --connection-file F` per notebook attached to a local kernel. */
export function mcpArgs(kernel: McpKernel): string[] {
  return ['-m', 'crane', 'mcp', '--connection-file', kernel.connectionFile];
}

/**
 * Keeps VS Code's list of CRANE MCP servers in step with the attached kernels (`update` on every kernel status)
 * and the server's interpreter (`python()`).
 */
export class McpServers {
  private kernels = new Map<string, McpKernel>();
  private listeners = new Set<() => void>();

  constructor(private readonly python: () => string | undefined) {}

  readonly onDidChangeMcpServerDefinitions = (listener: () => void) => {
    this.listeners.add(listener);
    return { dispose: () => this.listeners.delete(listener) };
  };

  /** A notebook's kernel changed: its local connection file, or undefined (none, dead, or a remote kernel). */
  update(notebookUri: string, label: string, connectionFile: string | undefined): void {
    const before = this.kernels.get(notebookUri)?.connectionFile;
    if (connectionFile) {
      this.kernels.set(notebookUri, { notebookUri, label, connectionFile });
    } else {
      this.kernels.delete(notebookUri);
    }
    if (before !== connectionFile) {
      this.listeners.forEach((l) => l());
    }
  }

  definitions(api: Pick<McpApi, 'stdio'>): unknown[] {
    const python = this.python();
    if (!python) {
      return [];
    }
    return [...this.kernels.values()].map((k) => api.stdio(`CRANE: ${k.label}`, python, mcpArgs(k)));
  }

  /**
   * Registers the provider; [] where the API is missing or refuses it (VS Code 1.100 wants the id under
   * `modelContextServerCollections`, 1.101+ under `mcpServerDefinitionProviders`: package.json declares both).
   * A refusal is reported to `onError` and never fails the extension's activation.
   */
  register(api: McpApi | undefined, onError: (err: unknown) => void = () => undefined): vscode.Disposable[] {
    if (!api) {
      return [];
    }
    try {
      return [
        api.register(MCP_PROVIDER_ID, {
          onDidChangeMcpServerDefinitions: this.onDidChangeMcpServerDefinitions,
          provideMcpServerDefinitions: () => this.definitions(api),
        }),
      ];
    } catch (err) {
      onError(err);
      return [];
    }
  }
}
