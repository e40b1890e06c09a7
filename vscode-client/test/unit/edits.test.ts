import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import type { WorkspaceEdit } from '../vscode.mock';
import { applyTextEdits, changedLineRanges, ensureConfirmation, extractEdit, FALLBACK_ANNOTATION, textEditsByUri } from '../../src/common/edits';

const r = (sl: number, sc: number, el: number, ec: number) => ({ start: { line: sl, character: sc }, end: { line: el, character: ec } });

describe('edits', () => {
  it('applies edits to text (for the diff view)', () => {
    const text = 'import numpy as np\nnp.zeros(3)\nundefined_thing + 1';
    expect(applyTextEdits(text, [{ range: r(2, 0, 2, 15), newText: 'thing' }])).toBe('import numpy as np\nnp.zeros(3)\nthing + 1');
    expect(applyTextEdits('a\nb', [{ range: r(0, 0, 0, 1), newText: 'A' }, { range: r(1, 0, 1, 1), newText: 'B\nC' }])).toBe('A\nB\nC');
  });

  it('computes the changed lines after the edits, shifting for earlier insertions', () => {
    expect(changedLineRanges([{ range: r(2, 0, 2, 19), newText: 'x = 0\nx + 1' }])).toEqual([[2, 3]]);
    expect(
      changedLineRanges([
        { range: r(5, 0, 5, 0), newText: 'z' },
        { range: r(0, 0, 0, 0), newText: 'a\nb\n' },
      ]),
    ).toEqual([
      [0, 1],
      [7, 7],
    ]);
    expect(changedLineRanges([{ range: r(1, 0, 3, 0), newText: '' }])).toEqual([]);
  });

  it('reads changes and documentChanges', () => {
    const e = {
      documentChanges: [
        { textDocument: { uri: 'a', version: 1 }, edits: [{ range: r(0, 0, 0, 0), newText: 'x' }] },
        { kind: 'create', uri: 'b' },
      ],
      changes: { a: [{ range: r(1, 0, 1, 0), newText: 'y' }] },
    };
    expect(textEditsByUri(e).get('a')?.length).toBe(2);
    expect(extractEdit({ edit: e })).toBe(e);
    expect(extractEdit({ foo: 1 })).toBeUndefined();
  });
});

describe('confirmation before applying', () => {
  const CELL = 'vscode-notebook-cell:/tmp/x/nb.ipynb#W1sZmlsZQ%3D%3D';
  const serverEdit = {
    documentChanges: [
      {
        textDocument: { uri: CELL, version: null },
        edits: [{ range: r(1, 0, 1, 8), newText: 'lst[:3]', annotationId: 'crane.fix.cell2' }],
      },
    ],
    changeAnnotations: { 'crane.fix.cell2': { label: 'CRANE fix: cell 2', needsConfirmation: true, description: 'why' } },
  };

  it('keeps the server annotations that need confirmation', () => {
    expect(ensureConfirmation(serverEdit, 'x')).toEqual(serverEdit);
  });

  it('forces confirmation on unannotated edits, `changes` and annotations that do not ask for it', () => {
    const out = ensureConfirmation(
      {
        documentChanges: [{ textDocument: { uri: CELL }, edits: [{ range: r(0, 0, 0, 0), newText: 'a' }] }],
        changes: { [CELL]: [{ range: r(2, 0, 2, 0), newText: 'b' }] },
      },
      'CRANE agent fix',
    );
    expect(out.changeAnnotations).toEqual({ [FALLBACK_ANNOTATION]: { label: 'CRANE agent fix', needsConfirmation: true } });
    expect(out.documentChanges).toEqual([
      { textDocument: { uri: CELL, version: null }, edits: [{ range: r(0, 0, 0, 0), newText: 'a', annotationId: FALLBACK_ANNOTATION }] },
      { textDocument: { uri: CELL, version: null }, edits: [{ range: r(2, 0, 2, 0), newText: 'b', annotationId: FALLBACK_ANNOTATION }] },
    ]);
    const lax = ensureConfirmation(
      { ...serverEdit, changeAnnotations: { 'crane.fix.cell2': { label: 'l', needsConfirmation: false } } } as never,
      'x',
    );
    expect(lax.changeAnnotations['crane.fix.cell2'].needsConfirmation).toBe(true);
  });

  it('refuses file operations', () => {
    expect(() => ensureConfirmation({ documentChanges: [{ kind: 'delete', uri: 'file:///x' }] }, 'x')).toThrow(/unsupported change/);
  });

  it("vscode-languageclient's converter turns the server's edit into entries needing confirmation (refactor preview)", async () => {
    // the real converter, loaded with CommonJS require (its `require('vscode')` gets the mock, see test/setup.ts)
    const require = createRequire(import.meta.url);
    require('vscode-languageserver-protocol/node'); // installs the node runtime the converter uses
    const { createConverter } = require(require.resolve('vscode-languageclient/node').replace(/node[/\\]main\.js$/, 'common/protocolConverter.js'));
    const p2c = createConverter(undefined, false, false, false);
    const we = (await p2c.asWorkspaceEdit(ensureConfirmation(serverEdit, 'x') as never)) as unknown as WorkspaceEdit;
    expect(we.edits).toHaveLength(1);
    expect(we.edits[0].uri.toString()).toBe(CELL);
    expect(we.edits[0].newText).toBe('lst[:3]');
    expect(we.edits[0].range.start.line).toBe(1);
    expect(we.edits[0].metadata).toEqual({ label: 'CRANE fix: cell 2', needsConfirmation: true, description: 'why' });
  });
});
