import { describe, expect, it, vi } from 'vitest';
import * as pkg from '../../package.json';
import {
  lmApi,
  LmToolHost,
  makeTool,
  mcpApi,
  McpServers,
  registerLmTools,
  resolveNotebook,
  TOOL_NAMES,
} from '../../src/common/lmTools';
import type { LmToolParams, LmToolResult } from '../../src/common/protocol';

const A = { uri: { toString: () => 'file:///w/a.ipynb', fsPath: '/w/a.ipynb' } };
const B = { uri: { toString: () => 'file:///w/sub/b.ipynb', fsPath: '/w/sub/b.ipynb' } };

function host(answer?: LmToolResult | Error): LmToolHost & { sent: LmToolParams[] } {
  const sent: LmToolParams[] = [];
  return {
    sent,
    request: (params) => {
      sent.push(params);
      if (answer === undefined) {
        return undefined;
      }
      return answer instanceof Error ? Promise.reject(answer) : Promise.resolve(answer);
    },
    notebooks: () => [A, B],
    current: () => A,
  };
}
const api = { makeResult: (text: string) => ({ text }) };

describe('CRANE language-model tools', () => {
  it('declares in package.json exactly the tools it registers, with object input schemas', () => {
    const declared = (pkg.contributes as { languageModelTools: Array<{ name: string; inputSchema: { type: string } }> })
      .languageModelTools;
    expect(declared.map((t) => t.name)).toEqual([...TOOL_NAMES]);
    declared.forEach((t) => expect(t.inputSchema.type).toBe('object'));
    const registered: string[] = [];
    const disposables = registerLmTools(
      { registerTool: (name) => (registered.push(name), { dispose: () => undefined }), makeResult: api.makeResult },
      host(),
    );
    expect(registered).toEqual([...TOOL_NAMES]);
    expect(disposables).toHaveLength(TOOL_NAMES.length);
  });

  it('registers nothing where VS Code has no language-model tool API', () => {
    expect(lmApi({} as never)).toBeUndefined();
    expect(lmApi({ lm: {} } as never)).toBeUndefined();
    expect(registerLmTools(undefined, host())).toEqual([]);
    expect(mcpApi({ lm: { registerTool: () => undefined } } as never)).toBeUndefined();
  });

  it('builds results with the API classes VS Code provides', () => {
    class TextPart {
      constructor(readonly value: string) {}
    }
    class ToolResult {
      constructor(readonly content: unknown[]) {}
    }
    const registerTool = vi.fn(() => ({ dispose: () => undefined }));
    const lm = { registerTool };
    const made = lmApi({ lm, LanguageModelTextPart: TextPart, LanguageModelToolResult: ToolResult } as never)!;
    expect(made.makeResult('hi')).toEqual(new ToolResult([new TextPart('hi')]));
    made.registerTool('x', makeTool('crane_kernel_facts', host(), made));
    expect(registerTool).toHaveBeenCalledOnce();
  });

  it('sends crane/lmTool for the notebook in use, without the notebook input, and returns the JSON text', async () => {
    const h = host({ tool: 'crane_kernel_facts', text: '{"facts": {}}' });
    const out = await makeTool('crane_kernel_facts', h, api).invoke({ input: { names: ['df'] } });
    expect(h.sent).toEqual([{ notebookUri: 'file:///w/a.ipynb', tool: 'crane_kernel_facts', input: { names: ['df'] } }]);
    expect(out).toEqual({ text: '{"facts": {}}' });
  });

  it('picks the notebook an input names by path, file name or URI; the cell tools pass its path', async () => {
    expect(resolveNotebook(host(), 'sub/b.ipynb')).toBe(B);
    expect(resolveNotebook(host(), '/w/sub/b.ipynb')).toBe(B);
    expect(resolveNotebook(host(), 'file:///w/a.ipynb')).toBe(A);
    expect(resolveNotebook(host(), 'other.ipynb')).toBeUndefined();
    const h = host({ tool: 'crane_check_cell', text: '{}' });
    await makeTool('crane_check_cell', h, api).invoke({ input: { cell: 2, notebook: 'sub/b.ipynb' } });
    expect(h.sent[0]).toEqual({ notebookUri: 'file:///w/sub/b.ipynb', tool: 'crane_check_cell', input: { cell: 2, notebook: '/w/sub/b.ipynb' } });
    const t = host({ tool: 'crane_try_code', text: '{}' });
    await makeTool('crane_try_code', t, api).invoke({ input: { code: '1', notebook: 'sub/b.ipynb' } });
    expect(t.sent[0].input).toEqual({ code: '1' });
  });

  it('tells the model why it could not run: no notebook, no server, a tool error, a failed request', async () => {
    const none = { ...host(), current: () => undefined };
    expect(await makeTool('crane_try_code', none, api).invoke({ input: { code: '1' } })).toEqual({
      text: 'crane_try_code: no Jupyter notebook is open in the editor: open it (and start its kernel) first',
    });
    expect(await makeTool('crane_try_code', host(), api).invoke({ input: { code: '1' } })).toEqual({
      text: 'crane_try_code: the CRANE language server is not running',
    });
    const failed = host({ tool: 'crane_fixes', text: 'no kernel is attached', isError: true });
    expect(await makeTool('crane_fixes', failed, api).invoke({ input: { cell: 1 } })).toEqual({
      text: 'crane_fixes failed: no kernel is attached',
    });
    const rejected = host(new Error('invalid params: code'));
    expect(await makeTool('crane_check_code', rejected, api).invoke({ input: { code: 1 } })).toEqual({
      text: 'crane_check_code: invalid params: code',
    });
  });

  it('asks for confirmation before running code in the sandbox, and only then', () => {
    const prep = makeTool('crane_try_code', host(), api).prepareInvocation({ input: { code: 'df.x = 1', budget_s: 5 } });
    expect(prep.confirmationMessages?.title).toMatch(/sandbox/);
    expect(prep.confirmationMessages?.message).toContain('df.x = 1');
    expect(prep.confirmationMessages?.message).toContain('5 s');
    for (const name of TOOL_NAMES.filter((n) => n !== 'crane_try_code')) {
      const p = makeTool(name, host(), api).prepareInvocation({ input: { cell: 3 } });
      expect(p.confirmationMessages).toBeUndefined();
      expect(p.invocationMessage).toMatch(/^CRANE: /);
    }
  });
});

describe("CRANE's MCP servers for VS Code", () => {
  it('offers one `crane mcp --connection-file` per notebook attached to a local kernel, and says when that changes', () => {
    const servers = new McpServers(() => '/env/bin/python');
    const changed = vi.fn();
    servers.onDidChangeMcpServerDefinitions(changed);
    const stdio = (label: string, command: string, args: string[]) => ({ label, command, args });
    expect(servers.definitions({ stdio })).toEqual([]);
    servers.update('file:///w/a.ipynb', 'a.ipynb', '/run/kernel-1.json');
    servers.update('file:///w/a.ipynb', 'a.ipynb', '/run/kernel-1.json'); // no change
    expect(changed).toHaveBeenCalledTimes(1);
    expect(servers.definitions({ stdio })).toEqual([
      { label: 'CRANE: a.ipynb', command: '/env/bin/python', args: ['-m', 'crane', 'mcp', '--connection-file', '/run/kernel-1.json'] },
    ]);
    servers.update('file:///w/a.ipynb', 'a.ipynb', undefined);
    expect(changed).toHaveBeenCalledTimes(2);
    expect(servers.definitions({ stdio })).toEqual([]);
  });

  it('registers the provider where the API exists', () => {
    const register = vi.fn(() => ({ dispose: () => undefined }));
    class Stdio {
      constructor(readonly label: string, readonly command: string, readonly args: string[]) {}
    }
    const api = mcpApi({ lm: { registerMcpServerDefinitionProvider: register }, McpStdioServerDefinition: Stdio } as never);
    const servers = new McpServers(() => 'python3');
    expect(servers.register(api)).toHaveLength(1);
    expect(register).toHaveBeenCalledWith('crane.mcpServers', expect.anything());
    expect(servers.register(undefined)).toEqual([]);
    const provider = (register.mock.calls[0] as unknown[])[1] as { provideMcpServerDefinitions(): unknown[] };
    servers.update('file:///w/a.ipynb', 'a.ipynb', '/k.json');
    expect(provider.provideMcpServerDefinitions()).toEqual([new Stdio('CRANE: a.ipynb', 'python3', ['-m', 'crane', 'mcp', '--connection-file', '/k.json'])]);
    const declared = (pkg.contributes as { mcpServerDefinitionProviders: Array<{ id: string }> }).mcpServerDefinitionProviders;
    expect(declared.map((d) => d.id)).toEqual(['crane.mcpServers']);
  });
});

describe('registration never fails the activation', () => {
  it('reports a refused MCP provider or tool and goes on', () => {
    const errors: unknown[] = [];
    const refuse = () => {
      throw new Error('MCP configuration providers must be registered in contributes.modelContextServerCollections');
    };
    const servers = new McpServers(() => 'python3');
    expect(servers.register({ register: refuse, stdio: () => ({}) }, (e) => errors.push(e))).toEqual([]);
    const tools = registerLmTools({ registerTool: refuse, makeResult: (t) => t }, {
      request: () => undefined,
      notebooks: () => [],
      current: () => undefined,
    }, (e) => errors.push(e));
    expect(tools).toEqual([]);
    expect(errors).toHaveLength(1 + TOOL_NAMES.length);
    const declared = pkg.contributes as unknown as Record<string, Array<{ id: string }>>;
    expect(declared.modelContextServerCollections.map((d) => d.id)).toEqual(['crane.mcpServers']);
  });
});
