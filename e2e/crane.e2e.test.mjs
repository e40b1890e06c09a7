/**
 * The CRANE extension in a real VS Code (code-server), driven by headless Chromium through playwright-core.
 * Started by `e2e/run.sh connection-file`, which provides code-server, the kernel and these environment variables:
 *   CRANE_E2E_URL          the workbench URL with ?folder=<workspace copy>
 *   CRANE_E2E_SCREENSHOTS  where each step's screenshot goes
 *   CRANE_E2E_RUN          the run folder (Chromium's fresh profile goes there)
 *   CRANE_E2E_KERNEL       the kernel's connection file (crane.kernel.connectionFile)
 *   CRANE_E2E_PRIMED       how many cells run.sh ran in the kernel (its execution count must stay there)
 *   CRANE_E2E_PYTHON       the Python with jupyter_client, for the kernel check
 *   CRANE_E2E_CHROMIUM     the browser (default /usr/bin/chromium)
 * The steps share one page and run in order; a failed step saves a `FAILED-<step>.png` screenshot.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import {
  cellRow as cellRowOf,
  craneStatus as craneStatusOf,
  env,
  moveTo as moveToOf,
  moveToText as moveToTextOf,
  normalise,
  openNotebook,
  scenario,
  SLOW,
  waitForFrameText as waitForFrameTextOf,
} from './lib.mjs';

const WORKBENCH_URL = env('CRANE_E2E_URL');
const KERNEL = env('CRANE_E2E_KERNEL');
const PRIMED = Number(env('CRANE_E2E_PRIMED'));
const PYTHON = env('CRANE_E2E_PYTHON');

const NOTEBOOK = 'sales.ipynb';
const CRASH_CELL = 4; // 1-based over all cells, markdown included, as CRANE numbers them (`crane check`)
const FIXED_SOURCE = 'revenue = (sales["units"] * sales["price"]).sum()\nrevenue';

const s = scenario();
const { step } = s;
let diagnosisText; // what the diagnosis preview showed
let statusWithPreviewFocused; // the CRANE status bar text while the diagnosis preview has the focus

const screenshot = (name) => s.screenshot(name);
const cellRow = (n) => cellRowOf(s.page, n);
const craneStatus = () => craneStatusOf(s.page);
const moveTo = (locator) => moveToOf(s.page, locator);
const moveToText = (locator, word) => moveToTextOf(s.page, locator, word);
const waitForFrameText = (re, timeout) => waitForFrameTextOf(s.page, re, timeout);

step('the workbench loads with the workspace', async () => {
  await s.page.goto(WORKBENCH_URL);
  await s.page.locator('.monaco-workbench').waitFor({ timeout: SLOW });
  await s.page.locator('.explorer-folders-view').getByText(NOTEBOOK).waitFor({ timeout: SLOW });
  await screenshot('workbench');
});

step('the notebook opens in the notebook editor', async () => {
  await openNotebook(s.page, NOTEBOOK);
  await cellRow(CRASH_CELL).waitFor();
  await screenshot('notebook-open');
});

step('the status bar shows the attached kernel', async () => {
  const item = craneStatus();
  await item.filter({ hasText: 'CRANE: kernel attached' }).waitFor({ timeout: SLOW });
  await item.hover();
  const tooltip = s.page.locator('.monaco-hover, .custom-hover, .workbench-hover').filter({ hasText: 'Kernel: attached' });
  await tooltip.first().waitFor();
  const text = await tooltip.first().innerText();
  assert.match(text, /Server: running/);
  assert.ok(text.includes(KERNEL), `the tooltip names the connection file ${KERNEL}:\n${text}`);
  await screenshot('status-kernel-attached');
  await s.page.mouse.move(800, 600);
});

step('the cell that will crash has a squiggle, and only that cell', async () => {
  const squiggle = cellRow(CRASH_CELL).locator('.squiggly-error');
  await squiggle.first().waitFor({ timeout: SLOW });
  for (const n of [2, 3]) {
    assert.equal(await cellRow(n).locator('.squiggly-error, .squiggly-warning').count(), 0, `cell ${n} ran fine: no squiggle`);
  }
  await screenshot('squiggle');
});

step("hovering the squiggle shows CRANE's message", async () => {
  await moveTo(cellRow(CRASH_CELL).locator('.squiggly-error').first());
  const hover = s.page.locator('.monaco-hover').filter({ hasText: 'KeyError' });
  await hover.first().waitFor();
  const text = await hover.first().innerText();
  assert.match(text, /revenue/);
  assert.match(text, /crane/);
  await s.page.waitForTimeout(500); // the hover fades in
  await screenshot('hover-message');
});

step('hovering a name shows its runtime facts from the kernel', async () => {
  await s.page.keyboard.press('Escape');
  await s.page.mouse.move(800, 900);
  await s.page.waitForTimeout(300);
  // `sales` where cell 3 assigns it
  await moveToText(cellRow(3).locator('.view-line').first(), 'sales');
  const hover = s.page.locator('.monaco-hover').filter({ hasText: 'DataFrame' });
  await hover.first().waitFor({ timeout: SLOW });
  const text = await hover.first().innerText();
  assert.match(text, /units/, `the hover lists the columns:\n${text}`);
  await s.page.waitForTimeout(500); // the hover fades in
  await screenshot('hover-runtime-facts');
});

step('the quick fix "Diagnose with CRANE" opens its explanation', async () => {
  await s.page.keyboard.press('Escape');
  await moveTo(cellRow(CRASH_CELL).locator('.squiggly-error').first());
  await s.page.mouse.down();
  await s.page.mouse.up();
  await s.page.keyboard.press('Control+Period');
  const action = s.page.locator('.action-widget .monaco-list-row').filter({ hasText: 'Diagnose with CRANE' });
  await action.first().waitFor();
  await screenshot('quick-fix-menu');
  // keyboard, as a user would (the menu blocks pointer events until the mouse moves)
  const focused = s.page.locator('.action-widget .monaco-list-row.focused');
  for (let i = 0; i < 6 && (await focused.getAttribute('aria-label')) !== 'Diagnose with CRANE'; i++) {
    await s.page.keyboard.press('ArrowDown');
  }
  assert.equal(await focused.getAttribute('aria-label'), 'Diagnose with CRANE');
  await s.page.keyboard.press('Enter');
  // markdown.showPreviewToSide of a crane-diagnosis: document: a webview whose text is the diagnosis
  await s.page.locator('.tabs-container .tab').filter({ hasText: /diagnosis/i }).first().waitFor({ timeout: SLOW });
  const frameText = await waitForFrameText(/will crash/, SLOW);
  assert.match(frameText, /KeyError/);
  assert.match(frameText, /revenue/);
  assert.match(frameText, /units/, 'the evidence lists the columns the DataFrame has');
  assert.match(frameText, /facts read from the live kernel/);
  diagnosisText = frameText;
  await s.page.mouse.move(1200, 950);
  await screenshot('diagnosis');
  statusWithPreviewFocused = await craneStatus().innerText();
});

step('editing the cell to the fix clears the squiggle', async () => {
  const row = cellRow(CRASH_CELL);
  await row.locator('.view-lines').click();
  await s.page.keyboard.press('Control+A');
  await s.page.keyboard.press('Delete');
  await s.page.keyboard.insertText(FIXED_SOURCE);
  await s.page.keyboard.press('Escape');
  assert.equal(normalise(await row.locator('.view-lines').innerText()), FIXED_SOURCE);
  await row.locator('.squiggly-error').first().waitFor({ state: 'detached', timeout: SLOW });
  // and it stays clear (a late, stale diagnostics push would bring it back)
  await s.page.waitForTimeout(3000);
  assert.equal(await row.locator('.squiggly-error, .squiggly-warning').count(), 0);
  await screenshot('fixed-no-squiggle');
});

step('the diagnosis numbers the cell as the notebook does', async (t) => {
  if (diagnosisText === undefined) {
    t.skip('no diagnosis was shown');
    return;
  }
  // The preview's title (from the extension) and its body (from the server) must name the same cell.
  assert.match(diagnosisText, new RegExp(`cell ${CRASH_CELL}\\b`), 'title');
  assert.match(diagnosisText, new RegExp(`Cell ${CRASH_CELL} will crash`), `body:\n${diagnosisText.slice(0, 400)}`);
}, { always: true });

step('the status bar keeps showing the kernel while the diagnosis preview has the focus', async (t) => {
  if (statusWithPreviewFocused === undefined) {
    t.skip('no diagnosis was shown');
    return;
  }
  // The preview is CRANE's own explanation of that notebook's cell: the kernel did not go away.
  assert.match(statusWithPreviewFocused, /kernel attached/, `status bar: ${statusWithPreviewFocused}`);
}, { always: true });

step('the kernel ran nothing but the cells run before the test', async () => {
  const script = fileURLToPath(new URL('./check_kernel.py', import.meta.url));
  const { stdout } = await promisify(execFile)(PYTHON, [script, KERNEL, String(PRIMED)]).catch((err) => {
    throw new Error(`the kernel's history changed: ${err.stdout || err.message}`);
  });
  const state = JSON.parse(stdout);
  assert.equal(state.execution_count, PRIMED);
}, { always: true });
