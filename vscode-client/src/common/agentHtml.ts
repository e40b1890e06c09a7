/** The agent panel's webview document. State arrives by postMessage; buttons post actions back. */

export type PanelAction = 'stop' | 'pause' | 'resume' | 'step' | 'apply' | 'diff' | 'discard' | 'run';

export const PANEL_ACTIONS: readonly PanelAction[] = ['stop', 'pause', 'resume', 'step', 'apply', 'diff', 'discard', 'run'];

export function isPanelAction(v: unknown): v is PanelAction {
  return typeof v === 'string' && (PANEL_ACTIONS as readonly string[]).includes(v);
}

export function agentPanelHtml(nonce: string, cspSource: string): string {
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src ${cspSource} 'unsafe-inline'; script-src 'nonce-${nonce}';">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<title>CRANE agent</title>
<style>
  body { font-family: var(--vscode-font-family); color: var(--vscode-foreground); padding: 0 12px; }
  .bar { position: sticky; top: 0; background: var(--vscode-editor-background); padding: 8px 0; display: flex; gap: 6px; flex-wrap: wrap; align-items: center; }
  button { background: var(--vscode-button-background); color: var(--vscode-button-foreground); border: none; padding: 4px 10px; cursor: pointer; }
  button.secondary { background: var(--vscode-button-secondaryBackground); color: var(--vscode-button-secondaryForeground); }
  button:disabled { opacity: 0.4; cursor: default; }
  .status { margin-left: auto; opacity: 0.8; }
  .step { border-left: 3px solid var(--vscode-textLink-foreground); margin: 10px 0; padding: 4px 10px; }
  .label { font-weight: bold; font-size: 0.85em; text-transform: uppercase; opacity: 0.7; margin-top: 6px; }
  pre { background: var(--vscode-textCodeBlock-background); padding: 6px; white-space: pre-wrap; word-break: break-word; }
  .message { margin: 8px 0; }
  .note { opacity: 0.7; font-size: 0.9em; }
</style>
</head>
<body>
<div class="bar">
  <button data-action="stop" id="stop">Stop</button>
  <button data-action="pause" id="pause" class="secondary">Pause</button>
  <button data-action="resume" id="resume" class="secondary">Resume</button>
  <button data-action="step" id="step" class="secondary">Step</button>
  <button data-action="apply" id="apply">Apply (preview)</button>
  <button data-action="diff" id="diff" class="secondary">Show diff</button>
  <button data-action="discard" id="discard" class="secondary">Discard</button>
  <button data-action="run" id="run" class="secondary">Run cell</button>
  <span class="status" id="status">idle</span>
</div>
<div class="message" id="message"></div>
<div id="held" class="note"></div>
<div id="steps"></div>
<p class="note">Pause holds new steps back in this panel; Step shows the next one. The agent works on the server and
nothing runs in your kernel: a proposal is applied only after you confirm it in the refactor preview, and the
cell runs only if you press "Run cell".</p>
<script nonce="${nonce}">
  const vscode = acquireVsCodeApi();
  for (const b of document.querySelectorAll('button[data-action]')) {
    b.addEventListener('click', () => vscode.postMessage({ type: 'action', action: b.dataset.action }));
  }
  function section(parent, label, text, code) {
    if (!text) return;
    const l = document.createElement('div'); l.className = 'label'; l.textContent = label; parent.appendChild(l);
    const el = document.createElement(code ? 'pre' : 'div'); el.textContent = text; parent.appendChild(el);
  }
  window.addEventListener('message', (event) => {
    const m = event.data;
    if (!m || m.type !== 'state') return;
    const s = m.state;
    const active = s.status === 'running' || s.status === 'stopping';
    document.getElementById('status').textContent = s.status + (s.tokens ? ' · ' + s.tokens + ' tokens' : '');
    document.getElementById('message').textContent = s.message || '';
    document.getElementById('held').textContent = s.held.length ? s.held.length + ' step(s) held (paused)' : '';
    document.getElementById('stop').disabled = !active;
    document.getElementById('pause').disabled = s.paused;
    document.getElementById('resume').disabled = !s.paused;
    document.getElementById('step').disabled = s.held.length === 0;
    const proposed = s.status === 'proposed';
    document.getElementById('apply').disabled = !proposed;
    document.getElementById('diff').disabled = !s.proposal;
    document.getElementById('discard').disabled = !proposed;
    document.getElementById('run').disabled = s.status !== 'applied';
    const steps = document.getElementById('steps');
    steps.textContent = '';
    for (const st of s.steps) {
      const d = document.createElement('div'); d.className = 'step';
      const h = document.createElement('div'); h.textContent = 'Step ' + st.step + (st.tokens ? ' (' + st.tokens + ' tokens)' : ''); d.appendChild(h);
      section(d, 'Reflection', st.reflection, false);
      section(d, 'Action', st.action, false);
      section(d, 'Code', st.code, true);
      section(d, 'Result', st.result, true);
      steps.appendChild(d);
    }
    if (s.proposal) {
      const d = document.createElement('div'); d.className = 'step';
      section(d, 'Proposal', s.proposal.summary, false);
      steps.appendChild(d);
    }
  });
  vscode.postMessage({ type: 'ready' });
</script>
</body>
</html>`;
}
