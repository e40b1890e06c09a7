/** The CRANE output channel ("CRANE: Show log"), shared with the language client. Secrets are redacted. */
import * as vscode from 'vscode';

let channel: vscode.LogOutputChannel | undefined;
const secretValues = new Set<string>();

export function getLogChannel(): vscode.LogOutputChannel {
  if (!channel) {
    channel = vscode.window.createOutputChannel('CRANE', { log: true });
  }
  return channel;
}

/** Values that must never reach the log (API keys). Registered by the secrets module. */
export function registerSecretValue(value: string | undefined): void {
  if (value && value.length >= 4) {
    secretValues.add(value);
  }
}

export function redact(text: string): string {
  let out = text;
  for (const value of secretValues) {
    out = out.split(value).join('***');
  }
  return out;
}

export function traceInfo(message: string): void {
  getLogChannel().info(redact(message));
}

export function traceWarn(message: string): void {
  getLogChannel().warn(redact(message));
}

export function traceError(message: string, err?: unknown): void {
  const detail = err === undefined ? '' : `: ${errorMessage(err)}`;
  getLogChannel().error(redact(message + detail));
}

export function errorMessage(err: unknown): string {
  if (err instanceof Error) {
    return err.message;
  }
  if (err && typeof err === 'object' && 'message' in err) {
    return String((err as { message: unknown }).message);
  }
  return String(err);
}

export function showLog(): void {
  getLogChannel().show(true);
}

/** For tests. */
export function resetLogForTests(): void {
  channel = undefined;
  secretValues.clear();
}
