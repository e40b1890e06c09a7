/** Markdown for a CRANE diagnosis: verdict, exception and line, runtime evidence, suggested fix, tokens and cost. */
import type { DiagnosisParams, Finding, Usage } from './protocol';

export function formatUsage(u: Usage | null | undefined): string {
  if (!u) {
    return 'No model was called (static and runtime analysis only).';
  }
  const tokens = `${u.promptTokens} prompt + ${u.completionTokens} completion tokens` +
    (u.cachedTokens ? ` (${u.cachedTokens} cached)` : '');
  const cost = u.costUsd === null || u.costUsd === undefined ? 'cost unknown' : `$${u.costUsd.toFixed(4)}`;
  return `${u.model || 'model'}: ${tokens}, ${cost}`;
}

export function formatVerdict(f: Finding | null | undefined): string {
  if (!f) {
    return '**Verdict:** no crash risk found in this cell.';
  }
  // columns are 0-based on the wire; editors count from 1
  const where = f.line ? ` at line ${f.line}${typeof f.col === 'number' ? `, column ${f.col + 1}` : ''}` : '';
  const confidence = typeof f.confidence === 'number' ? ` (confidence ${Math.round(f.confidence * 100)}%)` : '';
  return `**Verdict:** \`${f.ename || 'Error'}\`${where}${confidence} — ${f.message}`;
}

/**
 * The document shown for a diagnosis. The server's markdown (verdict, explanation, evidence, suggested fix)
 * is the body; the client adds the title and usage, and the verdict and evidence when the server sent none.
 */
export function formatDiagnosis(d: DiagnosisParams, cellLabel: string): string {
  const parts: string[] = [`# CRANE diagnosis — ${cellLabel}`, ''];
  const body = (d.markdown ?? '').trim();
  if (body) {
    parts.push(body, '');
  } else {
    parts.push(formatVerdict(d.verdict), '');
  }
  if (!body && d.verdict) {
    if (d.verdict.rootCause) {
      parts.push('## Root cause', '', d.verdict.rootCause, '');
    }
    if (d.verdict.evidence?.length) {
      parts.push('## Runtime evidence', '', ...d.verdict.evidence.map((e) => `- ${e}`), '');
    }
  }
  parts.push('---', '', `*${formatUsage(d.usage)}*`, '');
  return parts.join('\n');
}
