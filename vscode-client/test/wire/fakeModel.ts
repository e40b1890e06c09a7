/**
 * A scripted OpenAI-compatible chat-completions server on 127.0.0.1 for the wire test: each chat-completions
 * request gets the next scripted turn (tool calls, as the repair agent expects) and its body is recorded; any
 * other request (the client's probes of a local server) gets a 404 and takes no turn.
 */
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface ToolCallTurn {
  calls: Array<{ name: string; args: Record<string, unknown> }>;
  usage?: { prompt_tokens: number; completion_tokens: number };
}

export class FakeModel {
  readonly requests: any[] = [];
  script: ToolCallTurn[] = [];
  private readonly server: http.Server;

  constructor() {
    this.server = http.createServer((req, res) => {
      let raw = '';
      req.on('data', (d) => (raw += String(d)));
      req.on('end', () => {
        if (req.method !== 'POST' || !String(req.url).endsWith('/chat/completions')) {
          // the client's probes of a local server (GET /models, /props, ...): answered, never a scripted turn
          res.writeHead(404, { 'content-type': 'application/json' });
          res.end('{"error": "not found"}');
          return;
        }
        const body = JSON.parse(raw || '{}');
        this.requests.push(body);
        const n = this.requests.length;
        const turn = this.script.shift();
        const message: Record<string, unknown> = { role: 'assistant', content: turn ? null : 'I am done.' };
        if (turn) {
          message.tool_calls = turn.calls.map((c, i) => ({
            id: `call_${n}_${i}`,
            type: 'function',
            function: { name: c.name, arguments: JSON.stringify(c.args) },
          }));
        }
        const u = turn?.usage ?? { prompt_tokens: 1000, completion_tokens: 50 };
        const payload = JSON.stringify({
          id: `chatcmpl-${n}`,
          object: 'chat.completion',
          created: Math.floor(Date.now() / 1000),
          model: body.model ?? 'fake',
          choices: [{ index: 0, message, finish_reason: turn ? 'tool_calls' : 'stop' }],
          usage: { ...u, total_tokens: u.prompt_tokens + u.completion_tokens, prompt_tokens_details: { cached_tokens: 0 } },
        });
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) });
        res.end(payload);
      });
    });
  }

  async start(): Promise<string> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/v1`;
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
