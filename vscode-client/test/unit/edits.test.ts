import { describe, expect, it } from 'vitest';
import { applyTextEdits, changedLineRanges, extractEdit, textEditsByUri } from '../../src/common/edits';

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
