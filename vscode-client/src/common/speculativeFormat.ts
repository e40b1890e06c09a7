/** Markdown for a `crane.runSpeculatively` result: verdict, exception and line, captured output, timing. */
import type { SpeculativeResult } from './protocol';

const VERDICTS: Record<string, string> = {
  crash: 'would crash',
  'no-crash': 'runs without an exception',
  timeout: 'inconclusive: the sandboxed run timed out',
  blocked: 'inconclusive: the cell does something the sandbox does not allow',
  unavailable: 'inconclusive: no sandbox could be started',
};

function fence(text: string): string {
  const longest = Math.max(2, ...(text.match(/`+/g) ?? []).map((m) => m.length));
  const f = '`'.repeat(longest + 1);
  return `${f}text\n${text.replace(/\s+$/, '')}\n${f}`;
}

/** The server's markdown is the body; the client adds a header and, when the server sent none, the fields. */
export function formatSpeculative(r: SpeculativeResult, cellLabel: string): string {
  const parts: string[] = [`# CRANE speculative run — ${cellLabel}`, ''];
  const body = (r.markdown ?? '').trim();
  if (body) {
    parts.push(body, '');
    return parts.join('\n');
  }
  const verdict = VERDICTS[r.verdict] ?? r.verdict;
  parts.push(`**Verdict:** ${verdict}.`, '');
  if (r.ename) {
    parts.push(`**Exception:** \`${r.ename}${r.evalue ? `: ${r.evalue}` : ''}\`${r.line ? ` at line ${r.line}` : ''}`, '');
  }
  if (r.reason) {
    parts.push(r.reason, '');
  }
  if (r.stdout) {
    parts.push('## Output', '', fence(r.stdout), '');
  }
  if (r.stderr) {
    parts.push('## Standard error', '', fence(r.stderr), '');
  }
  for (const d of r.displays ?? []) {
    parts.push(`## Display (${d.kind})`, '', fence(d.text), '');
  }
  const ms = typeof r.elapsedMs === 'number' ? ` in ${Math.round(r.elapsedMs)} ms` : '';
  parts.push('---', '', `*Sandboxed run${ms}: nothing ran in your kernel.*`, '');
  return parts.join('\n');
}

export function isSpeculativeResult(v: unknown): v is SpeculativeResult {
  const o = v as SpeculativeResult;
  return !!o && typeof o === 'object' && typeof o.verdict === 'string';
}
