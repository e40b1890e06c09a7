/**
 * The CRANE extension in a real VS Code (code-server), driven by headless Chromium through playwright-core.
 * Started by e2e/run.sh, which provides code-server, the kernel and these environment variables:
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
import { mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { chromium } from 'playwright-core';

const env = (name) => {
  const v = process.env[name];
  if (!v) {
    throw new Error(`${name} is not set: run this test through e2e/run.sh`);
  }
  return v;
};
const WORKBENCH_URL = env('CRANE_E2E_URL');
const SHOTS = env('CRANE_E2E_SCREENSHOTS');
const RUN = env('CRANE_E2E_RUN');
const KERNEL = env('CRANE_E2E_KERNEL');
const PRIMED = Number(env('CRANE_E2E_PRIMED'));
const PYTHON = env('CRANE_E2E_PYTHON');
const CHROMIUM = process.env.CRANE_E2E_CHROMIUM || '/usr/bin/chromium';

const NOTEBOOK = 'sales.ipynb';
const CRASH_CELL = 4; // 1-based over all cells, markdown included, as CRANE numbers them (`crane check`)
const FIXED_SOURCE = 'revenue = (sales["units"] * sales["price"]).sum()\nrevenue';

// Generous: the machine is shared and slow; the server starts Python, attaches and probes the kernel.
const SLOW = 90_000;

let context;
let failed; // the first failed step: later steps are skipped
let page;
let shot = 0;
let diagnosisText; // what the diagnosis preview showed
let statusWithPreviewFocused; // the CRANE status bar text while the diagnosis preview has the focus

async function screenshot(name) {
  shot += 1;
  const file = path.join(SHOTS, `${String(shot).padStart(2, '0')}-${name}.png`);
  await page.screenshot({ path: file });
  return file;
}

/**
 * Runs a step; on failure saves a screenshot of the page as it was before rethrowing. Steps after a failed
 * one are skipped (they build on its page state), except `always` ones.
 */
function step(name, fn, { always = false } = {}) {
  test(name, async (t) => {
    if (failed && !always) {
      t.skip(`after the failed step "${failed}"`);
      return;
    }
    try {
      await fn(t);
    } catch (err) {
      failed ??= name;
      if (page) {
        await page.screenshot({ path: path.join(SHOTS, `FAILED-${name.replace(/[^a-z0-9]+/gi, '-')}.png`) }).catch(() => {});
      }
      throw err;
    }
  });
}

/** The list row of notebook cell `n` (1-based, markdown cells included). */
function cellRow(n) {
  return page.locator('.notebookOverlay .monaco-list-row.code-cell-row, .notebookOverlay .monaco-list-row.markdown-cell-row').nth(n - 1);
}

/**
 * Opens the notebook from the explorer. Right after the workbench appears, the built-in `ipynb` extension
 * may not be registered yet and VS Code opens the file as JSON text: then the tab is closed and the open
 * retried, a few times.
 */
async function openNotebook() {
  const notebook = page.locator('.notebookOverlay');
  const text = page.locator('.editor-instance .monaco-editor[data-uri$="' + NOTEBOOK + '"]');
  for (let attempt = 1; attempt <= 6; attempt++) {
    await page.locator('.explorer-folders-view').getByText(NOTEBOOK).dblclick();
    await notebook.or(text).first().waitFor({ timeout: SLOW });
    if (await notebook.isVisible()) {
      return;
    }
    // opened as text: close that editor and try again a little later
    console.error(`# ${NOTEBOOK} opened as text (attempt ${attempt}): reopening`);
    await page.locator('.tabs-container .tab.active .codicon-close').click();
    await page.waitForTimeout(2000);
  }
  throw new Error(`${NOTEBOOK} kept opening as text, not in the notebook editor`);
}

/** The CRANE status bar item. */
function craneStatus() {
  return page.locator('.statusbar-item').filter({ hasText: /CRANE/ }).first();
}

/** Moves the mouse to the middle of `locator` (squiggles sit under the text, which takes the pointer events). */
async function moveTo(locator) {
  await locator.scrollIntoViewIfNeeded();
  const box = await locator.boundingBox();
  assert.ok(box, 'the element is on screen');
  await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2, { steps: 4 });
}

/** Moves the mouse onto the first occurrence of `word` in the text of `locator` (one editor line). */
async function moveToText(locator, word) {
  await locator.scrollIntoViewIfNeeded();
  const box = await locator.evaluate((el, w) => {
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const at = node.textContent.indexOf(w);
      if (at >= 0) {
        const range = document.createRange();
        range.setStart(node, at);
        range.setEnd(node, at + w.length);
        const r = range.getBoundingClientRect();
        return { x: r.x, y: r.y, width: r.width, height: r.height };
      }
    }
    return null;
  }, word);
  assert.ok(box, `"${word}" is on that line`);
  await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2, { steps: 4 });
}

/** Monaco renders spaces as non-breaking spaces. */
function normalise(text) {
  return text.replace(/\u00a0/g, ' ').trim();
}

/** Polls every frame (webviews are nested iframes) until one's body text matches `re`; returns that text. */
async function waitForFrameText(re, timeout) {
  const deadline = Date.now() + timeout;
  while (Date.now() < deadline) {
    for (const frame of page.frames()) {
      const text = await frame.evaluate(() => document.body?.innerText ?? '').catch(() => '');
      if (re.test(text)) {
        return text;
      }
    }
    await page.waitForTimeout(250);
  }
  throw new Error(`no frame shows ${re} within ${timeout} ms`);
}

before(async () => {
  mkdirSync(SHOTS, { recursive: true });
  // a fresh profile in the run folder (run.sh empties it); Playwright passes it as --user-data-dir
  context = await chromium.launchPersistentContext(path.join(RUN, 'chromium-profile'), {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--disable-quic',
    ],
    viewport: { width: 1600, height: 1000 },
  });
  await context.tracing.start({ screenshots: true, snapshots: true });
  page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(30_000);
});

after(async () => {
  // a Playwright trace of the whole run when a step failed: npx playwright-core show-trace <file>
  const trace = failed ? path.join(SHOTS, 'trace.zip') : undefined;
  await context?.tracing.stop(trace ? { path: trace } : {}).catch(() => {});
  await context?.close().catch(() => {});
});

step('the workbench loads with the workspace', async () => {
  await page.goto(WORKBENCH_URL);
  await page.locator('.monaco-workbench').waitFor({ timeout: SLOW });
  await page.locator('.explorer-folders-view').getByText(NOTEBOOK).waitFor({ timeout: SLOW });
  await screenshot('workbench');
});

step('the notebook opens in the notebook editor', async () => {
  await openNotebook();
  await cellRow(CRASH_CELL).waitFor();
  await screenshot('notebook-open');
});

step('the status bar shows the attached kernel', async () => {
  const item = craneStatus();
  await item.filter({ hasText: 'CRANE: kernel attached' }).waitFor({ timeout: SLOW });
  await item.hover();
  const tooltip = page.locator('.monaco-hover, .custom-hover, .workbench-hover').filter({ hasText: 'Kernel: attached' });
  await tooltip.first().waitFor();
  const text = await tooltip.first().innerText();
  assert.match(text, /Server: running/);
  assert.ok(text.includes(KERNEL), `the tooltip names the connection file ${KERNEL}:\n${text}`);
  await screenshot('status-kernel-attached');
  await page.mouse.move(800, 600);
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
  const hover = page.locator('.monaco-hover').filter({ hasText: 'KeyError' });
  await hover.first().waitFor();
  const text = await hover.first().innerText();
  assert.match(text, /revenue/);
  assert.match(text, /crane/);
  await page.waitForTimeout(500); // the hover fades in
  await screenshot('hover-message');
});

step('hovering a name shows its runtime facts from the kernel', async () => {
  await page.keyboard.press('Escape');
  await page.mouse.move(800, 900);
  await page.waitForTimeout(300);
  // `sales` where cell 3 assigns it
  await moveToText(cellRow(3).locator('.view-line').first(), 'sales');
  const hover = page.locator('.monaco-hover').filter({ hasText: 'DataFrame' });
  await hover.first().waitFor({ timeout: SLOW });
  const text = await hover.first().innerText();
  assert.match(text, /units/, `the hover lists the columns:\n${text}`);
  await page.waitForTimeout(500); // the hover fades in
  await screenshot('hover-runtime-facts');
});

step('the quick fix "Diagnose with CRANE" opens its explanation', async () => {
  await page.keyboard.press('Escape');
  await moveTo(cellRow(CRASH_CELL).locator('.squiggly-error').first());
  await page.mouse.down();
  await page.mouse.up();
  await page.keyboard.press('Control+Period');
  const action = page.locator('.action-widget .monaco-list-row').filter({ hasText: 'Diagnose with CRANE' });
  await action.first().waitFor();
  await screenshot('quick-fix-menu');
  // keyboard, as a user would (the menu blocks pointer events until the mouse moves)
  const focused = page.locator('.action-widget .monaco-list-row.focused');
  for (let i = 0; i < 6 && (await focused.getAttribute('aria-label')) !== 'Diagnose with CRANE'; i++) {
    await page.keyboard.press('ArrowDown');
  }
  assert.equal(await focused.getAttribute('aria-label'), 'Diagnose with CRANE');
  await page.keyboard.press('Enter');
  // markdown.showPreviewToSide of a crane-diagnosis: document: a webview whose text is the diagnosis
  await page.locator('.tabs-container .tab').filter({ hasText: /diagnosis/i }).first().waitFor({ timeout: SLOW });
  const frameText = await waitForFrameText(/will crash/, SLOW);
  assert.match(frameText, /KeyError/);
  assert.match(frameText, /revenue/);
  assert.match(frameText, /units/, 'the evidence lists the columns the DataFrame has');
  assert.match(frameText, /facts read from the live kernel/);
  diagnosisText = frameText;
  await page.mouse.move(1200, 950);
  await screenshot('diagnosis');
  statusWithPreviewFocused = await craneStatus().innerText();
});

step('editing the cell to the fix clears the squiggle', async () => {
  const row = cellRow(CRASH_CELL);
  await row.locator('.view-lines').click();
  await page.keyboard.press('Control+A');
  await page.keyboard.press('Delete');
  await page.keyboard.insertText(FIXED_SOURCE);
  await page.keyboard.press('Escape');
  assert.equal(normalise(await row.locator('.view-lines').innerText()), FIXED_SOURCE);
  await row.locator('.squiggly-error').first().waitFor({ state: 'detached', timeout: SLOW });
  // and it stays clear (a late, stale diagnostics push would bring it back)
  await page.waitForTimeout(3000);
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
