// Test-only extension for the e2e scenario `lm-tools`: what a chat participant or Copilot does, without Copilot.
// The command invokes CRANE's language-model tools with vscode.lm.invokeTool on the open notebook and writes what
// came back to $CRANE_E2E_LM_OUT (JSON), which the browser test reads.
'use strict';
const fs = require('node:fs');
const vscode = require('vscode');

async function call(name, input) {
  const source = new vscode.CancellationTokenSource();
  try {
    const result = await vscode.lm.invokeTool(name, { input, toolInvocationToken: undefined }, source.token);
    const text = result.content.map((part) => (typeof part.value === 'string' ? part.value : '')).join('');
    return { ok: true, text };
  } catch (err) {
    return { ok: false, error: String((err && err.message) || err) };
  } finally {
    source.dispose();
  }
}

function activate(context) {
  context.subscriptions.push(
    vscode.commands.registerCommand('craneE2E.invokeTools', async () => {
      const out = process.env.CRANE_E2E_LM_OUT;
      const results = {
        tools: vscode.lm.tools.filter((t) => t.name.startsWith('crane_')).map((t) => t.name),
        notebook: vscode.window.activeNotebookEditor?.notebook.uri.toString() ?? null,
      };
      results.facts = await call('crane_kernel_facts', { names: ['sales'] });
      results.checkCell = await call('crane_check_cell', { cell: 4, mode: 'static' });
      results.checkCode = await call('crane_check_code', { code: 'int(sales["units"].sum()) // 0', mode: 'auto' });
      results.tryCode = await call('crane_try_code', { code: 'sales["units"] = 0\nprint("rows", len(sales))' });
      results.badInput = await call('crane_check_cell', { cell: 'four' });
      fs.writeFileSync(`${out}.tmp`, JSON.stringify(results, null, 2));
      fs.renameSync(`${out}.tmp`, out); // the test waits for the file: it appears complete
    }),
  );
}

module.exports = { activate, deactivate() {} };
