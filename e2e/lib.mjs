/**
 * Shared by the end-to-end scenarios (e2e/*.e2e.test.mjs): the browser, named steps with screenshots, and
 * the workbench's parts (explorer, notebook cells, the CRANE status bar item, hovers, webview frames).
 * Every wait is on a DOM condition with a generous timeout: the machine is shared and slow.
 */
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { chromium } from 'playwright-core';

export const env = (name) => {
  const v = process.env[name];
  if (!v) {
    throw new Error(`${name} is not set: run this test through e2e/run.sh`);
  }
  return v;
};

// Generous: the machine is shared and slow; the server starts Python, attaches and probes the kernel.
export const SLOW = 90_000;

/**
 * One browser page shared by a scenario's steps (they run in order). `prefix` names the screenshots:
 * `<prefix>NN-<step>.png`, and `FAILED-<prefix><step>.png` when a step fails.
 */
export function scenario({ prefix = '' } = {}) {
  const shots = env('CRANE_E2E_SCREENSHOTS');
  const run = env('CRANE_E2E_RUN');
  const chromiumPath = process.env.CRANE_E2E_CHROMIUM || '/usr/bin/chromium';
  const tracing = Boolean(process.env.CRANE_E2E_TRACE);
  const s = {
    page: undefined,
    context: undefined,
    failed: undefined, // the first failed step: later steps are skipped
    shot: 0,
  };

  before(async () => {
    mkdirSync(shots, { recursive: true });
    // a fresh profile in the run folder (run.sh empties it); Playwright passes it as --user-data-dir
    s.context = await chromium.launchPersistentContext(path.join(run, 'chromium-profile'), {
      executablePath: chromiumPath,
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
    // A Playwright trace (a screencast and DOM snapshots of every action) only on request (CRANE_E2E_TRACE=1):
    // recording it took 40 % of a scenario's CPU (49 -> 29 CPU-s for connection-file), paid on every passing run
    if (tracing) await s.context.tracing.start({ screenshots: true, snapshots: true });
    s.page = s.context.pages()[0] ?? (await s.context.newPage());
    // every wait (page loads, cell rows, clicks) as generous as the scenarios' own: at load 25 code-server took over
    // 30 s to serve the workbench and show a notebook's rows, and a scenario failed before CRANE did anything
    s.page.setDefaultTimeout(SLOW);
  });

  after(async () => {
    // the trace of the whole run when a step failed: npx playwright-core show-trace <file>
    const trace = s.failed ? path.join(shots, `${prefix}trace.zip`) : undefined;
    if (tracing) await s.context?.tracing.stop(trace ? { path: trace } : {}).catch(() => {});
    await s.context?.close().catch(() => {});
  });

  /** Saves `<prefix>NN-<name>.png`. */
  s.screenshot = async (name) => {
    s.shot += 1;
    const file = path.join(shots, `${prefix}${String(s.shot).padStart(2, '0')}-${name}.png`);
    await s.page.screenshot({ path: file });
    return file;
  };

  /**
   * Runs a step; on failure saves a screenshot of the page as it was before rethrowing. Steps after a failed
   * one are skipped (they build on its page state), except `always` ones.
   */
  s.step = (name, fn, { always = false } = {}) => {
    test(name, async (t) => {
      if (s.failed && !always) {
        t.skip(`after the failed step "${s.failed}"`);
        return;
      }
      try {
        await fn(t);
      } catch (err) {
        s.failed ??= name;
        if (s.page) {
          const file = path.join(shots, `FAILED-${prefix}${name.replace(/[^a-z0-9]+/gi, '-')}.png`);
          await s.page.screenshot({ path: file }).catch(() => {});
        }
        throw err;
      }
    });
  };
  return s;
}

/** The list rows of the visible notebook's cells (markdown included), in order. */
export function cellRows(page) {
  return page.locator(
    '.notebookOverlay:visible .monaco-list-row.code-cell-row, .notebookOverlay:visible .monaco-list-row.markdown-cell-row',
  );
}

/** The list row of notebook cell `n` (1-based, markdown cells included, as CRANE numbers them). */
export function cellRow(page, n) {
  return cellRows(page).nth(n - 1);
}

/**
 * Opens a notebook from the explorer. Right after the workbench appears, the built-in `ipynb` extension
 * may not be registered yet and VS Code opens the file as JSON text: then the tab is closed and the open
 * retried, a few times.
 */
export async function openNotebook(page, name) {
  const notebook = page.locator('.notebookOverlay:visible');
  const text = page.locator('.editor-instance .monaco-editor[data-uri$="' + name + '"]');
  for (let attempt = 1; attempt <= 6; attempt++) {
    await page.locator('.explorer-folders-view').getByText(name, { exact: true }).dblclick();
    await notebook.or(text).first().waitFor({ timeout: SLOW });
    if (await notebook.isVisible()) {
      return;
    }
    // opened as text: close that editor and try again a little later
    console.error(`# ${name} opened as text (attempt ${attempt}): reopening`);
    await page.locator('.tabs-container .tab.active .codicon-close').click();
    await page.waitForTimeout(2000);
  }
  throw new Error(`${name} kept opening as text, not in the notebook editor`);
}

/** The CRANE status bar item. */
export function craneStatus(page) {
  return page.locator('.statusbar-item').filter({ hasText: /CRANE/ }).first();
}

/** The hover that shows a status bar item's tooltip (or an editor hover) containing `text`. */
export function hoverWith(page, text) {
  return page.locator('.monaco-hover, .custom-hover, .workbench-hover').filter({ hasText: text }).first();
}

/** Hovers the CRANE status item until its tooltip contains `text`; returns the tooltip's text. */
export async function craneTooltip(page, text, timeout = SLOW) {
  const deadline = Date.now() + timeout;
  for (;;) {
    await page.mouse.move(800, 600);
    await page.keyboard.press('Escape').catch(() => {});
    await craneStatus(page).hover();
    const tip = hoverWith(page, text);
    try {
      await tip.waitFor({ timeout: 5000 });
      return await tip.innerText();
    } catch (err) {
      if (Date.now() > deadline) {
        const shown = await page.locator('.monaco-hover, .custom-hover, .workbench-hover').allInnerTexts().catch(() => []);
        throw new Error(`the CRANE tooltip never showed ${text}; last shown: ${JSON.stringify(shown)}`);
      }
    }
  }
}

/** Moves the mouse to the middle of `locator` (squiggles sit under the text, which takes the pointer events). */
export async function moveTo(page, locator) {
  // The editor re-renders a decoration when diagnostics are published again (the element the locator found is
  // replaced while it scrolls): the locator is resolved anew, a few times.
  for (let attempt = 1; ; attempt++) {
    try {
      await locator.scrollIntoViewIfNeeded();
      const box = await locator.boundingBox();
      assert.ok(box, 'the element is on screen');
      await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2, { steps: 4 });
      return;
    } catch (err) {
      if (attempt >= 5 || !/not attached|detached|element is on screen/.test(String(err && err.message))) throw err;
      await locator.waitFor({ state: 'attached', timeout: 10000 });
    }
  }
}

/**
 * Hovers `locator` (a squiggle) until an editor hover containing `text` shows; returns that hover. An editor hover
 * keeps the message it showed when the pointer arrived: when diagnostics are published again meanwhile (a kernel
 * restart makes the old KeyError squiggle a NameError one a moment later), a pointer left still never sees the new
 * message. So each try moves away, closes the hover and moves onto the squiggle again (resolved anew).
 */
export async function hoverUntil(page, locator, text, timeout = SLOW) {
  const deadline = Date.now() + timeout;
  for (;;) {
    await page.keyboard.press('Escape').catch(() => {});
    await page.mouse.move(800, 900);
    await locator.waitFor({ timeout: Math.max(1000, deadline - Date.now()) });
    await moveTo(page, locator);
    const hover = page.locator('.monaco-hover').filter({ hasText: text }).first();
    try {
      await hover.waitFor({ timeout: 5000 });
      return hover;
    } catch (err) {
      if (Date.now() > deadline) {
        const shown = await page.locator('.monaco-hover').allInnerTexts().catch(() => []);
        throw new Error(`no hover showed ${text}; last shown: ${JSON.stringify(shown)}`);
      }
    }
  }
}

/** Moves the mouse onto the first occurrence of `word` in the text of `locator` (one editor line). */
export async function moveToText(page, locator, word) {
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
export function normalise(text) {
  return text.replace(/\u00a0/g, ' ').trim();
}

/** The body text of every frame (webviews are nested iframes); `webviewsOnly`: not the workbench itself. */
export async function frameTexts(page, { webviewsOnly = false } = {}) {
  const out = [];
  for (const frame of page.frames()) {
    if (webviewsOnly && frame === page.mainFrame()) {
      continue;
    }
    out.push(await frame.evaluate(() => document.body?.innerText ?? '').catch(() => ''));
  }
  return out;
}

/**
 * Polls every frame (`webviewsOnly`: every frame but the workbench's, e.g. a notebook's output webview, which
 * renders after the cell's state shows it ended) until one's body text matches `re`; returns that text.
 */
export async function waitForFrameText(page, re, timeout, { webviewsOnly = false } = {}) {
  const deadline = Date.now() + timeout;
  while (Date.now() < deadline) {
    for (const text of await frameTexts(page, { webviewsOnly })) {
      if (re.test(text)) {
        return text;
      }
    }
    await page.waitForTimeout(250);
  }
  throw new Error(`no frame shows ${re} within ${timeout} ms`);
}

// ---- notebooks with a kernel (Microsoft's Jupyter extension) -----------------------------------------------

const RUNNING = '.codicon-notebook-state-executing, .codicon-notebook-state-pending';

/**
 * Clicks the run button of cell `n`, as a user does, and waits until a run has started. A fast cell's
 * executing state can come and go between two polls, so an observer on the notebook (a stable element)
 * notes that a run started.
 */
export async function startCell(page, n, timeout = SLOW) {
  const overlay = page.locator('.notebookOverlay:visible').first();
  const handle = await overlay.elementHandle();
  await handle.evaluate((el, running) => {
    el.__craneRunSeen = false;
    el.__craneObserver?.disconnect();
    el.__craneObserver = new MutationObserver(() => {
      if (el.querySelector(running)) {
        el.__craneRunSeen = true;
      }
    });
    el.__craneObserver.observe(el, { subtree: true, childList: true, attributes: true, attributeFilter: ['class'] });
  }, RUNNING);
  const row = cellRow(page, n);
  await row.scrollIntoViewIfNeeded();
  await row.hover();
  await row.locator('.run-button-container a.action-label').first().click();
  await page.waitForFunction((el) => el.__craneRunSeen, handle, { timeout, polling: 100 });
}

/** Waits until no cell is pending or executing and cell `n` shows how its last run ended. */
export async function waitForCellDone(page, n, timeout = SLOW) {
  const overlay = page.locator('.notebookOverlay:visible').first();
  const handle = await overlay.elementHandle();
  await page.waitForFunction(([el, running]) => !el.querySelector(running), [handle, RUNNING], { timeout, polling: 100 });
  await handle.evaluate((el) => el.__craneObserver?.disconnect());
  await cellRow(page, n).locator('.codicon-notebook-state-success, .codicon-notebook-state-error').first().waitFor({ timeout });
}

/** Whether cell `n` is pending or executing now. */
export async function cellRunning(page, n) {
  return (await cellRow(page, n).locator(RUNNING).count()) > 0;
}

/** Runs cell `n` with its run button and waits until it has finished. */
export async function runCell(page, n, timeout = SLOW) {
  await startCell(page, n, timeout);
  await waitForCellDone(page, n, timeout);
}

/** The execution count label of cell `n` ("[3]", or "[ ]" when it has not run). */
export async function executionCount(page, n) {
  return normalise(await cellRow(page, n).locator('.execution-count-label').innerText());
}

/**
 * Waits until the notebook's kernel picker shows `name`. With one matching kernelspec the Jupyter extension
 * selects it by itself; otherwise ("Select Kernel") this picks it as a user would: the kernel button,
 * "Select Another Kernel...", "Jupyter Kernel...", then the kernelspec.
 */
export async function waitForKernelPicked(page, name, timeout = SLOW) {
  const label = page.locator('.notebook-toolbar-container .kernel-label').first();
  const deadline = Date.now() + timeout;
  let picked = false;
  for (;;) {
    const text = normalise((await label.innerText().catch(() => '')) || '');
    if (text === name) {
      return;
    }
    if (Date.now() > deadline) {
      throw new Error(`the kernel picker shows "${text}", not "${name}"`);
    }
    if (!picked && /select kernel/i.test(text) && Date.now() > deadline - timeout + 15_000) {
      picked = true;
      const row = (re) => page.locator('.quick-input-widget .monaco-list-row').filter({ hasText: re }).first();
      await label.click();
      const another = row(/Select Another Kernel/);
      if (await another.waitFor({ timeout: 10_000 }).then(() => true, () => false)) {
        await another.click();
      }
      await row(/Jupyter Kernel/).click();
      await row(new RegExp(name.replace(/[()]/g, '\\$&'))).click();
    }
    await page.waitForTimeout(500);
  }
}

/** A button of a modal dialog whose text matches `re`. */
export function dialogButton(page, re, label) {
  return page
    .locator('.monaco-dialog-box')
    .filter({ hasText: re })
    .locator('a.monaco-button', { hasText: new RegExp(`^${label}$`) })
    .first();
}

/** Runs a command from the command palette by its title. */
export async function runCommand(page, title) {
  await page.keyboard.press('F1');
  const input = page.locator('.quick-input-widget input[type="text"]').first();
  await input.waitFor();
  await input.fill(`>${title}`);
  const row = page.locator('.quick-input-widget .monaco-list-row').filter({ hasText: title }).first();
  await row.waitFor({ timeout: SLOW });
  await row.click();
}

/** Starts recording every text the CRANE status bar item shows (read back with recordedStatusTexts). */
export async function recordStatusTexts(page) {
  await page.evaluate(() => {
    const seen = (window.__craneStatusTexts = []);
    const read = () => {
      for (const el of document.querySelectorAll('.statusbar-item')) {
        const text = (el.innerText || '').trim();
        if (/CRANE/.test(text) && seen.at(-1) !== text) {
          seen.push(text);
        }
      }
    };
    read();
    const bar = document.querySelector('.part.statusbar') ?? document.body;
    new MutationObserver(read).observe(bar, { subtree: true, childList: true, characterData: true, attributes: true });
  });
}

export async function recordedStatusTexts(page) {
  return page.evaluate(() => window.__craneStatusTexts ?? []);
}

/** The CRANE output channel so far (VS Code writes it to <logs>/<stamp>/exthost<N>/crane.crane/CRANE.log). */
export async function craneLog() {
  const { readdir, readFile } = await import('node:fs/promises');
  const root = env('CRANE_E2E_LOGS');
  const files = (await readdir(root, { recursive: true })).filter((f) => f.endsWith('CRANE.log'));
  const texts = await Promise.all(files.map((f) => readFile(path.join(root, f), 'utf8')));
  return texts.join('\n');
}

/**
 * The kernel's execution count and `len(In) - 1`, read privately (check_kernel.py); throws unless both
 * equal `expected`.
 */
export async function kernelCheck(connectionFile, expected) {
  const { execFile } = await import('node:child_process');
  const { promisify } = await import('node:util');
  const script = new URL('./check_kernel.py', import.meta.url).pathname;
  try {
    const { stdout } = await promisify(execFile)(env('CRANE_E2E_PYTHON'), [script, connectionFile, String(expected)]);
    return JSON.parse(stdout);
  } catch (err) {
    throw new Error(`the kernel's history is not the user's ${expected} runs: ${err.stdout || err.message}`);
  }
}
