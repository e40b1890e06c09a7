import { describe, expect, it, vi } from 'vitest';

// the real client needs a real VS Code; its options are plain data (notes §4.4)
vi.mock('vscode-languageclient/node', () => ({ LanguageClient: class {}, State: { Stopped: 1, Starting: 3, Running: 2 } }));
import { answerConfiguration, buildClientOptions, buildServerOptions, DOCUMENT_SELECTOR } from '../../src/common/server';
import { pipeServerStderr } from '../../src/common/serverLog';
import { mock } from '../vscode.mock';

describe('server options', () => {
  it('starts `python -m crane serve` with the given environment', () => {
    expect(buildServerOptions('/venv/bin/python', { A: '1' }, '/ws')).toEqual({
      command: '/venv/bin/python',
      args: ['-m', 'crane', 'serve'],
      options: { env: { A: '1' }, cwd: '/ws' },
    });
  });

  it('selects python cells of Jupyter notebooks only (not the interactive window)', () => {
    expect(DOCUMENT_SELECTOR).toEqual([{ notebook: 'jupyter-notebook', language: 'python' }]);
    const opts = buildClientOptions({ mode: 'static' }, {});
    expect(opts.documentSelector).toBe(DOCUMENT_SELECTOR);
    expect(opts.initializationOptions).toEqual({ mode: 'static' });
  });

  it('logs the server stderr through CRANE (one line per record), not the client default', () => {
    const opts = buildClientOptions({}, {});
    expect(opts.stdioOptions?.stderr).toBe(pipeServerStderr);
  });

  it('answers workspace/configuration for `crane` with the same settings object as initializationOptions', () => {
    mock.reset();
    mock.config = { 'crane.mode': 'static', 'crane.llm.model': '' };
    const out = answerConfiguration({ items: [{ section: 'crane' }, { section: 'python' }] }, [{ raw: true }, { py: 1 }]) as any[];
    expect(out[0]).toMatchObject({ mode: 'static', llm: { model: null, apiBase: null }, kernel: { connectionFile: null } });
    expect(out[1]).toEqual({ py: 1 });
  });
});
