import { PassThrough } from 'node:stream';
import { describe, expect, it, vi } from 'vitest';
import type { Message, MessageReader } from 'vscode-languageclient/node';
import { registerSecretValue, resetLogForTests } from '../../src/common/log';
import { FilteringMessageReader, isLogMessageNotification, LogSink, pipeServerStderr, StderrParser } from '../../src/common/serverLog';

function sink(): LogSink & { lines: string[] } {
  const lines: string[] = [];
  const at = (level: string) => (m: string) => lines.push(`[${level}] ${m}`);
  return { lines, error: at('error'), warn: at('warn'), info: at('info'), debug: at('debug'), trace: at('trace') };
}

describe('server stderr in the output channel', () => {
  it('logs each record once, at its level, without the timestamp; continuation lines keep the level', () => {
    const p = new StderrParser();
    expect(p.line('Traceback (most recent call last):')).toEqual({ level: 'error', text: 'Traceback (most recent call last):' });
    expect(p.line('2025-11-21 05:01:02,345 INFO crane.lsp.kernels: attached kernel-1.json')).toEqual({
      level: 'info',
      text: 'crane.lsp.kernels: attached kernel-1.json',
    });
    expect(p.line('  second line of the message  ')).toEqual({ level: 'info', text: '  second line of the message' });
    expect(p.line('2025-11-21 05:01:02,345 WARNING pygls.protocol: slow')?.level).toBe('warn');
    expect(p.line('2025-11-21 05:01:02,345 DEBUG crane.probe: x')?.level).toBe('debug');
    expect(p.line('2025-11-21 05:01:02,345 ERROR crane.lsp.server: boom')?.level).toBe('error');
    expect(p.line('  File "x.py", line 1')?.level).toBe('error');
    expect(p.line('')).toBeUndefined();
  });

  it('pipes a stream line by line, redacting secrets', async () => {
    resetLogForTests();
    registerSecretValue('sk-secret-123');
    const out = sink();
    const input = new PassThrough();
    pipeServerStderr(input, out);
    input.write('2025-11-21 05:01:02,345 INFO crane.llm: key sk-secret-123 loaded\n');
    input.end('2025-11-21 05:01:02,346 WARNING crane.lsp.settings: bad mode\n');
    await new Promise((r) => setTimeout(r, 20));
    expect(out.lines).toEqual(['[info] crane.llm: key *** loaded', '[warn] crane.lsp.settings: bad mode']);
  });
});

describe('window/logMessage is dropped (the same records come from stderr)', () => {
  it('filters only logMessage notifications', () => {
    let deliver: (m: Message) => void = () => undefined;
    const inner = {
      onError: vi.fn(),
      onClose: vi.fn(),
      onPartialMessage: vi.fn(),
      listen: vi.fn((cb: (m: Message) => void) => {
        deliver = cb;
        return { dispose: vi.fn() };
      }),
      dispose: vi.fn(),
    } as unknown as MessageReader;
    const reader = new FilteringMessageReader(inner, isLogMessageNotification);
    const got: Message[] = [];
    reader.listen((m) => got.push(m));
    const log = { jsonrpc: '2.0', method: 'window/logMessage', params: { type: 3, message: 'crane.lsp: hi' } } as Message;
    const diag = { jsonrpc: '2.0', method: 'textDocument/publishDiagnostics', params: {} } as Message;
    const show = { jsonrpc: '2.0', method: 'window/showMessage', params: { type: 2, message: 'bad setting' } } as Message;
    deliver(log);
    deliver(diag);
    deliver(show);
    expect(got).toEqual([diag, show]);
    expect(reader.onClose).toBe(inner.onClose);
    reader.dispose();
    expect(inner.dispose).toHaveBeenCalled();
  });
});
