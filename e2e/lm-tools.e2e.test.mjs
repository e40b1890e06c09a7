/**
 * CRANE's language-model tools in a real VS Code (code-server), called as Copilot or a chat participant would:
 * a small test extension (e2e/lm-tools-extension) runs `vscode.lm.invokeTool` on the open notebook and writes
 * what came back to CRANE_E2E_LM_OUT. Started by `e2e/run.sh lm-tools`, with the kernel of `connection-file`:
 *   CRANE_E2E_URL, CRANE_E2E_SCREENSHOTS, CRANE_E2E_RUN, CRANE_E2E_PYTHON, CRANE_E2E_CHROMIUM  as there;
 *   CRANE_E2E_KERNEL       the kernel's connection file (crane.kernel.connectionFile)
 *   CRANE_E2E_PRIMED       how many cells run.sh ran in the kernel (its execution count must stay there)
 *   CRANE_E2E_LM_OUT       where the test extension writes the tools' results
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { craneStatus, dialogButton, env, kernelCheck, openNotebook, runCommand, scenario, SLOW } from './lib.mjs';

const WORKBENCH_URL = env('CRANE_E2E_URL');
const KERNEL = env('CRANE_E2E_KERNEL');
const PRIMED = Number(env('CRANE_E2E_PRIMED'));
const OUT = env('CRANE_E2E_LM_OUT');
const NOTEBOOK = 'sales.ipynb';

const s = scenario({ prefix: 'lm-' });
const { step } = s;
let results;

step('the notebook opens and CRANE attaches to its kernel', async () => {
  await s.page.goto(WORKBENCH_URL);
  await s.page.locator('.monaco-workbench').waitFor({ timeout: SLOW });
  await s.page.locator('.explorer-folders-view').getByText(NOTEBOOK).waitFor({ timeout: SLOW });
  await openNotebook(s.page, NOTEBOOK);
  await craneStatus(s.page).filter({ hasText: 'CRANE: kernel attached' }).waitFor({ timeout: SLOW });
  await s.screenshot('attached');
});

step('a chat participant invokes the tools; crane_try_code asks for confirmation first', async () => {
  await runCommand(s.page, 'CRANE e2e: invoke the language-model tools');
  const yes = dialogButton(s.page, /Run code in the CRANE sandbox/, '(Yes|OK|Continue|Allow|Run)');
  await yes.waitFor({ timeout: SLOW * 2 });
  const dialog = await s.page.locator('.monaco-dialog-box').first().innerText();
  assert.match(dialog, /sales\["units"\] = 0/, `the confirmation shows the code:\n${dialog}`);
  await s.screenshot('confirmation');
  await yes.click();
  const deadline = Date.now() + SLOW * 2;
  while (!existsSync(OUT)) {
    assert.ok(Date.now() < deadline, `no results in ${OUT}`);
    await s.page.waitForTimeout(250); // the file appears once, complete (written then renamed)
  }
  results = JSON.parse(readFileSync(OUT, 'utf8'));
});

step('the tools answer from the live kernel', () => {
  assert.deepEqual(results.tools.sort(), [
    'crane_check_cell',
    'crane_check_code',
    'crane_fixes',
    'crane_kernel_facts',
    'crane_try_code',
  ]);
  assert.ok(results.facts.ok, results.facts.error);
  const facts = JSON.parse(results.facts.text);
  assert.equal(facts.facts.sales.kind, 'dataframe', results.facts.text);
  assert.ok(facts.facts.sales.columns.some((c) => c.name === 'units'), results.facts.text);

  const cell = JSON.parse(results.checkCell.text);
  assert.equal(cell.prediction, 'crash', results.checkCell.text);
  assert.equal(cell.findings[0].ename, 'KeyError', results.checkCell.text);

  const code = JSON.parse(results.checkCode.text);
  assert.equal(code.prediction, 'crash', results.checkCode.text);
  assert.equal(code.decided_by, 'sandbox', results.checkCode.text);
  assert.equal(code.sandbox.ename, 'ZeroDivisionError', results.checkCode.text);

  const run = JSON.parse(results.tryCode.text);
  assert.equal(run.outcome, 'no-crash', results.tryCode.text);
  assert.match(run.stdout, /^rows \d+/, results.tryCode.text);
});

step('a bad input is an error the model can read, not a crash', () => {
  const bad = results.badInput;
  const text = bad.ok ? bad.text : bad.error;
  assert.match(text, /crane_check_cell/, JSON.stringify(bad));
  assert.match(text, /invalid|Expected|integer/i, JSON.stringify(bad));
});

step("the user's kernel ran nothing of it", async () => {
  await kernelCheck(KERNEL, PRIMED);
});
