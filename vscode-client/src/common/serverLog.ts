/**
 * The server's log in the CRANE output channel, one line per message.
 *
 * The server writes every log record to stderr (`2025-01-01 12:00:00,123 INFO crane.lsp.x: message`) and also
 * sends its `crane` records as `window/logMessage`. vscode-languageclient would show both: each stderr line as
 * `[error]` and the same record again as `[info]`. stderr is the complete copy (it also carries DEBUG records,
 * other libraries' warnings, tracebacks and anything printed before the LSP connection exists), so the client
 * logs stderr at each record's own level and drops the `window/logMessage` duplicates from the message stream.
 */
import * as readline from 'node:readline';
import type { Readable } from 'node:stream';
import type { Disposable, Message, MessageReader } from 'vscode-languageclient/node';
import { redact } from './log';

export type LogLevel = 'error' | 'warn' | 'info' | 'debug' | 'trace';

export interface LogSink {
  error(message: string): void;
  warn(message: string): void;
  info(message: string): void;
  debug(message: string): void;
  trace(message: string): void;
}

const RECORD = /^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[,.]\d+)? (CRITICAL|ERROR|WARNING|WARN|INFO|DEBUG|NOTSET) (.*)$/;

const LEVELS: Record<string, LogLevel> = {
  CRITICAL: 'error',
  ERROR: 'error',
  WARNING: 'warn',
  WARN: 'warn',
  INFO: 'info',
  DEBUG: 'debug',
  NOTSET: 'trace',
};

/**
 * Parses stderr line by line. A log record's line gives its level (the timestamp is dropped: the channel adds
 * its own); the lines after it (a traceback, a multi-line message) keep that level. Lines before any record
 * (e.g. an import error while starting) are errors.
 */
export class StderrParser {
  private level: LogLevel = 'error';

  line(raw: string): { level: LogLevel; text: string } | undefined {
    const text = raw.replace(/\s+$/, '');
    if (!text) {
      return undefined;
    }
    const m = RECORD.exec(text);
    if (m) {
      this.level = LEVELS[m[1]] ?? 'info';
      return { level: this.level, text: m[2] };
    }
    return { level: this.level, text };
  }
}

/** `stdioOptions.stderr` for the LanguageClient: one channel line per stderr line, at its level, redacted. */
export function pipeServerStderr(input: Readable, sink: LogSink): void {
  const parser = new StderrParser();
  readline
    .createInterface({ input, crlfDelay: Infinity, terminal: false, historySize: 0 })
    .on('line', (raw: string) => {
      const parsed = parser.line(raw);
      if (parsed) {
        sink[parsed.level](redact(parsed.text));
      }
    });
}

/** `stdioOptions.stdout`: the server never writes there outside LSP messages; if something does, show it. */
export function pipeServerStdout(input: Readable, sink: LogSink): void {
  readline
    .createInterface({ input, crlfDelay: Infinity, terminal: false, historySize: 0 })
    .on('line', (raw: string) => sink.warn(`stdout: ${redact(raw)}`));
}

export function isLogMessageNotification(m: Message): boolean {
  return (m as { method?: unknown }).method === 'window/logMessage' && (m as { id?: unknown }).id === undefined;
}

/** A MessageReader that drops the messages `drop` selects (here: `window/logMessage`, already logged from stderr). */
export class FilteringMessageReader implements MessageReader {
  constructor(
    private readonly inner: MessageReader,
    private readonly drop: (m: Message) => boolean,
  ) {}

  get onError(): MessageReader['onError'] {
    return this.inner.onError;
  }

  get onClose(): MessageReader['onClose'] {
    return this.inner.onClose;
  }

  get onPartialMessage(): MessageReader['onPartialMessage'] {
    return this.inner.onPartialMessage;
  }

  listen(callback: (m: Message) => void): Disposable {
    return this.inner.listen((m) => {
      if (!this.drop(m)) {
        callback(m);
      }
    });
  }

  dispose(): void {
    this.inner.dispose();
  }
}
