/**
 * Issue 24: install and go. A fresh code-server profile where no interpreter the extension can find has CRANE
 * (no `crane.python`, no Python extension; PATH has a Python 3.10+ without crane-notebook): opening a notebook
 * makes the extension create its own server environment in its global storage from the wheel the vsix
 * carries (a progress notification meanwhile), attach to the kernel and show the squiggle; a second start
 * (the window reloaded: a new extension host) reuses that environment without installing anything.
 * Started by `e2e/run.sh fresh`; environment as for crane.e2e.test.mjs, plus
 *   CRANE_E2E_STORAGE  the extension's global storage folder (where its environment must appear)
 * Screenshots: fresh-progress.png, fresh-squiggle.png, fresh-NN-<step>.png.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import {
  cellRow as cellRowOf,
  craneLog,
  craneStatus as craneStatusOf,
  craneTooltip,
  env,
  openNotebook,
  scenario,
  SLOW,
} from './lib.mjs';

const WORKBENCH_URL = env('CRANE_E2E_URL');
const SHOTS = env('CRANE_E2E_SCREENSHOTS');
const STORAGE = env('CRANE_E2E_STORAGE');
const NOTEBOOK = 'sales.ipynb';
const CRASH_CELL = 4;
// creating the environment downloads crane-notebook's dependencies from the package index: minutes on a slow
// machine; each wait below ends on an event (a notification, a log line, the status bar), this is only its cap
const INSTALL = 9 * 60_000;
const ENV_DIR = path.join(STORAGE, 'server-env');

const s = scenario({ prefix: 'fresh-' });
const { step } = s;
const cellRow = (n) => cellRowOf(s.page, n);
const craneStatus = () => craneStatusOf(s.page);
const shot = (name) => s.page.screenshot({ path: path.join(SHOTS, `fresh-${name}.png`) });

/** Polls the CRANE output channel until `re` matches it; returns the log. */
async function waitForLog(re, timeout) {
  const deadline = Date.now() + timeout;
  for (;;) {
    const text = await craneLog().catch(() => '');
    if (re.test(text)) {
      return text;
    }
    if (Date.now() > deadline) {
      throw new Error(`the CRANE log never matched ${re}; its end:\n${text.slice(-3000)}`);
    }
    await s.page.waitForTimeout(500);
  }
}

const count = (text, re) => (text.match(new RegExp(re.source, 'g')) ?? []).length;

step('the workbench loads with the workspace; CRANE has no environment yet', async () => {
  assert.equal(existsSync(ENV_DIR), false, `${ENV_DIR} exists before the extension ran`);
  await s.page.goto(WORKBENCH_URL);
  await s.page.locator('.monaco-workbench').waitFor({ timeout: SLOW });
  await s.page.locator('.explorer-folders-view').getByText(NOTEBOOK).waitFor({ timeout: SLOW });
  await s.screenshot('workbench');
});

step('opening a notebook sets up the server environment, with a progress notification', async () => {
  await openNotebook(s.page, NOTEBOOK);
  const toast = s.page
    .locator('.notifications-toasts .notification-toast')
    .filter({ hasText: 'CRANE: first-use setup (a minute or a few)' })
    .first();
  await toast.waitFor({ timeout: SLOW });
  // the notification follows pip's steps: the picture shows one of them, over the notebook's cells
  await cellRow(CRASH_CELL).waitFor({ timeout: SLOW });
  await toast.filter({ hasText: /collecting|downloading|installing/ }).waitFor({ timeout: INSTALL });
  await shot('progress');
  await waitForLog(/building the server environment from .*Python 3\.\d+/, SLOW);
});

step('the environment is built into a partial folder and put in place when complete', async () => {
  const log = await waitForLog(/server environment ready|could not|CRANE needs Python/, INSTALL);
  assert.match(log, /server environment ready: .*server-env \(create, Python 3\.\d+/, log.slice(-3000));
  const marker = JSON.parse(readFileSync(path.join(ENV_DIR, 'crane-env.json'), 'utf8'));
  assert.match(marker.wheel, /^crane_notebook-.*\.whl$/);
  assert.match(marker.wheelSha256, /^[0-9a-f]{64}$/);
  assert.equal(count(log, /installing crane_notebook/), 1);
});

step('the server starts from that environment and attaches to the kernel', async () => {
  await craneStatus().filter({ hasText: 'CRANE: kernel attached' }).waitFor({ timeout: SLOW });
  const tip = await craneTooltip(s.page, 'Kernel: attached');
  assert.match(tip, /Server: running/);
  assert.ok(tip.includes(path.join('server-env', 'bin', 'python')), `the server runs from the extension's environment:\n${tip}`);
  assert.match(tip, /extension-env/);
  await s.page.mouse.move(800, 600);
  await s.screenshot('attached');
});

step('the cell that will crash has a squiggle', async () => {
  await s.page.keyboard.press('Escape').catch(() => {});
  await cellRow(CRASH_CELL).locator('.squiggly-error').first().waitFor({ timeout: SLOW });
  await s.page.waitForTimeout(300); // let the notification's fade-out finish for the picture
  await shot('squiggle');
});

step('a second start (window reloaded) reuses the environment without installing', async () => {
  const before = await craneLog();
  const marker = readFileSync(path.join(ENV_DIR, 'crane-env.json'), 'utf8');
  await s.page.reload();
  await s.page.locator('.monaco-workbench').waitFor({ timeout: SLOW });
  await s.page.locator('.explorer-folders-view').getByText(NOTEBOOK).waitFor({ timeout: SLOW });
  if (!(await s.page.locator('.notebookOverlay:visible').isVisible())) {
    await openNotebook(s.page, NOTEBOOK);
  }
  await craneStatus().filter({ hasText: 'CRANE: kernel attached' }).waitFor({ timeout: SLOW });
  await cellRow(CRASH_CELL).locator('.squiggly-error').first().waitFor({ timeout: SLOW });
  const log = await waitForLog(/reusing the server environment/, SLOW);
  const starts = count(log, /starting the server \(activation\)/);
  assert.ok(starts >= 2, `two activations in the log (found ${starts})`);
  assert.equal(count(log, /installing crane_notebook/), count(before, /installing crane_notebook/), 'nothing installed again');
  assert.equal(count(log, /installing crane_notebook/), 1);
  assert.equal(readFileSync(path.join(ENV_DIR, 'crane-env.json'), 'utf8'), marker, 'the environment was not rebuilt');
  assert.equal(
    await s.page.locator('.notifications-toasts .notification-toast').filter({ hasText: 'CRANE: setting up' }).count(),
    0,
  );
  await s.screenshot('second-start');
});
