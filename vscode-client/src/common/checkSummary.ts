/** A one-line summary of a `crane.checkNotebook` result ("all findings per cell"). */

function countFindings(v: unknown): number {
  if (Array.isArray(v)) {
    return v.length;
  }
  if (v && typeof v === 'object') {
    const o = v as Record<string, unknown>;
    if (Array.isArray(o.findings)) {
      return o.findings.length;
    }
    if (Array.isArray(o.diagnostics)) {
      return o.diagnostics.length;
    }
  }
  return 0;
}

export function summarizeCheck(result: unknown): { findings: number; cells: number; text: string } {
  let findings = 0;
  let cells = 0;
  const obj = result && typeof result === 'object' ? (result as Record<string, unknown>) : undefined;
  const perCell = obj?.cells;
  if (Array.isArray(perCell)) {
    for (const c of perCell) {
      const n = countFindings(c);
      findings += n;
      cells += n > 0 ? 1 : 0;
    }
  } else if (perCell && typeof perCell === 'object') {
    for (const c of Object.values(perCell)) {
      const n = countFindings(c);
      findings += n;
      cells += n > 0 ? 1 : 0;
    }
  } else if (Array.isArray(obj?.findings)) {
    const list = obj.findings as Array<Record<string, unknown>>;
    findings = list.length;
    cells = new Set(list.map((f) => f.cellUri ?? f.cell ?? '')).size;
  }
  const text =
    findings === 0
      ? 'CRANE: no crash risks found in this notebook.'
      : `CRANE: ${findings} crash risk${findings === 1 ? '' : 's'} in ${cells} cell${cells === 1 ? '' : 's'}.`;
  return { findings, cells, text };
}
