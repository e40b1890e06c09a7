/**
 * The real VS Code path: Microsoft's Jupyter extension (ms-toolsai.jupyter 2025.4.1) owns the kernel, and
 * CRANE reaches it through the extension's kernels API, in code-server driven by headless Chromium.
 * Started by `e2e/run.sh jupyter`, which installs both extensions, registers a kernelspec for the test's
 * Python (JUPYTER_PATH) and provides:
 *   CRANE_E2E_URL, CRANE_E2E_SCREENSHOTS, CRANE_E2E_RUN, CRANE_E2E_PYTHON, CRANE_E2E_CHROMIUM (see lib.mjs)
 *   CRANE_E2E_LOGS         VS Code's log folder (the CRANE output channel is read from there)
 *   CRANE_E2E_KERNEL_NAME  the kernelspec's display name
 *   CRANE_E2E_RUNTIME_DIR  where the Jupyter extension writes connection files (JUPYTER_RUNTIME_DIR)
 *   CRANE_BRIDGE_WAIT_MS=2000 is set for code-server: the bridge says it stops waiting after 2 s, not 10.
 * The user's scenario (issue 12, steps 1-6), on revenue.ipynb: 1 markdown, 2 a slow first step
 * (`time.sleep(10)`, prints "ready"), 3 `import pandas as pd`, 4 `sales = pd.read_csv(...)`,
 * 5 `total = sales["revenue"].sum()` (KeyError), 6 adds the column.
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import {
  cellRow,
  cellRunning,
  startCell,
  waitForCellDone,
  craneTooltip,
  env,
  kernelCheck,
  hoverUntil,
  moveTo,
  moveToText,
  openNotebook,
  recordStatusTexts,
  recordedStatusTexts,
  craneLog,
  runCell,
  executionCount,
  frameTexts,
  waitForFrameText,
  scenario,
  SLOW,
  waitForKernelPicked,
  dialogButton,
  craneStatus,
} from './lib.mjs';

const WORKBENCH_URL = env('CRANE_E2E_URL');
const RUNTIME_DIR = env('CRANE_E2E_RUNTIME_DIR');
const KERNEL_NAME = env('CRANE_E2E_KERNEL_NAME');
const NOTEBOOK = 'revenue.ipynb';
const SLOW_CELL = 2;
const CRASH_CELL = 5;
const FIX_CELL = 6;

const s = scenario({ prefix: 'jupyter-' });
const { step } = s;
let firstFile; // the connection file of the kernel's first process
let crashSource; // cell 4's text, which no step edits

/** Waits until the CRANE output channel has a line matching `re`. */
async function waitForLog(re, timeout = SLOW) {
  const deadline = Date.now() + timeout;
  while (!re.test(await craneLog())) {
    if (Date.now() > deadline) {
      throw new Error(`the CRANE log never showed ${re}`);
    }
    await s.page.waitForTimeout(250);
  }
}

/** Waits for an error squiggle in cell `n`; a timeout names the cell and shows the end of the CRANE log. */
async function waitForSquiggle(n) {
  try {
    await cellRow(s.page, n).locator('.squiggly-error').first().waitFor({ timeout: SLOW });
  } catch (err) {
    const tail = (await craneLog()).split('\n').slice(-10).join('\n');
    throw new Error(`cell ${n} never showed an error squiggle (${err.message.split('\n')[0]}); the CRANE log ends:\n${tail}`);
  }
}

/** The connection file the CRANE tooltip names as attached through the Jupyter extension. */
async function attachedThroughJupyter(exclude) {
  const deadline = Date.now() + SLOW;
  for (;;) {
    const tip = await craneTooltip(s.page, 'through the Jupyter extension');
    const m = /Kernel: (?:attached|idle|busy) \(through the Jupyter extension: ([^)\n]+\.json)\)/.exec(tip);
    if (m && m[1] !== exclude) {
      return { file: m[1], tooltip: tip };
    }
    if (Date.now() > deadline) {
      const bridge = (await craneLog()).split('\n').filter((l) => /kernel bridge|kernel_attach|kernel_watch/.test(l));
      const statuses = await recordedStatusTexts(s.page);
      throw new Error(`the tooltip never named a new connection file attached through the Jupyter extension:\n${tip}\n` +
        `status texts: ${JSON.stringify(statuses.slice(-6))}\nlog:\n${bridge.slice(-8).join('\n')}`);
    }
    await s.page.waitForTimeout(500);
  }
}

step('the workbench loads with the workspace', async () => {
  await s.page.goto(WORKBENCH_URL);
  await s.page.locator('.monaco-workbench').waitFor({ timeout: SLOW });
  await s.page.locator('.explorer-folders-view').getByText(NOTEBOOK, { exact: true }).waitFor({ timeout: SLOW });
  await recordStatusTexts(s.page);
  await s.screenshot('workbench');
});

step('1. the notebook opens, its kernel is picked, the user runs the first cell with its run button', async () => {
  await openNotebook(s.page, NOTEBOOK);
  await cellRow(s.page, FIX_CELL).waitFor();
  crashSource = await cellRow(s.page, CRASH_CELL).locator('.view-lines').innerText();
  await waitForKernelPicked(s.page, KERNEL_NAME);
  await s.screenshot('kernel-picked');
  await startCell(s.page, SLOW_CELL); // 10 s: CRANE's question will wait behind it
});

step('2. CRANE asks through the kernels API: the consent dialog is answered "Allow"; attached through the Jupyter extension', async () => {
  const allow = dialogButton(s.page, /Do you want to grant Kernel access to the extension CRANE/, 'Allow');
  await allow.waitFor({ timeout: SLOW });
  await s.screenshot('consent-dialog');
  // while the prompt is open the bridge stops waiting (2 s here), without cancelling its question
  await waitForLog(/kernel bridge: .*: no answer yet, still listening \(never cancelled\)/);
  assert.ok(await cellRunning(s.page, SLOW_CELL), 'the first cell is still running when the user allows access');
  await allow.click();
  // the question queues behind the running cell: the cell ends as it would have, not interrupted
  await waitForCellDone(s.page, SLOW_CELL);
  assert.equal(await cellRow(s.page, SLOW_CELL).locator('.codicon-notebook-state-success').count(), 1, 'the first cell succeeded');
  // the output webview renders after the cell's state shows it ended: wait for the text, then read every output
  await waitForFrameText(s.page, /\bready\b/, SLOW, { webviewsOnly: true }); // printed: it was not interrupted
  const outputs = (await frameTexts(s.page, { webviewsOnly: true })).join('\n');
  assert.doesNotMatch(outputs, /KeyboardInterrupt/);
  assert.equal(await executionCount(s.page, SLOW_CELL), '[1]');
  const { file, tooltip } = await attachedThroughJupyter();
  assert.ok(file.startsWith(RUNTIME_DIR + path.sep), `the kernel's connection file ${file} is the Jupyter extension's`);
  firstFile = file;
  await craneStatus(s.page).filter({ hasText: 'CRANE: kernel attached via Jupyter' }).waitFor({ timeout: SLOW });
  assert.doesNotMatch(tooltip, /declined|could not|Waiting/i);
  await s.screenshot('attached-via-jupyter');
  await s.page.mouse.move(800, 600);
  await runCell(s.page, 3);
  await runCell(s.page, 4);
  assert.equal(await executionCount(s.page, 4), '[3]');
});

step('3. the crashing cell that was not run has a squiggle; hovering a name shows runtime facts', async () => {
  const squiggle = cellRow(s.page, CRASH_CELL).locator('.squiggly-error');
  await squiggle.first().waitFor({ timeout: SLOW });
  for (const n of [SLOW_CELL, 3, 4, FIX_CELL]) {
    assert.equal(await cellRow(s.page, n).locator('.squiggly-error, .squiggly-warning').count(), 0, `cell ${n}: no squiggle`);
  }
  await moveTo(s.page, squiggle.first());
  const message = s.page.locator('.monaco-hover').filter({ hasText: 'KeyError' }).first();
  await message.waitFor();
  assert.match(await message.innerText(), /revenue/);
  await s.page.waitForTimeout(400); // the hover fades in
  await s.screenshot('squiggle-keyerror');
  await s.page.keyboard.press('Escape');
  await s.page.mouse.move(800, 900);
  await moveToText(s.page, cellRow(s.page, 4).locator('.view-line').first(), 'sales');
  const facts = s.page.locator('.monaco-hover').filter({ hasText: 'DataFrame' }).first();
  await facts.waitFor({ timeout: SLOW });
  assert.match(await facts.innerText(), /units/, 'the hover lists the columns');
  await s.page.waitForTimeout(400);
  await s.screenshot('hover-runtime-facts');
  await s.page.keyboard.press('Escape');
  await s.page.mouse.move(800, 900);
});

step('4. running cell 6 adds the column: the squiggle clears without any edit to the crashing cell', async () => {
  await runCell(s.page, FIX_CELL);
  assert.equal(await executionCount(s.page, FIX_CELL), '[4]');
  await cellRow(s.page, CRASH_CELL).locator('.squiggly-error').first().waitFor({ state: 'detached', timeout: SLOW });
  assert.equal(await cellRow(s.page, CRASH_CELL).locator('.view-lines').innerText(), crashSource, 'cell 4 was not edited');
  await s.screenshot('squiggle-cleared-by-a-run');
  // the user's four runs, and nothing else, in the kernel (CRANE's question through the API included)
  const state = await kernelCheck(firstFile, 4);
  assert.deepEqual([state.execution_count, state.history_length], [4, 4]);
});

step('5. restarting the kernel from the toolbar: CRANE attaches to the new process and its facts reset', async () => {
  await s.page.locator('.notebook-toolbar-container [aria-label="Restart Kernel"]').first().click();
  // run.sh sets jupyter.askForKernelRestart: the Jupyter extension always asks first (however long it takes)
  const confirm = dialogButton(s.page, /restart/i, 'Restart');
  await confirm.waitFor({ timeout: SLOW });
  await s.screenshot('restart-confirm');
  await confirm.click();
  const { file } = await attachedThroughJupyter(firstFile);
  assert.ok(file.startsWith(RUNTIME_DIR + path.sep));
  // the names are gone: the cells that use them now predict NameError
  for (const n of [4, CRASH_CELL, FIX_CELL]) {
    await waitForSquiggle(n);
  }
  assert.equal(await cellRow(s.page, 3).locator('.squiggly-error').count(), 0);
  const hover = await hoverUntil(s.page, cellRow(s.page, CRASH_CELL).locator('.squiggly-error').first(), 'NameError');
  assert.match(await hover.innerText(), /sales/);
  await s.page.waitForTimeout(400);
  await s.screenshot('restarted-names-gone');
  await s.page.keyboard.press('Escape');
  await s.page.mouse.move(800, 900);
  const texts = await recordedStatusTexts(s.page);
  assert.ok(texts.some((t) => /kernel restarting/.test(t)), `the status said the kernel was restarting: ${JSON.stringify(texts)}`);
  assert.ok(!texts.some((t) => /could not|\(discovery\)|static only \(/.test(t)), `status texts: ${JSON.stringify(texts)}`);
});

step('6. the execution count and history show only the user\'s runs; CRANE\'s requests never appear as outputs', async () => {
  await runCell(s.page, 3);
  await runCell(s.page, 4);
  assert.equal(await executionCount(s.page, 3), '[1]');
  assert.equal(await executionCount(s.page, 4), '[2]');
  // the facts follow the new process: the column is missing again
  await cellRow(s.page, CRASH_CELL).locator('.squiggly-error').first().waitFor({ timeout: SLOW });
  await hoverUntil(s.page, cellRow(s.page, CRASH_CELL).locator('.squiggly-error').first(), 'KeyError');
  await s.page.keyboard.press('Escape');
  const { file } = await attachedThroughJupyter(firstFile);
  const state = await kernelCheck(file, 2);
  assert.deepEqual([state.execution_count, state.history_length], [2, 2]);
  // the cells' outputs are in a webview, rendered after the cells' states show they ended
  await waitForFrameText(s.page, /region\s+product\s+units/, SLOW, { webviewsOnly: true }); // cell 4's output
  const outputs = await frameTexts(s.page, { webviewsOnly: true });
  for (const text of outputs) {
    assert.ok(!text.includes('kernel-v3') && !text.includes(RUNTIME_DIR), `an output shows CRANE's question:\n${text.slice(0, 500)}`);
  }
  await s.screenshot('only-user-runs');
});

step('the CRANE log shows no failed attach and no re-attach per cell run', async () => {
  const log = await craneLog();
  assert.doesNotMatch(log, /could not attach|not attached|kernel bridge: .*failed/);
  const attaches = log.match(/kernel bridge: .* -> .*: attached/g) ?? [];
  assert.equal(attaches.length, 2, `one attach per kernel process:\n${attaches.join('\n')}`);
}, { always: true });
