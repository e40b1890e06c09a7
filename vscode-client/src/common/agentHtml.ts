/** The agent panel's webview document. State arrives by postMessage; buttons post actions back. */

export type PanelAction = 'stop' | 'pause' | 'resume' | 'step' | 'apply' | 'diff' | 'discard' | 'run' | 'report';

export const PANEL_ACTIONS: readonly PanelAction[] = ['stop', 'pause', 'resume', 'step', 'apply', 'diff', 'discard', 'run', 'report'];

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
  button:disabled { opacity: 0.5; cursor: default; background: transparent; color: var(--vscode-disabledForeground); outline: 1px solid var(--vscode-widget-border, transparent); }
  .status { margin-left: auto; opacity: 0.8; }
  .step { border-left: 3px solid var(--vscode-textLink-foreground); margin: 10px 0; padding: 4px 10px; }
  .step.proposed { border-left-color: var(--vscode-editorWarning-foreground); }
  .step.error, .step.refused, .step.stopped { border-left-color: var(--vscode-editorError-foreground); }
  .head { font-weight: bold; }
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
  <button data-action="report" id="report" class="secondary">Report</button>
  <span class="status" id="status">idle</span>
</div>
<div class="message" id="message"></div>
<div id="steps"></div>
<div id="result"></div>
<p class="note">The agent works in a sandbox on the server: nothing runs in your kernel. In step mode every action it
proposes waits for Step (Resume lets it go on; Pause holds it again). A proposal is applied only after you confirm it in
the refactor preview, and cells run only if you press "Run cell".</p>
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
  function usageText(u) {
    if (!u) return '';
    const tokens = (u.promptTokens || 0) + (u.completionTokens || 0);
    if (!tokens) return '';
    let t = tokens + ' tokens';
    if (u.cachedTokens) t += ' (' + u.cachedTokens + ' cached)';
    if (typeof u.costUsd === 'number') t += ' · $' + u.costUsd.toFixed(4);
    return t;
  }
  window.addEventListener('message', (event) => {
    const m = event.data;
    if (!m || m.type !== 'state') return;
    const s = m.state;
    const active = s.status === 'running' || s.status === 'stopping';
    const mode = s.stepMode ? (s.autoContinue ? 'step mode, running' : 'step mode, paused') : '';
    const usage = usageText(s.usage);
    document.getElementById('status').textContent = s.status + (active && mode ? ' (' + mode + ')' : '') + (usage ? ' · ' + usage : '');
    document.getElementById('message').textContent = s.message || '';
    document.getElementById('stop').disabled = !active;
    document.getElementById('pause').disabled = active ? (s.stepMode && !s.autoContinue) : s.stepNext;
    document.getElementById('resume').disabled = active ? !(s.stepMode && !s.autoContinue) : !s.stepNext;
    document.getElementById('step').disabled = !(active && s.waiting !== undefined && s.waiting !== null);
    const proposed = s.status === 'proposed';
    document.getElementById('apply').disabled = !proposed;
    document.getElementById('diff').disabled = !s.edit;
    document.getElementById('discard').disabled = !proposed;
    document.getElementById('run').disabled = s.status !== 'applied';
    document.getElementById('report').disabled = !(s.result && s.result.markdown);
    const steps = document.getElementById('steps');
    steps.textContent = '';
    for (const st of s.steps) {
      const d = document.createElement('div');
      d.className = 'step ' + (st.phase === 'proposed' ? 'proposed' : (st.status || ''));
      const h = document.createElement('div'); h.className = 'head';
      let head = 'Step ' + st.step + ' · ' + (st.action || '?') + (st.cell ? ' (cell ' + st.cell + ')' : '');
      if (st.phase === 'proposed') head += ' · waiting for Step';
      else if (st.status && st.status !== 'ok') head += ' · ' + st.status;
      const u = usageText(st.usage);
      if (u) head += ' · ' + u;
      if (st.elapsedS) head += ' · ' + st.elapsedS.toFixed(1) + ' s';
      h.textContent = head; d.appendChild(h);
      section(d, 'Reflection', st.reflection, false);
      section(d, 'Code', st.code, true);
      section(d, 'Result', st.result, true);
      steps.appendChild(d);
    }
    const result = document.getElementById('result');
    result.textContent = '';
    if (s.result && s.result.markdown) {
      const d = document.createElement('div'); d.className = 'step';
      section(d, 'Report', s.result.markdown, true);
      result.appendChild(d);
    }
  });
  vscode.postMessage({ type: 'ready' });
</script>
</body>
</html>`;
}
