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

/**
 * The server's markdown is the body; the client adds a header and, when the server sent none, the fields of the
 * sandbox's record (`r.sandbox`).
 */
export function formatSpeculative(r: SpeculativeResult, cellLabel: string): string {
  const parts: string[] = [`# CRANE speculative run — ${cellLabel}`, ''];
  const body = (r.markdown ?? '').trim();
  if (body) {
    parts.push(body, '');
    return parts.join('\n');
  }
  const v = r.sandbox;
  const verdict = VERDICTS[v.verdict] ?? v.verdict;
  parts.push(`**Verdict:** ${verdict}.`, '');
  if (v.ename) {
    parts.push(`**Exception:** \`${v.ename}${v.evalue ? `: ${v.evalue}` : ''}\`${v.line ? ` at line ${v.line}` : ''}`, '');
  }
  if (v.reason) {
    parts.push(v.reason, '');
  }
  if (v.stdout) {
    parts.push('## Output', '', fence(v.stdout), '');
  }
  if (v.stderr) {
    parts.push('## Standard error', '', fence(v.stderr), '');
  }
  for (const d of v.displays ?? []) {
    parts.push(`## Display (${d.kind})`, '', fence(d.text ?? ''), '');
  }
  const ms = typeof v.elapsedMs === 'number' ? ` in ${Math.round(v.elapsedMs)} ms` : '';
  parts.push('---', '', `*Sandboxed run${ms}: nothing ran in your kernel.*`, '');
  return parts.join('\n');
}

export function isSpeculativeResult(v: unknown): v is SpeculativeResult {
  const o = v as SpeculativeResult;
  return !!o && typeof o === 'object' && !!o.sandbox && typeof o.sandbox === 'object'
    && typeof o.sandbox.verdict === 'string';
}
