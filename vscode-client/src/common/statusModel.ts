/** Pure status state for the status bar: server, kernel per notebook, analysing, agent running. */
import type { KernelInfo, KernelSource, KernelStatusParams } from './protocol';

export type ServerState = 'stopped' | 'starting' | 'running' | 'error';

/**
 * A note of the kernel bridge about a notebook: `fallback` (the server's own discovery applies: no Jupyter
 * extension, access declined, the kernel could not be asked), `waiting` (for the Jupyter extension's
 * answer), `restarting` (the kernel is restarting: a new process is coming), `info` (anything else).
 */
export type BridgeNoteKind = 'fallback' | 'waiting' | 'restarting' | 'info';
export interface BridgeNote {
  kind: BridgeNoteKind;
  text: string;
}

/** How each kernel source reads in the tooltip ("Kernel: attached (<label>: <file>)"). */
export const SOURCE_LABELS: Record<KernelSource, string> = {
  request: 'named by the client',
  'jupyter-extension': 'through the Jupyter extension',
  discovery: "found by CRANE's discovery",
  setting: 'crane.kernel.connectionFile',
};

/** Why CRANE and the notebook's toolbar may name different kernels (the kernel comes from the setting). */
export const SETTING_NOTE =
  "This kernel comes from the setting crane.kernel.connectionFile, not from the notebook's kernel picker: the " +
  "toolbar shows the notebook's own kernel (\"Select Kernel\" when it has none), which CRANE does not check. " +
  "Clear the setting to check the notebook's own kernel.";

export interface StatusState {
  server: ServerState;
  serverMessage: string;
  interpreter: string;
  activeNotebook: string | undefined;
  /** Last `crane/kernelStatus` per notebook URI ('' for notebookUri null). */
  kernels: Record<string, KernelStatusParams>;
  /** Client-side notes on the kernel bridge per notebook (e.g. access declined). */
  bridgeNotes: Record<string, BridgeNote>;
  /** Work in flight (commands and server work-done progress). */
  busy: number;
  busyTitle: string;
  agentRuns: string[];
}

export type StatusKind = 'normal' | 'warning' | 'error';

export interface StatusView {
  text: string;
  tooltip: string;
  kind: StatusKind;
}

export function initialStatus(): StatusState {
  return {
    server: 'stopped',
    serverMessage: '',
    interpreter: '',
    activeNotebook: undefined,
    kernels: {},
    bridgeNotes: {},
    busy: 0,
    busyTitle: '',
    agentRuns: [],
  };
}

export type StatusEvent =
  | { type: 'server'; state: ServerState; message?: string; interpreter?: string }
  | { type: 'activeNotebook'; uri: string | undefined }
  | { type: 'kernelStatus'; params: KernelStatusParams }
  | { type: 'bridgeNote'; notebookUri: string; note: BridgeNote | undefined }
  | { type: 'busy'; delta: 1 | -1; title?: string }
  | { type: 'agentStarted'; runId: string }
  | { type: 'agentStopped'; runId: string };

export function reduceStatus(s: StatusState, e: StatusEvent): StatusState {
  switch (e.type) {
    case 'server': {
      const next: StatusState = {
        ...s,
        server: e.state,
        serverMessage: e.message ?? '',
        interpreter: e.interpreter ?? s.interpreter,
      };
      if (e.state !== 'running') {
        // a restarted server knows nothing about kernels or work in flight
        next.kernels = {};
        next.busy = 0;
        next.busyTitle = '';
        next.agentRuns = [];
      }
      return next;
    }
    case 'activeNotebook':
      return { ...s, activeNotebook: e.uri };
    case 'kernelStatus':
      return { ...s, kernels: { ...s.kernels, [e.params.notebookUri ?? '']: e.params } };
    case 'bridgeNote': {
      const notes = { ...s.bridgeNotes };
      if (e.note) {
        notes[e.notebookUri] = e.note;
      } else {
        delete notes[e.notebookUri];
      }
      return { ...s, bridgeNotes: notes };
    }
    case 'busy': {
      const busy = Math.max(0, s.busy + e.delta);
      return { ...s, busy, busyTitle: busy === 0 ? '' : e.delta > 0 ? e.title ?? s.busyTitle : s.busyTitle };
    }
    case 'agentStarted':
      return s.agentRuns.includes(e.runId) ? s : { ...s, agentRuns: [...s.agentRuns, e.runId] };
    case 'agentStopped':
      return { ...s, agentRuns: s.agentRuns.filter((r) => r !== e.runId) };
  }
}

/** How a kernel is named to users: "remote kernel (URL)" for a kernel on a Jupyter Server, else its file. */
export function kernelLabel(k: KernelInfo): string {
  if (k.serverUrl) {
    return k.description || `remote kernel (${k.serverUrl})`;
  }
  return k.connectionFile ?? k.description ?? '';
}

/** The kernel status that applies to the active notebook (its own, else the server-wide one). */
export function kernelFor(s: StatusState): KernelStatusParams | undefined {
  return (s.activeNotebook !== undefined ? s.kernels[s.activeNotebook] : undefined) ?? s.kernels[''];
}

export function renderStatus(s: StatusState): StatusView {
  const lines: string[] = [];
  lines.push(`Server: ${s.server}${s.serverMessage ? ` — ${s.serverMessage}` : ''}`);
  if (s.interpreter) {
    lines.push(`Python: ${s.interpreter}`);
  }
  const k = kernelFor(s);
  const note = s.activeNotebook ? s.bridgeNotes[s.activeNotebook] : undefined;
  if (k) {
    const how = k.kernel ? SOURCE_LABELS[k.kernel.source] ?? k.kernel.source : '';
    lines.push(`Kernel: ${k.state}${k.kernel ? ` (${how}: ${kernelLabel(k.kernel)})` : ''}`);
    if (k.message) {
      lines.push(k.message);
    }
    if (k.kernel?.source === 'setting') {
      lines.push(SETTING_NOTE);
    }
    if (k.stale) {
      lines.push('Some diagnostics use facts read before the kernel\'s current run; they are re-checked when it is idle.');
    }
    if (k.sandbox === 'layered') {
      lines.push('Sandbox: layered (speculative runs write files in a private layer and may start worker processes)');
    } else if (k.sandbox === 'blocking') {
      lines.push(`Sandbox: blocking (side effects are refused${k.sandboxReason ? `: ${k.sandboxReason}` : ''})`);
    } else if (k.sandbox === 'transplant') {
      lines.push(`Sandbox: transplant (speculative runs use a confined copy of the cell's inputs in a separate process${k.sandboxReason ? `; not forked: ${k.sandboxReason}` : ''})`);
    }
  } else {
    lines.push('Kernel: none reported');
  }
  if (note) {
    lines.push(note.text);
  }
  if (s.busy > 0) {
    lines.push(`Analysing${s.busyTitle ? `: ${s.busyTitle}` : ''}`);
  }
  if (s.agentRuns.length > 0) {
    lines.push(`Agent running (${s.agentRuns.length})`);
  }
  lines.push('Click for details.');
  const tooltip = lines.join('\n');

  if (s.server === 'error') {
    return { text: '$(error) CRANE', tooltip, kind: 'error' };
  }
  if (s.server === 'stopped') {
    return { text: '$(circle-slash) CRANE: stopped', tooltip, kind: 'warning' };
  }
  if (s.server === 'starting') {
    return { text: '$(sync~spin) CRANE: starting', tooltip, kind: 'normal' };
  }
  if (note?.kind === 'restarting') {
    return { text: '$(sync~spin) CRANE: kernel restarting', tooltip, kind: 'normal' };
  }
  if (s.agentRuns.length > 0) {
    return { text: '$(hubot) CRANE: agent running', tooltip, kind: 'normal' };
  }
  if (s.busy > 0) {
    return { text: '$(loading~spin) CRANE: analysing', tooltip, kind: 'normal' };
  }
  const suffix =
    note?.kind === 'fallback'
      ? ' (discovery)'
      : k?.kernel?.serverUrl
        ? ' (remote)'
        : k?.kernel?.source === 'jupyter-extension'
          ? ' via Jupyter'
          : k?.kernel?.source === 'setting'
            ? ' (from setting)'
            : '';
  if (!k || k.state === 'static-only') {
    return { text: `$(circle-outline) CRANE: static only${suffix}`, tooltip, kind: 'normal' };
  }
  if (k.state !== 'dead' && k.stale) {
    // diagnostics rely on facts read before the kernel's current run (re-checked when it is idle)
    return { text: '$(warning) CRANE: kernel facts stale', tooltip, kind: 'warning' };
  }
  switch (k.state) {
    case 'dead':
      return { text: '$(warning) CRANE: kernel dead', tooltip, kind: 'warning' };
    case 'busy':
      return { text: `$(plug) CRANE: kernel busy${suffix}`, tooltip, kind: 'normal' };
    default:
      return { text: `$(plug) CRANE: kernel attached${suffix}`, tooltip, kind: 'normal' };
  }
}
