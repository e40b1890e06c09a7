/**
 * Issue 12, step 7: in a fresh profile the user answers "Deny" to the Jupyter extension's consent prompt.
 * CRANE falls back to its own discovery and says so; it does not prompt again by itself; granting access
 * later ("Jupyter: Manage Access To Jupyter Kernels") attaches through the Jupyter extension on the user's
 * next action, without reloading the window. Started by `e2e/run.sh jupyter-deny` (a code-server of its own,
 * fresh user data and browser profile); environment as for jupyter.e2e.test.mjs. On revenue.ipynb: 3 `import
 * pandas as pd`, 4 `sales = pd.read_csv(...)`, 5 `total = sales["revenue"].sum()` (KeyError), 6 adds the column.
 */
import assert from 'node:assert/strict';
import {
  cellRow,
  craneLog,
  craneStatus,
  craneTooltip,
  dialogButton,
  env,
  executionCount,
  openNotebook,
  recordedStatusTexts,
  recordStatusTexts,
  runCell,
  runCommand,
  scenario,
  SLOW,
  waitForKernelPicked,
} from './lib.mjs';

const WORKBENCH_URL = env('CRANE_E2E_URL');
const KERNEL_NAME = env('CRANE_E2E_KERNEL_NAME');
const NOTEBOOK = 'revenue.ipynb';
const IMPORT_CELL = 3;
const READ_CELL = 4;
const CRASH_CELL = 5;
const FIX_CELL = 6;
const CONSENT = /Do you want to grant Kernel access to the extension CRANE/;

const s = scenario({ prefix: 'jupyter-deny-' });
const { step } = s;

/** How many answers of the kernel (through the API) the bridge has logged that match `re`. */
async function bridgeAnswers(re) {
  return ((await craneLog()).match(/kernel bridge: the kernel answered: .*/g) ?? []).filter((l) => re.test(l)).length;
}

async function waitFor(what, predicate, timeout = SLOW) {
  const deadline = Date.now() + timeout;
  while (!(await predicate())) {
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${what}`);
    }
    await s.page.waitForTimeout(250);
  }
}

step('the workbench loads with the workspace, in a fresh profile', async () => {
  await s.page.goto(WORKBENCH_URL, { timeout: SLOW }); // code-server serves the workbench slowly on a loaded machine
  await s.page.locator('.monaco-workbench').waitFor({ timeout: SLOW });
  await s.page.locator('.explorer-folders-view').getByText(NOTEBOOK, { exact: true }).waitFor({ timeout: SLOW });
  await recordStatusTexts(s.page);
  await openNotebook(s.page, NOTEBOOK);
  await cellRow(s.page, FIX_CELL).waitFor({ timeout: SLOW }); // the notebook renders its cells slowly on a loaded machine
  await waitForKernelPicked(s.page, KERNEL_NAME);
  await runCell(s.page, IMPORT_CELL);
  await s.screenshot('cell-run');
});

step('7a. the user answers "Deny": CRANE falls back to its own discovery with a clear status note', async () => {
  const deny = dialogButton(s.page, CONSENT, 'Deny');
  await deny.waitFor({ timeout: SLOW });
  await s.screenshot('consent-dialog');
  await deny.click();
  await craneStatus(s.page).filter({ hasText: 'CRANE: kernel attached (discovery)' }).waitFor({ timeout: SLOW });
  const tip = await craneTooltip(s.page, 'declined');
  assert.match(tip, /Kernel: (attached|idle|busy) \(found by CRANE's discovery: .*kernel-v3.*\.json\)/);
  assert.match(tip, /Jupyter: Manage Access To Jupyter Kernels/);
  await s.screenshot('declined-discovery');
  await s.page.mouse.move(800, 600);
});

step('7b. discovery serves the predictions; CRANE does not prompt again by itself', async () => {
  await runCell(s.page, READ_CELL); // a user action: CRANE asks again, and the Jupyter extension refuses without a prompt
  assert.equal(await executionCount(s.page, READ_CELL), '[2]');
  await cellRow(s.page, CRASH_CELL).locator('.squiggly-error').first().waitFor({ timeout: SLOW });
  await waitFor('the second refusal in the CRANE log', async () => (await bridgeAnswers(/declined/)) >= 2);
  assert.equal(await s.page.locator('.monaco-dialog-box').count(), 0, 'no second consent prompt');
  await s.screenshot('discovery-squiggle');
});

step('7c. granting access later ("Jupyter: Manage Access To Jupyter Kernels") attaches on the next action, no reload', async () => {
  await runCommand(s.page, 'Jupyter: Manage Access To Jupyter Kernels');
  const crane = s.page.locator('.quick-input-widget .monaco-list-row').filter({ hasText: 'CRANE' }).first();
  await crane.waitFor({ timeout: SLOW });
  // the row's label toggles its checkbox (a click on the box itself would toggle it twice)
  await crane.locator('.quick-input-list-rows').first().click();
  await s.page.locator('.quick-input-widget').filter({ hasText: '1 Selected' }).waitFor({ timeout: SLOW });
  await s.screenshot('manage-access');
  await s.page.keyboard.press('Enter');
  await s.page.locator('.quick-input-widget').waitFor({ state: 'hidden' });
  await s.page.evaluate(() => (window.__craneSameWindow = true)); // a reload would lose it
  await runCell(s.page, FIX_CELL); // the user's next action in the notebook
  await craneStatus(s.page).filter({ hasText: 'CRANE: kernel attached via Jupyter' }).waitFor({ timeout: SLOW });
  const tip = await craneTooltip(s.page, 'through the Jupyter extension');
  assert.doesNotMatch(tip, /declined/);
  assert.equal(await s.page.evaluate(() => window.__craneSameWindow), true, 'the window was not reloaded');
  await s.page.mouse.move(800, 600);
  // running cell 6 added the column: the facts (through the new attachment) clear cell 5's squiggle
  await cellRow(s.page, CRASH_CELL).locator('.squiggly-error').first().waitFor({ state: 'detached', timeout: SLOW });
  await craneTooltip(s.page, 'through the Jupyter extension');
  await s.screenshot('granted-attached-via-jupyter');
  const texts = await recordedStatusTexts(s.page);
  assert.ok(!texts.some((t) => /could not/.test(t)), `status texts: ${JSON.stringify(texts)}`);
});
