import { beforeEach, describe, expect, it } from 'vitest';
import { commands, mock } from '../vscode.mock';
import { formatDiagnosis, formatUsage } from '../../src/common/diagnosisFormat';
import { DiagnosisView } from '../../src/common/diagnosisView';
import type { DiagnosisParams, SpeculativeResult } from '../../src/common/protocol';
import { formatSpeculative, isSpeculativeResult } from '../../src/common/speculativeFormat';

const CELL = 'vscode-notebook-cell:/tmp/x/nb.ipynb#W0sZmlsZQ%3D%3D';
const base: DiagnosisParams = {
  notebookUri: 'file:///tmp/x/nb.ipynb',
  cellUri: CELL,
  verdict: {
    rule: 'undefined-name',
    ename: 'NameError',
    message: "name 'undefined_thing' is not defined",
    line: 3,
    col: 1,
    endLine: 3,
    endCol: 16,
    rootCause: 'never assigned in an earlier cell',
    confidence: 0.9,
    evidence: ['kernel namespace has no undefined_thing', 'no earlier cell assigns it'],
  },
  markdown: '',
  usage: null,
  cell: 2,
  findings: [],
  mode: 'live',
  source: 'rules',
  session: null,
  cached: false,
  note: null,
};

describe('diagnosis view', () => {
  beforeEach(() => mock.reset());

  it('shows verdict, exception and line, evidence and usage', () => {
    const md = formatDiagnosis(base, 'nb.ipynb, cell 1');
    expect(md).toContain('`NameError` at line 3, column 2');
    expect(md).toContain('confidence 90%');
    expect(md).toContain('- kernel namespace has no undefined_thing');
    expect(md).toContain('never assigned');
    expect(md).toContain('No model was called');
  });

  it("uses the server's markdown (with the suggested fix) as the body and adds tokens and cost", () => {
    const md = formatDiagnosis(
      {
        ...base,
        markdown: '## Suggested fix\n\nDefine `undefined_thing` first.',
        usage: { promptTokens: 1200, completionTokens: 80, cachedTokens: 1000, costUsd: 0.00123, model: 'openai/gpt-4o-mini' },
      },
      'c',
    );
    expect(md).toContain('## Suggested fix');
    expect(md).not.toContain('## Runtime evidence');
    expect(md).not.toContain('**Verdict:**'); // the server's markdown states it (no duplicate)
    expect(md).toContain('1200 prompt + 80 completion tokens (1000 cached), $0.0012');
    expect(formatUsage({ promptTokens: 1, completionTokens: 2, cachedTokens: 0, costUsd: null, model: 'm' })).toContain('cost unknown');
    expect(formatDiagnosis({ ...base, verdict: null }, 'c')).toContain('no crash risk found');
  });

  it('opens a markdown preview per cell, once for duplicate deliveries', async () => {
    const view = new DiagnosisView();
    const uri = await view.show(base);
    expect(commands.executeCommand).toHaveBeenCalledWith('markdown.showPreviewToSide', uri);
    expect(view.provideTextDocumentContent(uri)).toContain('NameError');
    await view.show(base); // the command result and the crane/diagnosis notification
    expect(commands.executeCommand).toHaveBeenCalledTimes(1);
    expect((await view.show({ ...base, markdown: 'new' })).toString()).toBe(uri.toString());
    expect(commands.executeCommand).toHaveBeenCalledTimes(2);
  });
});

describe('speculative run view', () => {
  beforeEach(() => mock.reset());

  const result: SpeculativeResult = {
    cellUri: CELL,
    cell: 2,
    sandbox: {
      verdict: 'crash' as const,
      ename: 'IndexError',
      evalue: 'list index out of range',
      line: 1,
      stdout: 'partial\n',
      displays: [{ kind: 'display_data', text: '<Figure>' }],
      elapsedMs: 41.6,
    },
    markdown: '',
  };

  it('renders the fields when the server sent no markdown, and the server markdown otherwise', () => {
    const text = formatSpeculative(result, 'nb.ipynb, cell 2');
    expect(text).toContain('# CRANE speculative run — nb.ipynb, cell 2');
    expect(text).toContain('**Verdict:** would crash.');
    expect(text).toContain('`IndexError: list index out of range` at line 1');
    expect(text).toContain('partial');
    expect(text).toContain('<Figure>');
    expect(text).toContain('in 42 ms');
    const server = formatSpeculative({ ...result, markdown: '**IndexError** at line 1' }, 'c');
    expect(server).toContain('**IndexError** at line 1');
    expect(server).not.toContain('**Verdict:**');
    expect(isSpeculativeResult(result)).toBe(true);
    expect(isSpeculativeResult({ markdown: 'x' })).toBe(false);
    expect(isSpeculativeResult({ verdict: 'crash', markdown: 'x' })).toBe(false); // the flat shape of old servers
  });

  it('opens it in the preview, in its own document beside the diagnosis', async () => {
    const view = new DiagnosisView();
    const spec = await view.showSpeculative(result, CELL);
    const diag = await view.show(base);
    expect(spec.toString()).not.toBe(diag.toString());
    expect(view.provideTextDocumentContent(spec as never)).toContain('would crash');
    expect(commands.executeCommand).toHaveBeenCalledWith('markdown.showPreviewToSide', spec);
  });
});
